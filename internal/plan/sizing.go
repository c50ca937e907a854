package plan

import (
	"encoding/json"
	"fmt"
	"slices"

	"modelserve/catalog"
	"modelserve/internal/gguf"
	"modelserve/internal/words"
)

// Sizing has one owner, here. The serve page's headline, form and memory
// bars, GET /api/v1/repos/..., the job's plan and check steps and the
// catalog's engine arguments all ask Size, so every figure an operator sees
// is the one the engine is started with. When the job, the page and the
// planner each worked it out, they disagreed: the page said 0.3 GB and the
// check step "about 1 GB", the form filled 4096 tokens under a headline of
// 16384, and a default sized against a node's total RAM left the replica
// unplaceable in its free RAM.

// The pool a request gets when it names none (the seed's): four slots of
// 4096 tokens, cut to the trained context when that is shorter. An
// embedding model gets many small slots instead: passages of up to 1024
// tokens, 32 at a time (four slots had an import of a hundred thousand
// chunks go at the pace of four, its card a third busy).
const (
	DefaultSlotTokens = 4096
	DefaultSlots      = 4
	DefaultPool       = DefaultSlotTokens * DefaultSlots
	EmbedSlotTokens   = 1024
	EmbedSlots        = 32
)

// The most a sizing is asked to hold: a serving size's bounds
// (catalog.Size), bounded here too, whatever the callers checked, so that
// no request's figures reach the estimate's arithmetic unbounded.
const (
	MaxContext = catalog.MaxContext
	MaxSlots   = catalog.MaxSlots
)

// Shrinking keeps slots of at least minSlotTokens while it can, then has
// fewer of them; contexts come in steps of contextStep tokens.
const (
	minSlotTokens = 2048
	contextStep   = 1024
)

// Ask is the sizing a request asks for. With neither CtxPool nor
// ContextLength the defaults apply, shrunk (never grown) to what fits;
// Longest asks for the longest context that fits instead. A pool or a
// context that was asked for is kept as it is, fitting or not.
type Ask struct {
	CtxPool       int
	ContextLength int
	Longest       bool
	Embeddings    bool
	// Judge is a guard model's: its prompts are each a new text, and its
	// engine keeps no prompt cache.
	Judge bool
}

// Sized says the request named its pool or its context.
func (a Ask) Sized() bool { return a.CtxPool > 0 || a.ContextLength > 0 }

// Model is what sizing needs of a model: its header (read from the
// registry or the mirror; one without a shape is sized on a rough figure),
// and the bytes of its weights and of its vision projector.
type Model struct {
	Header         gguf.Header
	WeightsBytes   int64
	ProjectorBytes int64
}

// Sizing is how a model runs on one shape of hardware: the engine's
// context, the memory of each part, whether it fits the pool and why.
type Sizing struct {
	// Size is the pool (llama.cpp's --ctx-size) and its slots; its JSON
	// is the sizing's own "ctx_pool", "slots" and "context_length" (what
	// one request may use), as scripts read them (sizingWire).
	Size catalog.Size `json:"-"`
	// Memory of each part, on a node's RAM on the CPU or on each card:
	// the weights, the KV cache for the pool's tokens, the compute buffers
	// and the engine's own (Compute), and a vision projector. NeedBytes
	// is their sum: what the replica is placed by. On the CPU the
	// engine's own includes its prompt cache (PromptCacheBytes).
	WeightsBytes   int64 `json:"weights_bytes"`
	KVBytes        int64 `json:"kv_bytes"`
	ComputeBytes   int64 `json:"compute_bytes"`
	ProjectorBytes int64 `json:"projector_bytes,omitempty"`
	NeedBytes      int64 `json:"need_bytes"`
	// PromptCacheBytes is the most llama.cpp's prompt cache may hold
	// (promptCacheBytes).
	PromptCacheBytes int64 `json:"prompt_cache_bytes,omitempty"`
	// HostBytes is what a replica on cards holds of its node's RAM
	// beside them: the engine's own, the tensors llama.cpp keeps in RAM
	// (gguf's HostBytes) and its prompt cache, which is in RAM whatever
	// runs on the cards. 0 on the CPU, where NeedBytes is all of it.
	HostBytes int64 `json:"host_bytes,omitempty"`
	// RoomBytes is the most memory a host of this shape has for it: free
	// now when Fit is FitsNow, in all otherwise; 0 when the pool has none.
	RoomBytes int64 `json:"room_bytes"`
	// Fit is FitsNow, FitsHardware or FitsNowhere; Reason says why in a
	// sentence, and how the context was chosen when it was.
	Fit    string `json:"fit"`
	Reason string `json:"reason"`
	// Shrunk says the default context was cut to fit.
	Shrunk bool `json:"shrunk,omitempty"`
	// Estimated says the header gave no shape: the memory is the rough
	// figure (weights, half again, and 2 GiB) and the KV cache unknown.
	Estimated bool `json:"estimated,omitempty"`
}

// Size sizes m on o's shape of hardware (the CPU of a node, or o's cards of
// its class on one node) as ask asks, against the pool's nodes.
func Size(m Model, o Option, ask Ask, nodes []Node) Sizing {
	sz := sizer{m: m, o: o, nodes: nodes, cards: max(o.GPUsPerNode, 1), cache: !ask.Embeddings && !ask.Judge && !m.Header.Embedding}
	trained := int(m.Header.ContextLength)
	if trained < 0 {
		trained = 0
	}
	now, all := sz.rooms(nodes)
	sz.known = len(nodes) > 0 || all > 0

	// What is asked, or the default, before any shrinking.
	ctx, slots := DefaultSlotTokens, DefaultSlots
	switch {
	case ask.Sized():
		asked := ask.Shape()
		ctx, slots = asked.Context(), asked.Slots
	case ask.Embeddings || m.Header.Embedding:
		ctx, slots = EmbedSlotTokens, EmbedSlots
	case ask.Longest && trained > 0:
		ctx, slots = trained, DefaultSlots
	}
	if !ask.Sized() && trained > 0 && ctx > trained {
		ctx = trained
	}
	ctx, slots = min(max(ctx, 1), MaxContext), min(max(slots, 1), MaxSlots)

	if ask.Sized() || !m.Header.Shaped() || !sz.known {
		// As asked, or a header that cannot say how memory grows with
		// the context, or no pool to say what room there is: nothing to
		// shrink by.
		return sz.finish(ctx, slots, now, all, "")
	}
	// Shrunk to the free room of a host that can have it now, else to
	// the room of one that could when it is free.
	for _, room := range []int64{now, all} {
		if room <= 0 {
			continue
		}
		c, s, ok := sz.shrink(ctx, slots, room, ask.Longest)
		if !ok {
			continue
		}
		why, wanted, got := "", catalog.SizeForSlots(slots, ctx), catalog.SizeForSlots(s, c)
		shrunk := got.Pool < wanted.Pool
		if shrunk {
			why = fmt.Sprintf("%s cut to %s to fit %s", wanted.Words(), got.Words(), words.Size(room))
			if ask.Longest {
				why = fmt.Sprintf("the longest context that fits %s: %s", words.Size(room), got.Words())
			}
		}
		out := sz.finish(c, s, now, all, why)
		out.Shrunk = shrunk
		return out
	}
	// Not even the smallest context fits anywhere: the smallest is what
	// the refusal names.
	smallest := min(contextStep, max(trained, 1))
	return sz.finish(smallest, 1, now, all, "")
}

// Shape is the context and slots of a request that named either: the pool
// shared by slots of the context asked, the default of the other filled in
// (a context longer than the default pool gets a pool of its own; a pool
// alone is slots of the default size, an embedding model's small ones).
// The serve form, the API and the job all read a pool this way.
func (a Ask) Shape() catalog.Size {
	pool, ctx := min(a.CtxPool, MaxContext*MaxSlots), min(a.ContextLength, MaxContext)
	if pool <= 0 {
		pool = max(DefaultPool, ctx)
	}
	if ctx <= 0 {
		ctx = min(pool, DefaultSlotTokens)
		if a.Embeddings {
			ctx = min(pool, EmbedSlotTokens)
		}
	}
	return catalog.SizeForSlots(min(catalog.SizeForContext(pool, ctx).Slots, MaxSlots), ctx)
}

type sizer struct {
	m     Model
	o     Option
	nodes []Node
	cards int
	// known is false when there was no pool to size against: nothing can
	// be said of where it fits, and nothing is refused for it.
	known bool
	// cache is whether the engine keeps a prompt cache: not for
	// embeddings or a judge.
	cache bool
}

// The prompt cache is a budget the plan chooses and counts. llama.cpp
// keeps in it the prompts its slots gave up, and gives one back whole
// when a request with its prefix comes again; prefix affinity sends each
// tenant's requests to one replica, so a replica's cache must hold the
// prefixes of every tenant routed to it, not just one slot's. Four
// one-slot replicas shared by 16 tenants with system prompts of half a
// slot, 8 requests each from 4 clients, reused 14-27% of what an oracle
// would with one slot's KV cache each, and all of it with this budget
// (the gateway's BenchmarkPromptCacheReuse).
const (
	// promptCacheMax is llama.cpp's own default, the most one is given.
	promptCacheMax = 8 << 30
	// PromptCacheSlots is how many prompts as long as a slot a prompt
	// cache's budget is for: eight of half a slot, beside the one in the
	// slot, at least as many tenants as hashing sixteen over four replicas
	// puts on the busiest 97 times in 100.
	PromptCacheSlots = 4
	// promptCacheShare is the most of what a node has to spare beside the
	// replica that the budget takes past one slot's worth, so replicas
	// placed beside it still find room.
	promptCacheShare = 4
)

// promptCacheBytes is what the engine's prompt cache may hold, in a
// node's RAM, for slots of ctx tokens, beside a replica that needs base of
// the room it is placed in (room; 0 when it fits nowhere, -1 when no
// pool says what room there is): PromptCacheSlots prompts as long as a
// slot, at most llama.cpp's default, and no more than a quarter of what
// the room spares beside the replica, though one slot's worth while the
// room spares that (the context comes first: a cache never shrinks it),
// in whole MiB (--cache-ram's unit). Left at llama.cpp's default and
// counted nowhere, it grew by every request's prompt until 8 GiB past
// what the replica was placed by.
func (z sizer) promptCacheBytes(ctx int, base, room int64) int64 {
	slot := int64(ctx) * z.m.Header.KVBytesPerToken()
	if !z.cache || slot <= 0 || room == 0 {
		return 0
	}
	b := min(PromptCacheSlots*slot, promptCacheMax)
	if room > 0 {
		spare := max(room-base, 0)
		b = min(b, max(spare/promptCacheShare, min(slot, spare)))
	}
	return wholeMiB(b)
}

// cacheRoom is the room a replica's prompt cache is sized against (see
// promptCacheBytes): of the node it runs on now if one has room for it,
// else of one that could when free; on cards, the RAM of a node with its
// cards, beside its host share (host).
func (z sizer) cacheRoom(need, host, now, all int64) int64 {
	if !z.o.CPU {
		if len(z.nodes) == 0 {
			return -1
		}
		var free bool
		now, all, free = hostRoom(z.nodes, z.o.Class, z.cards, need)
		if !free {
			now = 0
		}
		need = host
	} else if !z.known {
		return -1
	}
	switch {
	case now > 0 && need <= now:
		return now
	case all > 0 && need <= all:
		return all
	}
	return 0
}

// promptCacheWords says a prompt cache of b bytes for slots of ctx
// tokens, for the sizing's sentence: "a prompt cache of 2 GB for about 8
// prompts of 4096 tokens".
func (z sizer) promptCacheWords(b int64, ctx int) string {
	slot := int64(ctx) * z.m.Header.KVBytesPerToken()
	n := b / max(slot, 1)
	if n < 1 {
		return fmt.Sprintf("a prompt cache of %s for part of one prompt of %d tokens", words.Size(b), ctx)
	}
	return fmt.Sprintf("a prompt cache of %s for about %d %s of %d tokens", words.Size(b), n, words.Plural(int(n), "prompt", "prompts"), ctx)
}

// wholeMiB is b rounded down to whole MiB.
func wholeMiB(b int64) int64 { return b >> 20 << 20 }

// need is the memory for a pool of ctx×slots tokens: of a node's RAM on the
// CPU, of each card on cards.
func (z sizer) need(ctx, slots int) int64 {
	h, w, p, size := z.m.Header, z.m.WeightsBytes, z.m.ProjectorBytes, catalog.SizeForSlots(slots, ctx)
	if z.o.CPU {
		return h.MemoryBytes(w, size.Pool, size.Slots, p)
	}
	return h.CardBytes(w, size.Pool, size.Slots, z.cards) + p/int64(z.cards)
}

// shrink is the largest pool, with ctx tokens a slot at most and slots at
// most, whose need fits room: the slots stay while each keeps 2048 tokens,
// then become fewer; longest keeps the context and sheds slots first.
func (z sizer) shrink(ctx, slots int, room int64, longest bool) (int, int, bool) {
	fits := func(c, s int) bool { return z.need(c, s) <= room }
	if fits(ctx, slots) {
		return ctx, slots, true
	}
	for s := slots; s >= 1; s-- {
		// The longest slot of s that fits, in steps of 1024 (the
		// model's own context when it is shorter).
		c := 0
		if ctx <= contextStep {
			if fits(ctx, s) {
				c = ctx
			}
		} else {
			c = mostThatFits(0, ctx/contextStep, func(k int) bool { return k == 0 || fits(k*contextStep, s) }) * contextStep
		}
		floor := minSlotTokens
		if longest || s == 1 {
			floor = min(contextStep, ctx)
		}
		if c >= floor || (s == 1 && c > 0) {
			if longest && s > 1 && c < ctx {
				continue // the whole context in fewer slots first
			}
			return c, s, true
		}
	}
	return 0, 0, false
}

// rooms are the most memory a host of this shape has free now, and in all.
func (z sizer) rooms(nodes []Node) (now, all int64) {
	for _, n := range nodes {
		if z.o.CPU {
			if n.CPUCores == 0 {
				continue
			}
			now, all = max(now, n.FreeRAMBytes), max(all, n.RAMBytes)
			continue
		}
		g, ok := n.class(z.o.Class)
		if !ok {
			continue
		}
		// Each card's room is the cards-th most free of the node's.
		total, _ := n.cards(z.o.Class, 0)
		if total < z.cards {
			continue
		}
		free := slices.Clone(g.FreeBytes)
		slices.Sort(free)
		slices.Reverse(free)
		if len(free) >= z.cards {
			now = max(now, free[z.cards-1])
		}
		all = max(all, g.MemoryBytes)
	}
	if !z.o.CPU && len(nodes) == 0 {
		// No pool to ask (a job without a planner): the class's cards
		// as the table gives them.
		if c, ok := LookupClass(z.o.Class); ok {
			all = c.MemoryBytes()
		}
	}
	return now, all
}

// finish works out the parts of a pool of ctx×slots tokens and where it
// fits; why is how the context was chosen, when it was.
func (z sizer) finish(ctx, slots int, now, all int64, why string) Sizing {
	h := z.m.Header
	s := Sizing{Size: catalog.SizeForSlots(slots, ctx), Estimated: !h.Shaped()}
	cards := int64(z.cards)
	s.NeedBytes = z.need(ctx, slots)
	if z.o.CPU {
		s.PromptCacheBytes = z.promptCacheBytes(ctx, s.NeedBytes, z.cacheRoom(s.NeedBytes, 0, now, all))
		s.NeedBytes += s.PromptCacheBytes
	} else {
		s.HostBytes = h.HostBytes(z.m.WeightsBytes, s.Size.Pool, s.Size.Slots, z.cards)
		s.PromptCacheBytes = z.promptCacheBytes(ctx, s.HostBytes, z.cacheRoom(s.NeedBytes, s.HostBytes, now, all))
		s.HostBytes += s.PromptCacheBytes
	}
	s.WeightsBytes = z.m.WeightsBytes / cards
	s.ProjectorBytes = z.m.ProjectorBytes / cards
	s.KVBytes = int64(s.Size.Pool) * h.KVBytesPerToken() / cards
	s.ComputeBytes = s.NeedBytes - s.WeightsBytes - s.KVBytes - s.ProjectorBytes
	if s.ComputeBytes < 0 {
		// On cards llama.cpp keeps the token embeddings in RAM: less of
		// the weights is on each card than the files' share.
		s.WeightsBytes, s.ComputeBytes = max(0, s.NeedBytes-s.KVBytes-s.ProjectorBytes), 0
	}

	where := z.o.where()
	needs := fmt.Sprintf("needs %s %s for %s", words.Size(s.NeedBytes), z.onWhat(), s.Size.Words())
	switch {
	case now > 0 && s.NeedBytes <= now:
		s.Fit, s.RoomBytes = FitsNow, now
		s.Reason = fmt.Sprintf("runs %s: %s, and a host has %s free", where, needs, words.Size(now))
	case all > 0 && s.NeedBytes <= all:
		s.Fit, s.RoomBytes = FitsHardware, all
		s.Reason = fmt.Sprintf("runs %s when there is room: %s; a host has %s in all, less free now (%s)", where, needs, words.Size(all), words.Size(now))
	case !z.known:
		s.Fit = FitsNow
		s.Reason = fmt.Sprintf("%s; what the nodes have free is not known", needs)
	default:
		s.Fit, s.RoomBytes = FitsNowhere, all
		s.Reason = fmt.Sprintf("does not fit %s: %s, and the most any node has is %s", where, needs, words.Size(all))
		if all == 0 {
			s.Reason = fmt.Sprintf("does not fit %s: no node of the pool has that hardware", where)
		}
	}
	if !z.o.CPU && len(z.nodes) > 0 && s.Fit != FitsNowhere {
		// Its cards' node holds its host share in RAM beside them.
		ramNow, ramAll, cardsFree := hostRoom(z.nodes, z.o.Class, z.cards, s.NeedBytes)
		switch {
		case ramAll < s.HostBytes:
			s.Fit, s.RoomBytes, s.Reason = FitsNowhere, all, "does not fit "+where+": "+hostShort(s.HostBytes, ramAll)
		case s.Fit == FitsNow && cardsFree && ramNow < s.HostBytes:
			s.Fit, s.RoomBytes, s.Reason = FitsHardware, all, fmt.Sprintf("runs %s when there is room: %s", where, hostBusy(s.HostBytes, ramNow))
		}
	}
	if s.PromptCacheBytes > 0 && s.Fit != FitsNowhere {
		of := "of that, "
		if !z.o.CPU {
			of = "beside it in the node's RAM, "
		}
		s.Reason += "; " + of + z.promptCacheWords(s.PromptCacheBytes, ctx)
	}
	if why != "" {
		s.Reason += "; " + why
	}
	return s
}

// onWhat is where the memory is needed, for sentences.
func (z sizer) onWhat() string {
	if z.o.CPU {
		return "of a node's RAM"
	}
	if z.cards > 1 {
		return "on each card"
	}
	return "on the card"
}

// sizingWire is a Sizing as its JSON has always said it: the pool as
// ctx_pool, with the context of one slot beside it.
type sizingWire struct {
	ContextLength int `json:"context_length"`
	Slots         int `json:"slots"`
	CtxPool       int `json:"ctx_pool"`
	sizingFields
}

// sizingFields is Sizing without its methods, so that sizingWire encodes
// its other fields the ordinary way.
type sizingFields Sizing

// MarshalJSON writes the sizing with its size as ctx_pool, slots and
// context_length.
func (s Sizing) MarshalJSON() ([]byte, error) {
	return json.Marshal(sizingWire{ContextLength: s.Size.Context(), Slots: s.Size.Slots, CtxPool: s.Size.Pool, sizingFields: sizingFields(s)})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *Sizing) UnmarshalJSON(b []byte) error {
	var w sizingWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = Sizing(w.sizingFields)
	s.Size = catalog.Size{Pool: w.CtxPool, Slots: w.Slots}
	return nil
}

// mostThatFits is the largest k from lo to hi for which fits(k), found by
// bisection: fits(lo) is taken as true, and once fits is false it stays
// false for every larger k. Each fits is a whole estimate, so it is asked
// about log2(hi-lo) times.
func mostThatFits(lo, hi int, fits func(int) bool) int {
	if fits(hi) {
		return hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
