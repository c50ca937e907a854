// Package gguf reads what a GGUF model file says about itself and works out
// whether the nodes' llama.cpp can run it and how much memory it needs.
//
// Before this, a model's memory figure was a guess written into the catalog
// by hand, and whether llama.cpp knew its architecture was found out when a
// replica failed to start. The check step now reads the file's header from
// the mirror's disk, and the planner reads it in a few ranges of the
// registry's file rather than the whole file (through whatever the caller
// opens: this package knows nothing of HTTP or tokens). The check refuses an
// architecture the engine build does not know in a sentence that says so,
// and sizes the replica: weights, the KV cache for the
// context it will be started with, and the engine's own buffers, through
// gguf-parser-go's model of llama.cpp. It also cuts a context pool to what a
// card holds, and finds the longest context that fits beside the weights.
package gguf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"

	parser "github.com/gpustack/gguf-parser-go"

	"modelserve/internal/operr"
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
	bufferSize int
	single     bool
}

// Option changes how Read and ReadRanges read.
type Option func(*options)

// WithBufferSize sets how many bytes ReadRanges asks for first, and at
// least each time after: a header costs its size rounded up to about this.
// The default is 1 MiB; the least is 32 KiB.
func WithBufferSize(n int) Option { return func(o *options) { o.bufferSize = n } }

// OnlyThisFile reads the named file alone, even when its name is a shard's
// (<prefix>-00002-of-00003.gguf). Without it gguf-parser-go reads and merges
// every shard of the set, and fails when one is missing; the library has no
// switch for this, so Read hides the shard name from it. ReadRanges always
// reads one file.
func OnlyThisFile() Option { return func(o *options) { o.single = true } }

const (
	defaultBufferSize = 1 << 20
	minBufferSize     = 32 << 10
	// maxHeaderBytes bounds what ReadRanges fetches for a header. Real
	// headers are a few megabytes (a 256k-token vocabulary is the most);
	// a file that claims more is not worth its download to find out.
	maxHeaderBytes = 256 << 20
)

func readOptions(opts []Option) options {
	o := options{bufferSize: defaultBufferSize}
	for _, opt := range opts {
		opt(&o)
	}
	o.bufferSize = max(o.bufferSize, minBufferSize)
	return o
}

// Read reads the header of the GGUF file at path on this machine (the
// mirror's copy). Given a shard of a split model it reads the whole set
// (see OnlyThisFile).
func Read(ctx context.Context, path string, opts ...Option) (Header, error) {
	if err := ctx.Err(); err != nil {
		return Header{}, err
	}
	o := readOptions(opts)
	// Every file the library will parse is walked first: what the header
	// claims is checked against bounds and the file's size before any
	// library trusts it.
	files := []string{path}
	if !o.single && parser.IsShardGGUFFilename(filepath.Base(path)) {
		files = parser.CompleteShardGGUFFilename(path)
	}
	for _, p := range files {
		if err := walkLocal(ctx, p, o); err != nil {
			return Header{}, fmt.Errorf("read the GGUF header of %s: %w", filepath.Base(p), err)
		}
	}
	f, err := readLocal(path, o)
	if err != nil {
		return Header{}, fmt.Errorf("read the GGUF header of %s: %w", filepath.Base(path), err)
	}
	return safeHeaderOf(f)
}

// walkLocal walks the header of the file at path, reading no more of it
// than the header.
func walkLocal(ctx context.Context, path string, o options) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	_, _, err = fetchHeader(ctx, func(_ context.Context, off, n int64) (io.ReadCloser, int64, error) {
		return io.NopCloser(io.NewSectionReader(f, off, n)), st.Size(), nil
	}, int64(o.bufferSize))
	return err
}

// errLibrary is a header the library failed on after the walk passed it:
// the library's fault or the file's, never a reason to stop the server.
var errLibrary = errors.New("gguf-parser-go failed on the header")

// safeHeaderOf is headerOf, with a panic in the library made an error.
func safeHeaderOf(f *parser.GGUFFile) (h Header, err error) {
	defer func() {
		if r := recover(); r != nil {
			h, err = Header{}, fmt.Errorf("%w: %v", errLibrary, r)
		}
	}()
	return headerOf(f), nil
}

func readLocal(path string, o options) (f *parser.GGUFFile, err error) {
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
	defer func() {
		// Walked first, a header should not make the library panic; if
		// it does, that file fails, not the process.
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("%w: %v", errLibrary, r)
		}
	}()
	// The token arrays (hundreds of thousands of strings) are counted, not
	// kept: nothing here needs the words, and keeping them took seconds.
	return parser.ParseGGUFFile(path, parser.SkipLargeMetadata(), parser.UseMMap())
}

// parseMu lets one header be parsed at a time in this process. With
// gguf-parser-go v0.28.1, forty concurrent reads through the planner came
// back corrupt three times ("seek delta overflow", EOF) and the race
// detector pointed into the library's pooled buffers. The planner and the
// check step both read headers, so the lock is here rather than in either.
// A header is small: waiting for one costs little.
var parseMu sync.Mutex

// RangeOpener opens n bytes of one file from off (fewer only where the file
// ends) and says how long the whole file is. The caller decides where the
// bytes come from and how: for a registry's file, hf's Open, which alone
// knows the token and where it may go.
type RangeOpener func(ctx context.Context, off, n int64) (body io.ReadCloser, size int64, err error)

// ReadRanges reads the header of one GGUF file through open, asking for
// the header's bytes and little more: a 2 GiB model whose header is a few
// kilobytes costs one read of the buffer size (WithBufferSize).
//
// gguf-parser-go parses files it opens itself, by path or by URL, and never
// from a reader. So ReadRanges walks the header's layout to learn where it
// ends, fetching more as the walk needs it, then writes what it fetched into
// a sparse temporary file of the file's full size (the figures for the
// weights come from the size) and has the library parse that. The walk
// covers every byte the parse reads, and the parse is checked to have ended
// where the walk did.
func ReadRanges(ctx context.Context, open RangeOpener, opts ...Option) (Header, error) {
	o := readOptions(opts)
	head, size, err := fetchHeader(ctx, open, int64(o.bufferSize))
	if err != nil {
		return Header{}, fmt.Errorf("read the GGUF header: %w", err)
	}
	f, err := parseHead(head, size)
	if err != nil {
		return Header{}, fmt.Errorf("read the GGUF header: %w", err)
	}
	return safeHeaderOf(f)
}

// fetchHeader reads the file's first bytes through open until they hold
// the whole header.
func fetchHeader(ctx context.Context, open RangeOpener, chunk int64) ([]byte, int64, error) {
	var head []byte
	size := int64(-1)
	want := chunk
	for {
		have := int64(len(head))
		body, total, err := open(ctx, have, want-have)
		if err != nil {
			return nil, 0, err
		}
		got, err := io.ReadAll(io.LimitReader(body, want-have))
		body.Close()
		if err != nil {
			return nil, 0, err
		}
		if size < 0 {
			if size = total; size < 0 {
				return nil, 0, errors.New("the source did not say how long the file is")
			}
		}
		head = append(head, got...)
		if int64(len(head)) < min(want, size) {
			return nil, 0, fmt.Errorf("the source sent %d bytes of the %d asked for", len(head)-int(have), min(want, size)-have)
		}
		w := walker{b: head, size: size}
		err = w.header()
		if err == nil && w.pos <= int64(len(head)) {
			return head[:w.pos], size, nil
		}
		if err == nil {
			// The last bytes were passed over, not read: they are header
			// all the same.
			w.need, err = w.pos, errShort
		}
		if !errors.Is(err, errShort) {
			return nil, 0, err
		}
		if w.need > maxHeaderBytes {
			return nil, 0, refused("its header claims more than %d MiB; it is not read", maxHeaderBytes>>20)
		}
		// What the walk needs, or where the list it ran short in ends at
		// the pace so far, or one more step. With nothing to go by the
		// steps double, so a long header still costs few round trips.
		want = min(size, max(w.need, w.guess, int64(len(head))+chunk))
		if w.guess == 0 {
			chunk *= 2
		}
	}
}

// parseHead has gguf-parser-go parse a header fetched by fetchHeader, as
// the start of a file of size bytes.
func parseHead(head []byte, size int64) (*parser.GGUFFile, error) {
	tmp, err := os.CreateTemp("", "gguf-header-*.gguf")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(head)
	if err == nil {
		// Sparse: the rest costs no disk, and is never read.
		err = tmp.Truncate(size)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("cannot write the header to a temporary file: %w", err)
	}
	f, err := readLocal(tmp.Name(), options{single: true})
	if err != nil {
		return nil, err
	}
	if end := f.TensorDataStartOffset - f.Padding; end != int64(len(head)) {
		// The parse read zeros where the walk saw no header: its figures
		// cannot be trusted.
		return nil, fmt.Errorf("the header ends at byte %d to the parser and at %d to the walk that fetched it", end, len(head))
	}
	return f, nil
}

// errShort is the walk running past the bytes fetched so far.
var errShort = errors.New("the header goes on past the bytes fetched")

// walker goes through a GGUF header as the format lays it out, reading
// only counts and lengths, to find where the tensor infos end.
type walker struct {
	b    []byte
	size int64 // of the whole file
	pos  int64
	bo   binary.ByteOrder
	wide bool // versions 2 and 3 write counts and lengths in 64 bits
	// need is the least the walk wants fetched when it runs short; guess
	// is where the list it was in would end, at its bytes per item so far.
	need, guess int64
}

func (w *walker) header() error {
	magic, err := w.take(4)
	if err != nil {
		return err
	}
	switch string(magic) {
	case "GGUF":
		w.bo = binary.LittleEndian
	case "FUGG":
		w.bo = binary.BigEndian
	default:
		return refused("it starts with %q, not GGUF: it is not a GGUF model", magic)
	}
	version, err := w.uint32()
	if err != nil {
		return err
	}
	switch version {
	case 1:
	case 2, 3:
		w.wide = true
	default:
		return refused("it is GGUF version %d, which this reader does not know", version)
	}
	tensors, err := w.count()
	if err != nil {
		return err
	}
	kvs, err := w.count()
	if err != nil {
		return err
	}
	// The least an entry can take is that of version 1: 32-bit lengths.
	// Entries of metadata differ too much for a guess at where they end.
	if err := w.list(kvs, 4+4+1, false, func() error {
		key, err := w.text()
		if err != nil {
			return err
		}
		t, err := w.uint32()
		if err != nil {
			return err
		}
		if b, ok := boundOf(key); ok {
			return w.bounded(key, t, b)
		}
		return w.value(t)
	}); err != nil {
		return err
	}
	return w.list(tensors, 4+4+4+8, true, w.tensorInfo)
}

// maxDims is ggml's GGML_MAX_DIMS: a tensor has at most four dimensions.
const maxDims = 4

// tensorInfo walks one tensor's info, and refuses one whose dimensions or
// type make no tensor, or whose data could not fit in the file: the
// library multiplies the dimensions without checking, and a dimension of
// 2^62 panicked in it.
func (w *walker) tensorInfo() error {
	name, err := w.text()
	if err != nil {
		return err
	}
	dims, err := w.uint32()
	if err != nil {
		return err
	}
	if dims == 0 || dims > maxDims {
		return refused("its header says tensor %s has %d dimensions; a tensor has 1 to %d", operr.Quote(name), dims, maxDims)
	}
	elements := uint64(1)
	for range dims {
		d, err := w.count()
		if err != nil {
			return err
		}
		hi, lo := bits.Mul64(elements, d)
		if hi != 0 || lo > uint64(w.size) {
			return refused("its header says tensor %s has more elements than the file has bytes", operr.Quote(name))
		}
		elements = lo
	}
	typ, err := w.uint32()
	if err != nil {
		return err
	}
	trait, ok := parser.GGMLType(typ).Trait()
	if !ok || trait.BlockSize == 0 {
		return refused("its header says tensor %s is of type %d, which is no ggml type", operr.Quote(name), typ)
	}
	if bytes := elements / trait.BlockSize * trait.TypeSize; bytes > uint64(w.size) {
		return refused("its header says tensor %s takes %d bytes, more than the whole file", operr.Quote(name), bytes)
	}
	return w.skip(8) // the data's offset
}

// bound is what a metadata value may be: no model has more.
type bound struct {
	most uint64
	// says is the sentence's words for the value: "says it has %d layers".
	says string
}

// bounds are checked before any library sees a header: a block_count of
// 0xFFFFFFFF had gguf-parser-go allocate 32 GiB for it, and the process
// died of it. Each is far beyond any real model.
var bounds = map[string]bound{
	"block_count":                {4096, "it has %d layers"},
	"context_length":             {1 << 24, "it was trained for %d tokens"},
	"embedding_length":           {1 << 17, "its embeddings are %d wide"},
	"feed_forward_length":        {1 << 20, "its feed-forward layers are %d wide"},
	"attention.head_count":       {4096, "it has %d attention heads"},
	"attention.head_count_kv":    {4096, "it has %d key/value heads"},
	"attention.key_length":       {1 << 16, "its keys are %d wide"},
	"attention.value_length":     {1 << 16, "its values are %d wide"},
	"expert_count":               {4096, "it has %d experts"},
	"expert_used_count":          {4096, "it uses %d experts a token"},
	"vocab_size":                 {1 << 22, "its vocabulary has %d tokens"},
	"rope.dimension_count":       {1 << 16, "its rotary embeddings are %d wide"},
	"ssm.state_size":             {1 << 16, "its state is %d wide"},
	"attention.sliding_window":   {1 << 24, "its attention window is %d tokens"},
	"split.count":                {1 << 12, "it is split into %d files"},
	"embedding_length_per_layer": {1 << 17, "its per-layer embeddings are %d wide"},
}

// boundOf is the bound of an <architecture>.<field> key ("llama.block_count").
func boundOf(key string) (bound, bool) {
	if _, field, ok := strings.Cut(key, "."); ok {
		b, ok := bounds[field]
		return b, ok
	}
	return bound{}, false
}

// bounded walks a value that must stay within b: a number, or an array of
// numbers (some architectures give a head count per layer).
func (w *walker) bounded(key string, t uint32, b bound) error {
	check := func(t uint32) error {
		v, err := w.number(t)
		if err != nil {
			return err
		}
		if v > b.most {
			return refused("its header says "+b.says+" (%s), more than any model has: the file is damaged or was made to do harm", v, key)
		}
		return nil
	}
	if t != typeArray {
		if fixedSize(t) == 0 {
			return w.value(t) // a string where a number belongs: the library's to judge
		}
		return check(t)
	}
	et, err := w.uint32()
	if err != nil {
		return err
	}
	n, err := w.count()
	if err != nil {
		return err
	}
	size := fixedSize(et)
	if size == 0 {
		return refused("its header says %s is an array of type %d; it is a number or an array of numbers", key, et)
	}
	if n > uint64(w.size-w.pos)/uint64(size) {
		return refused("its header claims an array of %d values at byte %d, more than the file holds", n, w.pos)
	}
	for range n {
		if err := check(et); err != nil {
			return err
		}
	}
	return nil
}

// number reads a numeric value of type t as a uint64: a negative or
// fractional one as what it would be if used as a count (a negative count
// is read as huge, and refused as such).
func (w *walker) number(t uint32) (uint64, error) {
	b, err := w.take(fixedSize(t))
	if err != nil {
		return 0, err
	}
	switch t {
	case 0, 7:
		return uint64(b[0]), nil
	case 1:
		return uint64(int64(int8(b[0]))), nil
	case 2:
		return uint64(w.bo.Uint16(b)), nil
	case 3:
		return uint64(int64(int16(w.bo.Uint16(b)))), nil
	case 4:
		return uint64(w.bo.Uint32(b)), nil
	case 5:
		return uint64(int64(int32(w.bo.Uint32(b)))), nil
	case 6:
		return floatCount(float64(math.Float32frombits(w.bo.Uint32(b)))), nil
	case 10, 11:
		return w.bo.Uint64(b), nil
	case 12:
		return floatCount(math.Float64frombits(w.bo.Uint64(b))), nil
	}
	return 0, nil
}

// floatCount is a float as a count: NaN, infinities and negatives are
// taken as the most there is.
func floatCount(f float64) uint64 {
	if math.IsNaN(f) || f < 0 || f >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(f)
}

// text reads a string's bytes, fetched.
func (w *walker) text() (string, error) {
	n, err := w.count()
	if err != nil {
		return "", err
	}
	if n > uint64(w.size-w.pos) {
		return "", refused("its header claims a string of %d bytes at byte %d, more than the file holds", n, w.pos)
	}
	b, err := w.take(int64(n))
	return string(b), err
}

// refused is a header the reader will not hand to the library: an
// operator's sentence, since the file, not the program, is at fault.
func refused(format string, args ...any) error {
	return operr.New(operr.Refused, format, args...)
}

// list walks n items, each at least least bytes. When the bytes run out
// and alike says the items are much the same size, it guesses where the
// list ends from the items walked so far.
func (w *walker) list(n uint64, least int64, alike bool, item func() error) error {
	if n > uint64(w.size-w.pos)/uint64(least) {
		return refused("its header claims %d entries at byte %d, more than the file holds", n, w.pos)
	}
	start := w.pos
	for i := uint64(0); i < n; i++ {
		if err := item(); err != nil {
			if errors.Is(err, errShort) && alike && i > 0 && w.guess == 0 {
				per := float64(w.pos-start) / float64(i)
				w.guess = w.pos + int64(per*float64(n-i)*1.05)
			}
			return err
		}
	}
	return nil
}

// fixedSize is the bytes of one of GGUF's fixed-size value types (the
// integers, floats and bool), 0 for a string, an array or an unknown type.
func fixedSize(t uint32) int64 {
	switch t {
	case 0, 1, 7: // uint8, int8, bool
		return 1
	case 2, 3: // uint16, int16
		return 2
	case 4, 5, 6: // uint32, int32, float32
		return 4
	case 10, 11, 12: // uint64, int64, float64
		return 8
	}
	return 0
}

const (
	typeString = 8
	typeArray  = 9
)

// value walks one metadata value of type t. An array of arrays is refused:
// gguf-parser-go v0.28.1 panics skipping one.
func (w *walker) value(t uint32) error {
	if n := fixedSize(t); n > 0 {
		return w.skip(n)
	}
	switch t {
	case typeString:
		return w.str()
	case typeArray:
		et, err := w.uint32()
		if err != nil {
			return err
		}
		n, err := w.count()
		if err != nil {
			return err
		}
		if size := fixedSize(et); size > 0 {
			if n > uint64(w.size-w.pos)/uint64(size) {
				return refused("its header claims an array of %d values at byte %d, more than the file holds", n, w.pos)
			}
			return w.skip(int64(n) * size)
		}
		if et == typeArray {
			return refused("its header holds an array of arrays at byte %d, which is not read", w.pos)
		}
		width := int64(4)
		if w.wide {
			width = 8
		}
		return w.list(n, width, true, func() error { return w.value(et) })
	}
	return refused("its header holds a value of unknown type %d at byte %d", t, w.pos)
}

// str walks a string: its length, then its bytes.
func (w *walker) str() error {
	n, err := w.count()
	if err != nil {
		return err
	}
	if n > uint64(w.size-w.pos) {
		return refused("its header claims a string of %d bytes at byte %d, more than the file holds", n, w.pos)
	}
	return w.skip(int64(n))
}

// count reads a count or a length: 64 bits, or 32 in version 1.
func (w *walker) count() (uint64, error) {
	if !w.wide {
		n, err := w.uint32()
		return uint64(n), err
	}
	b, err := w.take(8)
	if err != nil {
		return 0, err
	}
	return w.bo.Uint64(b), nil
}

func (w *walker) uint32() (uint32, error) {
	b, err := w.take(4)
	if err != nil {
		return 0, err
	}
	return w.bo.Uint32(b), nil
}

// take returns the next n bytes.
func (w *walker) take(n int64) ([]byte, error) {
	start := w.pos
	if err := w.skip(n); err != nil {
		return nil, err
	}
	if w.pos > int64(len(w.b)) {
		w.need = w.pos
		return nil, errShort
	}
	return w.b[start:w.pos], nil
}

// skip passes over n bytes, which need not have been fetched yet: the walk
// only reads counts and lengths. Where the header ends is checked against
// what was fetched at the end.
func (w *walker) skip(n int64) error {
	if n < 0 || n > w.size-w.pos {
		return refused("its header runs past the end of the file at byte %d", w.pos)
	}
	w.pos += n
	return nil
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
		memo:            &memo{m: map[estimateKey]usage{}},
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
