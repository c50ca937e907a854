package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/r3labs/sse/v2"

	"modelserve/jobs"
)

// events streams a job's changes over server-sent events through
// r3labs/sse. Each connection gets a stream of its own, so the snapshot that
// opens it goes to that connection alone and a stalled browser holds up only
// itself. The library's replay is off: a reconnecting client (Last-Event-ID
// or not) gets the job as it stands, which is never stale, rather than a log
// of changes to apply.
type events struct {
	sse  *sse.Server
	next atomic.Uint64
	// heartbeat is how often a quiet stream gets a comment line: proxies
	// and load balancers close a connection idle for a minute or so, and
	// a job that downloads for an hour may say nothing new for minutes.
	heartbeat time.Duration

	mu    sync.Mutex
	ready map[string]chan struct{} // stream → closed once its subscriber is registered

	// rates are the job streams' last download rates (stream_job_rates.go).
	rates lastRates
	// stopping ends every stream when closed (Deps.Stopping).
	stopping <-chan struct{}
}

func newEvents(stopping <-chan struct{}) *events {
	e := &events{ready: map[string]chan struct{}{}, heartbeat: 15 * time.Second, stopping: stopping}
	e.sse = sse.NewWithCallback(e.subscribed, nil)
	e.sse.AutoReplay = false
	e.sse.AutoStream = false
	// Rendered HTML has newlines; each line must go out as its own data
	// field or the browser's EventSource drops the rest.
	e.sse.SplitData = true
	return e
}

func (e *events) subscribed(stream string, _ *sse.Subscriber) {
	e.mu.Lock()
	if c, ok := e.ready[stream]; ok {
		close(c)
		delete(e.ready, stream)
	}
	e.mu.Unlock()
}

// serve streams what changes arrive on ch, each rendered by render into an
// event's data, until the client goes away or ch closes (the job server
// dropped a subscriber that fell behind). Ending the stream makes the
// browser reconnect and start again from a fresh snapshot, which is how a
// client that fell behind catches up.
func (e *events) serve(w http.ResponseWriter, r *http.Request, ch <-chan jobs.Event, render func(jobs.Event) ([]byte, string, error)) {
	streamEach(e, w, r, ch, func(ev jobs.Event) ([]byte, string, string, error) {
		data, name, err := render(ev)
		return data, name, strconv.FormatInt(ev.Seq, 10), err
	})
}

// streamEach is serve for changes of any kind: the fleet's and the
// mirror's pages stream what they read of the fleet and the mirror, which
// are not a job's events. render gives each change's data, event name and
// id.
func streamEach[T any](e *events, w http.ResponseWriter, r *http.Request, ch <-chan T, render func(T) (data []byte, name, id string, err error)) {
	id := "c" + strconv.FormatUint(e.next.Add(1), 10)
	ready := make(chan struct{})
	e.mu.Lock()
	e.ready[id] = ready
	e.mu.Unlock()
	e.sse.CreateStream(id)
	defer func() {
		e.mu.Lock()
		delete(e.ready, id)
		e.mu.Unlock()
		// Only after the library has let go of the subscriber: removing
		// the stream first leaves its goroutine waiting forever.
		e.sse.RemoveStream(id)
	}()

	// The stream ends when this context does. The library watches the
	// request's context to let go of its subscriber, so ending it is the
	// one way to close a stream without leaving that goroutine behind.
	ctx, end := context.WithCancel(r.Context())
	defer end()
	sent := &sentWriter{ResponseWriter: w, seen: make(chan struct{}, 1)}
	var last string // the id of the last event published
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer end()
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		beat := time.NewTicker(e.heartbeat)
		defer beat.Stop()
		for {
			select {
			case <-beat.C:
				if !e.sse.TryPublish(id, &sse.Event{Comment: heartbeatComment}) {
					return
				}
			case ev, ok := <-ch:
				if !ok {
					// The library writes what was published on its own
					// goroutine, which ending the stream stops: the last
					// event is let out first, or it was lost now and then.
					sent.await(last, time.Second)
					return
				}
				data, name, evID, err := render(ev)
				if err != nil {
					return
				}
				// Never block on a stalled client: end its stream instead,
				// and it reconnects to a fresh snapshot.
				sent.expect(evID)
				if !e.sse.TryPublish(id, &sse.Event{ID: []byte(evID), Event: []byte(name),
					Data: []byte(lineEnds.Replace(string(data))), Retry: reconnectAfter}) {
					return
				}
				last = evID
			case <-e.stopping:
				// The client reconnects to the process listening next;
				// what was published goes out first.
				sent.await(last, time.Second)
				return
			case <-ctx.Done():
				return
			}
		}
	}()

	r2 := r.Clone(ctx)
	q := r2.URL.Query()
	q.Set("stream", id)
	r2.URL.RawQuery = q.Encode()
	// The library reads Last-Event-ID only to replay its own log, which is
	// off; the snapshot already brings the client up to date.
	r2.Header.Del("Last-Event-ID")
	w.Header().Set("X-Accel-Buffering", "no")
	e.sse.ServeHTTP(sent, r2)
	<-done
}

// sentWriter is a stream's writer that tells when the event it expects has
// gone out: the library writes an event's id line first, then the rest of
// it before it looks again at whether the stream has ended.
type sentWriter struct {
	http.ResponseWriter
	mu   sync.Mutex
	want string
	out  bool
	seen chan struct{}
}

func (s *sentWriter) expect(id string) {
	s.mu.Lock()
	s.want, s.out = "id: "+id+"\n", false
	s.mu.Unlock()
}

func (s *sentWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	if !s.out && s.want != "" && strings.Contains(string(b), s.want) {
		s.out = true
		select {
		case s.seen <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	return s.ResponseWriter.Write(b)
}

func (s *sentWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// await waits, at most limit, for the event id to have gone out.
func (s *sentWriter) await(id string, limit time.Duration) {
	if id == "" {
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		s.mu.Lock()
		out := s.out
		s.mu.Unlock()
		if out {
			return
		}
		select {
		case <-s.seen:
		case <-t.C:
			return
		}
	}
}

// lineEnds makes every line end a "\n". An event stream also ends a line at
// a lone "\r", which the library does not split on: a model's reply with one
// in it cut the rest of the event off.
var lineEnds = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// heartbeatComment is what a quiet stream says to stay open.
var heartbeatComment = []byte("still here")

// reconnectAfter is the retry field sent with each event, in milliseconds:
// a browser whose connection dropped asks again after half a second rather
// than its default three.
var reconnectAfter = []byte("500")
