package evals

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"modelserve/internal/operr"
)

func TestParseAcceptsEachKind(t *testing.T) {
	s, err := Parse([]byte(`{"cases": [
		{"name": "capital", "system": "Answer in one word.", "prompt": "What is the capital of France?", "max_tokens": 8, "expect": {"regex": "(?i)paris"}},
		{"name": "order", "prompt": "An order as JSON.", "expect": {"json_schema": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}}},
		{"name": "yes", "prompt": "Say yes.", "expect": {"exact": "yes", "ignore_case": true}},
		{"name": "near", "expect": {"similarity": {"anchor": "cat", "closer": "kitten", "farther": "invoice"}}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind   string
		tokens int
	}{{KindRegex, 8}, {KindJSONSchema, DefaultMaxTokens}, {KindExact, DefaultMaxTokens}, {KindSimilarity, DefaultMaxTokens}}
	if len(s.Cases) != len(want) {
		t.Fatalf("%d cases, want %d", len(s.Cases), len(want))
	}
	for i, w := range want {
		if c := s.Cases[i]; c.Kind() != w.kind || c.Tokens() != w.tokens {
			t.Errorf("case %d: kind %s, %d tokens; want %s, %d", i+1, c.Kind(), c.Tokens(), w.kind, w.tokens)
		}
	}
	// Written out and read again, it is the same suite, to the byte.
	again, err := Parse(s.JSON())
	if err != nil {
		t.Fatalf("the suite as written out does not read: %v\n%s", err, s.JSON())
	}
	if !bytes.Equal(again.JSON(), s.JSON()) || again.Digest() != s.Digest() {
		t.Errorf("written out twice, the suite differs:\n%s\n%s", s.JSON(), again.JSON())
	}
	if !strings.Contains(string(s.JSON()), `"(?i)paris"`) {
		t.Errorf("the suite as written out lost the pattern:\n%s", s.JSON())
	}
}

func TestParseRefusesInSentences(t *testing.T) {
	long := strings.Repeat("x", MaxPromptBytes+1)
	many := `{"cases": [` + strings.TrimSuffix(strings.Repeat(`{"name": "n", "prompt": "p", "expect": {"regex": "."}},`, MaxCases+1), ",") + `]}`
	for _, tc := range []struct {
		name, suite string
		// want are parts of the sentence: the case and the field.
		want []string
	}{
		{"not JSON", `{"cases": [`, []string{"the suite is not a JSON object", "ends in the middle"}},
		{"not an object", `[1, 2]`, []string{"the suite is not a JSON object"}},
		{"null", `null`, []string{"the suite is not a JSON object", "null"}},
		{"two values", `{"cases": []} {}`, []string{"more than one JSON value"}},
		{"no cases", `{}`, []string{`no "cases"`, `{"cases": []} to remove it`}},
		{"unknown top field", `{"cases": [], "name": "x"}`, []string{`unknown field "name"`}},
		{"cases not a list", `{"cases": {}}`, []string{`"cases" should be a list`}},
		{"too many", many, []string{"101 cases", "at most 100"}},
		{"case not an object", `{"cases": ["hi"]}`, []string{"case 1 is not an object"}},
		{"no name", `{"cases": [{"prompt": "p", "expect": {"regex": "."}}]}`, []string{"case 1 has no name"}},
		{"blank name", `{"cases": [{"name": "  ", "prompt": "p", "expect": {"regex": "."}}]}`, []string{"case 1 has no name"}},
		{"name not a string", `{"cases": [{"name": 3, "prompt": "p", "expect": {"regex": "."}}]}`, []string{"case 1: name should be a string"}},
		{"name on two lines", `{"cases": [{"name": "a\nb", "prompt": "p", "expect": {"regex": "."}}]}`, []string{"case 1", "control character"}},
		{"duplicate names", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": "."}}, {"name": "a", "prompt": "q", "expect": {"regex": "."}}]}`,
			[]string{`case 2 ("a") has the same name as case 1`}},
		{"unknown case field", `{"cases": [{"name": "a", "promt": "p", "expect": {"regex": "."}}]}`, []string{`case 1 ("a") has an unknown field "promt"`}},
		{"no prompt", `{"cases": [{"name": "a", "expect": {"regex": "."}}]}`, []string{`case 1 ("a") has no prompt`}},
		{"prompt too long", `{"cases": [{"name": "a", "prompt": "` + long + `", "expect": {"regex": "."}}]}`, []string{`case 1 ("a"): prompt is 8193 bytes`}},
		{"system not a string", `{"cases": [{"name": "a", "system": [], "prompt": "p", "expect": {"regex": "."}}]}`, []string{`case 1 ("a"): system should be a string`}},
		{"max tokens zero", `{"cases": [{"name": "a", "prompt": "p", "max_tokens": 0, "expect": {"regex": "."}}]}`, []string{`case 1 ("a"): max_tokens is "0"`, "from 1 to 1024"}},
		{"max tokens too many", `{"cases": [{"name": "a", "prompt": "p", "max_tokens": 1025, "expect": {"regex": "."}}]}`, []string{`max_tokens is "1025"`}},
		{"max tokens a fraction", `{"cases": [{"name": "a", "prompt": "p", "max_tokens": 1.5, "expect": {"regex": "."}}]}`, []string{`max_tokens is "1.5"`}},
		{"no expect", `{"cases": [{"name": "a", "prompt": "p"}]}`, []string{`case 1 ("a") has no expect`}},
		{"empty expect", `{"cases": [{"name": "a", "prompt": "p", "expect": {}}]}`, []string{`case 1 ("a"): expect has no expectation`}},
		{"two expectations", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": ".", "exact": "x"}}]}`, []string{`case 1 ("a"): expect has 2 expectations (exact and regex)`}},
		{"unknown expectation", `{"cases": [{"name": "a", "prompt": "p", "expect": {"contains": "x"}}]}`, []string{`case 1 ("a"): expect has an unknown field "contains"`}},
		{"bad regex", `{"cases": [{"name": "cap", "prompt": "p", "expect": {"regex": "(?i)paris("}}]}`, []string{`case 1 ("cap"): expect.regex is not a Go (RE2) regular expression`, "missing closing )"}},
		{"backreference", `{"cases": [{"name": "cap", "prompt": "p", "expect": {"regex": "(a)\\1"}}]}`, []string{`case 1 ("cap"): expect.regex`}},
		{"empty regex", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": ""}}]}`, []string{`expect.regex is empty`}},
		{"regex too long", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": "` + strings.Repeat("a", MaxPatternBytes+1) + `"}}]}`, []string{`expect.regex is 1001 bytes`}},
		{"regex not a string", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": null}}]}`, []string{`expect.regex should be a string`}},
		{"ignore case alone", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": ".", "ignore_case": true}}]}`, []string{`expect.ignore_case applies to exact alone`}},
		{"ignore case not a bool", `{"cases": [{"name": "a", "prompt": "p", "expect": {"exact": "x", "ignore_case": "yes"}}]}`, []string{`expect.ignore_case should be true or false`}},
		{"schema not a schema", `{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": "object"}}]}`, []string{`case 1 ("j"): expect.json_schema should be a JSON Schema`}},
		{"schema invalid", `{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": {"type": "thing"}}}]}`, []string{`case 1 ("j"): expect.json_schema is not a valid JSON Schema`}},
		{"schema refers outside", `{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": {"$ref": "file:///etc/passwd"}}}]}`,
			[]string{`case 1 ("j"): expect.json_schema refers to "file:///etc/passwd", outside itself`}},
		{"schema too large", `{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": {"description": "` + strings.Repeat("d", MaxSchemaBytes) + `"}}}]}`,
			[]string{`case 1 ("j"): expect.json_schema is 16`, "at most 16384"}},
		{"similarity with a prompt", `{"cases": [{"name": "s", "prompt": "p", "expect": {"similarity": {"anchor": "a", "closer": "b", "farther": "c"}}}]}`,
			[]string{`case 1 ("s") is a similarity case`, "takes no prompt"}},
		{"similarity missing a text", `{"cases": [{"name": "s", "expect": {"similarity": {"anchor": "a", "closer": "b"}}}]}`,
			[]string{`case 1 ("s"): expect.similarity has no farther`}},
		{"similarity unknown text", `{"cases": [{"name": "s", "expect": {"similarity": {"anchor": "a", "closer": "b", "farther": "c", "far": "d"}}}]}`,
			[]string{`case 1 ("s"): expect.similarity has an unknown field "far"`}},
		{"second case named", `{"cases": [{"name": "ok", "prompt": "p", "expect": {"regex": "."}}, {"name": "bad", "prompt": "p", "expect": {"exact": 3}}]}`,
			[]string{`case 2 ("bad"): expect.exact should be a string`}},
		{"too large", `{"cases": [], "x": "` + strings.Repeat("x", MaxSuiteBytes) + `"}`, []string{"the suite is 1048", "at most 1048576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.suite))
			if err == nil {
				t.Fatal("accepted")
			}
			e, ok := operr.As(err)
			if !ok || e.Kind != operr.Invalid {
				t.Fatalf("%v is not an operator's refusal of bad input", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Msg, w) {
					t.Errorf("%q does not say %q", e.Msg, w)
				}
			}
		})
	}
}

func TestEmptySuiteParses(t *testing.T) {
	s, err := Parse([]byte(`{"cases": []}`))
	if err != nil || len(s.Cases) != 0 {
		t.Fatalf("an empty suite: %+v, %v", s, err)
	}
	if got := strings.Join(strings.Fields(string(s.JSON())), ""); got != `{"cases":[]}` {
		t.Errorf("an empty suite writes out as %s", got)
	}
}

func TestJudge(t *testing.T) {
	suite, err := Parse([]byte(`{"cases": [
		{"name": "capital", "prompt": "p", "expect": {"regex": "(?i)paris"}},
		{"name": "exact", "prompt": "p", "expect": {"exact": "Paris"}},
		{"name": "exact any case", "prompt": "p", "expect": {"exact": "Paris", "ignore_case": true}},
		{"name": "json", "prompt": "p", "expect": {"json_schema": {"type": "object", "required": ["age"], "properties": {"age": {"type": "integer"}}}}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := func(name string) Case {
		for _, c := range suite.Cases {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no case %s", name)
		return Case{}
	}
	for _, tc := range []struct {
		name, c, answer string
		pass            bool
		reason          string
	}{
		{"matches", "capital", "It is PARIS.", true, ""},
		{"does not match", "capital", "Lyon", false, `the answer does not match (?i)paris: "Lyon"`},
		{"exact, trimmed", "exact", "  Paris\n", true, ""},
		{"exact, other case", "exact", "paris", false, `the answer is not "Paris": "paris"`},
		{"exact in any case", "exact any case", "PARIS", true, ""},
		{"exact in any case, other word", "exact any case", "Rome", false, `the answer is not "Paris", in any case: "Rome"`},
		{"JSON", "json", `{"age": 3}`, true, ""},
		{"JSON in a fence", "json", "```json\n{\"age\": 3}\n```", true, ""},
		{"not JSON", "json", "three years", false, `the answer is not JSON: "three years"`},
		{"JSON not fitting", "json", `{"age": "three"}`, false, `the answer's JSON does not fit the schema (at '/age': got string, want integer)`},
		{"JSON missing a property", "json", `{}`, false, `(at the top: missing property 'age')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, reason := c(tc.c).judge(context.Background(), tc.answer, new(sync.WaitGroup))
			if pass != tc.pass || !strings.Contains(reason, tc.reason) || (tc.pass && reason != "") {
				t.Errorf("judge(%q) = %v, %q; want %v, %q", tc.answer, pass, reason, tc.pass, tc.reason)
			}
		})
	}
}

func TestJudgeSimilarity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vecs   [][]float64
		pass   bool
		reason string
	}{
		{"anchor is the closer text", [][]float64{{1, 2, 3}, {1, 2, 3}, {3, 2, 1}}, true, ""},
		{"anchor nearer the farther", [][]float64{{1, 0}, {0, 1}, {1, 0.1}}, false, "the anchor is not nearer the closer text: cosine 0.0000 with it, 0.9950"},
		{"a tie fails", [][]float64{{1, 0}, {1, 0}, {2, 0}}, false, "not nearer"},
		{"lengths differ", [][]float64{{1, 0}, {1, 0, 0}, {1, 0}}, false, "cannot be compared"},
		{"a zero vector", [][]float64{{0, 0}, {1, 0}, {1, 0}}, false, "cannot be compared"},
		{"two vectors", [][]float64{{0, 0}, {1, 0}}, false, "2 embeddings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pass, reason := judgeSimilarity(tc.vecs)
			if pass != tc.pass || !strings.Contains(reason, tc.reason) {
				t.Errorf("= %v, %q; want %v, %q", pass, reason, tc.pass, tc.reason)
			}
		})
	}
}

// FuzzParse feeds the suite parser what an API caller could send. Whatever
// it is, Parse does not panic; a refusal is an operator's sentence of
// bounded length; and a suite it accepts writes out to JSON that reads back
// as the same suite.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"cases": []}`,
		`{"cases": [{"name": "capital", "system": "s", "prompt": "What is the capital of France?", "max_tokens": 8, "expect": {"regex": "(?i)paris"}}]}`,
		`{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": {"type": "object", "$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}}}]}`,
		`{"cases": [{"name": "e", "prompt": "p", "expect": {"exact": "<b>yes</b>", "ignore_case": true}}]}`,
		`{"cases": [{"name": "s", "expect": {"similarity": {"anchor": "a", "closer": "b", "farther": "c"}}}]}`,
		`{"cases": [{"name": "j", "prompt": "p", "expect": {"json_schema": {"$ref": "http://127.0.0.1:1/x.json"}}}]}`,
		`{"cases": [{"name": "a\u0000", "prompt": "p", "expect": {"regex": "a{1001}"}}]}`,
		`{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": "."}}, {"name": "a", "prompt": "p", "expect": {"regex": "."}}]}`,
		`{"cases": null}`,
		`[]`,
		"\xff",
		hostileSuite(refChain(40)),
		hostileSuite(notChain(2000)),
		hostileSuite(`{"$defs": {"a": {"items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"}`),
		hostileSuite(`{"$dynamicRef": "#/$defs/a", "$defs": {"a": {"$dynamicAnchor": "a"}}}`),
		wideSuite(),
		manyCases(8, `{"type": "string", "pattern": "`+hostilePattern+`"}`),
		`{"cases": [{"name": "r", "prompt": "p", "expect": {"regex": "` + strings.Repeat("a{1000}", 142) + `"}}]}`,
		hostileSuite(`{"patternProperties": {"` + strings.Repeat("a{999}", 30) + `": {}}}`),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			e, ok := operr.As(err)
			if !ok || e.Kind != operr.Invalid || e.Msg == "" {
				t.Fatalf("refused with %v, not an operator's sentence", err)
			}
			if n := utf8.RuneCountInString(e.Msg); n > 1000 {
				t.Fatalf("a refusal of %d characters quotes too much of the input: %.200s…", n, e.Msg)
			}
			return
		}
		if len(s.Cases) > MaxCases {
			t.Fatalf("accepted %d cases", len(s.Cases))
		}
		out := s.JSON()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("the accepted suite, written out, is refused: %v\n%s", err, out)
		}
		if !bytes.Equal(again.JSON(), out) {
			t.Fatalf("the suite changed on its way out and back:\n%s\n%s", out, again.JSON())
		}
		for i, c := range s.Cases {
			if c.Kind() == KindRegex && c.re == nil || c.Kind() == KindJSONSchema && c.schema == nil {
				t.Fatalf("case %d (%s) was accepted uncompiled", i+1, c.Kind())
			}
			if c.Tokens() < 1 || c.Tokens() > MaxTokensLimit {
				t.Fatal(fmt.Sprintf("case %d asks for %d tokens", i+1, c.Tokens()))
			}
		}
	})
}
