package fleet

import (
	"testing"
)

// TestListeningHearsTheEngineSayItListens: the engine's line that it
// listens is heard however its output is cut into writes, and nothing
// else it says is taken for it.
func TestListeningHearsTheEngineSayItListens(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		heard  bool
	}{
		{"this build's line", []string{"0.00.103.827 I srv  llama_server: model loaded\n", "0.00.103.951 I srv  llama_server: listening on http://127.0.0.1:39615\n"}, true},
		{"an older build's line", []string{"main: server is listening on http://127.0.0.1:4242 - starting the main loop\n"}, true},
		{"cut across writes", []string{"llama_server: listen", "ing o", "n http://127.0.0.1:1\n"}, true},
		{"a byte a write", splitBytes("x: listening on http://127.0.0.1:1\n"), true},
		{"still loading", []string{"load_model: loading model 'tiny.gguf'\n", "srv  init: listening soon\n", "on http"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newListening()
			for _, w := range tc.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			select {
			case <-l.heard:
				if !tc.heard {
					t.Errorf("heard the engine listen in %q", tc.writes)
				}
				// A second such line must not close heard again.
				_, _ = l.Write([]byte("listening on http again\n"))
			default:
				if tc.heard {
					t.Errorf("did not hear the engine listen in %q", tc.writes)
				}
			}
		})
	}
}

func splitBytes(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}
