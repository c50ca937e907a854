package hf_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
)

// TestRefsTellBranchesFromTags: the listing names each branch and tag at
// its commit, and KindOf says what a revision is, a commit without asking.
func TestRefsTellBranchesFromTags(t *testing.T) {
	s := hubtest.New(t)
	s.AddRepo("acme/m", hubtest.RepoOptions{Branches: []string{"main", "dev"}})
	first := s.AddFile("acme/m", "m.gguf", []byte("one"))
	second := s.AddFile("acme/m", "m.gguf", []byte("two"))
	s.SetRef("acme/m", "v1", first)
	s.SetRef("acme/m", "refs/pr/1", first)
	c := mustClient(t, s.URL(), "")

	refs, err := c.Refs(context.Background(), "acme/m")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := refs.Branch("main"); !ok || b.Commit != second {
		t.Errorf("main is %+v (%v), want at %s", b, ok, second)
	}
	for rev, want := range map[string]string{
		"main": hf.RefBranch, "dev": hf.RefBranch, "v1": hf.RefTag, first: hf.RefCommit,
		"refs/pr/1": hf.RefOther, first[:7]: hf.RefOther,
	} {
		if got := refs.KindOf(rev); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", rev, got, want)
		}
	}
	if n := len(hubRequests(s, "/api/models/acme/m/refs")); n != 1 {
		t.Errorf("%d requests for the refs, want 1", n)
	}

	_, err = c.Refs(context.Background(), "acme/none")
	if !errors.Is(err, hf.ErrNotFound) {
		t.Errorf("refs of a missing repository: %v, want not found", err)
	}
}

// TestHostileRefs: a listing that names a ref no revision could be, or a
// commit that is not one, is refused whole in a sentence; so is one too
// long to be a model repository's.
func TestHostileRefs(t *testing.T) {
	commit := strings.Repeat("c", 40)
	many := strings.Repeat(`{"name":"b","targetCommit":"`+commit+`"},`, 10001)
	for _, tc := range []struct{ name, body, want string }{
		{"a control character in a name", `{"branches":[{"name":"ma\u001bin","targetCommit":"` + commit + `"}],"tags":[]}`,
			"which no branch or tag can be"},
		{"an empty name", `{"branches":[],"tags":[{"name":"","targetCommit":"` + commit + `"}]}`, "which no branch or tag can be"},
		{"a commit that is not one", `{"branches":[{"name":"main","targetCommit":"../../etc"}],"tags":[]}`, "which is not a commit id"},
		{"too many", `{"branches":[` + strings.TrimSuffix(many, ",") + `],"tags":[]}`, "more than the 10000 modelserve reads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			_, err := mustClient(t, srv.URL, "").Refs(context.Background(), "acme/m")
			msg, ok := operr.Sentence(err)
			if !ok || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "acme/m") {
				t.Errorf("got %v, want a sentence naming acme/m and saying %q", err, tc.want)
			}
		})
	}
	t.Run("larger than a listing can be", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"branches":[{"name":"%s","targetCommit":"%s"}]}`, strings.Repeat("b", 9<<20), commit)
		}))
		defer srv.Close()
		if _, err := mustClient(t, srv.URL, "").Refs(context.Background(), "acme/m"); err == nil {
			t.Error("a 9 MiB listing was read")
		}
	})
}

// TestLocalRefs: a folder has one branch, main, at the digest of what it
// holds, which moves when a file changes.
func TestLocalRefs(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(root, "mine", "m.gguf"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	regs := hf.Registries{Local: hf.NewLocal(root, "")}
	before, err := regs.Refs(context.Background(), "local/mine")
	if err != nil {
		t.Fatal(err)
	}
	write("two, longer")
	after, err := regs.Refs(context.Background(), "local/mine")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := before.Branch("main")
	a, ok := after.Branch("main")
	if !ok || len(after.Branches) != 1 || a.Commit == b.Commit || !hf.IsCommit(a.Commit) {
		t.Errorf("main before %+v, after %+v: want one branch whose commit moved", before, after)
	}
}
