package mirror

import (
	"cmp"
	"slices"
)

// Flight is a file being fetched, or waiting for a slot, as the mirror
// holds it in memory: its progress and how many fetches wait on it.
type Flight struct {
	Entry
	// Waiters is how many Fetch calls (jobs) wait on the file.
	Waiters int
}

// Flights are the files being fetched or queued now, sorted as List sorts.
// Unlike List it reads nothing from the disk, so a page that follows the
// downloads can ask every second, however many files the mirror holds.
func (m *Mirror) Flights() []Flight {
	m.mu.Lock()
	out := make([]Flight, 0, len(m.flights))
	for _, fl := range m.flights {
		if fl.ctx.Err() != nil {
			continue // cancelled, still stopping: nobody waits on it
		}
		p := fl.progress()
		f := fl.file
		out = append(out, Flight{
			Entry: Entry{Model: f.Model, Revision: f.Revision, Path: f.Path, State: p.State,
				Size: p.BytesDone, BytesDone: p.BytesDone, BytesTotal: p.BytesTotal, Connections: int(fl.conns.Load())},
			Waiters: fl.waiters,
		})
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Flight) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.Path, b.Path))
	})
	return out
}
