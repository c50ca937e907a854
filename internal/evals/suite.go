package evals

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelserve/internal/operr"
)

// Suite is a model's cases, as the API's PUT takes them and the console's
// editor holds them:
//
//	{"cases": [
//	  {"name": "capital", "system": "Answer in one word.",
//	   "prompt": "What is the capital of France?", "max_tokens": 16,
//	   "expect": {"regex": "(?i)paris"}},
//	  {"name": "order", "prompt": "...", "expect": {"json_schema": {"type": "object", "required": ["id"]}}},
//	  {"name": "yes", "prompt": "...", "expect": {"exact": "yes", "ignore_case": true}},
//	  {"name": "near", "expect": {"similarity": {"anchor": "cat", "closer": "kitten", "farther": "invoice"}}}
//	]}
type Suite struct {
	Cases []Case `json:"cases"`
}

// Case is one question and the rule its answer is judged by.
type Case struct {
	// Name is unique in the suite; results are matched across runs by it.
	Name string `json:"name"`
	// System and Prompt are the chat's system and user messages; a
	// similarity case has neither.
	System string `json:"system,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	// MaxTokens bounds the answer; 0 is DefaultMaxTokens.
	MaxTokens int    `json:"max_tokens,omitempty"`
	Expect    Expect `json:"expect"`

	// re and schema are Expect's pattern and schema, compiled once; cost
	// is the schema's expansion (the subschemas that can judge one value).
	re     *regexp.Regexp
	schema *jsonschema.Schema
	cost   int
	// unjudged is why a kept suite's pattern or schema, read again under
	// bounds drawn after it was kept, is not checked: its answers fail,
	// saying so.
	unjudged string
}

// Expect is a case's one expectation.
type Expect struct {
	// Regex: the answer matches this RE2 pattern (Go's regexp).
	Regex *string `json:"regex,omitempty"`
	// JSONSchema: the answer, trimmed and out of a ```json fence if it is
	// in one, is JSON valid against this schema (draft 2020-12 unless its
	// $schema says otherwise; it may not refer to anything outside
	// itself).
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
	// Exact: the answer, trimmed, is this text; IgnoreCase compares
	// without regard to case.
	Exact      *string `json:"exact,omitempty"`
	IgnoreCase bool    `json:"ignore_case,omitempty"`
	// Similarity, for an embedding model: the anchor's embedding is
	// nearer (by cosine) the closer text's than the farther text's.
	Similarity *Similarity `json:"similarity,omitempty"`
}

// Similarity is an embedding case's three texts.
type Similarity struct {
	Anchor  string `json:"anchor"`
	Closer  string `json:"closer"`
	Farther string `json:"farther"`
}

// The kinds of expectation, as results name them.
const (
	KindRegex      = "regex"
	KindJSONSchema = "json_schema"
	KindExact      = "exact"
	KindSimilarity = "similarity"
)

// Kind is the case's expectation.
func (c Case) Kind() string {
	switch e := c.Expect; {
	case e.Regex != nil:
		return KindRegex
	case e.JSONSchema != nil:
		return KindJSONSchema
	case e.Exact != nil:
		return KindExact
	}
	return KindSimilarity
}

// Tokens is the most tokens the case's answer may have.
func (c Case) Tokens() int {
	if c.MaxTokens == 0 {
		return DefaultMaxTokens
	}
	return c.MaxTokens
}

// Bounds of a suite. A suite is untrusted input kept in the database and
// run against models: each bound keeps one suite from costing more than
// a suite is worth.
const (
	MaxCases         = 100
	MaxSuiteBytes    = 1 << 20
	MaxNameLength    = 100
	MaxPromptBytes   = 8 << 10
	MaxPatternBytes  = 1000
	MaxSchemaBytes   = 16 << 10
	MaxExactBytes    = 4 << 10
	MaxTokensLimit   = 1024
	DefaultMaxTokens = 64
)

// Parse reads and checks a suite. Every refusal is an operr.Invalid
// sentence naming the case (by number, and by name once it has one) and
// the field; nothing of an invalid suite is kept.
func Parse(data []byte) (Suite, error) { return parse(context.Background(), data, false) }

// parse is Parse, stopping when ctx ends. A kept suite (one read back from
// the store to be run) is read with the rules it was kept under: its size
// is not checked again, and a case whose pattern or schema costs more than
// the bounds allow is kept, to fail when it runs with the sentence why
// (Case.unjudged).
func parse(ctx context.Context, data []byte, kept bool) (Suite, error) {
	if len(data) > MaxSuiteBytes && !kept {
		return Suite{}, invalid("the suite is %d bytes; it may be at most %d (1 MiB)", len(data), MaxSuiteBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil || top == nil {
		return Suite{}, invalid("the suite is not a JSON object %s: %s", shape, jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Suite{}, invalid("the suite holds more than one JSON value: send one object %s", shape)
	}
	for _, k := range sortedKeys(top) {
		if k != "cases" {
			return Suite{}, invalid("the suite has an unknown field %s: it holds \"cases\" alone", operr.Quote(k))
		}
	}
	raw, ok := top["cases"]
	if !ok || isNull(raw) {
		return Suite{}, invalid("the suite has no \"cases\": send %s, or {\"cases\": []} to remove it", shape)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return Suite{}, invalid("the suite's \"cases\" should be a list of cases %s", shape)
	}
	if len(list) > MaxCases {
		return Suite{}, invalid("the suite has %d cases; it may have at most %d", len(list), MaxCases)
	}
	s := Suite{Cases: make([]Case, 0, len(list))}
	seen := map[string]int{}
	// One budget for the whole suite's regular expressions; once the suite
	// is compiled, it bounds those of answers alone.
	regexes := newRegexBudget()
	defer regexes.finish()
	for i, rc := range list {
		if err := ctx.Err(); err != nil {
			return Suite{}, err
		}
		c, err := parseCase(i+1, rc, kept, regexes)
		if err != nil {
			return Suite{}, err
		}
		if first, dup := seen[c.Name]; dup {
			return Suite{}, invalid("%s has the same name as case %d: names are unique in a suite", label(i+1, c.Name), first)
		}
		seen[c.Name] = i + 1
		s.Cases = append(s.Cases, c)
	}
	// The suite is kept written out, indented: deep schemas grow on the
	// way, and what is kept must read again.
	if !kept {
		if n := len(s.JSON()); n > MaxSuiteBytes {
			return Suite{}, invalid("the suite, written out as it is kept (indented), is %d bytes; it may be at most %d (1 MiB): drop cases, or make its schemas shallower", n, MaxSuiteBytes)
		}
	}
	return s, nil
}

// shape is a suite's JSON, for sentences that say what to send.
const shape = `{"cases": [{"name": ..., "prompt": ..., "expect": {...}}]}`

var (
	caseFields   = []string{"name", "system", "prompt", "max_tokens", "expect"}
	expectFields = []string{"regex", "json_schema", "exact", "ignore_case", "similarity"}
	simFields    = []string{"anchor", "closer", "farther"}
)

// parseCase reads and checks the case numbered n.
func parseCase(n int, raw json.RawMessage, kept bool, regexes *regexBudget) (Case, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return Case{}, invalid("case %d is not an object: a case is {\"name\": ..., \"prompt\": ..., \"expect\": {...}}", n)
	}
	var c Case
	at := label(n, "")
	name, has, err := text(f, "name")
	switch {
	case err != nil:
		return Case{}, invalid("%s: name should be a string", at)
	case !has || strings.TrimSpace(name) == "":
		return Case{}, invalid("%s has no name: give each case a name, unique in the suite", at)
	case utf8.RuneCountInString(name) > MaxNameLength:
		return Case{}, invalid("%s: the name is %d characters long; it may be at most %d", at, utf8.RuneCountInString(name), MaxNameLength)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return Case{}, invalid("%s: the name holds a control character (a newline, a tab); give it a name on one line", at)
	}
	c.Name = name
	at = label(n, name)
	for _, k := range sortedKeys(f) {
		if !slices.Contains(caseFields, k) {
			return Case{}, invalid("%s has an unknown field %s: a case has name, system, prompt, max_tokens and expect", at, operr.Quote(k))
		}
	}
	if c.Expect, err = parseExpect(at, f); err != nil {
		return Case{}, err
	}
	if c.Kind() == KindSimilarity {
		for _, k := range []string{"system", "prompt", "max_tokens"} {
			if _, ok := f[k]; ok {
				return Case{}, invalid("%s is a similarity case, asked through /v1/embeddings: it takes no %s; its texts are expect.similarity's anchor, closer and farther", at, k)
			}
		}
	} else {
		if err := parseChat(at, f, &c); err != nil {
			return Case{}, err
		}
	}
	if err := c.compile(at, kept, regexes); err != nil {
		return Case{}, err
	}
	return c, nil
}

// parseChat reads a chat case's system, prompt and max_tokens.
func parseChat(at string, f map[string]json.RawMessage, c *Case) error {
	for _, k := range []string{"system", "prompt"} {
		v, has, err := text(f, k)
		switch {
		case err != nil:
			return invalid("%s: %s should be a string", at, k)
		case len(v) > MaxPromptBytes:
			return invalid("%s: %s is %d bytes; it may be at most %d", at, k, len(v), MaxPromptBytes)
		case k == "prompt" && (!has || strings.TrimSpace(v) == ""):
			return invalid("%s has no prompt: give it the user's message to ask the model", at)
		}
		if k == "system" {
			c.System = v
		} else {
			c.Prompt = v
		}
	}
	if raw, ok := f["max_tokens"]; ok {
		if err := json.Unmarshal(raw, &c.MaxTokens); err != nil || isNull(raw) || c.MaxTokens < 1 || c.MaxTokens > MaxTokensLimit {
			return invalid("%s: max_tokens is %s; give a whole number from 1 to %d, or leave it out for %d",
				at, operr.Quote(string(raw)), MaxTokensLimit, DefaultMaxTokens)
		}
	}
	return nil
}

// parseExpect reads a case's expect: exactly one expectation.
func parseExpect(at string, f map[string]json.RawMessage) (Expect, error) {
	var e Expect
	raw, ok := f["expect"]
	if !ok || isNull(raw) {
		return e, invalid("%s has no expect: give it one of regex, json_schema, exact or similarity", at)
	}
	var x map[string]json.RawMessage
	if err := json.Unmarshal(raw, &x); err != nil || x == nil {
		return e, invalid("%s: expect should be an object such as {\"regex\": \"(?i)paris\"}", at)
	}
	var kinds []string
	for _, k := range sortedKeys(x) {
		if !slices.Contains(expectFields, k) {
			return e, invalid("%s: expect has an unknown field %s: it takes one of regex, json_schema, exact (with ignore_case) or similarity", at, operr.Quote(k))
		}
		if k != "ignore_case" {
			kinds = append(kinds, k)
		}
	}
	switch len(kinds) {
	case 0:
		return e, invalid("%s: expect has no expectation: give it one of regex, json_schema, exact or similarity", at)
	case 1:
	default:
		return e, invalid("%s: expect has %d expectations (%s): give it exactly one", at, len(kinds), strings.Join(kinds, " and "))
	}
	switch kind := kinds[0]; kind {
	case KindRegex, KindExact:
		v, _, err := text(x, kind)
		switch {
		case err != nil:
			return e, invalid("%s: expect.%s should be a string", at, kind)
		case kind == KindRegex && v == "":
			return e, invalid("%s: expect.regex is empty, which any answer matches: give a pattern the answer must match", at)
		case kind == KindRegex && len(v) > MaxPatternBytes:
			return e, invalid("%s: expect.regex is %d bytes; it may be at most %d", at, len(v), MaxPatternBytes)
		case kind == KindExact && len(v) > MaxExactBytes:
			return e, invalid("%s: expect.exact is %d bytes; it may be at most %d", at, len(v), MaxExactBytes)
		}
		if kind == KindRegex {
			e.Regex = &v
		} else {
			e.Exact = &v
		}
	case KindJSONSchema:
		var buf bytes.Buffer
		if err := json.Compact(&buf, x[kind]); err != nil {
			return e, invalid("%s: expect.json_schema is not JSON", at)
		}
		if buf.Len() > MaxSchemaBytes {
			return e, invalid("%s: expect.json_schema is %d bytes; it may be at most %d", at, buf.Len(), MaxSchemaBytes)
		}
		if b := buf.Bytes(); b[0] != '{' && !bytes.Equal(b, []byte("true")) && !bytes.Equal(b, []byte("false")) {
			return e, invalid("%s: expect.json_schema should be a JSON Schema: an object such as {\"type\": \"object\"}", at)
		}
		e.JSONSchema = json.RawMessage(buf.Bytes())
	case KindSimilarity:
		sim, err := parseSimilarity(at, x[kind])
		if err != nil {
			return e, err
		}
		e.Similarity = &sim
	}
	if raw, ok := x["ignore_case"]; ok {
		if e.Exact == nil {
			return e, invalid("%s: expect.ignore_case applies to exact alone", at)
		}
		if err := json.Unmarshal(raw, &e.IgnoreCase); err != nil || isNull(raw) {
			return e, invalid("%s: expect.ignore_case should be true or false", at)
		}
	}
	return e, nil
}

// parseSimilarity reads expect.similarity's three texts.
func parseSimilarity(at string, raw json.RawMessage) (Similarity, error) {
	var s Similarity
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return s, invalid("%s: expect.similarity should be an object {\"anchor\": ..., \"closer\": ..., \"farther\": ...}", at)
	}
	for _, k := range sortedKeys(f) {
		if !slices.Contains(simFields, k) {
			return s, invalid("%s: expect.similarity has an unknown field %s: it takes anchor, closer and farther", at, operr.Quote(k))
		}
	}
	for _, k := range simFields {
		v, has, err := text(f, k)
		switch {
		case err != nil:
			return s, invalid("%s: expect.similarity.%s should be a string", at, k)
		case !has || strings.TrimSpace(v) == "":
			return s, invalid("%s: expect.similarity has no %s: give it anchor, closer and farther, each a text", at, k)
		case len(v) > MaxPromptBytes:
			return s, invalid("%s: expect.similarity.%s is %d bytes; it may be at most %d", at, k, len(v), MaxPromptBytes)
		}
		switch k {
		case "anchor":
			s.Anchor = v
		case "closer":
			s.Closer = v
		default:
			s.Farther = v
		}
	}
	return s, nil
}

// compile compiles the case's pattern or schema, their regular
// expressions through the suite's budget. kept is as parse's.
func (c *Case) compile(at string, kept bool, regexes *regexBudget) error {
	switch c.Kind() {
	case KindRegex:
		re, err := regexes.compile(*c.Expect.Regex)
		var large *regexTooLarge
		if errors.As(err, &large) {
			if kept {
				c.unjudged = fmt.Sprintf("%s: expect.regex %s", at, large.sentence())
				return nil
			}
			return invalid("%s: expect.regex %s", at, large.sentence())
		}
		if err != nil {
			return invalid("%s: expect.regex is not a Go (RE2) regular expression: %s", at, clipText(strings.TrimPrefix(err.Error(), "error parsing regexp: "), 160))
		}
		c.re = re
	case KindJSONSchema:
		sch, cost, err := compileSchema(c.Expect.JSONSchema, regexes)
		var over errBounds
		if kept && errors.As(err, &over) {
			c.unjudged = fmt.Sprintf("%s: expect.json_schema %s", at, over.msg)
			return nil
		}
		if err != nil {
			return invalid("%s: expect.json_schema %s", at, err)
		}
		c.schema, c.cost = sch, cost
	}
	return nil
}

// schemaURL is where a case's schema is, for the schema library: a name
// of its own, so that nothing resolves against this machine's folders.
const schemaURL = "mem:///schema.json"

// errOutside is a schema referring to a document other than itself.
var errOutside = errors.New("a schema may not refer outside itself")

// noLoader refuses every document a schema refers to: the library's
// default loader reads local files, and a suite is untrusted input.
type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, errOutside }

// compileSchema compiles raw (compact JSON) and counts its expansion,
// saying in a few words what is wrong with a schema that does not compile
// or costs too much (errBounds) to check an answer against. Its depth is
// bounded before it is compiled, its regular expressions as the library
// compiles them (through regexes), and its expansion after.
func compileSchema(raw []byte, regexes *regexBudget) (*jsonschema.Schema, int, error) {
	if d := schemaDepth(raw); d > MaxSchemaDepth {
		return nil, 0, errBounds{fmt.Sprintf("nests %d levels deep; it may nest at most %d (objects and arrays, each properties or items taking two): make it shallower", d, MaxSchemaDepth)}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, 0, errors.New("is not JSON")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseRegexpEngine(regexes.engine)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, 0, errors.New("is not a schema that can be used here")
	}
	sch, err := c.Compile(schemaURL)
	if large := regexes.refusal(); large != nil {
		return nil, 0, errBounds{fmt.Sprintf("has a pattern%s, %s, that %s", patternPlace(err), operr.Quote(clipText(large.pattern, 40)), large.sentence())}
	}
	if err != nil {
		var load *jsonschema.LoadURLError
		if errors.As(err, &load) {
			return nil, 0, fmt.Errorf("refers to %s, outside itself: a schema here must be whole, with its definitions under $defs", operr.Quote(load.URL))
		}
		return nil, 0, fmt.Errorf("is not a valid JSON Schema: %s", schemaProblem(err))
	}
	cost, err := expansion(sch)
	if err != nil {
		return nil, 0, err
	}
	if cost > MaxSchemaExpansion {
		return nil, 0, errBounds{fmt.Sprintf("expands to more than %d subschemas once each $ref is followed where it is used: "+
			"checking one answer would cost too much; refer to fewer definitions, or to each from fewer places", MaxSchemaExpansion)}
	}
	return sch, cost, nil
}

// schemaProblem is the schema library's complaint, on one line, without
// the name it gave the schema.
func schemaProblem(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return clipText(leafError(ve), 200)
		}
	}
	msg := strings.ReplaceAll(strings.ReplaceAll(err.Error(), schemaURL+"#", "#"), schemaURL, "the schema")
	msg, _, _ = strings.Cut(msg, "\n")
	return clipText(msg, 200)
}

// leafError is the first innermost cause of a validation error, where the
// library's tree of causes says what is wrong: "at '/age': got string,
// want number".
func leafError(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	msg := strings.Join(strings.Fields(ve.Error()), " ")
	msg = strings.TrimPrefix(strings.ReplaceAll(msg, schemaURL, "the schema"), "- ")
	return strings.Replace(msg, "at '':", "at the top:", 1)
}

// JSON is the suite written out, indented, as the editor shows it and the
// store keeps it. The same suite always writes the same bytes: a suite
// kept is shown with the digest of the bytes kept, so a change here
// changes the digest of suites kept before it.
func (s Suite) JSON() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// A pattern such as <b> reads as itself in the editor, not \u003cb\u003e.
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if s.Cases == nil {
		s.Cases = []Case{}
	}
	if err := enc.Encode(s); err != nil {
		// Every field is a string, a number, a bool or JSON compacted on
		// parsing: there is nothing that does not encode.
		panic("evals: a suite does not encode: " + err.Error())
	}
	return buf.Bytes()
}

// Digest names the suite's content: two runs with the same digest asked the
// same cases the same way.
func (s Suite) Digest() string {
	sum := sha256.Sum256(s.JSON())
	return hex.EncodeToString(sum[:6])
}

// label names the case numbered n (from 1) in a sentence: case 3
// ("capital").
func label(n int, name string) string {
	if name == "" {
		return fmt.Sprintf("case %d", n)
	}
	return fmt.Sprintf("case %d (%s)", n, operr.Quote(name))
}

// text is f's string field key, whether it is there, and an error when it
// is there and not a string.
func text(f map[string]json.RawMessage, key string) (string, bool, error) {
	raw, ok := f[key]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		return "", true, errors.New("not a string")
	}
	return s, true, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonProblem says what is wrong with a suite the decoder refused.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return "it is null"
	case errors.Is(err, io.EOF):
		return "it is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends in the middle of a value"
	case errors.As(err, &syn):
		return fmt.Sprintf("%s at byte %d", clipText(syn.Error(), 120), syn.Offset)
	case errors.As(err, &te):
		return "it is a JSON " + te.Value
	}
	return "it cannot be read"
}

// clipText is s cut to most characters.
func clipText(s string, most int) string {
	if utf8.RuneCountInString(s) <= most {
		return s
	}
	return string([]rune(s)[:most]) + "…"
}

func invalid(format string, args ...any) error { return operr.New(operr.Invalid, format, args...) }
