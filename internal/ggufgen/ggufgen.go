// Package ggufgen writes small, valid GGUF files for tests.
//
// Every step after the mirror reads a GGUF file: the check step reads its
// header, works out its memory and refuses an architecture the engine does
// not know, and the smoke test has llama.cpp load it and answer. Testing
// those steps against real models meant gigabytes of downloads, and hand-made
// bytes that real llama.cpp would refuse hide the bugs a test is for. This
// package writes files by the format's own rules instead: tiny llama models
// (2 layers, 64 wide, a byte-fallback vocabulary, about half a megabyte) that
// real llama.cpp loads and generates with, split sets as llama.cpp's
// gguf-split lays them out, projectors, and files that declare the shapes of
// real 7B and 8B models with a sparse data region, so a header reader sees a
// real model's parameter count in a file that takes a few megabytes of disk.
package ggufgen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TensorType is a ggml tensor type, numbered as ggml numbers them.
type TensorType uint32

// The tensor types a Spec can ask for. Only F32 and F16 carry generated
// weights; the block-quantised types are for ShapeOnly files, whose data
// region is left as zeros, so that a header declares the sizes a real
// quantised model has.
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q8_0 TensorType = 8
	Q4_K TensorType = 12
	Q6_K TensorType = 14
)

// blockOf is how many elements one block of t holds and how many bytes the
// block takes, from ggml's type traits.
func blockOf(t TensorType) (elems, bytes uint64, ok bool) {
	switch t {
	case F32:
		return 1, 4, true
	case F16:
		return 1, 2, true
	case Q4_0:
		return 32, 18, true
	case Q8_0:
		return 32, 34, true
	case Q4_K:
		return 256, 144, true
	case Q6_K:
		return 256, 210, true
	}
	return 0, 0, false
}

// fileTypeOf is the general.file_type llama.cpp's quantiser writes for a
// model made mostly of t (LLAMA_FTYPE_*).
func fileTypeOf(t TensorType) uint32 {
	switch t {
	case F16:
		return 1
	case Q4_0:
		return 2
	case Q8_0:
		return 7
	case Q4_K:
		return 15 // Q4_K_M
	case Q6_K:
		return 18
	}
	return 0
}

// Spec describes a file to write. The zero Spec is a tiny llama model that
// real llama.cpp loads and generates with.
type Spec struct {
	// Name is general.name.
	Name string
	// Architecture is general.architecture and the prefix of the model's
	// own keys; "llama" when empty. A name llama.cpp does not know makes a
	// file it refuses with its own "unknown model architecture" error.
	Architecture string
	// NoArchitecture leaves general.architecture out (the model's keys keep
	// Architecture's prefix): a header reader must notice the key is missing
	// rather than take a library's default.
	NoArchitecture bool

	// The shape; each zero takes the tiny model's value, except KeyLength
	// and ValueLength, which are written only when set (llama.cpp then
	// takes EmbeddingLength/HeadCount).
	ContextLength     uint32
	EmbeddingLength   uint32
	BlockCount        uint32
	FeedForwardLength uint32
	HeadCount         uint32
	HeadCountKV       uint32
	KeyLength         uint32
	ValueLength       uint32

	// ExpertCount and ExpertUsedCount make a mixture-of-experts model, laid
	// out as llama.cpp lays out Mixtral: a router and stacked expert tensors
	// in place of each block's feed-forward tensors.
	ExpertCount     uint32
	ExpertUsedCount uint32

	// Vocab are words added to the vocabulary after the special and byte
	// tokens, each as "▁word" with every prefix of it ("▁w", "▁wo", ...),
	// which SPM needs to reach a word. Without any, 34 English words are
	// used: 335 tokens in all.
	Vocab []string
	// VocabSize, when larger than the vocabulary so made, fills it up to
	// this many tokens with made-up words: the token count of a real model,
	// which sizes its embedding and output tensors.
	VocabSize int
	// ChatTemplate is tokenizer.chat_template; none is written when empty.
	ChatTemplate string

	// Pooling, when set, is written as <arch>.pooling_type (1 mean, 2 cls,
	// 3 last): what marks an embedding model.
	Pooling *uint32

	// TensorType is the type of the two-dimensional weights; one-dimensional
	// ones (norms, biases) are always F32, as in real files. F32 unless set.
	TensorType TensorType
	// FileType is general.file_type; zero takes the one TensorType implies.
	FileType uint32
	// Alignment is general.alignment; 32 (and the key left out) when zero.
	Alignment uint32

	// ShapeOnly declares the tensors with their full shapes but writes no
	// weights: the data region is extended to its full size as a hole in
	// the file (zeros when the writer cannot seek). Use it for the shapes of
	// real models, whose weights would take gigabytes.
	ShapeOnly bool
	// PadTo, when larger than the model, extends the file to exactly this
	// many bytes after its last tensor, as a hole where the writer allows:
	// a multi-gigabyte file that costs no disk. llama.cpp ignores bytes
	// after the data it declares, so a padded model still loads.
	PadTo int64

	// Projector makes a vision projector (an mmproj file) instead of a
	// model: architecture "clip", general.type "mmproj", a small vision
	// encoder and a two-layer MLP projector.
	Projector bool
}

// withDefaults fills the tiny model's values into what s leaves zero.
func (s Spec) withDefaults() Spec {
	if s.Architecture == "" {
		s.Architecture = "llama"
	}
	if s.Projector {
		s.Architecture = "clip"
	}
	def := func(v *uint32, d uint32) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.ContextLength, 4096)
	def(&s.EmbeddingLength, 64)
	def(&s.BlockCount, 2)
	def(&s.FeedForwardLength, 128)
	def(&s.HeadCount, 4)
	def(&s.HeadCountKV, 2)
	def(&s.Alignment, 32)
	if s.FileType == 0 {
		s.FileType = fileTypeOf(s.TensorType)
	}
	if s.Name == "" {
		s.Name = "ggufgen tiny " + s.Architecture
	}
	return s
}

func (s Spec) validate() error {
	if _, _, ok := blockOf(s.TensorType); !ok {
		return fmt.Errorf("tensor type %d is not one ggufgen writes", s.TensorType)
	}
	if !s.ShapeOnly && s.TensorType != F32 && s.TensorType != F16 {
		return fmt.Errorf("tensor type %d carries no generated weights: use F32 or F16, or ShapeOnly", s.TensorType)
	}
	if s.Alignment%8 != 0 {
		return fmt.Errorf("alignment %d is not a multiple of 8, which GGUF requires", s.Alignment)
	}
	if s.EmbeddingLength%s.HeadCount != 0 && s.KeyLength == 0 {
		return fmt.Errorf("embedding length %d is not a multiple of the head count %d", s.EmbeddingLength, s.HeadCount)
	}
	if s.HeadCountKV > s.HeadCount || s.HeadCount%s.HeadCountKV != 0 {
		return fmt.Errorf("%d kv heads do not divide %d heads", s.HeadCountKV, s.HeadCount)
	}
	if (s.ExpertCount == 0) != (s.ExpertUsedCount == 0) || s.ExpertUsedCount > s.ExpertCount {
		return fmt.Errorf("%d of %d experts used is not a mixture of experts", s.ExpertUsedCount, s.ExpertCount)
	}
	return nil
}

// Write writes the file s describes to w. A ShapeOnly or padded file is
// written with holes when w is an *os.File (or anything that seeks and
// truncates), and with zeros otherwise.
func Write(w io.Writer, s Spec) error {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return err
	}
	f := build(s)
	return f.write(w, s.PadTo)
}

// WriteFile writes the file s describes at path, replacing any file there.
func WriteFile(path string, s Spec) (err error) {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	return Write(out, s)
}

// Bytes is the file s describes, for a test that wants it in memory. It
// panics on a Spec Write refuses; keep ShapeOnly and PadTo small here.
func Bytes(s Spec) []byte {
	var b bytes.Buffer
	if err := Write(&b, s); err != nil {
		panic("ggufgen: " + err.Error())
	}
	return b.Bytes()
}

// WriteSplit writes the model s describes as n shards in dir, named
// <prefix>-0000i-of-0000n.gguf, as llama.cpp's gguf-split writes them: the
// first shard holds all the metadata, every shard says which it is
// (split.no, from 0), how many there are (split.count) and how many tensors
// the whole set holds (split.tensors.count), and the tensors are spread over
// the shards in order. It returns the shards' paths, first to last.
func WriteSplit(dir, prefix string, s Spec, n int) ([]string, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.PadTo > 0 {
		return nil, errors.New("a split set cannot be padded: pad a single file instead")
	}
	whole := build(s)
	if n < 1 || n > len(whole.tensors) || n > 99999 {
		return nil, fmt.Errorf("%d shards for %d tensors: give between 1 and %d", n, len(whole.tensors), len(whole.tensors))
	}
	splitKeys := func(i int) []kv {
		return []kv{
			{"split.no", uint16(i)},
			{"split.count", uint16(n)},
			{"split.tensors.count", int32(len(whole.tensors))},
		}
	}
	var paths []string
	for i := range n {
		lo, hi := i*len(whole.tensors)/n, (i+1)*len(whole.tensors)/n
		shard := &file{alignment: whole.alignment, shapeOnly: whole.shapeOnly}
		if i == 0 {
			shard.kvs = append(append(shard.kvs, whole.kvs...), splitKeys(i)...)
		} else {
			shard.kvs = splitKeys(i)
		}
		shard.tensors = append(shard.tensors, whole.tensors[lo:hi]...)
		path := filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n))
		if err := writeShard(path, shard); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func writeShard(path string, f *file) (err error) {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	return f.write(out, 0)
}
