package evals

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/internal/operr"
)

// refChain is a schema of n definitions, each any of two references to
// the next: 2^n validations of one value, were each $ref followed every
// time it is reached.
func refChain(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref": "#/$defs/d0", "$defs": {`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d": {"anyOf": [{"$ref": "#/$defs/d%d"}, {"$ref": "#/$defs/d%d"}]}, `, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d": {"type": "string"}}}`, n)
	return b.String()
}

// notChain is n schemas each the not of the next.
func notChain(n int) string {
	return strings.Repeat(`{"not": `, n) + `{}` + strings.Repeat(`}`, n)
}

// hostileSuite is a suite of one JSON Schema case with schema.
func hostileSuite(schema string) string {
	return `{"cases": [{"name": "hostile", "prompt": "Answer with JSON.", "expect": {"json_schema": ` + schema + `}}]}`
}

// wideSuite is a suite under 1 MiB whose schemas, each as deep as a
// schema may be, grow past 1 MiB once written out indented, as the store
// keeps a suite.
func wideSuite() string {
	schema := strings.Repeat(`{"items": `, MaxSchemaDepth-3) + `{"enum": [` + strings.Repeat(`[0,0,0,0,0,0,0,0],`, 750) + `0]}` + strings.Repeat(`}`, MaxSchemaDepth-3)
	cases := make([]string, 5)
	for i := range cases {
		cases[i] = fmt.Sprintf(`{"name": "w%d", "prompt": "p", "expect": {"json_schema": %s}}`, i, schema)
	}
	return `{"cases": [` + strings.Join(cases, ",") + `]}`
}

// Each schema too costly to check answers against is refused when the
// suite is put, in a sentence naming the case and the field, and at once.
func TestParseRefusesCostlySchemas(t *testing.T) {
	for _, tc := range []struct{ name, suite, want string }{
		{"references doubling forty times", hostileSuite(refChain(40)), "expands to more than 2000 subschemas"},
		{"a not chain 2,000 deep", hostileSuite(notChain(2000)), "nests 2001 levels deep; it may nest at most 32"},
		{"a recursive schema", hostileSuite(`{"$defs": {"a": {"items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"}`), `refers back to itself at "#/$defs/a"`},
		{"a dynamic reference", hostileSuite(`{"$dynamicRef": "#a", "$defs": {"a": {"$dynamicAnchor": "a"}}}`), "uses $dynamicRef or $recursiveRef"},
		{"a suite that grows past 1 MiB written out", wideSuite(), "the suite, written out as it is kept (indented), is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.suite) > MaxSuiteBytes {
				t.Fatalf("the suite is %d bytes, over the limit before any bound of the schema's", len(tc.suite))
			}
			_, err := Parse([]byte(tc.suite))
			e, ok := operr.As(err)
			if !ok || e.Kind != operr.Invalid || !strings.Contains(e.Msg, tc.want) {
				t.Fatalf("Parse = %v; want an invalid suite saying %q", err, tc.want)
			}
			if tc.name != "a suite that grows past 1 MiB written out" && !strings.HasPrefix(e.Msg, `case 1 ("hostile"): expect.json_schema `) {
				t.Errorf("the refusal %q does not name the case and the field", e.Msg)
			}
		})
	}
	// A schema that refers to one definition from several places is fine.
	if _, err := Parse([]byte(hostileSuite(refChain(8)))); err != nil {
		t.Errorf("a schema of 2^8 expansions is refused: %v", err)
	}
}

// hostilePattern is the pattern of issue 44: 16 KB of "a{1000}" that Go's
// regexp would compile to 2.3 million instructions, 4.6 s and half a
// gigabyte for each compile.
var hostilePattern = strings.Repeat("a{1000}", 2300)

// manyCases is a suite of n JSON Schema cases, each with schema, where
// NUM is the case's number.
func manyCases(n int, schema string) string {
	cases := make([]string, n)
	for i := range cases {
		cases[i] = fmt.Sprintf(`{"name": "c%d", "prompt": "Answer with JSON.", "expect": {"json_schema": %s}}`,
			i+1, strings.ReplaceAll(schema, "NUM", strconv.Itoa(i+1)))
	}
	return `{"cases": [` + strings.Join(cases, ", ") + `]}`
}

// Each place a suite holds a regular expression is bounded by what it
// compiles to, before it is compiled: the suite of eight hostile
// patterns is refused at once, in a sentence naming the case, the field
// and the bound; a suite whose patterns take the whole bound is kept, as
// quickly.
func TestParseBoundsRegularExpressions(t *testing.T) {
	at := func(n int, p string) string { return strings.Repeat("a{1000}", n) + p }
	refused := []struct{ name, suite, want string }{
		{"the issue's eight hostile patterns", manyCases(8, `{"type": "string", "pattern": "`+hostilePattern+`"}`),
			`case 1 ("c1"): expect.json_schema has a pattern at "#/pattern", "a{1000}`},
		{"a pattern in a property", manyCases(1, `{"properties": {"id": {"pattern": "`+at(21, "")+`"}}}`),
			`case 1 ("c1"): expect.json_schema has a pattern at "#/properties/id/pattern"`},
		{"a patternProperties name", manyCases(1, `{"patternProperties": {"`+at(21, "")+`": {"type": "string"}}}`),
			`case 1 ("c1"): expect.json_schema has a pattern at "#/patternProperties"`},
		{"a draft-07 pattern", manyCases(1, `{"$schema": "http://json-schema.org/draft-07/schema#", "pattern": "`+at(21, "")+`"}`),
			`case 1 ("c1"): expect.json_schema has a pattern at "#/pattern"`},
		{"expect.regex", `{"cases": [{"name": "r", "prompt": "p", "expect": {"regex": "` + at(142, "") + `"}}]}`,
			`case 1 ("r"): expect.regex compiles to more than 20000 instructions, and the regular expressions of a suite may compile to at most 20000 in all`},
		{"the suite's patterns together", manyCases(3, `{"pattern": "`+at(8, "NUM")+`"}`),
			`case 3 ("c3"): expect.json_schema has a pattern at "#/pattern", "a{1000}a{1000}`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.suite) > MaxSuiteBytes {
				t.Fatalf("the suite is %d bytes, over the limit before any bound of its patterns", len(tc.suite))
			}
			var err error
			took := boundedParse(t, func() { _, err = Parse([]byte(tc.suite)) })
			e, ok := operr.As(err)
			if !ok || e.Kind != operr.Invalid || !strings.Contains(e.Msg, tc.want) || !strings.Contains(e.Msg, "20000") {
				t.Fatalf("Parse = %v; want an invalid suite saying %q and the bound", err, tc.want)
			}
			t.Logf("refused in %s: %s", took, e.Msg)
		})
	}
	// A pattern met again is compiled, and counted, once.
	for _, tc := range []struct{ name, suite string }{
		{"patterns that take the whole bound", manyCases(8, `{"type": "string", "pattern": "`+at(2, "NUM{498}")+`"}`)},
		{"the same pattern eight times", manyCases(8, `{"type": "string", "pattern": "`+at(19, "")+`", "properties": {"a": {"pattern": "`+at(19, "")+`"}}}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			took := boundedParse(t, func() { _, err = Parse([]byte(tc.suite)) })
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			t.Logf("kept in %s", took)
		})
	}
}

// boundedParse runs f, failing the test should it take a second (not
// under the race detector) or allocate 100 MiB.
func boundedParse(t *testing.T, f func()) time.Duration {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	before, start := sample[0].Value.Uint64(), time.Now()
	boundedMemory(t, 1<<30, 30*time.Second, f)
	took := time.Since(start)
	metrics.Read(sample)
	if n := sample[0].Value.Uint64() - before; took > time.Second && !raceEnabled || n > 100<<20 {
		t.Errorf("took %s and allocated %d MiB; the bounds are 1s and 100 MiB", took.Round(time.Millisecond), n>>20)
	}
	return took
}

// An answer's string checked against format "regex" (asserted by a
// draft-07 schema) is compiled under the same bound: the pattern
// as an answer fails the case at once.
func TestJudgeBoundsRegexFormat(t *testing.T) {
	s, err := Parse([]byte(hostileSuite(`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "string", "format": "regex"}`)))
	if err != nil {
		t.Fatal(err)
	}
	var pass bool
	var reason string
	boundedParse(t, func() {
		pass, reason = s.Cases[0].judge(context.Background(), `"`+hostilePattern+`"`, new(sync.WaitGroup))
	})
	if pass || !strings.Contains(reason, "does not fit the schema") {
		t.Errorf("judge = %v, %q; want the answer refused as no regex", pass, reason)
	}
	if pass, reason := s.Cases[0].judge(context.Background(), `"(?i)paris"`, new(sync.WaitGroup)); !pass {
		t.Errorf("a small regular expression as the answer: %q", reason)
	}
}

// A suite kept before the bounds were drawn still reads, and its costly
// case fails when judged, saying why, without being checked.
func TestKeptCostlySchemaIsNotJudged(t *testing.T) {
	s, err := parse(context.Background(), []byte(hostileSuite(refChain(40))), true)
	if err != nil {
		t.Fatalf("the kept suite does not read: %v", err)
	}
	pass, reason := s.Cases[0].judge(context.Background(), `"x"`, new(sync.WaitGroup))
	if pass || !strings.Contains(reason, `not judged: case 1 ("hostile"): expect.json_schema expands to more than 2000 subschemas`) {
		t.Errorf("judge = %v, %q; want a failure saying the schema is not judged", pass, reason)
	}

	// So with a pattern past the bound of regular expressions: read, not
	// compiled.
	kept := `{"cases": [{"name": "r", "prompt": "p", "expect": {"regex": "` + strings.Repeat("a{1000}", 142) + `"}}, ` +
		`{"name": "j", "prompt": "p", "expect": {"json_schema": {"pattern": "` + hostilePattern + `"}}}]}`
	var err2 error
	boundedParse(t, func() { s, err2 = parse(context.Background(), []byte(kept), true) })
	if err2 != nil {
		t.Fatalf("the kept suite does not read: %v", err2)
	}
	for i, want := range []string{
		`not judged: case 1 ("r"): expect.regex compiles to more than 20000 instructions`,
		`not judged: case 2 ("j"): expect.json_schema has a pattern at "#/pattern"`,
	} {
		if pass, reason := s.Cases[i].judge(context.Background(), "aaa", new(sync.WaitGroup)); pass || !strings.Contains(reason, want) {
			t.Errorf("case %d: judge = %v, %q; want %q", i+1, pass, reason, want)
		}
	}
}

// An answer too large for its schema fails, saying so, unchecked; one
// checked past the case's bound fails too, and is counted until it ends.
func TestJudgeBoundsTheAnswer(t *testing.T) {
	s, err := Parse([]byte(hostileSuite(refChain(8))))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cases[0]
	many := "[" + strings.Repeat(`"a",`, 2000) + `"a"]`
	if pass, reason := c.judge(context.Background(), many, new(sync.WaitGroup)); pass || !strings.Contains(reason, "not judged: the answer's JSON holds 2002 values, too many") {
		t.Errorf("a large answer: %v, %q", pass, reason)
	}
	big := `"` + strings.Repeat("a", MaxJudgedBytes) + `"`
	if pass, reason := c.judge(context.Background(), big, new(sync.WaitGroup)); pass || !strings.Contains(reason, "not judged: the answer is 16386 bytes") {
		t.Errorf("a long answer: %v, %q", pass, reason)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var judging sync.WaitGroup
	if pass, reason := c.judge(ctx, `"a"`, &judging); pass && reason != "" || !pass && !strings.Contains(reason, "within the case's bound") {
		t.Errorf("judged after the case's bound: %v, %q", pass, reason)
	}
	judging.Wait()
}

// FuzzJudge judges answers against the suites an API caller could put.
// Whatever the two are, a suite Parse accepts judges any answer without
// allocating more than a bound: a runaway fails the test (see
// boundedMemory) rather than exhausting the machine.
func FuzzJudge(f *testing.F) {
	for _, seed := range []struct{ suite, answer string }{
		{hostileSuite(refChain(40)), `1`},
		{hostileSuite(refChain(8)), `{"a": [1, 2, {"b": null}]}`},
		{hostileSuite(notChain(30)), `1`},
		{hostileSuite(`{"type": "array", "uniqueItems": true, "items": {"anyOf": [{"type": "integer"}, {"multipleOf": 0.0001}]}}`), "[" + strings.Repeat("1e99999,", 500) + "2]"},
		{hostileSuite(`{"properties": {"a": {"const": {"x": [1, 2, 3]}}}, "required": ["a"]}`), "```json\n{\"a\": {\"x\": [1, 2, 3]}}\n```"},
		{hostileSuite(`{"pattern": "^(a|aa)+$"}`), `"` + strings.Repeat("a", 5000) + `b"`},
		{hostileSuite(`{"$schema": "http://json-schema.org/draft-07/schema#", "items": {"format": "regex"}}`), `["` + strings.Repeat("a{1000}", 1000) + `", "b{1000}"]`},
	} {
		f.Add([]byte(seed.suite), seed.answer)
	}
	f.Fuzz(func(t *testing.T, data []byte, answer string) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		boundedMemory(t, 512<<20, 30*time.Second, func() {
			var judging sync.WaitGroup
			for _, c := range s.Cases {
				if c.Kind() == KindSimilarity {
					continue
				}
				if pass, reason := c.judge(context.Background(), answer, &judging); !pass && reason == "" {
					t.Errorf("case %s failed without a reason", c.Name)
				}
			}
			judging.Wait()
		})
	})
}

// boundedMemory runs f, and ends the test process should f allocate more
// than limit bytes or run longer than limit: a goroutine cannot be
// stopped from outside, and a runaway must fail the test rather than take
// the machine's memory.
func boundedMemory(t *testing.T, limit uint64, most time.Duration, f func()) {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	start, began := allocated(), time.Now()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			if n := allocated() - start; n > limit {
				t.Fatalf("judging allocated %d MiB, more than the bound of %d MiB", n>>20, limit>>20)
			}
			return
		case <-tick.C:
			if n := allocated() - start; n > limit || time.Since(began) > most {
				panic(fmt.Sprintf("judging ran away: %d MiB allocated in %s (bounds %d MiB, %s); the process ends here", n>>20, time.Since(began).Round(time.Millisecond), limit>>20, most))
			}
		}
	}
}
