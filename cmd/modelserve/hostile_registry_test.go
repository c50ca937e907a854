package main

import (
	"net/url"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// A registry whose listing names files no filesystem should be handed, or a
// revision no registry could have, is refused with a sentence and a 4xx:
// not a 500 with the sentence left in the log. A revision is refused before
// any request reaches the registry.
func TestHostileRegistryInputIsRefusedInASentence(t *testing.T) {
	hub := hubtest.New(t)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL()})
	tinyRepo(t, hub, "acme/Tiny-GGUF", "tiny-Q4_K_M.gguf", ggufgen.Spec{})

	for _, tc := range []struct {
		name  string
		entry hubtest.TreeEntry
		want  string
	}{
		{"a path that climbs out", hubtest.TreeEntry{Type: "file", Path: "../x.gguf", Size: 10}, "climbs out of its folder"},
		{"an absolute path", hubtest.TreeEntry{Type: "file", Path: "/etc/passwd", Size: 10}, "starts at the root"},
		{"a NUL in a path", hubtest.TreeEntry{Type: "file", Path: "a\x00b.gguf", Size: 10}, "control character"},
		{"an escape in a path", hubtest.TreeEntry{Type: "file", Path: "a\x1b[31mb.gguf", Size: 10}, "control character"},
		{"a sha256 that is not one", hubtest.TreeEntry{Type: "file", Path: "w.gguf", Size: 10,
			LFS: &hubtest.TreeLFS{OID: "not-a-sha", Size: 10}}, "which is not a sha256"},
		{"a negative size", hubtest.TreeEntry{Type: "file", Path: "w.gguf", Size: -5}, "a size of -5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "acme/Poisoned-" + strings.ReplaceAll(tc.name, " ", "-")
			hub.AddRepo(id, hubtest.RepoOptions{})
			hub.AddFile(id, "ok-Q4_K_M.gguf", ggufgen.Bytes(ggufgen.Spec{}))
			hub.AddRawTreeEntry(id, tc.entry)
			var e struct{ Error string }
			status := s.do("GET", "/api/v1/repos/"+id, nil, &e)
			if status < 400 || status >= 500 || !strings.Contains(e.Error, tc.want) || !strings.Contains(e.Error, id) {
				t.Errorf("GET the repository: %d %q, want a 4xx naming %s and saying %q", status, e.Error, id, tc.want)
			}
		})
	}

	for _, rev := range []string{"\x00x", "ma\x1bin", "v1\nmain", "x\u0085y"} {
		t.Run("revision "+url.QueryEscape(rev), func(t *testing.T) {
			hub.ResetCounters()
			var e struct{ Error string }
			status := s.do("GET", "/api/v1/repos/acme/Tiny-GGUF?revision="+url.QueryEscape(rev), nil, &e)
			if status != 400 || !strings.Contains(e.Error, "control character") {
				t.Errorf("GET at revision %q: %d %q, want 400 saying it has a control character", rev, status, e.Error)
			}
			if log := hub.Log(); len(log) != 0 {
				t.Errorf("the registry was asked %s %s for a revision refused before asking", log[0].Method, log[0].URL)
			}
			// Nor does a job start at such a revision.
			status = s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-GGUF", "revision": rev}, &e)
			if status != 400 || !strings.Contains(e.Error, "control character") {
				t.Errorf("serving at revision %q: %d %q, want 400 saying it has a control character", rev, status, e.Error)
			}
		})
	}
	// The registry's answers are fine otherwise: the tiny repository reads.
	var report struct{ Repo string }
	if status := s.do("GET", "/api/v1/repos/acme/Tiny-GGUF", nil, &report); status != 200 || report.Repo != "acme/Tiny-GGUF" {
		t.Errorf("GET a sound repository: %d %+v", status, report)
	}
}
