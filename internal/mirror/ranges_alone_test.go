package mirror

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"
)

// On a link one connection fills, a ranged fetch is a single stream: the
// lone connection asks for the rest of the file once, not for each part
// (a round trip and a pause in the bytes at every part's end).
func TestRangedFetchAloneAsksOnce(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20+12345, 31)
	f := addFile(t, srv, "big.gguf", content)
	m := newMirror(t, srv, func(o *Options) { o.Connections, o.PartSize, o.RateWindow = 4, testPart, time.Minute })

	mustHave(t, mustFetch(t, m, f)[0], content)
	if got := srv.Requests(repoID, f.Path); got != 1 {
		t.Errorf("the registry was asked for the file %d times, want once", got)
	}
	served(t, srv, f.Path, f.Size, f.Size)
}

// The lone connection's bytes are hashed from the buffers they arrived
// in, as a single stream's are: none is read back from the file, which
// would copy every byte a second time (the CPU that made a ranged fetch
// slower than one stream on a fast link).
func TestRangedFetchAloneHashesFromMemory(t *testing.T) {
	srv := newHub(t)
	content := randomish(32<<20+777, 32)
	f := addFile(t, srv, "big.gguf", content)
	m := newMirror(t, srv, func(o *Options) { o.Connections, o.PartSize, o.RateWindow = 4, testPart, time.Minute })

	fl := &flight{file: f, local: filepath.Join(t.TempDir(), "big.gguf")}
	d := &download{m: m, fl: fl, name: "big.gguf", part: partialPath(fl.local), h: sha256.New(), ranges: true}
	if err := d.try(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d.r == nil {
		t.Fatal("the file was not fetched in parts")
	}
	if d.r.readBackBytes != 0 {
		t.Errorf("%d of %d bytes were read back from the file to be hashed, want none", d.r.readBackBytes, f.Size)
	}
	if _, err := d.finish(); err != nil {
		t.Fatal(err)
	}
	mustHave(t, fl.local, content)
}

// When the controller takes connections away, the one at the hash's edge
// stays: its bytes go on being hashed as they arrive, and the prefix grows.
func TestRangedFetchShedsTheConnectionFarthestAhead(t *testing.T) {
	front, middle, back := &conn{cancel: func(error) {}}, &conn{cancel: func(error) {}}, &conn{cancel: func(error) {}}
	r := &ranged{conns: map[*conn]bool{front: true, middle: true, back: true}, parts: []*part{
		{start: 0, end: 10, next: 4, busy: true, conn: front},
		{start: 10, end: 20, next: 15, busy: true, conn: middle},
		{start: 20, end: 30, next: 22, busy: true, conn: back},
	}}
	got := r.sheddableLocked()
	if len(got) != 3 || got[0] != back || got[1] != middle || got[2] != front {
		t.Errorf("the connections are taken away in the order of the parts at %v; want the farthest ahead first",
			func() (at []int64) {
				for _, c := range got {
					for _, p := range r.parts {
						if p.conn == c {
							at = append(at, p.start)
						}
					}
				}
				return at
			}())
	}
}

// A pause right after the count went from one to two — the first
// connection bringing nothing for a quarter of a window, the second still
// starting — is not a throttle: the count is judged at the window's end,
// not cut to one for good.
func TestControllerWaitsOutAPause(t *testing.T) {
	m := newMirror(t, nil, func(o *Options) { o.RateWindow = time.Second })
	ctl := newController(m.opts, 16)
	if n := ctl.next(1, 20e6); n != 2 {
		t.Fatalf("one connection at 20 MB/s went to %d, want 2", n)
	}
	first, second := &conn{windows: 1}, &conn{}
	r := &ranged{d: &download{m: m, fl: &flight{}}, conns: map[*conn]bool{first: true, second: true}, want: 2}
	r.looked = time.Now().Add(-m.opts.RateWindow / 4)
	r.control(ctl)
	if r.want != 2 || ctl.ceiling != 16 {
		t.Errorf("after a quarter window without bytes the count is %d, at most %d; want 2, at most 16", r.want, ctl.ceiling)
	}
}

// A window that a busy machine paused, right after the count went from one
// to two, reads as a second connection that does not pay; on a CDN that
// paces each connection the count is tried again a little later rather
// than held at one to the end of the file.
func TestControllerTriesAgainAfterHolding(t *testing.T) {
	c := newController(Options{}, 16)
	n := c.next(1, 20e6) // two
	n = c.next(n, 20e6)  // two that gave no more: a pause
	if n != 1 {
		t.Fatalf("two connections at one's rate went to %d, want back to 1", n)
	}
	windows := 0
	for ; n == 1 && windows < 2*holdWindows; windows++ {
		n = c.next(n, float64(n)*20e6)
	}
	for range 10 {
		n = c.next(n, float64(n)*20e6)
	}
	if n < 8 {
		t.Errorf("after %d windows held at one, a paced CDN's fetch settled on %d connections; want more", windows, n)
	}
}
