// Package notify tells an operator's webhook what modelserve did on its
// own: new weights noticed, an update promoted or rolled back, a model
// parked, a job failed. Without it, an operator learned of these only by
// looking at the console, often long after.
//
// Each notice is a JSON POST with a text field (which Slack, Mattermost,
// Discord-compatible and most chat webhooks show as it is) beside fields a
// script can read. Sending never holds up the work it reports: a notice
// goes into a bounded queue and a single sender posts it, retrying a few
// times with a growing wait; a notice that finds the queue full, or fails
// every try, is dropped and counted in /metrics.
//
// A try that times out is tried again, though the webhook may have taken
// it and only answered late: a notice lost is worse than one told twice,
// and every try of one notice carries the same X-Modelserve-Notice-Id,
// by which a webhook that keeps what it took drops a second copy. A
// notice waiting for its next try does not hold back the ones after it,
// which go out in between: a slow webhook delays a notice by at most one
// try's timeout, and notices may arrive out of order (each says when it
// happened, in at).
package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"modelserve/internal/operr"
)

// The kinds of notice.
const (
	KindUpdateNoticed = "update_noticed"
	KindPromoted      = "promoted"
	KindRolledBack    = "rolled_back"
	KindParked        = "parked"
	KindJobFailed     = "job_failed"
)

// Event is one notice, as it is posted.
type Event struct {
	Kind string `json:"event"`
	// Text is the notice in a sentence, for a chat to show.
	Text  string    `json:"text"`
	Model string    `json:"model,omitempty"`
	Job   string    `json:"job,omitempty"`
	At    time.Time `json:"at"`
}

// maxText bounds a notice's sentence: the reasons in it come from engines
// and registries.
const maxText = 2000

// UpdateNoticed is the notice of new weights on a served model's branch.
func UpdateNoticed(model, repo, from, to string) Event {
	return Event{Kind: KindUpdateNoticed, Model: model,
		Text: fmt.Sprintf("modelserve: new weights for %s: %s moved from %s to %s", model, repo, from, to)}
}

// Promoted is the notice of an update that became its model.
func Promoted(model, commit string) Event {
	return Event{Kind: KindPromoted, Model: model,
		Text: fmt.Sprintf("modelserve: %s promoted: it now serves %s", model, commit)}
}

// RolledBack is the notice of an update taken back, and why.
func RolledBack(model, commit, why string) Event {
	return Event{Kind: KindRolledBack, Model: model,
		Text: fmt.Sprintf("modelserve: the update of %s to %s was rolled back: %s", model, commit, why)}
}

// Parked is the notice of a model the fleet stopped starting, its engine
// having failed again and again.
func Parked(model, why string) Event {
	return Event{Kind: KindParked, Model: model,
		Text: fmt.Sprintf("modelserve: %s is parked, no replica starts until it is unparked: %s", model, why)}
}

// JobFailed is the notice of a job that failed, at which step and why.
func JobFailed(job, model, repo, step, why string) Event {
	what := repo
	if model != "" {
		what = model + " (" + repo + ")"
	}
	return Event{Kind: KindJobFailed, Model: model, Job: job,
		Text: fmt.Sprintf("modelserve: job %s serving %s failed at the %s step: %s", job, what, step, why)}
}

// Options tune a Notifier; the zero value is the defaults.
type Options struct {
	// Queue is how many notices may wait to be sent; 256 unless set.
	Queue int
	// Attempts is how many times a notice is tried; 5 unless set.
	Attempts int
	// Backoff is the wait after the first failed try, doubled after each
	// (up to a minute); a second unless set.
	Backoff time.Duration
	// Timeout bounds one try; 10 seconds unless set.
	Timeout time.Duration
	// Client sends the notices; a plain one unless set.
	Client *http.Client
	Log    *slog.Logger
}

// Notifier posts notices to one webhook. A nil *Notifier sends nothing,
// so whoever holds one calls Send without asking whether there is one.
type Notifier struct {
	url   string
	opts  Options
	queue chan Event
	sent  prometheus.Counter
	lost  *prometheus.CounterVec
}

// New is a Notifier posting to rawURL, its counts registered with reg
// (nil: not counted). It sends nothing until Run.
func New(rawURL string, reg prometheus.Registerer, o Options) (*Notifier, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{url: rawURL, opts: o, queue: make(chan Event, o.Queue),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_notices_sent_total", Help: "Notices the webhook (--notify-url) took.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_notice_failures_total", Help: "Notices never delivered, by reason: failed (every try refused or unanswered) or queue_full.",
		}, []string{"reason"}),
	}
	// Both reasons are there from the start, at 0, for an alert on rate.
	n.lost.WithLabelValues("failed")
	n.lost.WithLabelValues("queue_full")
	if reg != nil {
		for _, c := range []prometheus.Collector{n.sent, n.lost} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

// CheckURL refuses what is not an http or https address.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--notify-url %s is not a webhook's address: give an http:// or https:// URL", operr.Quote(rawURL))
	}
	return nil
}

// Send queues e and returns at once; with the queue full, e is dropped and
// counted.
func (n *Notifier) Send(e Event) {
	if n == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	e.Text = truncate(e.Text, maxText)
	select {
	case n.queue <- e:
	default:
		n.lost.WithLabelValues("queue_full").Inc()
		n.opts.Log.Warn("a notice was dropped: the webhook's queue is full", "event", e.Kind, "model", e.Model)
	}
}

// IDHeader names the notice on each of its tries, so that a webhook can
// tell a notice tried again from a new one.
const IDHeader = "X-Modelserve-Notice-Id"

// notice is a notice on its way: its body and id, the same on every try,
// and when its next try is due.
type notice struct {
	e     Event
	body  []byte
	id    string
	tries int
	wait  time.Duration
	due   time.Time
}

// Run sends the notices, one try at a time, until ctx ends: the queued
// ones in order, and between them those whose next try is due.
func (n *Notifier) Run(ctx context.Context) {
	var again []*notice // waiting for their next try, soonest first
	defer func() {
		if len(again) > 0 {
			n.lost.WithLabelValues("failed").Add(float64(len(again)))
		}
	}()
	for {
		// A timer left unstopped is collected (Go 1.23), and one that
		// fires after another case was taken is not read.
		var due <-chan time.Time
		if len(again) > 0 {
			due = time.After(time.Until(again[0].due))
		}
		var next *notice
		select {
		case <-ctx.Done():
			return
		case e := <-n.queue:
			next = n.newNotice(e)
			if next == nil {
				continue
			}
		case <-due:
			next, again = again[0], again[1:]
		}
		if !n.try(ctx, next) {
			continue
		}
		if len(again) >= n.opts.Queue {
			// As many waiting as may be queued: the webhook is down or
			// slow for all of them, and this one is given up.
			n.lose(next, errors.New("too many notices wait for another try"))
			continue
		}
		i, _ := slices.BinarySearchFunc(again, next.due, func(a *notice, t time.Time) int { return a.due.Compare(t) })
		again = slices.Insert(again, i, next)
	}
}

// newNotice is e on its way, with its id; nil when it cannot be sent.
func (n *Notifier) newNotice(e Event) *notice {
	body, err := json.Marshal(e)
	if err != nil {
		n.lost.WithLabelValues("failed").Inc()
		return nil
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id) // crypto/rand.Read never fails on Linux
	return &notice{e: e, body: body, id: hex.EncodeToString(id), wait: n.opts.Backoff}
}

// try posts x once, and says whether it is to be tried again (x.due says
// when): not once the webhook took it (2xx), answered what no retry mends
// (4xx but 408 and 429), or the tries ran out.
func (n *Notifier) try(ctx context.Context, x *notice) (again bool) {
	x.tries++
	err := n.post(ctx, x.body, x.id)
	if err == nil {
		n.sent.Inc()
		return false
	}
	var final finalError
	if x.tries >= n.opts.Attempts || errors.As(err, &final) || ctx.Err() != nil {
		n.lose(x, err)
		return false
	}
	x.due = time.Now().Add(x.wait)
	x.wait = min(2*x.wait, time.Minute)
	return true
}

// lose counts x as never delivered, and logs why.
func (n *Notifier) lose(x *notice, err error) {
	n.lost.WithLabelValues("failed").Inc()
	n.opts.Log.Warn("a notice was not delivered", "event", x.e.Kind, "model", x.e.Model, "tries", x.tries, "err", err)
}

// finalError is a refusal another try would get again.
type finalError struct{ error }

func (n *Notifier) post(ctx context.Context, body []byte, id string) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return finalError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IDHeader, id)
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return finalError{fmt.Errorf("the webhook refused the notice: %s", resp.Status)}
	default:
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// A rune cut in two is dropped.
	return strings.ToValidUTF8(s[:n], "") + "…"
}
