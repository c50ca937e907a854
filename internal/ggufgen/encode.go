package ggufgen

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
)

// kv is one metadata entry. The value's Go type decides its GGUF type:
// uint8, int8, uint16, int16, uint32, int32, float32, bool, string, uint64,
// int64, float64, or a slice of one of them for an array.
type kv struct {
	key   string
	value any
}

// weights is how a tensor's values are made.
type weights int

const (
	random weights = iota // small values around zero
	ones                  // a norm's scale
)

type tensor struct {
	name string
	dims []uint64 // ggml order: dims[0] is the contiguous one
	typ  TensorType
	init weights
}

func (t tensor) elements() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

func (t tensor) size() uint64 {
	elems, bytes, _ := blockOf(t.typ)
	return t.elements() / elems * bytes
}

// file is one GGUF file before it is written: its metadata and tensors, with
// the offsets worked out at write time so a shard can take a slice of them.
type file struct {
	kvs       []kv
	tensors   []tensor
	alignment uint64
	shapeOnly bool
}

func alignUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// write lays the file out as the GGUF spec says: header, metadata, tensor
// infos, zero padding to the alignment, then each tensor's data at its
// offset, each padded to the alignment as ggml's own writer pads them.
func (f *file) write(w io.Writer, padTo int64) error {
	for _, t := range f.tensors {
		elems, _, _ := blockOf(t.typ)
		if t.dims[0]%elems != 0 {
			return fmt.Errorf("tensor %s has %d columns, not a whole number of %d-element blocks", t.name, t.dims[0], elems)
		}
		if len(t.name) >= 64 {
			return fmt.Errorf("tensor name %s is 64 bytes or longer, which GGUF refuses", t.name)
		}
	}
	out := &sink{w: bufio.NewWriterSize(w, 1<<16), under: w}
	if t, ok := w.(truncater); ok {
		// A file may already hold something before where this one starts.
		base, err := t.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		out.base = base
	}
	out.bytes([]byte("GGUF"))
	out.u32(3)
	out.u64(uint64(len(f.tensors)))
	out.u64(uint64(len(f.kvs)))
	for _, e := range f.kvs {
		out.str(e.key)
		if err := out.value(e.value, true); err != nil {
			return fmt.Errorf("metadata %s: %w", e.key, err)
		}
	}
	var offset uint64
	for _, t := range f.tensors {
		out.str(t.name)
		out.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			out.u64(d)
		}
		out.u32(uint32(t.typ))
		out.u64(offset)
		offset += alignUp(t.size(), f.alignment)
	}
	out.zeros(alignUp(out.pos, f.alignment) - out.pos)
	for _, t := range f.tensors {
		if f.shapeOnly {
			out.skip(t.size())
		} else {
			out.tensorData(t)
		}
		out.zeros(alignUp(t.size(), f.alignment) - t.size())
	}
	if padTo > 0 {
		if uint64(padTo) < out.pos {
			return fmt.Errorf("padding to %d bytes is less than the model's own %d bytes", padTo, out.pos)
		}
		out.skip(uint64(padTo) - out.pos)
	}
	return out.finish()
}

// sink writes little-endian values, remembers the first error, and turns
// runs of zeros into a hole when the writer underneath can seek and truncate.
type sink struct {
	w     *bufio.Writer
	under io.Writer
	pos   uint64
	base  int64 // where the file starts in the writer underneath
	hole  bool  // the file ends in a hole still to be made by Truncate
	err   error
	buf   [8]byte
}

type truncater interface {
	io.Seeker
	Truncate(size int64) error
}

func (s *sink) bytes(b []byte) {
	if s.err != nil {
		return
	}
	if s.hole {
		// Data after a hole: seek to where it goes first.
		if s.err = s.w.Flush(); s.err != nil {
			return
		}
		if _, s.err = s.under.(truncater).Seek(s.base+int64(s.pos), io.SeekStart); s.err != nil {
			return
		}
		s.hole = false
	}
	_, s.err = s.w.Write(b)
	s.pos += uint64(len(b))
}

func (s *sink) u32(v uint32) {
	binary.LittleEndian.PutUint32(s.buf[:4], v)
	s.bytes(s.buf[:4])
}

func (s *sink) u64(v uint64) {
	binary.LittleEndian.PutUint64(s.buf[:8], v)
	s.bytes(s.buf[:8])
}

func (s *sink) str(v string) {
	s.u64(uint64(len(v)))
	if s.err == nil && !s.hole {
		_, s.err = s.w.WriteString(v)
		s.pos += uint64(len(v))
		return
	}
	s.bytes([]byte(v))
}

var zeroBlock [1 << 16]byte

func (s *sink) zeros(n uint64) {
	for n > 0 && s.err == nil {
		k := min(n, uint64(len(zeroBlock)))
		s.bytes(zeroBlock[:k])
		n -= k
	}
}

// skip leaves n zero bytes: a hole when the writer allows, written zeros
// otherwise. Gaps under 64 KiB are written: a hole smaller than a few
// filesystem blocks saves nothing.
func (s *sink) skip(n uint64) {
	if _, ok := s.under.(truncater); !ok || n < 64<<10 {
		s.zeros(n)
		return
	}
	if s.err != nil {
		return
	}
	s.pos += n
	s.hole = true
}

func (s *sink) finish() error {
	if s.err != nil {
		return s.err
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	if s.hole {
		if err := s.under.(truncater).Truncate(s.base + int64(s.pos)); err != nil {
			return err
		}
		_, err := s.under.(truncater).Seek(s.base+int64(s.pos), io.SeekStart)
		return err
	}
	return nil
}

// value writes a metadata value: its type first when typed, then the value.
func (s *sink) value(v any, typed bool) error {
	tag := func(t uint32) {
		if typed {
			s.u32(t)
		}
	}
	switch v := v.(type) {
	case uint8:
		tag(0)
		s.bytes([]byte{v})
	case int8:
		tag(1)
		s.bytes([]byte{byte(v)})
	case uint16:
		tag(2)
		binary.LittleEndian.PutUint16(s.buf[:2], v)
		s.bytes(s.buf[:2])
	case int16:
		tag(3)
		binary.LittleEndian.PutUint16(s.buf[:2], uint16(v))
		s.bytes(s.buf[:2])
	case uint32:
		tag(4)
		s.u32(v)
	case int32:
		tag(5)
		s.u32(uint32(v))
	case float32:
		tag(6)
		s.u32(math.Float32bits(v))
	case bool:
		tag(7)
		b := byte(0)
		if v {
			b = 1
		}
		s.bytes([]byte{b})
	case string:
		tag(8)
		s.str(v)
	case uint64:
		tag(10)
		s.u64(v)
	case int64:
		tag(11)
		s.u64(uint64(v))
	case float64:
		tag(12)
		s.u64(math.Float64bits(v))
	case []string:
		return array(s, typed, 8, v)
	case []float32:
		return array(s, typed, 6, v)
	case []int32:
		return array(s, typed, 5, v)
	case []uint32:
		return array(s, typed, 4, v)
	default:
		return fmt.Errorf("ggufgen cannot write a %T", v)
	}
	return nil
}

func array[T any](s *sink, typed bool, elem uint32, vs []T) error {
	if typed {
		s.u32(9)
	}
	s.u32(elem)
	s.u64(uint64(len(vs)))
	// The common arrays are written without boxing each element: a real
	// model's vocabulary is 150 thousand of them, three times over.
	switch vs := any(vs).(type) {
	case []string:
		for _, v := range vs {
			s.str(v)
		}
		return nil
	case []float32:
		b := make([]byte, 0, 4*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		s.bytes(b)
		return nil
	case []int32:
		b := make([]byte, 0, 4*len(vs))
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		s.bytes(b)
		return nil
	}
	for _, v := range vs {
		if err := s.value(v, false); err != nil {
			return err
		}
	}
	return nil
}

// tensorData writes t's values. Each tensor draws from its own generator,
// seeded by its name, so a model's weights are the same whether it is
// written whole or split, and the same on every run.
func (s *sink) tensorData(t tensor) {
	h := fnv.New64a()
	h.Write([]byte(t.name))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x9e3779b97f4a7c15))
	const chunk = 4096
	var buf [chunk * 4]byte
	n := t.elements()
	for n > 0 && s.err == nil {
		k := min(n, chunk)
		var used int
		for i := range k {
			v := float32(1)
			if t.init == random {
				v = float32(rng.Float64()*0.04 - 0.02)
			}
			if t.typ == F16 {
				binary.LittleEndian.PutUint16(buf[i*2:], float16(v))
				used += 2
			} else {
				binary.LittleEndian.PutUint32(buf[i*4:], math.Float32bits(v))
				used += 4
			}
		}
		s.bytes(buf[:used])
		n -= k
	}
}

// float16 is v in IEEE half precision, rounded to nearest, ties to even.
func float16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00 // too large: infinity
	case exp <= 0:
		if exp < -10 {
			return sign // below the smallest subnormal
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		h := mant >> shift
		rem, half := mant&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is still the right value
	}
	return sign | uint16(h)
}
