package evals

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelserve/internal/operr"
)

// MaxRegexProgram is how many instructions the regular expressions of one
// suite (each expect.regex, and each pattern and patternProperties name of
// its schemas) may compile to, in all; an answer's string checked against
// format "regex" may compile to as many on its own. Compiling writes each
// counted repeat out in full: "a{1000}" is a thousand instructions, and a
// 16 KB pattern of 2,300 of them compiled to 2.3 million, taking 4.6 s and
// half a gigabyte, which is what Go's regexp would allow. At this bound a
// suite's regular expressions compile in well under 100 ms and keep about
// a megabyte, and matching one against an answer stays within a second.
const MaxRegexProgram = 20_000

// regexTooLarge is why a regular expression is refused: what it compiles
// to, and how much of the suite's bound was left for it.
type regexTooLarge struct {
	pattern string
	size    int64
	left    int
}

// sentence says what is wrong with the pattern, and what to do, after
// the words that name it.
func (e *regexTooLarge) sentence() string {
	if e.size > MaxRegexProgram {
		return fmt.Sprintf("compiles to more than %d instructions, and the regular expressions of a suite may compile to at most %d in all: "+
			"a counted repeat is written out in full (a{1000} is 1000 instructions), so use + or * for a long one", MaxRegexProgram, MaxRegexProgram)
	}
	return fmt.Sprintf("compiles to %d instructions, past the %d left of the %d the regular expressions of a suite may compile to in all: "+
		"shorten the counted repeats ({1000}) of this case and those before it, or split the suite", e.size, e.left, MaxRegexProgram)
}

func (e *regexTooLarge) Error() string {
	return "the regular expression " + operr.Quote(clipText(e.pattern, 40)) + " " + e.sentence()
}

// regexBudget compiles the regular expressions of one suite, refusing
// before it compiles one any that would take the suite past
// MaxRegexProgram. The schema library compiles patterns itself, and may
// compile one twice (checking the schema, then building it): through the
// budget, a pattern is compiled and counted once. Once the suite is
// compiled (done), it compiles only the strings of answers checked
// against format "regex", each bounded on its own and none kept.
type regexBudget struct {
	mu       sync.Mutex
	left     int
	compiled map[string]*regexp.Regexp
	done     bool
	// refused is the first regular expression refused for its size.
	refused *regexTooLarge
}

func newRegexBudget() *regexBudget {
	return &regexBudget{left: MaxRegexProgram, compiled: map[string]*regexp.Regexp{}}
}

// compile compiles pattern (Go's RE2 syntax), or refuses it with a
// *regexTooLarge when it would compile to more than the budget has left.
func (b *regexBudget) compile(pattern string) (*regexp.Regexp, error) {
	b.mu.Lock()
	done, re, left := b.done, b.compiled[pattern], b.left
	b.mu.Unlock()
	if re != nil {
		return re, nil
	}
	if done {
		// An answer's string, checked against format "regex": bounded on
		// its own, and not kept.
		left = MaxRegexProgram
	}
	size, err := sizeOf(pattern)
	if err != nil {
		return nil, err
	}
	if size > int64(left) {
		over := &regexTooLarge{pattern: pattern, size: size, left: left}
		b.mu.Lock()
		if b.refused == nil && !done {
			b.refused = over
		}
		b.mu.Unlock()
		return nil, over
	}
	if re, err = regexp.Compile(pattern); err != nil || done {
		return re, err
	}
	// A suite compiles in one goroutine: nothing else spent the budget
	// since it was read.
	b.mu.Lock()
	b.left -= int(size)
	b.compiled[pattern] = re
	b.mu.Unlock()
	return re, nil
}

// sizeOf is how many instructions pattern compiles to, counted no further
// than past MaxRegexProgram, or why it is no regular expression.
func sizeOf(pattern string) (int64, error) {
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	var large *syntax.Error
	if errors.As(err, &large) && large.Code == syntax.ErrLarge {
		// Past Go's own bound of 3.3 million instructions: past ours.
		return MaxRegexProgram + 1, nil
	}
	if err != nil {
		return 0, err
	}
	return programSize(parsed), nil
}

// refusal is the regular expression refused for its size since it was
// last asked, if any.
func (b *regexBudget) refusal() *regexTooLarge {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.refused
	b.refused = nil
	return r
}

// patternPlace is where in its schema the library was compiling the
// pattern that err refuses, in words to follow "a pattern": ` at
// "#/properties/a/pattern"`; empty when err does not say.
func patternPlace(err error) string {
	var bad *jsonschema.InvalidRegexError
	if errors.As(err, &bad) {
		return " at " + operr.Quote(strings.TrimPrefix(bad.URL, schemaURL))
	}
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		// The check against the metaschema: the deepest place named, since
		// a patternProperties name is checked as a value of its own, at ''.
		var at []string
		for ; ve != nil; ve = first(ve.Causes) {
			if len(ve.InstanceLocation) > 0 {
				at = ve.InstanceLocation
			}
		}
		return " at " + operr.Quote("#/"+strings.Join(at, "/"))
	}
	return ""
}

func first(causes []*jsonschema.ValidationError) *jsonschema.ValidationError {
	if len(causes) == 0 {
		return nil
	}
	return causes[0]
}

// engine is compile as the schema library takes it.
func (b *regexBudget) engine(pattern string) (jsonschema.Regexp, error) {
	re, err := b.compile(pattern)
	if err != nil {
		return nil, err
	}
	return re, nil
}

// finish ends the suite's compiling: from now on the budget keeps
// nothing, and bounds each regular expression on its own.
func (b *regexBudget) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.compiled = true, nil
}

// programSize is how many instructions re compiles to, counted as Go's
// regexp/syntax counts them when it bounds a program (a counted repeat
// written out, a star taken as two), from the parsed tree and without
// writing it out: counting a 2.3-million-instruction pattern takes
// microseconds. It stops counting past MaxRegexProgram.
func programSize(re *syntax.Regexp) int64 {
	const most = MaxRegexProgram + 1
	var size int64
	switch re.Op {
	case syntax.OpLiteral:
		size = int64(len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		size = 2 + programSize(re.Sub[0])
	case syntax.OpPlus, syntax.OpQuest:
		size = 1 + programSize(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			if size += programSize(sub); size > most {
				return most
			}
		}
		if re.Op == syntax.OpAlternate && len(re.Sub) > 1 {
			size += int64(len(re.Sub)) - 1
		}
	case syntax.OpRepeat:
		sub := programSize(re.Sub[0])
		switch {
		case re.Max == -1 && re.Min == 0:
			size = 2 + sub // x*
		case re.Max == -1:
			size = 1 + int64(re.Min)*sub // xxx+
		default:
			size = int64(re.Max)*sub + int64(re.Max-re.Min) // xx(x(x)?)?
		}
	}
	return min(max(1, size), most)
}
