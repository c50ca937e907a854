package plan

import (
	"context"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// A header is read in ranges through the registry: a 2 GiB model whose
// header is a few kilobytes costs the Hub about a megabyte, not the file.
func TestReadHeadersCostsTheHeader(t *testing.T) {
	w := newWorld(t, mustNodes(t, l4Node))
	w.hub.AddRepo("acme/big", hubtest.RepoOptions{})
	size := addSparse(t, w.hub, "acme/big", "big-Q4_K_M.gguf", ggufgen.Spec{PadTo: 2 << 30})
	repo := w.repo(t, "acme/big")
	read := ReadHeaders(w.client)

	h, err := read(context.Background(), w.client.DownloadURL(repo.ID, repo.Commit, "big-Q4_K_M.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	served := w.served(repo)
	t.Logf("the header of a %d GiB file cost %d KiB", size>>30, served>>10)
	if h.Size != 2<<30 || h.Architecture != "llama" || served == 0 || served > 8<<20 {
		t.Errorf("read a header of %d bytes, %q, for %d bytes served; want 2 GiB, llama, at most 8 MiB", h.Size, h.Architecture, served)
	}
}

func TestReadHeadersRefusesARegistryWithoutRanges(t *testing.T) {
	w := newWorld(t, mustNodes(t, l4Node))
	w.hub.AddRepo("acme/big", hubtest.RepoOptions{})
	addSparse(t, w.hub, "acme/big", "big-Q4_K_M.gguf", ggufgen.Spec{PadTo: 2 << 30})
	w.hub.IgnoreRange("acme/big", "big-Q4_K_M.gguf", true)
	repo := w.repo(t, "acme/big")

	_, err := ReadHeaders(w.client)(context.Background(), w.client.DownloadURL(repo.ID, repo.Commit, "big-Q4_K_M.gguf"))

	if err == nil || !strings.Contains(err.Error(), "does not answer Range requests for acme/big file big-Q4_K_M.gguf") {
		t.Errorf("error %v, want one saying the registry does not answer Range requests", err)
	}
}

// BenchmarkReadHeaderOverHTTP reads a 2 GiB model's header from the Hub
// double through the registry client, and reports the bytes each read
// cost the Hub.
func BenchmarkReadHeaderOverHTTP(b *testing.B) {
	w := newWorld(b, mustNodes(b, l4Node))
	w.hub.AddRepo("acme/big", hubtest.RepoOptions{})
	addSparse(b, w.hub, "acme/big", "big-Q4_K_M.gguf", ggufgen.Spec{PadTo: 2 << 30})
	repo := w.repo(b, "acme/big")
	u := w.client.DownloadURL(repo.ID, repo.Commit, "big-Q4_K_M.gguf")
	read := ReadHeaders(w.client)
	before := w.served(repo)
	for b.Loop() {
		if _, err := read(context.Background(), u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(w.served(repo)-before)/float64(b.N), "bytes-served/op")
}
