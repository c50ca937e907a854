package hf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"modelserve/internal/operr"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
)

// Body is part of a registry's file, as it arrives.
//
// Opening registry bytes lives here, and only here, because of the token:
// the Hub answers a download with a redirect to its CDN, and Go's client
// keeps Authorization on a redirect to the same host name on another port
// and to any subdomain (cdn-lfs.huggingface.co is one). The mirror and the
// header reader once each kept their own copy of the rule that stops that,
// and the copies drifted. Now both ask Open.
type Body struct {
	io.ReadCloser
	// Offset is the byte of the file the body starts at: the offset asked
	// for, or 0 when the registry ignored the Range and sends the whole
	// file (only for a read to the end; see Open).
	Offset int64
	// Size is the whole file's size, -1 when the registry did not say.
	Size int64
}

// Open reads a file of the Hub by the URL DownloadURL gave for it: n bytes
// from offset, or every byte from offset on when n <= 0.
//
// The token goes with a request to the endpoint itself (same scheme, host
// and port), and never with the redirect to the CDN or anywhere else. A
// busy registry (429, 5xx) or a failed connection is tried again as every
// request of the client is; a refusal comes back as the client's sentence
// for it (errors.Is ErrGated, ErrNotFound, ...), and a read that starts past
// the file's end as ErrRangeNotSatisfiable.
//
// A read to the end that the registry answers with the whole file (it
// ignored the Range) comes back with Offset 0, for the caller to start
// over; a bounded read answered so is refused, since it would cost the whole
// file for a part of it.
func (c *Client) Open(ctx context.Context, downloadURL string, offset, n int64) (*Body, error) {
	u, err := url.Parse(downloadURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not a download URL of %s", downloadURL, c.host())
	}
	if offset < 0 {
		return nil, fmt.Errorf("cannot read %s from byte %d", downloadURL, offset)
	}
	s := c.subjectOf(u)
	h := http.Header{}
	// Bytes as stored: a body gunzipped on the way would not match the
	// published size, and offsets into it would not be offsets into the file.
	h.Set("Accept-Encoding", "identity")
	switch {
	case n > 0:
		h.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+n-1))
	case offset > 0:
		h.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := c.send(ctx, http.MethodGet, downloadURL, h, s, c.http)
	if err != nil {
		return nil, err
	}
	b := &Body{ReadCloser: resp.Body, Size: -1}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok {
			resp.Body.Close()
			return nil, fmt.Errorf("%s answered the request for %s from byte %d with a range it did not name (%q)",
				c.host(), s.name(), offset, resp.Header.Get("Content-Range"))
		}
		if n > 0 && start != offset {
			resp.Body.Close()
			return nil, fmt.Errorf("%s answered the request for %s from byte %d with bytes from %d",
				c.host(), s.name(), offset, start)
		}
		b.Offset, b.Size = start, total
	case http.StatusOK:
		b.Size = resp.ContentLength
		if n > 0 && (offset > 0 || b.Size < 0 || b.Size > n) {
			resp.Body.Close()
			return nil, noRanges{fmt.Sprintf("%s does not answer Range requests for %s, so part of it cannot be read without all of it",
				c.host(), s.name())}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		return nil, refusal(ErrRangeNotSatisfiable, "%s holds fewer than %d bytes of %s", c.host(), offset+1, s.name())
	default:
		defer resp.Body.Close()
		if resp.Request != nil && !c.sameOrigin(resp.Request.URL) {
			// The CDN's refusals are not the Hub's: a 403 there is an
			// expired signature, not a disabled repository. Said all the
			// same, as the operator's: a job shows it rather than an
			// unexpected error.
			kind := operr.Unavailable
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
				kind = operr.NotFound
			}
			return nil, operr.New(kind, "%s, where %s sent the download of %s, answered %s",
				resp.Request.URL.Host, c.host(), s.name(), resp.Status)
		}
		return nil, c.refused(resp, s, authorized(resp))
	}
	return b, nil
}

// ErrNoRanges is what a bounded read answered with the whole file is: the
// registry does not serve Range, and a caller that wanted parts of the file
// at once reads it in one stream instead.
var ErrNoRanges = errors.New("the registry does not answer Range requests")

type noRanges struct{ msg string }

func (e noRanges) Error() string        { return e.msg }
func (e noRanges) Is(target error) bool { return target == ErrNoRanges }

// subjectOf names what a download URL of this client is about, for
// sentences: DownloadURL's <endpoint>/<id>/resolve/<commit>/<path> read
// back. Any other URL is named as it is.
func (c *Client) subjectOf(u *url.URL) subject {
	rest, ok := strings.CutPrefix(u.Path, strings.TrimRight(c.origin.Path, "/")+"/")
	parts := strings.SplitN(rest, "/", 5)
	if !ok || !c.sameOrigin(u) || len(parts) != 5 || parts[2] != "resolve" {
		return subject{id: u.Redacted()}
	}
	return subject{id: parts[0] + "/" + parts[1], revision: parts[3], path: parts[4]}
}

// name is the file a subject is about, as a sentence names it.
func (s subject) name() string {
	if s.path == "" {
		return s.id
	}
	return s.id + " file " + s.path
}

// Open reads a file by its download URL from whichever registry holds it:
// a file:// URL (the local folder's) from this machine's disk, any other
// from the Hub. See Client.Open.
func (r Registries) Open(ctx context.Context, downloadURL string, offset, n int64) (*Body, error) {
	if strings.HasPrefix(downloadURL, "file:") {
		return openFile(ctx, downloadURL, offset, n)
	}
	if r.Hub == nil {
		return nil, fmt.Errorf("%s is on the Hub, and no Hub is configured", downloadURL)
	}
	return r.Hub.Open(ctx, downloadURL, offset, n)
}

// openFile reads a file:// URL (Local.DownloadURL's) as Open reads from the
// Hub. Any file the URL names is read: the URLs come from DownloadURL, not
// from requests.
func openFile(ctx context.Context, downloadURL string, offset, n int64) (*Body, error) {
	u, err := url.Parse(downloadURL)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return nil, fmt.Errorf("%q is not a file URL of the local folder", downloadURL)
	}
	f, err := os.Open(u.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, refusal(ErrNotFound, "%s is not in its folder any more: it was moved or deleted after the folder was listed; look the repository up again", path.Base(u.Path))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path.Base(u.Path), err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("cannot read %s: it is not a regular file", u.Path)
	}
	if offset > st.Size() {
		f.Close()
		return nil, refusal(ErrRangeNotSatisfiable, "%s holds fewer than %d bytes", path.Base(u.Path), offset+1)
	}
	var r io.Reader = io.NewSectionReader(f, offset, st.Size()-offset)
	if n > 0 {
		r = io.LimitReader(r, n)
	}
	return &Body{ReadCloser: &fileBody{ctx: ctx, r: r, f: f}, Offset: offset, Size: st.Size()}, nil
}

// fileBody stops reading when its request's context ends, as an HTTP body
// does: a 40 GB copy from a local folder is as long as a download. It holds
// the context of the one call that opened it, as http.Response's body does.
type fileBody struct {
	ctx context.Context
	r   io.Reader
	f   *os.File
}

func (b *fileBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.r.Read(p)
}

func (b *fileBody) Close() error { return b.f.Close() }

// contentRange reads "bytes a-b/total"; total is -1 for "*".
func contentRange(h string) (start, total int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(spec, "/")
	if !found {
		return 0, 0, false
	}
	a, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	if tot == "*" {
		return start, -1, true
	}
	total, err = strconv.ParseInt(strings.TrimSpace(tot), 10, 64)
	if err != nil || total < 0 {
		return 0, 0, false
	}
	return start, total, true
}
