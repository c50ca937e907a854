package plan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"

	"modelserve/internal/gguf"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

// sparse is an in-memory file that keeps what was written and remembers
// the rest as zeros, so a ShapeOnly GGUF of gigabytes costs its header.
type sparse struct {
	data []byte
	pos  int64
	size int64
}

func (s *sparse) Write(p []byte) (int, error) {
	end := s.pos + int64(len(p))
	if end > int64(len(s.data)) && !allZero(p) {
		s.data = append(s.data, make([]byte, end-int64(len(s.data)))...)
	}
	if s.pos < int64(len(s.data)) {
		copy(s.data[s.pos:], p)
	}
	s.pos = end
	s.size = max(s.size, end)
	return len(p), nil
}

func allZero(p []byte) bool {
	for len(p) >= len(zeros) {
		if !bytes.Equal(p[:len(zeros)], zeros[:]) {
			return false
		}
		p = p[len(zeros):]
	}
	return bytes.Equal(p, zeros[:len(p)])
}

var zeros [4096]byte

func (s *sparse) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += s.pos
	case io.SeekEnd:
		off += s.size
	}
	if off < 0 {
		return 0, errors.New("sparse: seek before the start")
	}
	s.pos = off
	return off, nil
}

func (s *sparse) Truncate(size int64) error {
	s.size = size
	return nil
}

// gen serves the file's bytes at off.
func (s *sparse) gen(off int64, p []byte) {
	clear(p)
	if off < int64(len(s.data)) {
		copy(p, s.data[off:])
	}
}

// mustSparse writes spec (ShapeOnly or padded) as a sparse file.
func mustSparse(t testing.TB, spec ggufgen.Spec) *sparse {
	t.Helper()
	s := &sparse{}
	if err := ggufgen.Write(s, spec); err != nil {
		t.Fatalf("writing %s: %v", spec.Name, err)
	}
	return s
}

// fakeSHA is a stand-in for a generated file's sha256, unique per content
// and size: hashing 75 GB of zeros would make the test take minutes.
func fakeSHA(head []byte, size int64, salt string) string {
	h := sha256.New()
	h.Write(head)
	fmt.Fprintf(h, "%d/%s", size, salt)
	return hex.EncodeToString(h.Sum(nil))
}

// addSparse serves spec at path in repository id.
func addSparse(t testing.TB, hub *hubtest.Server, id, path string, spec ggufgen.Spec) int64 {
	t.Helper()
	s := mustSparse(t, spec)
	hub.AddFileSpec(id, hubtest.FileSpec{Path: path, Size: s.size, Gen: s.gen, SHA256: fakeSHA(s.data, s.size, path)})
	return s.size
}

// addZeros serves size bytes of zeros (safetensors weights whose content
// the planner never reads).
func addZeros(t testing.TB, hub *hubtest.Server, id, path string, size int64) {
	t.Helper()
	hub.AddFileSpec(id, hubtest.FileSpec{Path: path, Size: size, Gen: func(_ int64, p []byte) { clear(p) },
		SHA256: fakeSHA(nil, size, path)})
}

// addSplit writes spec as n shards and serves each from the sparse file on
// disk ggufgen.WriteSplit made.
func addSplit(t testing.TB, hub *hubtest.Server, id, prefix string, spec ggufgen.Spec, n int) []string {
	t.Helper()
	paths, err := ggufgen.WriteSplit(t.TempDir(), prefix, spec, n)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		st, _ := f.Stat()
		head := make([]byte, min(st.Size(), 1<<16))
		f.ReadAt(head, 0)
		name := st.Name()
		hub.AddFileSpec(id, hubtest.FileSpec{Path: name, Size: st.Size(), SHA256: fakeSHA(head, st.Size(), name),
			Gen: func(off int64, p []byte) {
				k, _ := f.ReadAt(p, off)
				clear(p[k:])
			}})
		names = append(names, name)
	}
	return names
}

// world is a Hub, a client for it and a planner over a pool.
type world struct {
	hub     *hubtest.Server
	client  *hf.Client
	planner *Planner
	reads   atomic.Int64
}

func newWorld(t testing.TB, nodes []Node) *world {
	t.Helper()
	w := &world{hub: hubtest.New(t)}
	var err error
	if w.client, err = hf.NewClient(hf.Options{Endpoint: w.hub.URL(), MaxRetries: -1}); err != nil {
		t.Fatal(err)
	}
	w.planner = w.newPlanner(t, nodes)
	return w
}

func (w *world) newPlanner(t testing.TB, nodes []Node) *Planner {
	t.Helper()
	read := ReadHeaders(w.client)
	p, err := New(Config{
		Pool: func() []Node { return nodes },
		Headers: func(ctx context.Context, url string) (gguf.Header, error) {
			w.reads.Add(1)
			return read(ctx, url)
		},
		DownloadURL: w.client.DownloadURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (w *world) repo(t testing.TB, id string) hf.Repo {
	t.Helper()
	r, err := w.client.Repo(context.Background(), id, "main")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// served is every byte of file content the Hub sent for a repository.
func (w *world) served(r hf.Repo) int64 {
	var n int64
	for _, f := range r.Files {
		n += w.hub.BytesServed(r.ID, f.Path)
	}
	return n
}

// mustNodes parses a nodes file's text.
func mustNodes(t testing.TB, text string) []Node {
	t.Helper()
	n, err := ParseNodes("nodes.json", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func withType(s ggufgen.Spec, typ ggufgen.TensorType) ggufgen.Spec {
	s.TensorType = typ
	return s
}

func option(t testing.TB, pl Plan, artifact, label string) Option {
	t.Helper()
	for _, o := range pl.For(artifact) {
		if o.Label() == label {
			return o
		}
	}
	t.Fatalf("the plan has no %s option for %s; it has %v", label, artifact, labels(pl.For(artifact)))
	return Option{}
}

func labels(opts []Option) []string {
	var out []string
	for _, o := range opts {
		out = append(out, fmt.Sprintf("%s %s %s %.1fGB", o.Artifact, o.Label(), o.Fit, o.NeedGB))
	}
	return out
}
