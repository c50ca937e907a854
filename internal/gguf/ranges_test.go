package gguf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modelserve/internal/ggufgen"
)

// ranges opens ranges of a file on disk as a registry would, counting the
// bytes it hands out and the ranges asked for.
type ranges struct {
	path   string
	served atomic.Int64
	opens  atomic.Int64
}

func (r *ranges) open(_ context.Context, off, n int64) (io.ReadCloser, int64, error) {
	f, err := os.Open(r.path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	r.opens.Add(1)
	body := io.NewSectionReader(f, off, max(0, min(n, st.Size()-off)))
	return readCloser{Reader: countingReader{body, &r.served}, Closer: f}, st.Size(), nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// padded writes a tiny model padded to 2 GiB: a big file whose header is a
// few kilobytes, taking no disk.
func padded(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Spec{PadTo: 2 << 30, ChatTemplate: "{{ x }}"}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadRanges(t *testing.T) {
	path := padded(t)
	local, err := Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      []Option
		mostBytes int64
	}{
		{"default buffer", nil, 8 << 20},
		{"small buffer", []Option{WithBufferSize(64 << 10)}, 128 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &ranges{path: path}
			h, err := ReadRanges(context.Background(), src.open, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if h.Size != 2<<30 || h.Architecture != "llama" || h.BlockCount != 2 || !h.ChatTemplate || h.Parameters != local.Parameters {
				t.Errorf("read %+v in ranges; locally %+v", h, local)
			}
			if n := src.served.Load(); n > tc.mostBytes || n == 0 {
				t.Errorf("the source sent %d bytes of a 2 GiB file for its header, want at most %d", n, tc.mostBytes)
			}
			if n := src.opens.Load(); n != 1 {
				t.Errorf("a header of a few kilobytes took %d ranges, want 1", n)
			}
		})
	}
}

// A header longer than the first range (a 128k-token vocabulary) is
// fetched in a few more, and costs about its own size.
func TestReadRangesLongHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llama.gguf")
	if err := ggufgen.WriteFile(path, ggufgen.Llama8B()); err != nil {
		t.Fatal(err)
	}
	local, err := Read(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	end := local.file.TensorDataStartOffset - local.file.Padding
	for _, buf := range []int{32 << 10, 1 << 20} {
		t.Run(fmt.Sprintf("%d KiB buffer", buf>>10), func(t *testing.T) {
			src := &ranges{path: path}
			h, err := ReadRanges(context.Background(), src.open, WithBufferSize(buf))
			if err != nil {
				t.Fatal(err)
			}
			if h.Size != local.Size || h.Parameters != local.Parameters || h.BlockCount != local.BlockCount ||
				h.ContextLength != local.ContextLength || h.KVBytesPerToken() != local.KVBytesPerToken() {
				t.Errorf("read %+v in ranges; locally %+v", h, local)
			}
			served, opens := src.served.Load(), src.opens.Load()
			t.Logf("a header of %d KiB cost %d KiB in %d ranges", end>>10, served>>10, opens)
			if served < end || served > end+end/4+int64(buf) {
				t.Errorf("the source sent %d bytes for a header of %d, want about the header", served, end)
			}
			if opens > 12 {
				t.Errorf("the header took %d ranges", opens)
			}
		})
	}
}

func TestReadRangesRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notGGUF := write("notes.gguf", []byte("this is not a model, just some text long enough"))
	truncated := write("cut.gguf", ggufgen.Bytes(ggufgen.Spec{})[:5000])
	refused := errors.New("the registry refused it")
	tests := []struct {
		name string
		open RangeOpener
		want string
	}{
		{"not a GGUF file", (&ranges{path: notGGUF}).open, `it starts with "this", not GGUF`},
		{"cut short", (&ranges{path: truncated}).open, "runs past the end of the file"},
		{"the source refuses", func(context.Context, int64, int64) (io.ReadCloser, int64, error) { return nil, 0, refused },
			"the registry refused it"},
		{"no size", func(ctx context.Context, off, n int64) (io.ReadCloser, int64, error) {
			b, _, err := (&ranges{path: truncated}).open(ctx, off, n)
			return b, -1, err
		}, "did not say how long the file is"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadRanges(context.Background(), tc.open)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "read the GGUF header: ") {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	t.Run("the source's error is kept for errors.Is", func(t *testing.T) {
		_, err := ReadRanges(context.Background(), func(context.Context, int64, int64) (io.ReadCloser, int64, error) { return nil, 0, refused })
		if !errors.Is(err, refused) {
			t.Errorf("error %v does not wrap the source's", err)
		}
	})
}

// The first shard of a split model reads as itself: the other shards hold
// tensors, not the model's shape.
func TestReadRangesFirstShard(t *testing.T) {
	dir := t.TempDir()
	paths, err := ggufgen.WriteSplit(dir, "m", ggufgen.Spec{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	whole, err := Read(ctx, paths[0])
	if err != nil {
		t.Fatal(err)
	}
	alone, err := ReadRanges(ctx, (&ranges{path: paths[0]}).open)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Shards != 3 || alone.Shards != 1 || alone.Parameters >= whole.Parameters || alone.Architecture != whole.Architecture {
		t.Errorf("the set read as %d shards of %d parameters, the first alone as %d of %d",
			whole.Shards, whole.Parameters, alone.Shards, alone.Parameters)
	}
}

// BenchmarkReadHeaderRanges reads a 2 GiB model's header in ranges, and
// reports how many bytes each read cost the source.
func BenchmarkReadHeaderRanges(b *testing.B) {
	src := &ranges{path: padded(b)}
	ctx := context.Background()
	for b.Loop() {
		if _, err := ReadRanges(ctx, src.open); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(src.served.Load())/float64(b.N), "served-bytes/op")
}

// TestReadRangesConcurrently reads headers of different shapes at once, as
// the planner and a job's check step do: each must come back as written.
func TestReadRangesConcurrently(t *testing.T) {
	dir := t.TempDir()
	const files = 12
	for i := 0; i < files; i++ {
		s := ggufgen.Spec{BlockCount: uint32(2 + i%4), ContextLength: uint32(1024 * (i + 1))}
		if err := ggufgen.WriteFile(filepath.Join(dir, fmt.Sprintf("m%d.gguf", i)), s); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for i := 0; i < files; i++ {
		wg.Go(func() {
			src := &ranges{path: filepath.Join(dir, fmt.Sprintf("m%d.gguf", i))}
			h, err := ReadRanges(context.Background(), src.open)
			switch {
			case err != nil:
				errs <- fmt.Errorf("m%d: %w", i, err)
			case h.BlockCount != 2+i%4 || h.ContextLength != 1024*(i+1):
				errs <- fmt.Errorf("m%d read as %d blocks, %d context; written with %d, %d", i, h.BlockCount, h.ContextLength, 2+i%4, 1024*(i+1))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
