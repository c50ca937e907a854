package gateway

import (
	"strings"
	"testing"
)

// TestRenamerAndTallyReadFromAReusedBuffer reads a canary's stream as relay
// does, every read into the same buffer, overwritten after each: what is
// held back between reads, the renamed model and the counts must not be
// taken from bytes a later read wrote over.
func TestRenamerAndTallyReadFromAReusedBuffer(t *testing.T) {
	answer := `data: {"choices":[{"delta":{"content":"Hi"}}],"model":"chatty@3f2a1b0"}` + "\n\n" +
		`data: {"choices":[],"model":"chatty@3f2a1b0","usage":{"completion_tokens":2,"prompt_tokens":5},` +
		`"timings":{"cache_n":1,"prompt_n":4,"predicted_n":2,"predicted_ms":3}}` + "\n\ndata: [DONE]\n\n"
	want := strings.ReplaceAll(answer, `"model":"chatty@3f2a1b0"`, `"model":"chatty"`)
	for _, size := range []int{3, 17, 40, len(answer)} {
		r := newRenamer("chatty@3f2a1b0", "chatty")
		tl := tally{stream: true}
		buf := make([]byte, size)
		var out strings.Builder
		for i := 0; i < len(answer); i += size {
			n := copy(buf, answer[i:])
			out.Write(r.next(buf[:n]))
			tl.feed(buf[:n])
			for j := range buf {
				buf[j] = 'x'
			}
		}
		out.Write(r.rest())
		if out.String() != want {
			t.Errorf("read by %d bytes:\n%s\nwant\n%s", size, out.String(), want)
		}
		if got, w := tl.counts(), (counts{prompt: 5, cached: 1, completion: 2, generating: 3000000}); got != w || !tl.done {
			t.Errorf("read by %d bytes: counts %+v, done %v; want %+v, done", size, got, tl.done, w)
		}
	}
}
