package handlers

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelserve/jobs"
)

// TestEventsKeepWholeLines: a rendered event with carriage returns in it (a
// model's reply can hold any byte) arrives whole, one data line per line,
// and every event tells the browser to reconnect quickly.
func TestEventsKeepWholeLines(t *testing.T) {
	e := newEvents(nil)
	ch := make(chan jobs.Event, 2)
	ch <- jobs.Event{Seq: 1}
	close(ch)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.serve(w, r, ch, func(jobs.Event) ([]byte, string, error) {
			return []byte("<p>said: a\rb\r\nc</p>\n<p>end</p>"), "step", nil
		})
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after its channel closed")
	}
	got := strings.Join(lines, "\n")
	want := "id: 1\ndata: <p>said: a\ndata: b\ndata: c</p>\ndata: <p>end</p>\nevent: step\nretry: 500\n"
	if !strings.Contains(got, want) {
		t.Errorf("the stream read\n%s\nwant it to hold\n%s", got, want)
	}
}

// TestStreamsEndWhenTheServerStops: closing Deps.Stopping ends a stream
// whose changes never end, after the last event has gone out, so that the
// browser reconnects (to the process listening next) rather than holding
// the server's shutdown.
func TestStreamsEndWhenTheServerStops(t *testing.T) {
	stopping := make(chan struct{})
	e := newEvents(stopping)
	ch := make(chan jobs.Event, 1)
	ch <- jobs.Event{Seq: 7}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.serve(w, r, ch, func(ev jobs.Event) ([]byte, string, error) { return []byte("<p>as it stands</p>"), "job", nil })
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "id: 7" {
	}
	close(stopping)
	done := make(chan bool)
	go func() {
		var rest []string
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
		done <- strings.Contains(strings.Join(rest, "\n"), "retry: 500")
	}()
	select {
	case whole := <-done:
		if !whole {
			t.Error("the last event was cut when the stream ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end when the server stopped")
	}
}
