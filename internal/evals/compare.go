package evals

import (
	"fmt"
	"strings"

	"modelserve/internal/operr"
)

// Compare says whether candidate, a run against a new version of a model,
// does worse than current, a run of the same suite against the version
// serving now: fewer cases passed. why says it in a sentence, naming the
// cases that passed in current and fail in candidate. Two runs that cannot
// be compared (either not done, of different models' suites, or of
// different suites) are an operr.Conflict saying why.
func Compare(current, candidate Run) (worse bool, why string, err error) {
	for _, r := range []Run{current, candidate} {
		if r.State != StateDone {
			return false, "", operr.New(operr.Conflict, "eval run %d of %s is %s, not done: only runs that judged every case compare", r.ID, r.Target, r.State)
		}
	}
	if current.Model != candidate.Model {
		return false, "", operr.New(operr.Conflict, "eval run %d ran %s's suite and run %d %s's: runs compare within one model's suite",
			current.ID, current.Model, candidate.ID, candidate.Model)
	}
	if current.Suite != candidate.Suite {
		return false, "", operr.New(operr.Conflict, "eval runs %d and %d asked different suites of %s (%s and %s): run both with the suite as it is now",
			current.ID, candidate.ID, current.Model, current.Suite, candidate.Suite)
	}
	score := func(r Run) string { return fmt.Sprintf("%d of %d", r.Passed, r.Total) }
	switch {
	case candidate.Passed < current.Passed:
		passed := map[string]bool{}
		for _, res := range current.Results {
			passed[res.Case] = res.Pass
		}
		var lost []string
		for _, res := range candidate.Results {
			if !res.Pass && passed[res.Case] {
				lost = append(lost, res.Case)
			}
		}
		why = fmt.Sprintf("%s passed %s cases of %s's suite, fewer than %s's %s", candidate.Target, score(candidate), candidate.Model, current.Target, score(current))
		if len(lost) > 0 {
			why += "; failing now: " + listNames(lost, 5)
		}
		return true, why, nil
	case candidate.Passed == current.Passed:
		return false, fmt.Sprintf("%s passed %s cases of %s's suite, as many as %s", candidate.Target, score(candidate), candidate.Model, current.Target), nil
	}
	return false, fmt.Sprintf("%s passed %s cases of %s's suite, more than %s's %s", candidate.Target, score(candidate), candidate.Model, current.Target, score(current)), nil
}

// listNames is names quoted and joined, the first most of them and how
// many more.
func listNames(names []string, most int) string {
	var q []string
	for i, n := range names {
		if i == most {
			q = append(q, fmt.Sprintf("and %d more", len(names)-most))
			break
		}
		q = append(q, operr.Quote(n))
	}
	return strings.Join(q, ", ")
}
