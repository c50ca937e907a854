package catalog

import (
	"sort"

	"modelserve/internal/operr"
)

// DefaultPage is a page of the catalog's length when none is asked. The
// API and the console page the catalog by name, a model's name the
// cursor: it costs the same at any depth and does not shift as models are
// added or removed between pages, where an offset would skip or repeat one.
const DefaultPage = 100

// PageAfter is the page of models (sorted by name, as List returns them)
// named after after ("" for the first), at most limit of them, with how
// many models come before it and whether more follow it.
func PageAfter(models []Model, after string, limit int) (page []Model, before int, more bool) {
	if after != "" {
		before = sort.Search(len(models), func(i int) bool { return models[i].Name > after })
	}
	to := min(before+limit, len(models))
	return models[before:to], before, to < len(models)
}

// CheckAfter refuses a cursor no model's name could be; a name the
// catalog does not have (a model removed since) pages as well as one it
// has.
func CheckAfter(after string) error {
	if !nameOK(after) {
		return operr.New(operr.Invalid, "after is a model's name, where the page before ended (%s), not %s", nameRule, operr.Quote(after))
	}
	return nil
}
