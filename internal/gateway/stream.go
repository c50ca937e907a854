package gateway

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"modelserve/internal/operr"
)

// AskStream is Ask for an answer read as it is written: the console's
// playground shows a reply token by token, which Ask, returning the answer
// whole, cannot. The request takes the same path as a client's (routing,
// queueing, starting on demand, the metrics), so what the playground shows
// is what a client gets.
//
// each is given the data of every event of a streamed answer, in order and
// without the closing "[DONE]", or the whole body of an answer that is not
// a stream (stream false, or an embeddings route); data is good only until
// each returns, as it is read where the answer was written. An error from
// each stops the request, freeing the engine's slot, and is returned. Any
// answer but a 200 is an operator's error carrying the gateway's or the
// engine's sentence, as Ask's; so is a stream the engine broke off before
// its end.
func (g *Gateway) AskStream(ctx context.Context, route string, body []byte, each func(data []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, route, bytes.NewReader(body))
	if err != nil {
		return operr.Wrap(operr.Invalid, err, "%s is not a route of the gateway", operr.Quote(route))
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "text/event-stream")
	sw := &streamWriter{header: http.Header{}, each: each, stop: cancel}
	g.forward(sw, r, self, true, time.Now()) // its arrival: wall time, as Forward's
	if sw.err != nil {
		return sw.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if sw.status != 0 && sw.status != http.StatusOK {
		return answerError(sw.status, sw.body.Bytes())
	}
	if !sw.stream {
		return each(sw.body.Bytes())
	}
	sw.endLine(sw.line)
	if sw.err != nil {
		return sw.err
	}
	if !sw.ended {
		return operr.New(operr.Unavailable, "the replica broke off its answer before the end: retry; the fleet page says whether it is still ready")
	}
	return nil
}

// streamWriter is where forward writes an answer for AskStream: a 200's
// event stream is cut into events as it arrives and each event's data
// handed on; anything else is kept whole.
type streamWriter struct {
	header http.Header
	status int
	stream bool
	each   func([]byte) error
	// stop cancels the request, so that forward counts it as a client
	// gone rather than a replica that failed.
	stop func()
	err  error
	// ended is whether the stream said "[DONE]".
	ended bool
	line  []byte
	body  bytes.Buffer
}

// maxEventLine bounds one line of a stream: a chunk is a token or a few,
// and a final chunk with its timings a kilobyte.
const maxEventLine = 1 << 20

func (w *streamWriter) Header() http.Header { return w.header }
func (w *streamWriter) Flush()              {}

func (w *streamWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	w.stream = status == http.StatusOK && isEventStream(w.header.Get("Content-Type"))
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.stream {
		return w.body.Write(b)
	}
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.line = append(w.line, b...)
			if len(w.line) > maxEventLine {
				w.fail(operr.New(operr.Unavailable, "the replica sent a line of more than %d bytes in its stream: not an answer the console can show", maxEventLine))
				return 0, w.err
			}
			break
		}
		line := b[:i]
		if len(w.line) > 0 {
			// Only a line cut by the read is copied: most are whole in
			// one and handed on from where they were written.
			w.line = append(w.line, line...)
			line = w.line
		}
		b = b[i+1:]
		if w.endLine(line); w.err != nil {
			return 0, w.err
		}
	}
	return n, nil
}

// endLine hands on the data of a line of the stream, without its newline.
// Each of an OpenAI stream's events is one data line; comments, event
// names and blank lines carry nothing to show.
func (w *streamWriter) endLine(line []byte) {
	line = bytes.TrimRight(line, "\r")
	w.line = w.line[:0]
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0:
		return
	case string(data) == "[DONE]":
		w.ended = true
		return
	case bytes.HasPrefix(data, []byte(`{"error"`)):
		// llama.cpp reports a failure after the 200 has gone out as an
		// event of its own.
		w.fail(answerError(http.StatusInternalServerError, data))
		return
	}
	if err := w.each(data); err != nil {
		w.fail(err)
	}
}

// fail keeps err and stops the request.
func (w *streamWriter) fail(err error) {
	if w.err == nil {
		w.err = err
		w.stop()
	}
}
