package vllmtest

import (
	"hash/maphash"
	"strings"
)

// prefixCache is vLLM's automatic prefix caching as far as a client can
// see it: a prompt's full blocks of tokens are kept, each under a hash of
// every token up to its end, and a later prompt that begins with the same
// blocks takes them instead of computing them again. vLLM computes a
// prompt's last token in any case, so a prompt met again whole still
// takes one block fewer than it has.
type prefixCache struct {
	seed   maphash.Seed
	blocks map[uint64]bool
	room   int // blocks the KV cache holds
}

// newPrefixCache is the cache of a start with a for a KV cache of tokens;
// nil when a turns prefix caching off (vLLM 0.11 keeps it on otherwise).
func newPrefixCache(a Args, tokens int64) *prefixCache {
	if _, off := a.Given["--no-enable-prefix-caching"]; off {
		return nil
	}
	return &prefixCache{seed: maphash.MakeSeed(), blocks: map[uint64]bool{}, room: int(max(tokens/blockSize, 1))}
}

// take is how many of prompt's tokens the cache held; it keeps prompt's
// full blocks for the next. Blocks beyond its room push the oldest out,
// which the double does all at once.
func (c *prefixCache) take(prompt []string) int {
	var h maphash.Hash
	h.SetSeed(c.seed)
	hits, counting := 0, true
	for i := 0; i+blockSize <= len(prompt); i += blockSize {
		h.WriteString(strings.Join(prompt[i:i+blockSize], "\x00"))
		h.WriteByte(0)
		sum := h.Sum64()
		if counting && c.blocks[sum] && i+blockSize < len(prompt) {
			hits++
		} else {
			counting = false
		}
		if len(c.blocks) >= c.room {
			clear(c.blocks)
		}
		c.blocks[sum] = true
	}
	return hits * blockSize
}
