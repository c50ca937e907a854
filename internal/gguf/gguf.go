// Package gguf reads what a GGUF model file says about itself and works out
// whether the nodes' llama.cpp can run it and how much memory it needs.
//
// Before this, a model's memory figure was a guess written into the catalog
// by hand, and whether llama.cpp knew its architecture was found out when a
// replica failed to start. The check step now reads the file's header, from
// the mirror's disk or over HTTP with a few Range requests rather than the
// whole file, refuses an architecture the engine build does not know in a
// sentence that says so, and sizes the replica: weights, the KV cache for the
// context it will be started with, and the engine's own buffers, through
// gguf-parser-go's model of llama.cpp. It also cuts a context pool to what a
// card holds, and finds the longest context that fits beside the weights.
package gguf

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	parser "github.com/gpustack/gguf-parser-go"
)

// Header is what a GGUF file's header says about the model in it.
type Header struct {
	// Architecture is general.architecture as the file writes it; empty
	// when the file has no such key (gguf-parser-go would say "llama").
	Architecture string
	// ContextLength is the context the model was trained for.
	ContextLength   int
	EmbeddingLength int
	BlockCount      int
	HeadCount       int
	// HeadCountKV is the number of key/value heads (fewer than HeadCount
	// with grouped-query attention).
	HeadCountKV int
	// KeyLength and ValueLength are the sizes of one key and one value
	// head: the file's own when it gives them, else EmbeddingLength/HeadCount.
	KeyLength   int
	ValueLength int
	// ExpertCount and ExpertUsedCount are a mixture of experts' sizes.
	ExpertCount     int
	ExpertUsedCount int
	// Embedding says the model makes embeddings, not text: it declares a
	// pooling type, or attends both ways. It is served with --embedding.
	Embedding bool
	// Pooling is <arch>.pooling_type (1 mean, 2 cls, 3 last, 4 rank); 0
	// when absent.
	Pooling int
	// FileType is general.file_type (llama.cpp's LLAMA_FTYPE_*), and
	// Quantization gguf-parser-go's name for what the tensors mostly are
	// ("Q4_K_M").
	FileType     uint32
	Quantization string
	// ChatTemplate says the file carries tokenizer.chat_template;
	// llama-server falls back to ChatML without one.
	ChatTemplate bool
	// Parameters is the number of weights in all the tensors read.
	Parameters uint64
	// Projector says the file is a vision projector (architecture clip),
	// loaded beside a model's weights with --mmproj, never on its own.
	Projector bool
	// Size is the bytes of the file, or of all its shards; Shards is how
	// many files were read (1 unless a split set was merged).
	Size   int64
	Shards int

	// file is the parsed header, kept for gguf-parser-go's estimate, and
	// memo that estimate's answers: the searches for what fits ask it the
	// same questions many times, and it matches hundreds of tensor names
	// against regular expressions each time.
	file *parser.GGUFFile
	memo *memo
}

// Shaped says the header gave the model's shape, which the memory figures
// need; without it they fall back to a rough figure from the weights.
func (h Header) Shaped() bool {
	return h.file != nil && h.BlockCount > 0 && h.EmbeddingLength > 0 && h.HeadCount > 0
}

type options struct {
	bearer     string
	bufferSize int
	single     bool
}

// Option changes how Read reads.
type Option func(*options)

// WithBearer sends token as "Authorization: Bearer" to the source's own
// host, for a gated repository's files. It is never sent to another host a
// redirect leads to (the Hub's CDN).
func WithBearer(token string) Option { return func(o *options) { o.bearer = token } }

// WithBufferSize sets how many bytes each Range request over HTTP asks for:
// a header costs its size rounded up to this. The default is 1 MiB; the
// least is 32 KiB.
func WithBufferSize(n int) Option { return func(o *options) { o.bufferSize = n } }

// OnlyThisFile reads the named file alone, even when its name is a shard's
// (<prefix>-00002-of-00003.gguf). Without it gguf-parser-go reads and merges
// every shard of the set, and fails when one is missing; the library has no
// switch for this, so Read hides the shard name from it.
func OnlyThisFile() Option { return func(o *options) { o.single = true } }

const defaultBufferSize = 1 << 20

// Read reads the header of the GGUF file at source: a local path, or an
// http(s) URL that answers HEAD and Range requests. Given a shard of a split
// model it reads the whole set (see OnlyThisFile).
func Read(ctx context.Context, source string, opts ...Option) (Header, error) {
	o := options{bufferSize: defaultBufferSize}
	for _, opt := range opts {
		opt(&o)
	}
	// The token arrays (hundreds of thousands of strings) are counted, not
	// kept: nothing here needs the words, and keeping them took seconds.
	popts := []parser.GGUFReadOption{parser.SkipLargeMetadata()}
	var (
		f   *parser.GGUFFile
		err error
	)
	if u, ok := remote(source); ok {
		f, err = readRemote(ctx, u, o, popts)
	} else if u, err2 := url.Parse(source); err2 == nil && u.Scheme == "file" {
		// The local-folder registry's download URLs.
		f, err = readLocal(u.Path, o, popts)
	} else {
		f, err = readLocal(source, o, popts)
	}
	if err != nil {
		return Header{}, fmt.Errorf("read the GGUF header of %s: %w", source, err)
	}
	return headerOf(f), nil
}

func remote(source string) (*url.URL, bool) {
	u, err := url.Parse(source)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false
	}
	return u, true
}

func readLocal(path string, o options, popts []parser.GGUFReadOption) (*parser.GGUFFile, error) {
	if o.single && parser.IsShardGGUFFilename(filepath.Base(path)) {
		// A link under a name that is not a shard's keeps the parser to
		// this one file.
		dir, err := os.MkdirTemp("", "gguf-header-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		link := filepath.Join(dir, "header.gguf")
		if err := os.Symlink(abs, link); err != nil {
			return nil, err
		}
		path = link
	}
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	parseMu.Lock()
	defer parseMu.Unlock()
	return parser.ParseGGUFFile(path, append(popts, parser.UseMMap())...)
}

// parseMu lets one header be parsed at a time in this process. With
// gguf-parser-go v0.28.1, forty concurrent reads through the planner came
// back corrupt three times ("seek delta overflow", EOF) and the race
// detector pointed into the library's pooled buffers. The planner and the
// check step both read headers, so the lock is here rather than in either.
// A header is small: waiting for one costs little.
var parseMu sync.Mutex

func readRemote(ctx context.Context, u *url.URL, o options, popts []parser.GGUFReadOption) (*parser.GGUFFile, error) {
	final, sameHost, err := follow(ctx, http.DefaultClient, u, o.bearer)
	if err != nil {
		return nil, err
	}
	popts = append(popts, parser.UseBufferSize(o.bufferSize))
	if o.bearer != "" && sameHost {
		// gguf-parser-go adds the token to every request it makes, so it
		// is given only a URL on the host the token is for.
		popts = append(popts, parser.UseBearerAuth(o.bearer))
	}
	s := final.String()
	if o.single {
		// A fragment is never sent, and keeps the shard pattern, which must
		// end in ".gguf", from matching.
		s += "#only"
	}
	parseMu.Lock()
	defer parseMu.Unlock()
	return parser.ParseGGUFFileRemote(ctx, s, popts...)
}

// follow finds where u's redirects end, sending the token only to u's own
// host, and says whether the end is still on that host.
func follow(ctx context.Context, client *http.Client, u *url.URL, token string) (*url.URL, bool, error) {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cur := u
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, cur.String(), nil)
		if err != nil {
			return nil, false, err
		}
		if token != "" && cur.Host == u.Host {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, false, err
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			loc, err := cur.Parse(resp.Header.Get("Location"))
			if err != nil || resp.Header.Get("Location") == "" {
				return nil, false, fmt.Errorf("%s redirected nowhere", cur.Redacted())
			}
			cur = loc
			continue
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return nil, false, fmt.Errorf("the server refused access (%s): the file may be gated or private, and needs a token that is allowed to read it", resp.Status)
		case resp.StatusCode != http.StatusOK:
			return nil, false, fmt.Errorf("the server answered %s", resp.Status)
		case !strings.EqualFold(resp.Header.Get("Accept-Ranges"), "bytes"):
			return nil, false, errors.New("the server does not answer Range requests, so the header cannot be read without the whole file")
		}
		return cur, cur.Host == u.Host, nil
	}
	return nil, false, fmt.Errorf("%s redirected more than 10 times", u.Redacted())
}

func headerOf(f *parser.GGUFFile) Header {
	a := f.Architecture()
	h := Header{
		ContextLength:   int(a.MaximumContextLength),
		EmbeddingLength: int(a.EmbeddingLength),
		BlockCount:      int(a.BlockCount),
		HeadCount:       int(a.AttentionHeadCount),
		HeadCountKV:     int(a.AttentionHeadCountKV),
		KeyLength:       int(a.AttentionKeyLength),
		ValueLength:     int(a.AttentionValueLength),
		ExpertCount:     int(a.ExpertCount),
		ExpertUsedCount: int(a.ExpertUsedCount),
		Pooling:         int(a.PoolingType),
		Parameters:      uint64(f.ModelParameters),
		Size:            int64(f.Size),
		Shards:          max(1, len(f.SplitSizes)),
		file:            f,
		memo:            &memo{m: map[estimateKey]int64{}},
	}
	kvs := f.Header.MetadataKV
	if kv, ok := kvs.Get("general.architecture"); ok && kv.ValueType == parser.GGUFMetadataValueTypeString {
		h.Architecture = kv.ValueString()
	}
	h.Projector = h.Architecture == "clip"
	if h.Projector {
		// The parser reads a projector's sizes into other fields; the
		// language-model shape above is not its.
		h = Header{Architecture: "clip", Projector: true, Parameters: h.Parameters, Size: h.Size, Shards: h.Shards, file: f, memo: h.memo}
	}
	if h.HeadCountKV == 0 {
		h.HeadCountKV = h.HeadCount
	}
	if kv, ok := kvs.Get("general.file_type"); ok && kv.ValueType.IsNumeric() {
		h.FileType = parser.ValueNumeric[uint32](kv)
	}
	if !h.Projector {
		// The library names them as llama.cpp's enum does (MOSTLY_Q4_K_M).
		q := f.Metadata().FileType.String()
		h.Quantization = strings.TrimPrefix(strings.TrimPrefix(q, "MOSTLY_"), "ALL_")
	}
	_, h.ChatTemplate = kvs.Get("tokenizer.chat_template")
	_, hasPooling := kvs.Get(h.Architecture + ".pooling_type")
	h.Embedding = !h.Projector && h.Architecture != "" && ((hasPooling && h.Pooling != 0) || !a.AttentionCausal)
	return h
}
