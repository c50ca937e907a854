package ggufgen

import (
	"bytes"
	"encoding/binary"
)

// KV is one metadata entry of a crafted header; its value is a
// uint32, uint64, string or []string.
type KV struct {
	Key   string
	Value any
}

// RawTensor is one tensor info of a crafted header: F32 (type 0) unless
// typ says otherwise.
type RawTensor struct {
	Name string
	Dims []uint64
	Type uint32
}

// Craft writes a GGUF version 3 file by hand, as an attacker would: what
// the header claims need not be true of the bytes after it, which are
// dataBytes of zeros. Spec refuses to describe such files; tests of what
// reads headers need them.
func Craft(kvs []KV, tensors []RawTensor, dataBytes int) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	u32 := func(v uint32) { binary.Write(&b, le, v) }
	u64 := func(v uint64) { binary.Write(&b, le, v) }
	str := func(s string) { u64(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	u32(3)
	u64(uint64(len(tensors)))
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.Key)
		switch v := kv.Value.(type) {
		case uint32:
			u32(4)
			u32(v)
		case uint64:
			u32(10)
			u64(v)
		case string:
			u32(8)
			str(v)
		case []uint32:
			u32(9)
			u32(4)
			u64(uint64(len(v)))
			for _, x := range v {
				u32(x)
			}
		case []string:
			u32(9)
			u32(8)
			u64(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		}
	}
	for _, t := range tensors {
		str(t.Name)
		u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			u64(d)
		}
		u32(t.Type)
		u64(0)
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, dataBytes))
	return b.Bytes()
}

// LlamaKVs are a small llama's metadata for Craft, with over replacing
// the entries it names (and adding those it lacks).
func LlamaKVs(over map[string]any) []KV {
	kvs := []KV{
		{"general.architecture", "llama"},
		{"llama.block_count", uint32(2)},
		{"llama.context_length", uint32(2048)},
		{"llama.embedding_length", uint32(64)},
		{"llama.feed_forward_length", uint32(128)},
		{"llama.attention.head_count", uint32(4)},
		{"llama.attention.head_count_kv", uint32(2)},
		{"tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "a"}},
	}
	for i, kv := range kvs {
		if v, ok := over[kv.Key]; ok {
			kvs[i].Value = v
			delete(over, kv.Key)
		}
	}
	for k, v := range over {
		kvs = append(kvs, KV{Key: k, Value: v})
	}
	return kvs
}
