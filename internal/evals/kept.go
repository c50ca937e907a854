package evals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
)

// suites holds, by model, the suite its row last held, read once and
// compiled once. A suite is compiled when it is put, and kept compiled;
// after a start, its first run compiles it, once, however many ask at
// the same time. Showing a suite (the API's GET, the console's page)
// reads it without compiling it: compiling on every read let six
// concurrent GETs of a hostile suite take 5.75 GB.
type suites struct {
	mu      sync.Mutex
	byModel map[string]*keptSuite
	// clock orders the suites' last use, to forget the least recently
	// used past maxKeptSuites.
	clock uint64
	// compiles counts the suites compiled, put or run.
	compiles atomic.Int64
}

// maxKeptSuites is how many models' suites are kept read: past it, the
// least recently used is read (and compiled) again when next asked.
const maxKeptSuites = 64

// keptSuite is one version of a model's suite: its row, read once
// (shown) and compiled once (run).
type keptSuite struct {
	sum     [sha256.Size]byte
	row     row
	used    uint64
	read    sync.Once
	shown   Stored
	readErr error
	build   sync.Once
	run     Suite
	runErr  error
}

func newSuites() *suites { return &suites{byModel: map[string]*keptSuite{}} }

// parse is parse, which compiles the suite, counted.
func (k *suites) parse(ctx context.Context, data []byte, kept bool) (Suite, error) {
	k.compiles.Add(1)
	return parse(ctx, data, kept)
}

// version is the kept suite for model's row r, a new one when r is not
// the version kept.
func (k *suites) version(model string, r row) *keptSuite {
	sum := sha256.Sum256([]byte(r.text))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.clock++
	e := k.byModel[model]
	if e == nil || e.sum != sum || !e.row.at.Equal(r.at) || e.row.by != r.by {
		if e == nil && len(k.byModel) >= maxKeptSuites {
			k.forgetOldest()
		}
		e = &keptSuite{sum: sum, row: r}
		k.byModel[model] = e
	}
	e.used = k.clock
	return e
}

// forgetOldest forgets the least recently used suite. k.mu is held.
func (k *suites) forgetOldest() {
	var oldest string
	for m, e := range k.byModel {
		if oldest == "" || e.used < k.byModel[oldest].used {
			oldest = m
		}
	}
	delete(k.byModel, oldest)
}

// forget forgets model's suite: it has none now.
func (k *suites) forget(model string) {
	k.mu.Lock()
	delete(k.byModel, model)
	k.mu.Unlock()
}

// put keeps suite, compiled, as the version of model's suite row r holds,
// and returns it as shown.
func (k *suites) put(model string, r row, suite Suite) Stored {
	e := k.version(model, r)
	e.read.Do(func() {
		e.shown = Stored{Model: model, Suite: suite, Digest: digestOf(e.sum), UpdatedAt: r.at, UpdatedBy: r.by, text: r.text}
	})
	e.build.Do(func() { e.run = suite })
	return e.shown
}

// shown is model's suite, row r, read but not compiled.
func (k *suites) shown(model string, r row) (Stored, error) {
	return k.readOf(k.version(model, r), model)
}

// readOf reads the version e of model's suite, once.
func (k *suites) readOf(e *keptSuite, model string) (Stored, error) {
	r := e.row
	e.read.Do(func() {
		// The row holds the suite as Suite.JSON wrote it once it was
		// checked: to be shown, it is decoded as it is, neither checked
		// nor compiled again, and its sum is its digest. Checking it
		// again, as a run does, reads it three times over.
		var suite Suite
		if err := json.Unmarshal([]byte(r.text), &suite); err != nil {
			e.readErr = fmt.Errorf("the eval suite kept for %s no longer reads: %w", model, err)
			return
		}
		e.shown = Stored{Model: model, Suite: suite, Digest: digestOf(e.sum), UpdatedAt: r.at, UpdatedBy: r.by, text: r.text}
	})
	return e.shown, e.readErr
}

// compiled is model's suite, row r, compiled to run, with the suite as
// shown.
func (k *suites) compiled(model string, r row) (Stored, Suite, error) {
	e := k.version(model, r)
	st, err := k.readOf(e, model)
	if err != nil {
		return Stored{}, Suite{}, err
	}
	e.build.Do(func() {
		// What is kept was checked when it was put; it is read with the
		// same rules, and compiled, once for all the runs of this version.
		suite, err := k.parse(context.Background(), []byte(r.text), true)
		if err != nil {
			e.runErr = fmt.Errorf("the eval suite kept for %s no longer reads: %w", model, err)
			return
		}
		e.run = suite
	})
	return st, e.run, e.runErr
}

// digestOf is Suite.Digest of the suite whose JSON has sha256 sum.
func digestOf(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:6]) }
