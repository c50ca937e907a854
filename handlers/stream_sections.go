package handlers

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/a-h/templ"
)

// section is one part of a page, swapped by the event of its name.
type section struct {
	name string
	data []byte
}

// part is a section before it is rendered.
type part struct {
	name string
	c    templ.Component
}

// pollSections is a live page's stream: it looks every every, renders the
// parts look gives, and sends each part whose rendering differs from what
// was last sent under its name, until the client goes or look says stop
// (the browser reconnects and starts again). The first look sends every
// part that is not empty; a quiet page then sends nothing but the
// heartbeat.
//
// The fleet and mirror pages each had this loop, ticker, comparison and
// all; a page now says only what to look at.
func (s *Server) pollSections(w http.ResponseWriter, r *http.Request, every time.Duration, look func(ctx context.Context, now time.Time) ([]part, bool)) {
	ctx := r.Context()
	out := make(chan section)
	go func() {
		defer close(out)
		sent := map[string][]byte{}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			parts, ok := look(ctx, time.Now())
			if !ok {
				return
			}
			for _, p := range parts {
				data, err := renderString(ctx, p.c)
				if err != nil {
					return
				}
				// Never an empty event either: empty data closes the
				// client's stream.
				if bytes.Equal(sent[p.name], data) {
					continue
				}
				select {
				case out <- section{p.name, data}:
					sent[p.name] = data
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	s.streamSections(w, r, out)
}

// streamSections streams each section sent on out as an event named
// after it, numbered in order, until the client goes. The producer ends
// with the request's context; what it was about to send is drained so it
// never waits on a reader that has gone.
func (s *Server) streamSections(w http.ResponseWriter, r *http.Request, out <-chan section) {
	var n uint64
	streamEach(s.events, w, r, out, func(sec section) ([]byte, string, string, error) {
		n++
		return sec.data, sec.name, strconv.FormatUint(n, 10), nil
	})
	for range out {
	}
}
