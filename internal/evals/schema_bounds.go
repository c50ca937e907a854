package evals

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelserve/internal/operr"
)

// A schema's cost is bounded before it is kept, and an answer's before it
// is judged. The schema library follows every $ref each time it is
// reached: forty definitions that each refer twice to the next are 2^40
// validations of one answer, and the library cannot be stopped once it
// has begun. Nor is compiling free: a chain of nested schemas compiles in
// time that grows with the square of its depth.
const (
	// MaxSchemaDepth is how deeply a case's schema may nest, in JSON
	// objects and arrays: each level of properties or items takes two.
	MaxSchemaDepth = 32
	// MaxSchemaExpansion is how many subschemas a case's schema may have
	// once every $ref is followed to what it names, each time it is
	// reached: the schemas that can judge one JSON value of an answer.
	MaxSchemaExpansion = 2000
	// MaxJudgedBytes is the most of an answer a JSON Schema case checks.
	MaxJudgedBytes = 16 << 10
	// maxJudgeWork bounds a schema's expansion times the JSON values of
	// an answer: the most validations one answer costs (at the bound, about
	// 90 MiB allocated and half a second, for a schema that fails every value).
	maxJudgeWork = 1 << 18
)

// errBounds is a schema refused for what checking an answer against it
// would cost, rather than for what it says: a suite kept before the bounds
// were drawn is still read, and such a case fails when it runs, saying why.
type errBounds struct{ msg string }

func (e errBounds) Error() string { return e.msg }

// schemaDepth is how deeply the compact JSON raw nests its objects and
// arrays.
func schemaDepth(raw []byte) int {
	depth, most, inString := 0, 0, false
	for i := 0; i < len(raw); i++ {
		switch b := raw[i]; {
		case inString && b == '\\':
			i++
		case b == '"':
			inString = !inString
		case inString:
		case b == '{' || b == '[':
			depth++
			most = max(most, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return most
}

// expansion is how many subschemas sch has with every $ref followed each
// time it is reached, counted no further than past MaxSchemaExpansion. A
// schema that refers back to itself, or through $dynamicRef or
// $recursiveRef (which name a different schema depending on how it was
// reached), is refused with the place it does so.
func expansion(sch *jsonschema.Schema) (int, error) {
	w := walk{cost: map[*jsonschema.Schema]int{}, open: map[*jsonschema.Schema]bool{}}
	return w.count(sch)
}

type walk struct {
	cost map[*jsonschema.Schema]int
	open map[*jsonschema.Schema]bool
}

func (w walk) count(s *jsonschema.Schema) (int, error) {
	if s == nil {
		return 0, nil
	}
	if n, ok := w.cost[s]; ok {
		return n, nil
	}
	if w.open[s] {
		return 0, errBounds{fmt.Sprintf("refers back to itself at %s: a schema here may not be recursive; spell out the levels the answer has", where(s))}
	}
	if s.DynamicRef != nil || s.RecursiveRef != nil {
		return 0, errBounds{fmt.Sprintf("uses $dynamicRef or $recursiveRef at %s, which modelserve does not bound: use $ref to a definition under $defs", where(s))}
	}
	w.open[s] = true
	defer delete(w.open, s)
	n := 1
	for _, c := range children(s) {
		m, err := w.count(c)
		if err != nil {
			return 0, err
		}
		if n += m; n > MaxSchemaExpansion {
			n = MaxSchemaExpansion + 1
		}
	}
	w.cost[s] = n
	return n, nil
}

// children are the schemas the library may validate with when it
// validates with s, on the same value or on one inside it.
func children(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.Not, s.If, s.Then, s.Else, s.PropertyNames, s.UnevaluatedProperties,
		s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	out = append(out, s.PrefixItems...)
	for _, v := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	for _, k := range sortedSchemaKeys(s.Properties) {
		out = append(out, s.Properties[k])
	}
	for _, k := range sortedSchemaKeys(s.DependentSchemas) {
		out = append(out, s.DependentSchemas[k])
	}
	for _, k := range sortedSchemaKeys(s.Dependencies) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	pats := make([]jsonschema.Regexp, 0, len(s.PatternProperties))
	for p := range s.PatternProperties {
		pats = append(pats, p)
	}
	slices.SortFunc(pats, func(a, b jsonschema.Regexp) int { return strings.Compare(a.String(), b.String()) })
	for _, p := range pats {
		out = append(out, s.PatternProperties[p])
	}
	return out
}

func sortedSchemaKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// where is s's place in its schema, as a JSON pointer: #/$defs/a.
func where(s *jsonschema.Schema) string {
	loc := strings.TrimPrefix(s.Location, schemaURL)
	if loc == "" || loc == "#" {
		return "its top"
	}
	return operr.Quote(loc)
}

// values is how many JSON values v holds, itself included.
func values(v any) int {
	switch v := v.(type) {
	case map[string]any:
		n := 1
		for _, e := range v {
			n += values(e)
		}
		return n
	case []any:
		n := 1
		for _, e := range v {
			n += values(e)
		}
		return n
	}
	return 1
}

// validate checks v against the case's schema. It refuses (unjudged) an
// answer that would cost more than maxJudgeWork validations, and gives up
// waiting when ctx ends: the library cannot be stopped, so the check goes
// on to its end (bounded by the schema's expansion and the answer's size)
// in the background, counted by judging until then.
func (c Case) validate(ctx context.Context, v any, judging *sync.WaitGroup) (invalid error, unjudged string) {
	if n := values(v); n*c.cost > maxJudgeWork {
		return nil, fmt.Sprintf("the answer's JSON holds %d values, too many to check against a schema of %d subschemas: "+
			"give the case a smaller max_tokens, or a smaller schema", n, c.cost)
	}
	done := make(chan error, 1)
	judging.Add(1)
	go func() {
		defer judging.Done()
		done <- c.schema.Validate(v)
	}()
	select {
	case err := <-done:
		return err, ""
	case <-ctx.Done():
		return nil, "the answer's JSON could not be checked against the schema within the case's bound"
	}
}
