package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"modelserve/internal/notify"
)

// receiver is a webhook that answers each POST with the next status of
// its list (the last one after), and keeps what it was sent.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []map[string]any
	tries    int
	srv      *httptest.Server
	arrived  chan struct{}
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses, arrived: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		st := r.statuses[min(r.tries, len(r.statuses)-1)]
		r.tries++
		if st < 300 {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil || req.Header.Get("Content-Type") != "application/json" {
				t.Errorf("the notice is not JSON: %s (%s)", b, req.Header.Get("Content-Type"))
			}
			r.got = append(r.got, m)
		}
		r.mu.Unlock()
		w.WriteHeader(st)
		r.arrived <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) waitTries(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("the webhook got %d tries, want %d", r.tries, n)
		}
	}
}

func start(t *testing.T, url string, o notify.Options) (*notify.Notifier, *prometheus.Registry, func()) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := notify.New(url, reg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return n, reg, stop
}

func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if reason == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, reason)
	return 0
}

// waitCount waits for a counter to reach want: it is counted just after
// the webhook answers.
func waitCount(t *testing.T, reg *prometheus.Registry, name, reason string, want float64) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); counter(t, reg, name, reason) < want && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}

// TestNoticeRetriedUntilTaken: a webhook that fails twice (503) gets the
// notice on the third try, once, with a text a chat shows.
func TestNoticeRetriedUntilTaken(t *testing.T) {
	r := newReceiver(t, 503, 503, 200)
	n, reg, _ := start(t, r.srv.URL, notify.Options{Backoff: time.Millisecond})
	n.Send(notify.JobFailed("serve-1", "tiny", "acme/Tiny-GGUF", "check", "it is not a GGUF model"))
	r.waitTries(t, 3)
	waitCount(t, reg, "modelserve_notices_sent_total", "", 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 1 {
		t.Fatalf("the webhook took %d notices, want 1", len(r.got))
	}
	got := r.got[0]
	want := "modelserve: job serve-1 serving tiny (acme/Tiny-GGUF) failed at the check step: it is not a GGUF model"
	if got["text"] != want || got["event"] != "job_failed" || got["model"] != "tiny" || got["job"] != "serve-1" || got["at"] == "" {
		t.Errorf("the notice: %v", got)
	}
	if s := counter(t, reg, "modelserve_notices_sent_total", ""); s != 1 {
		t.Errorf("sent %v, want 1", s)
	}
}

// TestNoticeFailuresAreCounted: tries are bounded, a refusal no retry
// mends (400) is tried once, and a full queue drops the notice; each lost
// notice is counted.
func TestNoticeFailuresAreCounted(t *testing.T) {
	t.Run("every try fails", func(t *testing.T) {
		r := newReceiver(t, 500)
		n, reg, stop := start(t, r.srv.URL, notify.Options{Backoff: time.Millisecond, Attempts: 3})
		n.Send(notify.Parked("tiny", "its engine exited 3 times"))
		r.waitTries(t, 3)
		waitCount(t, reg, "modelserve_notice_failures_total", "failed", 1)
		stop()
		if r.tries != 3 {
			t.Errorf("%d tries, want 3", r.tries)
		}
		if f := counter(t, reg, "modelserve_notice_failures_total", "failed"); f != 1 {
			t.Errorf("failures %v, want 1", f)
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := newReceiver(t, 400)
		n, reg, stop := start(t, r.srv.URL, notify.Options{Backoff: time.Millisecond})
		n.Send(notify.Promoted("tiny", "abc1234"))
		r.waitTries(t, 1)
		waitCount(t, reg, "modelserve_notice_failures_total", "failed", 1)
		stop()
		if r.tries != 1 || counter(t, reg, "modelserve_notice_failures_total", "failed") != 1 {
			t.Errorf("%d tries (want 1), failures %v", r.tries, counter(t, reg, "modelserve_notice_failures_total", "failed"))
		}
	})
	t.Run("queue full", func(t *testing.T) {
		// A webhook that does not answer holds the sender; Send still
		// returns at once, and what does not fit is dropped.
		hold := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hold }))
		defer srv.Close()
		defer close(hold)
		n, reg, _ := start(t, srv.URL, notify.Options{Queue: 2, Timeout: time.Minute})
		sent := make(chan struct{})
		go func() {
			for range 10 {
				n.Send(notify.UpdateNoticed("tiny", "acme/Tiny-GGUF", "aaa", "bbb"))
			}
			close(sent)
		}()
		select {
		case <-sent:
		case <-time.After(10 * time.Second):
			t.Fatal("Send waited for the webhook")
		}
		// One in the sender's hands (or about to be), two queued.
		if f := counter(t, reg, "modelserve_notice_failures_total", "queue_full"); f < 7 || f > 8 {
			t.Errorf("dropped %v of 10 with a queue of 2, want 7 or 8", f)
		}
	})
	t.Run("no notifier", func(t *testing.T) {
		var n *notify.Notifier
		n.Send(notify.Promoted("tiny", "abc")) // no panic, nothing sent
	})
}

func TestNoticeURLIsChecked(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "hooks.example.com/x", "http://"} {
		if _, err := notify.New(u, nil, notify.Options{}); err == nil || !strings.Contains(err.Error(), "--notify-url") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

// TestASlowWebhookHoldsBackOneTryOnly: a webhook slower than a try's
// timeout for one notice (it answers only when the try gives up) sees
// each of its tries under the same X-Modelserve-Notice-Id, and the notice
// sent after it arrives as soon as the first try has timed out, before the
// slow one is tried again, under an id of its own.
func TestASlowWebhookHoldsBackOneTryOnly(t *testing.T) {
	type arrival struct{ kind, id string }
	arrivals := make(chan arrival, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e struct{ Event string }
		_ = json.NewDecoder(r.Body).Decode(&e)
		arrivals <- arrival{e.Event, r.Header.Get(notify.IDHeader)}
		if e.Event == notify.KindParked {
			<-r.Context().Done() // slower than the try's timeout
			return
		}
	}))
	defer srv.Close()
	const timeout, backoff = 200 * time.Millisecond, time.Second
	n, reg, stop := start(t, srv.URL, notify.Options{Timeout: timeout, Backoff: backoff, Attempts: 3})
	begun := time.Now()
	n.Send(notify.Parked("slow", "its engine exited 3 times"))
	n.Send(notify.Promoted("fast", "abc1234"))

	next := func() arrival {
		t.Helper()
		select {
		case a := <-arrivals:
			return a
		case <-time.After(30 * time.Second):
			t.Fatal("the webhook got no more tries")
			return arrival{}
		}
	}
	slow := next()
	if slow.kind != notify.KindParked || len(slow.id) < 16 {
		t.Fatalf("first arrival %+v, want the parked notice with an id", slow)
	}
	fast := next()
	took := time.Since(begun)
	if fast.kind != notify.KindPromoted {
		t.Fatalf("after the slow notice's first try came %+v, want the promoted notice: the slow one's retries held it back", fast)
	}
	if fast.id == "" || fast.id == slow.id {
		t.Errorf("the second notice's id %q, the first's %q: want one of its own", fast.id, slow.id)
	}
	if took > timeout+backoff {
		t.Errorf("the second notice arrived %v after it was sent, past the slow one's timeout (%v) and backoff", took, timeout)
	}
	for range 2 {
		if again := next(); again != slow {
			t.Errorf("the slow notice tried again as %+v, want %+v: the same id on every try", again, slow)
		}
	}
	waitCount(t, reg, "modelserve_notice_failures_total", "failed", 1)
	stop()
	if s := counter(t, reg, "modelserve_notices_sent_total", ""); s != 1 {
		t.Errorf("sent %v, want 1 (the fast notice)", s)
	}
	t.Logf("the notice after the slow one arrived %v after it was sent (try timeout %v)", took, timeout)
}
