package hubtest

import (
	"crypto/hmac"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// faults are what is wrong with one file's downloads (or, for the path "",
// with a repository's Hub routes) until cleared.
type faults struct {
	flipAt     int64 // offset of the byte served flipped; -1 for none
	cutAfter   int64 // body bytes written before the connection is cut
	cuts       int   // responses still to cut
	failStatus int
	fails      int // answers still to fail with failStatus
	// failSaying, when set, is the message of an injected failure, made
	// from the request it answers.
	failSaying  func(*http.Request) string
	bps         int64
	ignoreRange bool
	stallAfter  int64 // body bytes written before the response stops sending
	stalls      int   // responses still to stall
}

// edit changes a file's faults under the lock, creating them if needed.
func (s *Server) edit(id, p string, fn func(*faults)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fileKey{id, p}
	f := s.faults[k]
	if f == nil {
		f = &faults{flipAt: -1, stallAfter: -1}
		s.faults[k] = f
	}
	fn(f)
}

// FlipByte makes the CDN serve the file with the byte at off inverted, so
// what arrives no longer matches the published sha256. A negative off stops it.
func (s *Server) FlipByte(id, path string, off int64) {
	s.edit(id, path, func(f *faults) { f.flipAt = max(off, -1) })
}

// CutNext makes the next k CDN responses with a body for the file close the
// connection after writing after bytes of it.
func (s *Server) CutNext(id, path string, after int64, k int) {
	s.edit(id, path, func(f *faults) { f.cutAfter, f.cuts = after, k })
}

// FailNext makes the next k requests for the file's content at the CDN
// answer status instead (a 429 carries Retry-After, see SetRetryAfter). With
// path "" it applies instead to every Hub route of the repository: model
// info, tree and resolve.
func (s *Server) FailNext(id, path string, status, k int) {
	s.edit(id, path, func(f *faults) { f.failStatus, f.fails = status, k })
}

// Trickle makes the CDN send the file at bytesPerSecond; 0 stops it.
func (s *Server) Trickle(id, path string, bytesPerSecond int64) {
	s.edit(id, path, func(f *faults) { f.bps = max(bytesPerSecond, 0) })
}

// StallNext makes the next k CDN responses with a body for the file stop
// sending after after bytes of it, with the connection kept open, until the
// client gives up on it.
func (s *Server) StallNext(id, path string, after int64, k int) {
	s.edit(id, path, func(f *faults) { f.stallAfter, f.stalls = after, k })
}

// IgnoreRange makes the CDN answer a Range request with 200 and the whole
// file, which a client resuming a download must notice.
func (s *Server) IgnoreRange(id, path string, on bool) {
	s.edit(id, path, func(f *faults) { f.ignoreRange = on })
}

// ClearFaults removes every fault of the file (or of the repository's Hub
// routes, for path "").
func (s *Server) ClearFaults(id, path string) {
	s.mu.Lock()
	delete(s.faults, fileKey{id, path})
	s.mu.Unlock()
}

// FailNextSaying is FailNext at the Hub's routes of a repository with a
// message of the test's making, from the request it answers, in the
// answer's X-Error-Message and body: a registry behind a proxy, or a
// broken one, says what it likes, as long as it likes, and may echo what
// it was sent, the Authorization header included.
func (s *Server) FailNextSaying(id string, status, k int, say func(*http.Request) string) {
	s.edit(id, "", func(f *faults) { f.failStatus, f.fails, f.failSaying = status, k, say })
}

// takeFailure uses up one injected failure, returning its status (0 for
// none), the Retry-After to send and what to say, when a test made it.
func (s *Server) takeFailure(k fileKey) (status, retryAfter int, say func(*http.Request) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[k]
	if f == nil || f.fails <= 0 {
		return 0, 0, nil
	}
	f.fails--
	return f.failStatus, s.retryAfter, f.failSaying
}

// takeBodyFaults copies the faults for one response with a body, using up a
// cut.
func (s *Server) takeBodyFaults(k fileKey) faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[k]
	if f == nil {
		return faults{flipAt: -1, cutAfter: -1, stallAfter: -1}
	}
	out := *f
	if f.cuts > 0 {
		f.cuts--
	} else {
		out.cutAfter = -1
	}
	if f.stalls > 0 {
		f.stalls--
	} else {
		out.stallAfter = -1
	}
	return out
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	token, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/repos/"), "/")
	q := r.URL.Query()
	expires, sig := q.Get("Expires"), q.Get("Signature")
	if !strings.HasPrefix(r.URL.Path, "/repos/") || !hmac.Equal([]byte(sig), []byte(s.sign(token, expires))) {
		cdnError(w, http.StatusForbidden, "AccessDenied", "the signature does not match")
		return
	}
	if exp, err := strconv.ParseInt(expires, 10, 64); err != nil || time.Now().Unix() > exp {
		cdnError(w, http.StatusForbidden, "AccessDenied", "Request has expired")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		cdnError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "")
		return
	}
	s.mu.Lock()
	ref, ok := s.blobs[token]
	if ok && r.Method == http.MethodGet {
		s.gets[ref.key]++
	}
	s.mu.Unlock()
	if !ok {
		cdnError(w, http.StatusNotFound, "NoSuchKey", "")
		return
	}
	if status, retryAfter, _ := s.takeFailure(ref.key); status != 0 {
		if status == http.StatusTooManyRequests && retryAfter >= 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		}
		cdnError(w, status, http.StatusText(status), "")
		return
	}
	f := ref.file
	h := w.Header()
	// The CDN's ETag is its own, not the sha256: a client must not take it
	// for the checksum.
	etag := md5.Sum([]byte(token))
	h.Set("ETag", `"`+hex.EncodeToString(etag[:])+`"`)
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Last-Modified", lastModified.Format(http.TimeFormat))
	h.Set("Content-Disposition", fmt.Sprintf("inline; filename=%q", path.Base(ref.key.path)))

	fl := faults{flipAt: -1, cutAfter: -1, stallAfter: -1}
	if r.Method == http.MethodGet {
		fl = s.takeBodyFaults(ref.key)
	} else {
		s.mu.Lock()
		if cur := s.faults[ref.key]; cur != nil {
			fl.ignoreRange = cur.ignoreRange
		}
		s.mu.Unlock()
	}
	start, end, status := int64(0), f.size-1, http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !fl.ignoreRange {
		a, b, satisfiable, partial := parseRange(rg, f.size)
		switch {
		case !satisfiable:
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", f.size))
			cdnError(w, http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "")
			return
		case partial:
			start, end, status = a, b, http.StatusPartialContent
			h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, f.size))
		}
	}
	h.Set("Content-Length", strconv.FormatInt(end-start+1, 10))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	s.stream(w, r, ref.key, f, start, end+1, fl)
}

func cdnError(w http.ResponseWriter, status int, code, msg string) {
	body := "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code + "</Code><Message>" + msg + "</Message></Error>"
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write([]byte(body))
}

// parseRange reads a single "bytes=" range. A header it cannot read is
// ignored (the whole file is sent), as RFC 9110 says; several ranges are
// answered with the whole file too, since real CDNs differ there.
func parseRange(h string, size int64) (start, end int64, satisfiable, partial bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, true, false
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, true, false
	}
	if first == "" { // the last n bytes
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, true, false
		}
		if n == 0 || size == 0 {
			return 0, 0, false, false
		}
		return max(size-n, 0), size - 1, true, true
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, 0, true, false
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, 0, true, false
		}
		b = min(b, size-1)
	}
	if a >= size {
		return 0, 0, false, false
	}
	return a, b, true, true
}

// stream writes bytes [start, end) of f, applying the faults and the CDN's
// manners (manners.go).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, k fileKey, f *blobFile, start, end int64, fl faults) {
	s.manners.enter()
	defer s.manners.leave()
	rate := s.manners.rate(fl.bps)
	chunk := pace(rate)
	buf := make([]byte, 1<<20)
	due := time.Now()
	var sent int64
	for off := start; off < end; {
		n := min(chunk, end-off)
		if fl.cutAfter >= 0 {
			n = min(n, fl.cutAfter-sent)
		}
		if fl.stallAfter >= 0 {
			n = min(n, fl.stallAfter-sent)
		}
		if n > 0 {
			p := buf[:n]
			f.read(off, p)
			if fl.flipAt >= off && fl.flipAt < off+n {
				p[fl.flipAt-off] ^= 0xFF
			}
			m, err := w.Write(p)
			s.count(k, int64(m))
			if err != nil {
				return
			}
			off += n
			sent += n
		}
		if fl.cutAfter >= 0 && sent >= fl.cutAfter {
			cut(w)
			return
		}
		if fl.stallAfter >= 0 && sent >= fl.stallAfter {
			// The connection stays open and sends nothing more, as a
			// stuck CDN edge does, until the client gives up on it.
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-s.done:
			}
			return
		}
		if rate > 0 {
			// A paced body must reach the client as it goes, not when
			// the server's buffer happens to fill.
			http.NewResponseController(w).Flush()
			// Each chunk is due after the one before at the rate in force
			// now (a throttle comes and goes), so timer slack does not add
			// up.
			due = due.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
			t := time.NewTimer(time.Until(due))
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-s.done:
				t.Stop()
				return
			}
			rate = s.manners.rate(fl.bps)
			chunk = pace(rate)
			if now := time.Now(); due.Before(now.Add(-time.Second)) {
				due = now // a throttle lifted: no burst to make up for it
			}
		}
	}
}

// pace is how many bytes are written at once at a rate: a twentieth of a
// second's worth (at most 1 MiB), so that the pace is smooth without a timer
// for every few kilobytes; unpaced, 32 KiB.
func pace(rate int64) int64 {
	if rate <= 0 {
		return 32 << 10
	}
	return max(min(rate/20, 1<<20), 1)
}

// cut sends what has been written and closes the connection under the
// response, as a network failure half way through a download would.
func cut(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	rc.Flush()
	conn, buf, err := rc.Hijack()
	if err != nil {
		panic(fmt.Sprintf("hubtest: cannot cut the connection: %v", err))
	}
	buf.Flush()
	conn.Close()
}
