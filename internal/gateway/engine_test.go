package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"modelserve/catalog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// closingEngine answers one request on each connection, as if it kept
// the connection, and closes it a moment later: what llama-server does
// to a kept connection after a few requests. It counts the connections,
// and those it closed.
func closingEngine(t *testing.T) (endpoint string, conns, closed *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns, closed = new(atomic.Int64), new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer closed.Add(1)
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				const body = `{"choices":[],"usage":{"completion_tokens":1}}`
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				time.Sleep(20 * time.Millisecond)
			}()
		}
	}()
	return "http://" + l.Addr().String(), conns, closed
}

// TestAKeptConnectionTheEngineClosedIsNotAFailure: a request sent on a
// kept connection the engine has closed since is sent again on a new
// one, and answered: the engine read none of it. It was a 502 for the
// client, and the replica avoided for a while.
func TestAKeptConnectionTheEngineClosedIsNotAFailure(t *testing.T) {
	endpoint, conns, closed := closingEngine(t)
	f := &stubFleet{ready: []fleet.Replica{{ID: "m-1", Model: "m", Endpoint: endpoint, Load: &fleet.Load{Size: catalog.Size{Slots: 1}}}}}
	g, err := New(Options{Catalog: f, Fleet: f, Tokens: anyToken{}, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 3 {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer k")
		rec := httptest.NewRecorder()
		g.Forward(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "completion_tokens") {
			t.Fatalf("request %d answered %d %q, want 200 and the engine's answer", i+1, rec.Code, rec.Body)
		}
		testkit.WaitFor(t, 5*time.Second, "the engine closing the kept connection", func() (bool, string) {
			n := closed.Load()
			return n == int64(i+1), fmt.Sprint(n, " closed")
		})
	}
	var failed dto.Metric
	if err := g.metrics.requests.WithLabelValues("m", "m-1", "502").Write(&failed); err != nil {
		t.Fatal(err)
	}
	if n := failed.GetCounter().GetValue(); n != 0 {
		t.Errorf("the replica was counted as failing %v requests, want none", n)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("the engine saw %d connections for 3 requests, want 3: one each", n)
	}
}

// TestARequestIsToldWrittenBeforeItsAnswer: the engine client says a
// request is written as soon as it is, not when its answer comes, so the
// next request in turn goes on while the engine works on this one.
func TestARequestIsToldWrittenBeforeItsAnswer(t *testing.T) {
	answer := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-answer
		io.WriteString(w, "{}")
	}))
	defer engine.Close()
	host, _ := hostOf(engine.URL)
	ec := newEngineClient()
	defer ec.closeIdle()
	written := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		resp, err := ec.do(context.Background(), &engineRequest{host: host, target: "/v1/chat/completions", key: "k",
			body: []byte(`{"model":"m"}`), wrote: func() { close(written) }})
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-written:
	case err := <-done:
		t.Fatalf("the request ended (%v) before it was told written", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the request was not told written while the engine had not answered")
	}
	close(answer)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAConnectionTheEngineClosesAfterItsAnswerIsReplacedAhead: an engine
// that closes the connection after each answer (llama-server after every
// streamed one) has a new connection opened as the answer ends, so the
// next request is written at once on it rather than dial in its own time.
func TestAConnectionTheEngineClosesAfterItsAnswerIsReplacedAhead(t *testing.T) {
	from := make(chan string, 2) // the address each request came from
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		from <- r.RemoteAddr
		w.Header().Set("Connection", "close")
		io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
	}))
	defer engine.Close()
	host, _ := hostOf(engine.URL)
	ec := newEngineClient()
	defer ec.closeIdle()
	ask := func() {
		t.Helper()
		resp, err := ec.do(context.Background(), &engineRequest{host: host, target: "/v1/chat/completions", key: "k", body: []byte(`{"model":"m"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ask()
	first := <-from
	// The connection opened ahead, once it is kept.
	var ahead string
	testkit.WaitFor(t, 5*time.Second, "a connection opened ahead after an answer the engine closed its connection after", func() (bool, string) {
		ec.mu.Lock()
		defer ec.mu.Unlock()
		cs := ec.idle[host]
		if len(cs) == 1 {
			ahead = cs[0].LocalAddr().String()
		}
		return ahead != "", fmt.Sprint(len(cs), " kept")
	})
	if ahead == first {
		t.Fatalf("the connection kept is the one the engine closed (%s)", first)
	}
	ask()
	if second := <-from; second != ahead {
		t.Errorf("the second request came from %s, want %s, the connection opened ahead for it", second, ahead)
	}
}

// TestConnectionsKeptForAnEngineGoneAreClosed: the connections kept for
// an engine nobody asks for any more (its replica retired; the next
// starts on another port) are closed once idle for idleFor, when a
// connection to any engine is next put back, and the engine forgotten.
func TestConnectionsKeptForAnEngineGoneAreClosed(t *testing.T) {
	ec := newEngineClient()
	defer ec.closeIdle()
	ours, theirs := net.Pipe()
	defer theirs.Close()
	ec.idle["127.0.0.1:1"] = []*engineConn{{Conn: ours, host: "127.0.0.1:1", put: time.Now().Add(-idleFor)}}
	other, otherEnd := net.Pipe()
	defer otherEnd.Close()
	ec.keep(&engineConn{Conn: other, host: "127.0.0.1:2"})

	ec.mu.Lock()
	_, kept := ec.idle["127.0.0.1:1"]
	n := len(ec.idle["127.0.0.1:2"])
	ec.mu.Unlock()
	if kept {
		t.Error("the engine gone is still among those connections are kept for")
	}
	if n != 1 {
		t.Errorf("%d connections kept for the engine in use, want the one put back", n)
	}
	theirs.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := theirs.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection kept for the engine gone reads %v at its other end, want it closed (EOF)", err)
	}
}
