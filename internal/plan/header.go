package plan

import (
	"context"
	"sync"

	"modelserve/internal/gguf"
)

// HeaderReader reads the header of the GGUF file at url (a registry's
// resolve URL, read with Range requests, or a local path).
type HeaderReader func(ctx context.Context, url string) (gguf.Header, error)

// ReadHeaders is the HeaderReader for a registry: gguf.Read of the first
// shard alone (the others hold tensors, not the model's shape), with the
// registry's token, which gguf.Read keeps from the CDN a download is
// redirected to. An empty token reads public repositories.
func ReadHeaders(token string) HeaderReader {
	return func(ctx context.Context, url string) (gguf.Header, error) {
		opts := []gguf.Option{gguf.OnlyThisFile()}
		if token != "" {
			opts = append(opts, gguf.WithBearer(token))
		}
		return gguf.Read(ctx, url, opts...)
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

// memory is what llama.cpp takes for the weights, a pool of ctx tokens
// shared by parallel slots, and its own buffers.
func (s *shape) memory(weights int64, ctx, parallel int) int64 {
	return s.header.MemoryBytes(weights, ctx, parallel, 0)
}

// longest is the longest context, up to the trained one and a multiple of
// 1024, that memory holds beside the weights. A model trained for fewer
// than 1024 tokens (embedding models of 512) keeps its own figure when it
// fits, which gguf's multiple-of-1024 search cannot say.
func (s *shape) longest(memory, weights int64) int {
	if s.trained > 0 && s.trained < 1024 {
		if s.shaped && s.memory(weights, s.trained, 1) <= memory {
			return s.trained
		}
		return 0
	}
	return s.header.LongestContextThatFits(memory, weights)
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
