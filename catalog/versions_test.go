package catalog_test

import (
	"context"
	"strings"
	"testing"

	"modelserve/catalog"
)

// TestVersionsFollowTheEntries: serving a model records its version as
// current; its canary is recorded as a canary; the canary promoted (the
// model's entry now at its commit) is current and the version before it
// retired; a canary rolled back says why; a model with no origin has no
// versions.
func TestVersionsFollowTheEntries(t *testing.T) {
	s, _ := MustOpen(t)
	ctx := context.Background()
	a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	at := func(name, commit string) catalog.Model {
		m := validModel(name)
		m.Origin = &catalog.Origin{Repo: "acme/chatty", Revision: commit, Ref: "main",
			Files: []catalog.OriginFile{{Path: "chatty-Q4_K_M.gguf", Bytes: 100, SHA256: strings.Repeat(commit[:1], 64)}}}
		return m
	}
	canary := func(commit string) catalog.Model {
		m := at(catalog.CanaryName("chatty", commit), commit)
		m.Canary = &catalog.Canary{Of: "chatty"}
		return m
	}
	states := func() string {
		vs, err := s.Versions(ctx, "chatty")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			out = append(out, v.Commit[:1]+":"+v.State)
		}
		return strings.Join(out, " ")
	}

	MustAdd(t, s, at("chatty", a))
	MustAdd(t, s, at("chatty", a)) // served again at the same commit: still one version
	if got := states(); got != "a:current" {
		t.Fatalf("after serving chatty: %s", got)
	}
	MustAdd(t, s, canary(b))
	if got := states(); got != "b:canary a:current" {
		t.Fatalf("with a canary: %s", got)
	}
	MustAdd(t, s, at("chatty", b))
	if got := states(); got != "b:current a:retired" {
		t.Fatalf("after the promotion: %s", got)
	}
	MustAdd(t, s, canary(c))
	if err := s.EndVersion(ctx, "chatty", c, catalog.VersionRolledBack, "its error rate was 40% against 0%"); err != nil {
		t.Fatal(err)
	}
	if got := states(); got != "c:rolled_back b:current a:retired" {
		t.Fatalf("after a roll-back: %s", got)
	}
	vs, _ := s.Versions(ctx, "chatty")
	if vs[0].Reason != "its error rate was 40% against 0%" || vs[0].Ended.IsZero() || vs[2].Reason != "replaced by bbbbbbb" {
		t.Errorf("versions %+v: want the roll-back's reason and the retirement's", vs)
	}
	if vs[1].Files[0].Path != "chatty-Q4_K_M.gguf" || vs[1].Profile.Name != "cpu" || vs[1].Ref != "main" {
		t.Errorf("the current version %+v lost its files, profile or ref", vs[1])
	}
	MustAdd(t, s, validModel("handmade"))
	if vs, err := s.Versions(ctx, "handmade"); err != nil || len(vs) != 0 {
		t.Errorf("a model with no origin has versions %+v (%v)", vs, err)
	}
}
