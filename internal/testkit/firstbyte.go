package testkit

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// MsToFirstByte times get to the first byte of its answer, each of b's
// loops, and reports and returns the mean in milliseconds: a page or an
// answer written whole before its first byte shows there what it costs.
// An answer but 200 fails b; the body is read to its end, untimed.
func MsToFirstByte(b *testing.B, get func() *http.Response) float64 {
	b.Helper()
	first := make([]byte, 1)
	var took time.Duration
	for b.Loop() {
		t0 := time.Now()
		resp := get()
		_, err := io.ReadFull(resp.Body, first)
		took += time.Since(t0)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %v", resp.Status, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ms := float64(took.Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(ms, "ms-to-first-byte")
	return ms
}

// BearerGet asks url with the API token tok, as a script does, failing tb
// when the request cannot be sent.
func BearerGet(tb testing.TB, url, tok string) *http.Response {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}
