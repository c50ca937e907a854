// Package accesslog writes a line per HTTP request: method, path, status,
// duration, and who asked (the console user or the API token's name).
//
// Who asked is known deep inside the handlers (the session is read by the
// console, the token checked by the API and by the gateway), and the line
// is written outside them, once the answer is sent. The middleware puts a
// holder in the request's context; whoever learns the name sets it there.
// Nothing is kept between requests, and nothing is global.
package accesslog

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"modelserve/internal/redact"
	"modelserve/internal/words"
)

type holderKey struct{}

// holder is who a request came from, filled in while it is handled, and
// when it came.
type holder struct {
	arrived     time.Time
	mu          sync.Mutex
	user, token string
}

// Arrived is when the request reached modelserve: when the middleware
// first saw it, before any handler read its body or checked who sent
// it. Without the middleware around the handler it says false.
func Arrived(ctx context.Context) (time.Time, bool) {
	if h, ok := ctx.Value(holderKey{}).(*holder); ok {
		return h.arrived, true
	}
	return time.Time{}, false
}

// SetUser records that the request is a signed-in console user's. Without
// the middleware around the handler it does nothing.
func SetUser(ctx context.Context, name string) {
	if h, ok := ctx.Value(holderKey{}).(*holder); ok {
		h.mu.Lock()
		h.user = name
		h.mu.Unlock()
	}
}

// SetToken records the name of the API token the request carried.
func SetToken(ctx context.Context, name string) {
	if h, ok := ctx.Value(holderKey{}).(*holder); ok {
		h.mu.Lock()
		h.token = name
		h.mu.Unlock()
	}
}

// Handler logs each request next serves to log at Info, when its answer is
// done (for a stream (SSE), when the stream ends), timed when it arrived,
// as Apache's and gorilla/handlers' access logs are: its time and its
// duration say when it came and when it was done, to the nanosecond.
func Handler(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h := &holder{arrived: start}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), holderKey{}, h)))
		status := rec.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http sends 200
		}
		attrs := []slog.Attr{
			slog.String("method", words.Clip(r.Method)), slog.String("path", Path(r.URL)), slog.Int("status", status),
			slog.Duration("duration", time.Since(start)), slog.Int64("bytes", rec.bytes), slog.String("remote", words.Clip(r.RemoteAddr)),
		}
		h.mu.Lock()
		if h.user != "" {
			attrs = append(attrs, slog.String("user", words.Clip(h.user)))
		}
		if h.token != "" {
			attrs = append(attrs, slog.String("token", words.Clip(h.token)))
		}
		h.mu.Unlock()
		if log.Enabled(r.Context(), slog.LevelInfo) {
			line := slog.NewRecord(start, slog.LevelInfo, "request", 0)
			line.AddAttrs(attrs...)
			_ = log.Handler().Handle(r.Context(), line) // as slog's own methods, which drop a handler's error
		}
	})
}

// Path is the request's path with its query as the log writes it: any
// secret in it replaced by "redacted" (redact.Query), since a token or
// password sent in a URL by mistake must not be copied into every log it
// passes through; and clipped (words.Clip), since a URL may be a
// megabyte long. A query longer than queryMost is left out, with its
// size: looking for secrets through a megabyte of it took seconds of a
// core for every such request, to write two hundred bytes of it.
func Path(u *url.URL) string {
	if u.RawQuery == "" {
		return words.Clip(u.EscapedPath())
	}
	if len(u.RawQuery) > queryMost {
		return words.Clip(u.EscapedPath()) + "?… (a query of " + words.Size(int64(len(u.RawQuery))) + " left out)"
	}
	q, ok := redact.Query(u.RawQuery)
	if !ok {
		return words.Clip(u.EscapedPath()) + "?(unreadable query left out)"
	}
	return words.Clip(u.EscapedPath() + "?" + q)
}

// queryMost is the longest query the log reads for secrets and writes
// in part: ten times what it writes of it, which no form or API of
// modelserve's comes near.
const queryMost = 10 * words.ClipMost

// recorder notes the status and size of an answer. It passes Flush on (the
// event streams need it) and unwraps for http.ResponseController.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
