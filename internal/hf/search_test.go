package hf_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// newSearchHub is a Hub holding GGUF repositories named qwen (one gated,
// one private) and one without a GGUF file.
func newSearchHub(t *testing.T) *hubtest.Server {
	t.Helper()
	s := hubtest.New(t)
	for _, r := range []struct {
		id   string
		opts hubtest.RepoOptions
		file string
	}{
		{"acme/Qwen-GGUF", hubtest.RepoOptions{Downloads: 1200, Likes: 34}, "qwen-q4_k_m.gguf"},
		{"meta/qwen-gated-GGUF", hubtest.RepoOptions{Gated: "manual", Downloads: 7, Likes: 1}, "q8_0.gguf"},
		{"acme/qwen-private", hubtest.RepoOptions{Private: true}, "q4.gguf"},
		{"acme/qwen-weights", hubtest.RepoOptions{}, "model.safetensors"},
		{"acme/llama-GGUF", hubtest.RepoOptions{}, "llama.gguf"},
	} {
		s.AddRepo(r.id, r.opts)
		s.AddFile(r.id, r.file, []byte("x"))
	}
	return s
}

func TestSearchFindsGGUFRepositories(t *testing.T) {
	s := newSearchHub(t)
	s.AddToken("granted", "acme/qwen-private")
	for _, tc := range []struct {
		name, token, query string
		want               []hf.Found
	}{
		{"anonymous sees public GGUF repositories", "", "QWEN", []hf.Found{
			{ID: "acme/Qwen-GGUF", Downloads: 1200, Likes: 34},
			{ID: "meta/qwen-gated-GGUF", Downloads: 7, Likes: 1, Gated: "manual"},
		}},
		{"a granted token sees the private one", "granted", "qwen", []hf.Found{
			{ID: "acme/Qwen-GGUF", Downloads: 1200, Likes: 34},
			{ID: "acme/qwen-private", Private: true},
			{ID: "meta/qwen-gated-GGUF", Downloads: 7, Likes: 1, Gated: "manual"},
		}},
		{"nothing matches", "", "mistral", []hf.Found{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mustClient(t, s.URL(), tc.token).Search(context.Background(), tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if !equalFound(got, tc.want) {
				t.Fatalf("found %+v, want %+v", got, tc.want)
			}
		})
	}
	// The query goes as the Hub documents it, through the one request path.
	reqs := hubRequests(s, "/api/models?")
	if len(reqs) == 0 || !strings.Contains(reqs[0].URL, "filter=gguf") || !strings.Contains(reqs[0].URL, "limit=20") {
		t.Fatalf("search requests: %+v", reqs)
	}
}

func equalFound(a, b []hf.Found) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSearchRetriesAndRefuses(t *testing.T) {
	s := newSearchHub(t)
	c := mustClient(t, s.URL(), "")
	s.FailNext(hubtest.SearchRoute, "", http.StatusServiceUnavailable, 2)
	if got, err := c.Search(context.Background(), "llama"); err != nil || len(got) != 1 {
		t.Fatalf("after two 503s: %+v, %v", got, err)
	}
	_, err := mustClient(t, s.URL(), "wrong").Search(context.Background(), "llama")
	if msg, ok := operr.Sentence(err); !ok || !errors.Is(err, hf.ErrUnauthorized) || !strings.Contains(msg, "refused the token") {
		t.Fatalf("a refused token: %v", err)
	}
	off, _ := hf.NewClient(hf.Options{Endpoint: s.URL(), Offline: true})
	if _, err := off.Search(context.Background(), "llama"); !errors.Is(err, hf.ErrOffline) {
		t.Fatalf("offline: %v", err)
	}
}

func TestSearchRefusesALongQuery(t *testing.T) {
	s := newSearchHub(t)
	long := strings.Repeat("q", hf.MaxQuery+1)
	for name, search := range map[string]func(context.Context, string) ([]hf.Found, error){
		"hub":        mustClient(t, s.URL(), "").Search,
		"registries": hf.Registries{Hub: mustClient(t, s.URL(), "")}.Search,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := search(context.Background(), long)
			msg, ok := operr.Sentence(err)
			if !ok || !strings.Contains(msg, operr.Quote(long)) || strings.Count(msg, "q") > words.ClipMost+10 {
				t.Fatalf("a %d-character query: %v", len(long), err)
			}
		})
	}
	if n := len(hubRequests(s, "/api/models")); n != 0 {
		t.Fatalf("a refused query reached the Hub %d times", n)
	}
}

func TestRegistriesSearchListsLocalFoldersFirst(t *testing.T) {
	s := newSearchHub(t)
	root := t.TempDir()
	for _, d := range []string{"qwen-local", "Other-QWEN", "llama"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	regs := hf.Registries{Hub: mustClient(t, s.URL(), ""), Local: hf.NewLocal(root, "")}
	ids := func(query string) string {
		t.Helper()
		got, err := regs.Search(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range got {
			out = append(out, f.ID)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct{ query, want string }{
		{"qwen", "local/Other-QWEN local/qwen-local acme/Qwen-GGUF meta/qwen-gated-GGUF"},
		{"local/qwen", "local/Other-QWEN local/qwen-local"},
		{"llama", "local/llama acme/llama-GGUF"},
		{"  ", ""},
	} {
		if got := ids(tc.query); got != tc.want {
			t.Errorf("search %q found %q, want %q", tc.query, got, tc.want)
		}
	}
}
