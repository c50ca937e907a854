package store

import (
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// waitBounds are the upper bounds of the gate's wait buckets: a write the
// gate lets in at once, one behind a few others (milliseconds each), one
// behind a long transaction, and the seconds that would mean a writer
// holding the gate far too long, up to gateWait.
var waitBounds = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond,
	500 * time.Millisecond, 2500 * time.Millisecond, 10 * time.Second, gateWait,
}

// waits counts how long writers waited at a gate: a fixed set of buckets,
// the sum and the longest, so it stays the same size however long
// modelserve runs. Safe for concurrent use without a lock: each write adds
// to it.
type waits struct {
	buckets [len(waitBounds)]atomic.Uint64 // each counts the waits up to its bound and above the one before
	count   atomic.Uint64
	sum     atomic.Int64 // nanoseconds
	max     atomic.Int64 // nanoseconds
}

func (w *waits) add(d time.Duration) {
	for i, b := range waitBounds {
		if d <= b {
			w.buckets[i].Add(1)
			break
		}
	}
	w.count.Add(1)
	w.sum.Add(int64(d))
	for {
		m := w.max.Load()
		if int64(d) <= m || w.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// WriteWaits is how long modelserve's writes waited for the database's
// write lock, in Go (the gate), since the database was opened. A write
// that found it free counts as a wait of zero.
type WriteWaits struct {
	// Writes is how many writes (transactions, and statements outside
	// one) asked for the lock.
	Writes uint64
	// Total is their waits added up; Longest the longest one.
	Total, Longest time.Duration
	// LongestHold is the longest a write held the lock (a transaction
	// from its BEGIN to its end, a statement while it ran): what kept
	// the longest waits waiting.
	LongestHold time.Duration
	// Within counts, for each bound of Bounds, the writes that waited
	// up to it (cumulative, as Prometheus counts a histogram's buckets).
	Bounds []time.Duration
	Within []uint64
}

func (w *waits) read() WriteWaits {
	out := WriteWaits{Bounds: waitBounds[:], Within: make([]uint64, len(waitBounds))}
	var n uint64
	for i := range w.buckets {
		n += w.buckets[i].Load()
		out.Within[i] = n
	}
	out.Writes = w.count.Load()
	out.Total = time.Duration(w.sum.Load())
	out.Longest = time.Duration(w.max.Load())
	return out
}

// WriteWaitsOf is how long db's writes have waited for its write lock;
// false when db was not opened by Open.
func WriteWaitsOf(db *sql.DB) (WriteWaits, bool) {
	d, ok := db.Driver().(*gatedDriver)
	if !ok {
		return WriteWaits{}, false
	}
	w := d.gate.waited.read()
	w.LongestHold = time.Duration(d.gate.longestHold.Load())
	return w, true
}

// WaitCollector tells Prometheus how long db's writes have waited for its
// write lock: modelserve_store_write_wait_seconds, a histogram, and
// modelserve_store_write_wait_longest_seconds, the longest wait since the
// start, and modelserve_store_write_hold_longest_seconds, the longest any
// write held the lock. It collects nothing for a database Open did not open.
func WaitCollector(db *sql.DB) prometheus.Collector { return waitCollector{db: db} }

var (
	waitHistDesc = prometheus.NewDesc("modelserve_store_write_wait_seconds",
		"How long each write waited for the database's write lock behind modelserve's other writers.", nil, nil)
	waitLongestDesc = prometheus.NewDesc("modelserve_store_write_wait_longest_seconds",
		"The longest any write has waited for the database's write lock since the start.", nil, nil)
	holdLongestDesc = prometheus.NewDesc("modelserve_store_write_hold_longest_seconds",
		"The longest any write has held the database's write lock since the start.", nil, nil)
)

type waitCollector struct{ db *sql.DB }

func (c waitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- waitHistDesc
	ch <- waitLongestDesc
	ch <- holdLongestDesc
}

func (c waitCollector) Collect(ch chan<- prometheus.Metric) {
	w, ok := WriteWaitsOf(c.db)
	if !ok {
		return
	}
	buckets := make(map[float64]uint64, len(w.Bounds))
	for i, b := range w.Bounds {
		buckets[b.Seconds()] = w.Within[i]
	}
	ch <- prometheus.MustNewConstHistogram(waitHistDesc, w.Writes, w.Total.Seconds(), buckets)
	ch <- prometheus.MustNewConstMetric(waitLongestDesc, prometheus.GaugeValue, w.Longest.Seconds())
	ch <- prometheus.MustNewConstMetric(holdLongestDesc, prometheus.GaugeValue, w.LongestHold.Seconds())
}
