package jobs

import (
	"context"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
)

// TestOriginRecordsTheRef: the catalog's origin says which revision the
// operator asked for and what the registry said it was, so that only a
// model served from a branch is watched for new weights. A commit is
// known for one without asking the registry's refs.
func TestOriginRecordsTheRef(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	commit := e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{Branches: []string{"main", "dev"}},
		map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
	e.hub.SetRef("acme/Tiny-GGUF", "v1", commit)
	e.hub.SetRef("acme/Tiny-GGUF", "refs/pr/1", commit)

	for _, tc := range []struct{ name, revision, ref, kind string }{
		{"main", "", "main", hf.RefBranch},
		{"by-tag", "v1", "v1", hf.RefTag},
		{"by-commit", commit, commit, hf.RefCommit},
		{"by-pr", "refs/pr/1", "refs/pr/1", hf.RefOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.hub.ResetCounters()
			j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Revision: tc.revision, Name: tc.name}).ID)
			if j.State != Done {
				t.Fatalf("job ended %s: %s", j.State, j.Error)
			}
			m, err := e.catalog.Get(context.Background(), tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if o := m.Origin; o == nil || o.Ref != tc.ref || o.RefKind != tc.kind || o.Revision != commit {
				t.Errorf("origin %+v, want ref %q (%s) at %s", o, tc.ref, tc.kind, commit)
			}
			asked := false
			for _, r := range e.hub.Log() {
				asked = asked || strings.HasSuffix(r.URL, "/refs")
			}
			if want := tc.kind != hf.RefCommit; asked != want {
				t.Errorf("the refs were asked for: %v, want %v", asked, want)
			}
		})
	}
}

// refusingRefs is the Hub client but for its refs, which it will not list.
type refusingRefs struct{ *hf.Client }

func (refusingRefs) Refs(ctx context.Context, id string) (hf.Refs, error) {
	return hf.Refs{}, operr.New(operr.NotFound, "the registry answered 404 Not Found for %s", id)
}

// TestServeWithoutTheRefs: a registry that does not list its refs still
// serves the model; the origin keeps the ref asked for, and no kind, so
// the model is not watched (and its status says why).
func TestServeWithoutTheRefs(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {}})
	deps := e.deps
	deps.Registry = refusingRefs{e.client}
	srv := MustServer(t, deps)
	j := MustEnd(t, srv, MustStart(t, srv, Request{Repo: "acme/Tiny-GGUF"}).ID)
	if j.State != Done {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	m, err := e.catalog.Get(context.Background(), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if o := m.Origin; o == nil || o.Ref != "main" || o.RefKind != "" {
		t.Errorf("origin %+v, want the ref main with no kind", o)
	}
}
