package fleet

// DefaultHeadroom is what the fleet keeps free on each device when the
// operator does not say: llama.cpp's own --fit keeps 1 GiB a device. A
// file planned "fits, 118.8 MB left" on a 23.5 GB host left the system
// and every other program that little.
const DefaultHeadroom = 1 << 30

// Headroom is what the fleet keeps free on every node for the system and
// other programs: taken off a node's RAM, and off each card's memory,
// before anything is promised to a replica. It is the one owner of "what
// a node may promise": placement, the nodes' free memory, the pool the
// planner sizes by and the memory bars all read it through keep.
type Headroom struct {
	// RAM is kept free of each node's memory; Card of each GPU's.
	RAM, Card int64
}

// keep is capacity c less the headroom: what may be promised on it.
func (h Headroom) keep(c Capacity) Capacity {
	c.RAMBytes = max(0, c.RAMBytes-h.RAM)
	c.AvailableBytes = max(0, c.AvailableBytes-h.RAM)
	if h.Card > 0 && len(c.GPUs) > 0 {
		cards := make([]Card, len(c.GPUs))
		for i, g := range c.GPUs {
			g.MemoryBytes = cardRoom(g.MemoryBytes, h.Card)
			cards[i] = g
		}
		c.GPUs = cards
	}
	return c
}

// cardRoom is what a card of mem bytes may promise with kept bytes kept
// free. A card whose memory is not known (0) is taken to have what a
// profile needs (CouldHost): it stays unknown.
func cardRoom(mem, kept int64) int64 {
	if mem <= 0 {
		return mem
	}
	return max(1, mem-kept)
}
