package mirror

import (
	"context"
	"errors"
	"fmt"
	oteltrace "go.opentelemetry.io/otel/trace"
	"modelserve/internal/operr"
	"modelserve/internal/words"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// flight is one file being fetched. Every Fetch that wants the file waits
// on the same flight, so a file is fetched once however many jobs ask; the
// flight is cancelled only when the last of them stops waiting.
type flight struct {
	file  File
	local string
	prev  *flight // a cancelled flight for the same file, still stopping

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns; err and sum are set

	fetching atomic.Bool
	bytes    atomic.Int64 // bytes of the file on disk so far
	conns    atomic.Int32 // connections fetching it now
	rate     atomic.Int64 // bytes a second over the last second

	// Guarded by Mirror.mu.
	waiters int
	subs    []chan *flight // told when the flight ends
	err     error
	sum     string
}

func (fl *flight) progress() FileProgress {
	p := FileProgress{Path: fl.file.Path, State: Queued, BytesDone: fl.bytes.Load(), BytesTotal: fl.file.Size}
	if fl.fetching.Load() {
		p.State, p.Connections = Fetching, int(fl.conns.Load())
	}
	return p
}

// Fetch makes every file present and returns their local paths in order.
// progress, when not nil, is called at most every ProgressEvery while files
// arrive, and once at the end, always from the calling goroutine. A file
// already present from the same commit with the published sha256 costs no
// request. The first failure ends the Fetch; the other files' partial bytes
// stay for the next one.
func (m *Mirror) Fetch(ctx context.Context, files []File, progress func(Progress)) ([]string, error) {
	// Every name is checked before anything touches the disk.
	locals := make([]string, len(files))
	for i, f := range files {
		local, err := m.LocalPath(f.Model, f.Revision, f.Path)
		if err != nil {
			return nil, err
		}
		if err := checkSource(f); err != nil {
			return nil, err
		}
		locals[i] = local
	}
	// Join the flights in progress, start the missing ones: checked for
	// room and started under one lock, so two Fetches at once cannot both
	// count the same free bytes as theirs.
	slots := make([]*flight, len(files))
	final := make([]FileProgress, len(files))
	ended := make(chan *flight, len(files))
	pending := 0
	m.mu.Lock()
	if err := m.checkSpaceLocked(files, locals); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	for i, f := range files {
		final[i] = FileProgress{Path: f.Path, State: Present, BytesDone: f.Size, BytesTotal: f.Size}
		// A file named twice waits on one flight, counted once.
		if j := slices.Index(locals[:i], locals[i]); j >= 0 {
			if slots[i] = slots[j]; slots[i] != nil {
				pending++
			}
			continue
		}
		if fl := m.flights[locals[i]]; fl != nil && fl.ctx.Err() == nil {
			fl.waiters++
			fl.subs = append(fl.subs, ended)
			slots[i] = fl
			pending++
			continue
		}
		if _, ok := m.presentLocked(locals[i], f); ok {
			continue
		}
		fl := m.startLocked(ctx, f, locals[i])
		fl.subs = append(fl.subs, ended)
		slots[i] = fl
		pending++
	}
	m.mu.Unlock()

	report := func() {
		if progress == nil {
			return
		}
		p := Progress{Files: make([]FileProgress, len(files))}
		for i := range files {
			p.Files[i] = final[i]
			if slots[i] != nil {
				p.Files[i] = slots[i].progress()
			}
			p.BytesDone += p.Files[i].BytesDone
			p.BytesTotal += p.Files[i].BytesTotal
			if slots[i] != nil && !slices.Contains(slots[:i], slots[i]) {
				p.Connections += p.Files[i].Connections // a file named twice comes once
			}
		}
		progress(p)
	}
	var tick <-chan time.Time
	if progress != nil {
		t := time.NewTicker(m.opts.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}

	var err error
	for pending > 0 && err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick:
			report()
		case fl := <-ended:
			// One flight may stand in several slots (a file named twice).
			for i := range slots {
				if slots[i] != fl {
					continue
				}
				slots[i], pending = nil, pending-1
				m.mu.Lock()
				ferr, sum := fl.err, fl.sum
				m.mu.Unlock()
				// A joiner may expect another sha256 than the flight's
				// starter did; each checks its own.
				if ferr == nil && files[i].SHA256 != "" && !strings.EqualFold(sum, files[i].SHA256) {
					ferr = mismatch(files[i].Path, sum, files[i].SHA256)
				}
				if ferr != nil {
					final[i] = FileProgress{Path: files[i].Path, State: Failed,
						BytesDone: fl.bytes.Load(), BytesTotal: files[i].Size, Err: ferr.Error()}
					err = ferr
				}
			}
		}
	}
	if err != nil {
		m.leave(slots, ended)
		// What this Fetch leaves unfinished stays as far as it came.
		for i, fl := range slots {
			if fl != nil {
				final[i] = FileProgress{Path: files[i].Path, State: Partial,
					BytesDone: fl.bytes.Load(), BytesTotal: files[i].Size}
				slots[i] = nil
			}
		}
	}
	report()
	if err != nil {
		return nil, err
	}
	return locals, nil
}

// checkSource refuses a file the mirror could not fetch or check.
func checkSource(f File) error {
	if f.Size < 0 {
		return operr.New(operr.Refused, "the registry published a size of %d bytes for %s; it is not fetched", f.Size, operr.Quote(f.Path))
	}
	if f.SHA256 != "" && !sha256Pattern.MatchString(f.SHA256) {
		return operr.New(operr.Refused, "the registry published %s as the sha256 of %s, which is not a sha256; it is not fetched", operr.Quote(f.SHA256), operr.Quote(f.Path))
	}
	u, err := url.Parse(f.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") {
		return operr.New(operr.Refused, "%s cannot be fetched from %s; the mirror fetches http, https and file URLs", operr.Quote(f.Path), operr.Quote(f.URL))
	}
	return nil
}

// startLocked starts a flight for a file; m.mu is held. Its requests are
// traced as the caller's who started it (a flight outlives its waiters).
func (m *Mirror) startLocked(from context.Context, f File, local string) *flight {
	ctx, cancel := context.WithCancel(oteltrace.ContextWithSpan(context.Background(), oteltrace.SpanFromContext(from)))
	fl := &flight{file: f, local: local, ctx: ctx, cancel: cancel, done: make(chan struct{}), waiters: 1}
	// A flight nobody waits for any more is cancelled but may still be
	// closing the partial file; the new one starts after it.
	if old := m.flights[local]; old != nil {
		fl.prev = old
	}
	if have, ok := partialHave(local, f.Size); ok {
		fl.bytes.Store(have)
	}
	m.flights[local] = fl
	delete(m.failed, local)
	go m.run(fl)
	return fl
}

// run fetches the flight's file and tells its waiters. Its lifetime is the
// flight's: it returns once the file is present, has failed, or every
// waiter has left.
func (m *Mirror) run(fl *flight) {
	if fl.prev != nil {
		<-fl.prev.done
	}
	sum, err := m.fetchFile(fl.ctx, fl)
	if err != nil && fl.ctx.Err() == nil {
		if m.opts.Metrics != nil {
			m.opts.Metrics.MirrorFailed()
		}
		m.log.Warn("mirror fetch failed", "model", fl.file.Model, "revision", fl.file.Revision,
			"path", fl.file.Path, "err", err)
	}
	m.mu.Lock()
	if m.flights[fl.local] == fl {
		delete(m.flights, fl.local)
	}
	if err != nil && fl.ctx.Err() == nil {
		m.failed[fl.local] = failure{file: fl.file, err: err.Error(), at: time.Now()}
	}
	fl.err, fl.sum = err, sum
	for _, c := range fl.subs {
		c <- fl // buffered for every file of its Fetch: never blocks
	}
	fl.subs = nil
	m.mu.Unlock()
	fl.cancel()
	close(fl.done)
}

// leave stops waiting for the flights still in slots, cancels those nobody
// else waits for, and waits until they have stopped, so that nothing of
// this Fetch runs after it returns.
func (m *Mirror) leave(slots []*flight, ended chan *flight) {
	var stopping []*flight
	seen := map[*flight]bool{}
	m.mu.Lock()
	for _, fl := range slots {
		if fl == nil || seen[fl] {
			continue
		}
		seen[fl] = true
		fl.subs = removeSub(fl.subs, ended)
		fl.waiters--
		if fl.waiters == 0 {
			fl.cancel()
			stopping = append(stopping, fl)
		}
	}
	m.mu.Unlock()
	for _, fl := range stopping {
		<-fl.done
	}
}

func removeSub(subs []chan *flight, c chan *flight) []chan *flight {
	out := subs[:0]
	for _, s := range subs {
		if s != c {
			out = append(out, s)
		}
	}
	return out
}

// presentLocked says whether the file is on disk, whole, with a verified
// sha256 that is the one published; m.mu is held so that no flight can
// rename a file into place between the look and the answer.
func (m *Mirror) presentLocked(local string, f File) (string, bool) {
	st, err := os.Stat(local)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return "", false
	}
	sum, err := readSidecar(local)
	if err != nil || (f.SHA256 != "" && !strings.EqualFold(sum, f.SHA256)) {
		return "", false
	}
	return sum, true
}

// checkSpaceLocked refuses a Fetch whose bytes still to come, plus 5% for
// the filesystem's own needs and for whatever else writes there
// meanwhile, do not fit beside what the fetches already under way will
// still write: each flight is a promise of its file's remaining bytes. Ten
// jobs that each saw the disk free on its own filled it, and failed
// half-way. Failing now beats failing at 95% of a 40 GB file.
func (m *Mirror) checkSpaceLocked(files []File, locals []string) error {
	var need, promised int64
	seen := map[string]bool{}
	var models []string
	for i, f := range files {
		if seen[locals[i]] {
			continue
		}
		seen[locals[i]] = true
		if fl := m.flights[locals[i]]; fl != nil && fl.ctx.Err() == nil {
			continue // joined: counted among the promises
		}
		if _, ok := m.presentLocked(locals[i], f); ok {
			continue
		}
		left := f.Size
		if have, ok := partialHave(locals[i], f.Size); ok {
			left -= have
		}
		need += left
		if !slices.Contains(models, f.Model) {
			models = append(models, f.Model)
		}
	}
	if need == 0 {
		return nil
	}
	for _, fl := range m.flights {
		if fl.ctx.Err() == nil {
			promised += max(0, fl.file.Size-fl.bytes.Load())
		}
	}
	need += need / 20
	free, err := m.opts.FreeSpace(m.dir)
	if err != nil {
		return fmt.Errorf("cannot tell whether the mirror has room for %s: %w", strings.Join(models, ", "), err)
	}
	room := int64(min(free, 1<<62)) - promised
	if room < need {
		held := ""
		if promised > 0 {
			held = fmt.Sprintf(" once the %s the fetches under way will still write are set aside", words.Size(promised))
		}
		return operr.New(operr.Unavailable, "the mirror's disk needs %s free to fetch %s, and has %s%s: free some space (the mirror page removes files), or give --data a larger disk",
			words.Size(need), strings.Join(models, ", "), words.Size(max(room, 0)), held)
	}
	return nil
}

// mismatch is the sentence for a file that is not what the registry
// published.
func mismatch(p, got, want string) error {
	return operr.New(operr.Refused, "%s arrived with sha256 %s, and the registry published %s",
		path.Base(p), short(got), short(strings.ToLower(want)))
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// errStalled cancels a try on which no byte arrived for StallTimeout.
var errStalled = errors.New("stalled")
