package handlers

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"modelserve/jobs"
	"modelserve/views"
)

// jobStream sends the job's live part, rendered by the same component as
// the page, first as it stands and then at each change. The event of a job
// that has ended is named "end": the page's SSE extension closes the stream
// on it instead of reconnecting, and the server ends the stream once that
// event has gone out.
func (s *Server) jobStream(w http.ResponseWriter, r *http.Request, v visit) {
	id := r.PathValue("id")
	if _, err := s.deps.Jobs.Get(r.Context(), id); err != nil {
		s.pageError(w, r, v, err)
		return
	}
	ch, cancel := s.deps.Jobs.Subscribe(id)
	defer cancel()
	ew := newEndWatcher(w)
	meter := &rateMeter{}
	s.events.serve(ew, r, untilEnded(r.Context(), ch, ew.sent()), func(ev jobs.Event) ([]byte, string, error) {
		now := time.Now()
		vm := jobView(ev.Job, now, v.csrf, meter)
		if p := mirrorProgress(&vm); p != nil && p.Rate == "—" {
			s.events.rates.fill(ev.Job.ID, p, now) // the stream's first readings
		} else {
			s.events.rates.put(ev.Job.ID, p, now)
		}
		s.withCallIt(r, ev.Job, &vm)
		s.withOffers(r, ev.Job, &vm)
		data, err := renderString(r.Context(), views.JobLive(vm))
		if ev.Job.Ended() {
			return data, "end", err
		}
		return data, "job", err
	})
}

// untilEnded passes on a job's events until the one that says it ended,
// then closes once that event has been written to the browser (sent), so
// that the stream ends with the job rather than stay open for nothing.
func untilEnded(ctx context.Context, in <-chan jobs.Event, sent <-chan struct{}) <-chan jobs.Event {
	out := make(chan jobs.Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				if ev.Job.Ended() {
					// Closing out ends the stream; before the last event is
					// out, it could be lost on the way.
					select {
					case <-sent:
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
					}
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// endWatcher is the stream's ResponseWriter, which notices when the "end"
// event has been written and flushed.
type endWatcher struct {
	http.ResponseWriter
	saw  bool
	once sync.Once
	done chan struct{}
}

func newEndWatcher(w http.ResponseWriter) *endWatcher {
	return &endWatcher{ResponseWriter: w, done: make(chan struct{})}
}

// sent is closed once the end event has reached the connection.
func (e *endWatcher) sent() <-chan struct{} { return e.done }

func (e *endWatcher) Write(b []byte) (int, error) {
	// The library writes each field of an event with a write of its own.
	if bytes.Equal(b, []byte("event: end\n")) {
		e.saw = true
	}
	return e.ResponseWriter.Write(b)
}

func (e *endWatcher) Flush() {
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if e.saw {
		e.once.Do(func() { close(e.done) })
	}
}

func (e *endWatcher) Unwrap() http.ResponseWriter { return e.ResponseWriter }
