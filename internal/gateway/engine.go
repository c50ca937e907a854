package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// engineClient carries requests to the engines over HTTP/1.1 connections
// it keeps. The hop has one shape, a POST of a JSON body to an engine
// listening on plain HTTP, which a request line and a few headers say:
// net/http's Transport spent more than half of the gateway's own
// allocations a request on it (two goroutines' hand-offs, its
// cancellation contexts, header copies for redirects never followed).
// The answer is read with http.ReadResponse, so its framing (length,
// chunks, a close) is read as the Transport reads it.
type engineClient struct {
	// dial opens a connection to an engine ("host:port").
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	idle map[string][]*engineConn // by host:port, the last put back last
	// closed is set by closeIdle, the gateway's Close: a connection put
	// back since (one opened ahead, warm) is closed, not kept.
	closed bool
	// swept is when the kept connections of every engine were last
	// looked over (sweepLocked).
	swept time.Time
}

// Kept connections: as many per engine as requests it may have in flight
// (with Go's default of two, every burst beyond two opened and closed
// connections), for as long as the Transport keeps them.
const (
	maxIdlePerEngine = 256
	idleFor          = 90 * time.Second
	// sweepEvery is how often, at most, keep looks over every engine's
	// kept connections for those idle longer than idleFor.
	sweepEvery = 10 * time.Second
)

func newEngineClient() *engineClient {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &engineClient{dial: d.DialContext, idle: map[string][]*engineConn{}}
}

// engineConn is a connection to an engine, with its buffers.
type engineConn struct {
	net.Conn
	host  string
	br    *bufio.Reader
	bw    *bufio.Writer
	put   time.Time // when it was last put back idle
	probe *idleProbe
}

// engineRequest is a request to an engine: to host ("host:port"), for
// target (path and query, escaped), with the engine's key, the client's
// Accept (may be empty), header (the trace context; may be nil) and the
// JSON body. wrote, when set, is called once the request is written whole,
// or once it is known it will not be.
type engineRequest struct {
	host, target, key, accept string
	header                    http.Header
	body                      []byte
	wrote                     func()
}

// errNotHTTP is do's error for an engine whose endpoint is not plain HTTP.
var errNotHTTP = errors.New("the engine's endpoint is not an http:// address")

// hostOf is the "host:port" of an engine's endpoint ("http://host:port").
func hostOf(endpoint string) (string, bool) {
	host, ok := strings.CutPrefix(endpoint, "http://")
	return strings.TrimRight(host, "/"), ok && host != ""
}

// do sends req and reads the answer's status and headers. Its body is
// read from the connection as the caller reads it; closing it before its
// end closes the connection, reading it to its end keeps the connection
// for the next request when the engine does. When ctx ends, the
// connection is closed: a read or write then fails at once. A kept
// connection the engine closed while it was idle (llama-server closes a
// kept connection after a few requests) fails before any byte of the
// answer: the request is sent once more on a new one, as the engine read
// none of it.
func (ec *engineClient) do(ctx context.Context, req *engineRequest) (*http.Response, error) {
	wrote := req.wrote
	defer func() {
		if wrote != nil {
			wrote()
		}
	}()
	for {
		c, kept, err := ec.conn(ctx, req.host)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		err = c.write(req)
		if err == nil && wrote != nil {
			wrote()
			wrote = nil
		}
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(c.br, nil)
		}
		if err != nil {
			stop()
			c.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if kept && closedIdle(err) {
				continue
			}
			return nil, err
		}
		resp.Body = &engineBody{ReadCloser: resp.Body, ec: ec, c: c, stop: stop, keep: !resp.Close}
		return resp, nil
	}
}

// closedIdle is whether err is how a kept connection the engine closed
// fails: the end of the stream, or a reset, before any byte came.
func closedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// conn is a kept connection to host, or a new one (kept false).
func (ec *engineClient) conn(ctx context.Context, host string) (*engineConn, bool, error) {
	// Wall time: the engine closes a connection idle too long by its own
	// (Options.Clock).
	now := time.Now()
	ec.mu.Lock()
	for cs := ec.idle[host]; len(cs) > 0; cs = ec.idle[host] {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		ec.idle[host] = cs[:len(cs)-1]
		if now.Sub(c.put) >= idleFor {
			c.Close()
			continue
		}
		ec.mu.Unlock()
		if !c.probe.closedWhileIdle() {
			return c, true, nil
		}
		c.Close()
		ec.mu.Lock()
	}
	ec.mu.Unlock()
	nc, err := ec.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return ec.wrap(nc, host), false, nil
}

// keep puts c back among host's idle connections.
func (ec *engineClient) keep(c *engineConn) {
	c.put = time.Now() // wall time, as conn's
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if c.put.Sub(ec.swept) >= sweepEvery {
		ec.sweepLocked(c.put)
	}
	if cs := ec.idle[c.host]; len(cs) < maxIdlePerEngine && !ec.closed {
		ec.idle[c.host] = append(cs, c)
		return
	}
	c.Close()
}

// sweepLocked closes the connections kept longer than idleFor, of every
// engine, and forgets the engines none is kept for. conn looks only at
// the engine it is asked for: an engine stopped (a replica retired, a
// model swapped out, each started again on a port of its own) is never
// asked for again, and the connections kept for it stayed open, one or
// more with each swap, for as long as modelserve ran. ec.mu is held.
func (ec *engineClient) sweepLocked(now time.Time) {
	ec.swept = now
	for host, cs := range ec.idle {
		fresh := cs[:0]
		for _, c := range cs {
			if now.Sub(c.put) >= idleFor {
				c.Close()
				continue
			}
			fresh = append(fresh, c)
		}
		clear(cs[len(fresh):])
		if len(fresh) == 0 {
			delete(ec.idle, host)
		} else {
			ec.idle[host] = fresh
		}
	}
}

// closeIdle closes the kept connections, and those put back from now on.
func (ec *engineClient) closeIdle() {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	ec.closed = true
	ec.dropIdleLocked()
}

// forget closes the connections kept to the engine at endpoint, which is
// about to be stopped: llama-server, stopping, waits for the client to
// close each connection open to it, and a kept one is read by nobody
// until a request takes it.
func (ec *engineClient) forget(endpoint string) {
	host, ok := hostOf(endpoint)
	if !ok {
		return
	}
	ec.mu.Lock()
	cs := ec.idle[host]
	delete(ec.idle, host)
	ec.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// dropIdleLocked closes the connections kept now. ec.mu is held.
func (ec *engineClient) dropIdleLocked() {
	for host, cs := range ec.idle {
		for _, c := range cs {
			c.Close()
		}
		delete(ec.idle, host)
	}
}

// write writes req to c: the request line, the headers, the body.
func (c *engineConn) write(req *engineRequest) error {
	w := c.bw
	w.WriteString("POST ")
	w.WriteString(req.target)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(req.host)
	w.WriteString("\r\nContent-Type: application/json\r\nContent-Length: ")
	var n [20]byte
	w.Write(strconv.AppendInt(n[:0], int64(len(req.body)), 10))
	w.WriteString("\r\nAuthorization: Bearer ")
	w.WriteString(req.key)
	if req.accept != "" {
		w.WriteString("\r\nAccept: ")
		w.WriteString(req.accept)
	}
	for k, vs := range req.header {
		for _, v := range vs {
			w.WriteString("\r\n")
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
		}
	}
	w.WriteString("\r\n\r\n")
	if len(req.body) > w.Available() {
		// A long prompt goes out as it is, not copied into the buffer
		// piece by piece.
		if err := w.Flush(); err != nil {
			return err
		}
		_, err := c.Conn.Write(req.body)
		return err
	}
	w.Write(req.body)
	return w.Flush()
}

// headerValue is whether v may be sent as a header's value: no control
// character but tab, so a client's Accept cannot add a header or a line.
func headerValue(v string) bool {
	for i := range len(v) {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// engineBody is an answer's body, read from its connection: read to its
// end, the connection is kept for the next request (unless the engine
// said it closes it); closed before, it is closed.
type engineBody struct {
	io.ReadCloser
	ec   *engineClient
	c    *engineConn
	stop func() bool // stops closing c when the request's context ends
	keep bool
	done bool
}

func (b *engineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.finish(true)
	}
	return n, err
}

func (b *engineBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish lets go of the connection: kept when the whole answer was read
// and nothing more came, the engine keeps it, and the request's end has
// not closed it.
func (b *engineBody) finish(whole bool) {
	b.done = true
	live := b.stop()
	if live && whole && b.keep && b.c.br.Buffered() == 0 {
		b.ec.keep(b.c)
		return
	}
	b.c.Close()
	if live && whole && !b.keep {
		// The engine closes the connection after the answer
		// (llama-server does after every streamed one): a new one is
		// opened now, beside the client reading the answer's end, so the
		// next request finds it open rather than dial in its own time.
		go b.ec.warm(b.c.host)
	}
}

// warmWithin bounds the dial of a connection opened ahead of a request.
const warmWithin = 2 * time.Second

// warm opens a connection to host and keeps it for the next request: one
// for each the engine closed after a whole answer, so the connections
// open to an engine stay as many as its requests at once. A dial that
// fails costs nothing: the next request dials itself, and says why.
func (ec *engineClient) warm(host string) {
	ctx, cancel := context.WithTimeout(context.Background(), warmWithin)
	defer cancel()
	nc, err := ec.dial(ctx, "tcp", host)
	if err != nil {
		return
	}
	ec.keep(ec.wrap(nc, host))
}

// wrap is nc, a new connection to host, with its buffers.
func (ec *engineClient) wrap(nc net.Conn, host string) *engineConn {
	return &engineConn{Conn: nc, host: host, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10),
		probe: newIdleProbe(nc)}
}
