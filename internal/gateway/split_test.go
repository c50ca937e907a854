package gateway

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestSplitIsExact(t *testing.T) {
	for _, c := range []struct {
		share float64
		n     int
		want  int
	}{
		{0.1, 200, 20},
		{0.1, 9, 0},
		{0.1, 10, 1},
		// 0.29·200 is 57.99999999999999 in floating point: counted in
		// integers it is 58.
		{0.29, 200, 58},
		{0.05, 1000, 50},
		{1.0 / 3, 300, 100},
		{0.5, 7, 3},
		{1, 50, 50},
		{0, 50, 0},
	} {
		t.Run(fmt.Sprint(c.share, " of ", c.n), func(t *testing.T) {
			s := splits{byModel: map[string]*splitCount{}}
			got := 0
			for i := 1; i <= c.n; i++ {
				if s.toCanary("chatty", "chatty@3f2a1b0", c.share) {
					got++
				}
				// Never more than one ahead of the exact share, nor behind.
				if exact := float64(i) * c.share; float64(got) > math.Ceil(exact) || float64(got) < math.Floor(exact)-1 {
					t.Fatalf("after %d requests %d went to the canary", i, got)
				}
			}
			if got != c.want {
				t.Errorf("%d of %d went to the canary, want %d", got, c.n, c.want)
			}
		})
	}

	t.Run("shares as fractions", func(t *testing.T) {
		for _, c := range []struct {
			share float64
			p, q  int64
		}{{0.1, 1, 10}, {0.29, 29, 100}, {1.0 / 3, 1, 3}, {0.125, 1, 8}, {1e-6, 1, 1_000_000}, {0.7, 7, 10},
			{-1, 0, 1}, {math.NaN(), 0, 1}, {2, 1, 1}} {
			if p, q := fraction(c.share); p != c.p || q != c.q {
				t.Errorf("%v is %d/%d, want %d/%d", c.share, p, q, c.p, c.q)
			}
		}
	})

	t.Run("per model, and afresh when the share changes", func(t *testing.T) {
		s := splits{byModel: map[string]*splitCount{}}
		count := func(model string, share float64, n int) (got int) {
			for range n {
				if s.toCanary(model, model+"@3f2a1b0", share) {
					got++
				}
			}
			return got
		}
		if got := count("a", 0.1, 5) + count("b", 0.1, 5); got != 0 {
			t.Errorf("5 requests each of two models at 0.1: %d to canaries, want 0 (each counts its own)", got)
		}
		if got := count("a", 0.1, 5); got != 1 {
			t.Errorf("the 10th request of a: %d to the canary, want 1", got)
		}
		if got := count("a", 0.5, 1); got != 0 {
			t.Errorf("the first request at 0.5 went to the canary: the count did not start again")
		}
		if got := count("a", 0.5, 199); got != 100 {
			t.Errorf("200 requests at 0.5: %d to the canary, want 100", got)
		}
	})
}

func TestRenamerRewritesTheModelOnly(t *testing.T) {
	answer := `data: {"choices":[{"delta":{"content":"\"chatty@3f2a1b0\""}}],"model":"chatty@3f2a1b0","object":"chat.completion.chunk"}` + "\n\n" +
		`data: {"choices":[],"model":"chatty@3f2a1b0","usage":{"completion_tokens":2}}` + "\n\n" +
		"data: [DONE]\n\n"
	want := strings.ReplaceAll(answer, `"model":"chatty@3f2a1b0"`, `"model":"chatty"`)
	for _, size := range []int{1, 2, 5, 13, len(answer)} {
		r := newRenamer("chatty@3f2a1b0", "chatty")
		var out strings.Builder
		for i := 0; i < len(answer); i += size {
			out.Write(r.next([]byte(answer[i:min(i+size, len(answer))])))
			// An event's end is never held back.
			if strings.HasSuffix(answer[:min(i+size, len(answer))], "\n") && !strings.HasSuffix(out.String(), "\n") {
				t.Fatalf("read by %d bytes: the end of an event was held back", size)
			}
		}
		out.Write(r.rest())
		if out.String() != want {
			t.Errorf("read by %d bytes:\n%s\nwant\n%s", size, out.String(), want)
		}
	}
	// What merely begins like the member is written at the end.
	r := newRenamer("chatty@3f2a1b0", "chatty")
	if got := string(r.next([]byte(`{"a":1,"mod`))) + string(r.rest()); got != `{"a":1,"mod` {
		t.Errorf("a partial member: %q", got)
	}
}
