package evals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"modelserve/internal/operr"
)

// judge is the verdict on a chat case's answer: whether it passes, and
// when it does not, why, in a sentence quoting the answer. A JSON Schema
// case's check is bounded (see Case.validate); judging counts the checks
// under way.
func (c Case) judge(ctx context.Context, answer string, judging *sync.WaitGroup) (bool, string) {
	if c.unjudged != "" {
		return false, "not judged: " + c.unjudged
	}
	switch c.Kind() {
	case KindRegex:
		if c.re.MatchString(answer) {
			return true, ""
		}
		return false, fmt.Sprintf("the answer does not match %s: %s", clipText(*c.Expect.Regex, 100), operr.Quote(answer))
	case KindExact:
		got, want := strings.TrimSpace(answer), strings.TrimSpace(*c.Expect.Exact)
		if got == want || (c.Expect.IgnoreCase && strings.EqualFold(got, want)) {
			return true, ""
		}
		if c.Expect.IgnoreCase {
			return false, fmt.Sprintf("the answer is not %s, in any case: %s", operr.Quote(want), operr.Quote(got))
		}
		return false, fmt.Sprintf("the answer is not %s: %s", operr.Quote(want), operr.Quote(got))
	case KindJSONSchema:
		text := unfence(answer)
		if len(text) > MaxJudgedBytes {
			return false, fmt.Sprintf("not judged: the answer is %d bytes, and a JSON Schema case checks at most %d: give the case a smaller max_tokens", len(text), MaxJudgedBytes)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return false, "the answer is not JSON: " + operr.Quote(answer)
		}
		err, unjudged := c.validate(ctx, v, judging)
		if unjudged != "" {
			return false, "not judged: " + unjudged
		}
		if err != nil {
			var ve *jsonschema.ValidationError
			why := "it is not valid"
			if errors.As(err, &ve) {
				why = clipText(leafError(ve), 200)
			}
			return false, fmt.Sprintf("the answer's JSON does not fit the schema (%s): %s", why, operr.Quote(answer))
		}
		return true, ""
	}
	return false, "a similarity case is judged on embeddings, not on a chat answer"
}

// fence is a whole answer inside a Markdown code fence, as models write
// JSON: ```json, the JSON, ```.
var fence = regexp.MustCompile("(?s)^```[A-Za-z]*[ \t]*\r?\n(.*?)\r?\n?```$")

// unfence is the answer trimmed and, when it is one fenced block, what
// the fence holds.
func unfence(answer string) string {
	a := strings.TrimSpace(answer)
	if m := fence.FindStringSubmatch(a); m != nil {
		return strings.TrimSpace(m[1])
	}
	return a
}

// judgeSimilarity is the verdict on a similarity case's three embeddings
// (anchor, closer, farther): what to show as the answer, whether it
// passes, and why not.
func judgeSimilarity(vecs [][]float64) (answer string, pass bool, reason string) {
	if len(vecs) != 3 {
		return "", false, fmt.Sprintf("the model answered %d embeddings for the 3 texts", len(vecs))
	}
	near, ok1 := cosine(vecs[0], vecs[1])
	far, ok2 := cosine(vecs[0], vecs[2])
	if !ok1 || !ok2 {
		return "", false, fmt.Sprintf("the embeddings cannot be compared: their lengths are %d, %d and %d, or one is all zeros",
			len(vecs[0]), len(vecs[1]), len(vecs[2]))
	}
	answer = fmt.Sprintf("cosine(anchor, closer) %.4f, cosine(anchor, farther) %.4f", near, far)
	if near > far {
		return answer, true, ""
	}
	return answer, false, fmt.Sprintf("the anchor is not nearer the closer text: cosine %.4f with it, %.4f with the farther one", near, far)
}

// cosine is the cosine of the angle between a and b, and false when they
// differ in length or one has no length.
func cosine(a, b []float64) (float64, bool) {
	if len(a) != len(b) || len(a) == 0 {
		return 0, false
	}
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	if na == 0 || nb == 0 {
		return 0, false
	}
	c := dot / (math.Sqrt(na) * math.Sqrt(nb))
	if math.IsNaN(c) || math.IsInf(c, 0) {
		return 0, false
	}
	return c, true
}
