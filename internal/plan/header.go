package plan

import (
	"context"
	"io"
	"sync"

	"modelserve/internal/gguf"
	"modelserve/internal/hf"
)

// HeaderReader reads the header of the GGUF file at url (a registry's
// download URL, as Config.DownloadURL gives it).
type HeaderReader func(ctx context.Context, url string) (gguf.Header, error)

// Opener reads part of a registry's file by its download URL (hf.Registries,
// hf.Client). It alone decides which requests carry the registry's token.
type Opener interface {
	Open(ctx context.Context, downloadURL string, offset, n int64) (*hf.Body, error)
}

// ReadHeaders is the HeaderReader for a registry: the header of the file
// alone (of a split model, the first shard holds the model's shape; the
// others hold tensors), read in a few ranges of it through the registry.
func ReadHeaders(reg Opener) HeaderReader {
	return func(ctx context.Context, url string) (gguf.Header, error) {
		return gguf.ReadRanges(ctx, func(ctx context.Context, off, n int64) (io.ReadCloser, int64, error) {
			b, err := reg.Open(ctx, url, off, n)
			if err != nil {
				return nil, 0, err
			}
			return b, b.Size, nil
		})
	}
}

// shape is what the planner uses of a header.
type shape struct {
	// shaped says the header gave the model's shape; without it memory is
	// the rough figure gguf falls back to and the KV cache is unknown.
	shaped      bool
	arch        string
	trained     int
	embedding   bool
	experts     int
	expertsUsed int
	kvPerToken  int64
	header      gguf.Header
}

func shapeOf(h gguf.Header) *shape {
	return &shape{
		arch: h.Architecture, trained: int(h.ContextLength), embedding: h.Embedding,
		experts: int(h.ExpertCount), expertsUsed: int(h.ExpertUsedCount),
		kvPerToken: h.KVBytesPerToken(), header: h, shaped: h.Shaped(),
	}
}

// activeShare is the part of the weights each token reads. A dense model
// reads all of them. A mixture of experts reads its attention, norms and
// router whole but only used/total of its expert tensors; the header gives
// no tensor sizes here, so the experts are taken to be everything but the
// attention (2·d² for query and output, 2·d·d_kv for key and value, per
// layer) — the token embeddings, a lookup of one row, count with them.
// Approximate, as tokens per second are.
func (s *shape) activeShare() float64 {
	h := s.header
	if s.experts <= 1 || s.expertsUsed <= 0 || h.Parameters == 0 || h.HeadCount == 0 {
		return 1
	}
	d := float64(h.EmbeddingLength)
	kv := d / float64(h.HeadCount) * float64(h.HeadCountKV)
	attention := float64(h.BlockCount) * (2*d*d + 2*d*kv)
	experts := max(0, min(0.98, 1-attention/float64(h.Parameters)))
	return (1 - experts) + experts*float64(s.expertsUsed)/float64(s.experts)
}

// headerCache keeps headers by the file's sha256: a file's bytes are what
// its sha256 says, so its header never changes, and planning a repository
// again — or another revision with the same files — reads nothing. It lives
// as long as the process: a gguf.Header keeps the parsed file the memory
// estimates run on, which has no stored form.
type headerCache struct {
	mu       sync.Mutex
	headers  map[string]gguf.Header
	inFlight map[string]chan struct{}
}

func newHeaderCache() *headerCache {
	return &headerCache{headers: map[string]gguf.Header{}, inFlight: map[string]chan struct{}{}}
}

// get is the header of the file with this sha256 at url, read once however
// many plans ask for it at the same time. A file with no published sha256
// is read every time: nothing says its bytes stayed the same.
func (c *headerCache) get(ctx context.Context, sha256, url string, read HeaderReader) (*shape, error) {
	if sha256 == "" {
		h, err := read(ctx, url)
		if err != nil {
			return nil, err
		}
		return shapeOf(h), nil
	}
	for {
		c.mu.Lock()
		if h, ok := c.headers[sha256]; ok {
			c.mu.Unlock()
			return shapeOf(h), nil
		}
		wait, busy := c.inFlight[sha256]
		if !busy {
			c.inFlight[sha256] = make(chan struct{})
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h, err := read(ctx, url)
	c.mu.Lock()
	close(c.inFlight[sha256])
	delete(c.inFlight, sha256)
	if err == nil {
		c.headers[sha256] = h
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return shapeOf(h), nil
}

// len is how many headers the cache holds.
func (c *headerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.headers)
}
