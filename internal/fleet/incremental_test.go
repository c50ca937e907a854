package fleet

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
)

// TestAChangedEntryIsSeenAtTheNextPass: the fleet keeps each entry's
// fingerprint between passes rather than computing it again every pass;
// an entry whose profile changed, its name and when it was added the
// same, must still have its replica replaced at the next pass that reads
// the catalog, and one changed back likewise.
func TestAChangedEntryIsSeenAtTheNextPass(t *testing.T) {
	added := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	m := entry("chat", "/weights/chat.gguf", 1)
	m.AddedAt = added
	cat := &catalogtest.Catalog{}
	cat.Put(m) // put again edited: its name and when it was added the same, as no store's re-add keeps

	node := &fakeNode{name: "n1", cap: Capacity{CPUCores: 8, RAMBytes: 64 << 30, AvailableBytes: 64 << 30}}
	f, err := New(Options{Catalog: cat, Nodes: []Node{node}, Threads: 1, Residency: -1, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	f.backend = &readyBackend{nodes: []Node{node}, ready: map[string]bool{}}
	ctx := context.Background()

	serving := func() (ids []string, stopping []string) {
		for _, r := range f.Replicas() {
			if r.State == Ready {
				ids = append(ids, r.ID)
			} else {
				stopping = append(stopping, r.ID)
			}
		}
		return ids, stopping
	}
	f.reconcile(ctx, true)
	if ids, _ := serving(); len(ids) != 1 || ids[0] != "chat-1" {
		t.Fatalf("serving %q, want chat-1", ids)
	}
	first := Fingerprint(m)

	for i, pool := range []int{2048, 1024} {
		edited := m
		edited.Profiles = []catalog.Profile{m.Profiles[0]}
		edited.Profiles[0].Pool = pool
		cat.Put(edited)
		f.reconcile(ctx, true)
		want, before := "chat-"+strconv.Itoa(i+2), "chat-"+strconv.Itoa(i+1)
		ids, stopping := serving()
		if len(ids) != 1 || ids[0] != want || !slices.Contains(stopping, before) {
			t.Fatalf("after the profile's pool became %d: serving %q, stopping %q; want %s serving and the replica before it stopping",
				pool, ids, stopping, want)
		}
		f.mu.Lock()
		got := f.replicas[want].fingerprint
		f.mu.Unlock()
		if got != Fingerprint(edited) {
			t.Errorf("%s started from fingerprint %s, want the edited entry's %s", want, got, Fingerprint(edited))
		}
		if pool == 1024 && got != first {
			t.Errorf("the entry changed back has fingerprint %s, want its first %s", got, first)
		}
	}
}
