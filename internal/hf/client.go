package hf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"modelserve/internal/operr"
)

// DefaultEndpoint is the Hub's address when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

const (
	defaultRetries = 4
	defaultBackoff = time.Second
	// maxBackoff and maxRetryAfter bound the wait between two tries, so a
	// registry that asks for an hour does not hold a job that long silently.
	maxBackoff    = 30 * time.Second
	maxRetryAfter = 60 * time.Second
	// maxTreePages stops a listing whose next links never end; at the Hub's
	// 1000 entries a page it is far beyond any real repository.
	maxTreePages = 1000
	// maxPageBytes bounds one JSON answer read into memory.
	maxPageBytes = 64 << 20
)

// Options configure a Client. Only the zero value's defaults are needed in
// production; tests shorten Backoff.
type Options struct {
	// Endpoint is the Hub's base URL (HF_ENDPOINT); default DefaultEndpoint.
	Endpoint string
	// Token is sent as a bearer token, to the endpoint's own host only.
	Token string
	// HTTP is copied, not changed; its CheckRedirect still runs after the
	// client's own. Default: a client with no overall timeout (what Open
	// reads may take hours; API calls are bounded by their context).
	HTTP *http.Client
	// MaxRetries is how many times an answer of 429 or 5xx, or a failed
	// connection, is tried again: 0 means 4, negative means never.
	MaxRetries int
	// Backoff is the first wait between tries, doubled each time: 0 means
	// one second.
	Backoff time.Duration
	// Offline refuses every request with a sentence saying so, without
	// touching the network (HF_HUB_OFFLINE=1, as huggingface_hub reads
	// it): on a machine cut off from the Hub, a job says why it cannot
	// read a repository at once instead of after minutes of retries.
	Offline bool
}

// Client reads repositories from the Hugging Face Hub (or anything that
// answers like it, such as internal/hubtest).
type Client struct {
	endpoint string
	origin   *url.URL
	token    string
	// http follows redirects but drops the token when one leaves the
	// endpoint; noFollow stops at the first answer, to read a redirect's
	// headers without touching the CDN.
	http       *http.Client
	noFollow   *http.Client
	maxRetries int
	backoff    time.Duration
	offline    bool
}

var _ Registry = (*Client)(nil)

// NewClient checks the options and builds a Client.
func NewClient(opts Options) (*Client, error) {
	endpoint := strings.TrimRight(strings.TrimSpace(opts.Endpoint), "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the Hub endpoint %q is not a URL like %s: check HF_ENDPOINT", opts.Endpoint, DefaultEndpoint)
	}
	c := &Client{
		endpoint:   endpoint,
		origin:     u,
		token:      strings.TrimSpace(opts.Token),
		maxRetries: opts.MaxRetries,
		backoff:    opts.Backoff,
		offline:    opts.Offline,
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = defaultRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.backoff <= 0 {
		c.backoff = defaultBackoff
	}
	base := &http.Client{}
	if opts.HTTP != nil {
		base = opts.HTTP
	}
	follow, stop := *base, *base
	theirs := base.CheckRedirect
	follow.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		// Go keeps Authorization on a redirect to the same host name on
		// another port, and to any subdomain: huggingface.co's CDN
		// (cdn-lfs.huggingface.co) is one. Only the endpoint itself gets
		// the token.
		if !c.sameOrigin(req.URL) {
			req.Header.Del("Authorization")
		}
		if theirs != nil {
			return theirs(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	stop.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http, c.noFollow = &follow, &stop
	return c, nil
}

// authorize adds the token to req when req goes to the endpoint itself
// (same scheme, host and port), and leaves any other request alone.
func (c *Client) authorize(req *http.Request) {
	if c.token != "" && c.sameOrigin(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

func (c *Client) sameOrigin(u *url.URL) bool {
	return u != nil && strings.EqualFold(u.Scheme, c.origin.Scheme) &&
		strings.EqualFold(u.Hostname(), c.origin.Hostname()) && port(u) == port(c.origin)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// host names the registry in sentences: "huggingface.co".
func (c *Client) host() string { return c.origin.Host }

// DownloadURL is where a file of a repository at a commit is fetched.
func (c *Client) DownloadURL(id, commit, path string) string {
	return c.endpoint + "/" + id + "/resolve/" + url.PathEscape(commit) + "/" + escapeSegments(path)
}

func escapeSegments(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Repo reads a repository at a revision (default "main"): which commit the
// revision is, whether it is gated or private, and every file with its size
// and sha256, all read at that one commit so a branch that moves meanwhile
// cannot mix two versions.
//
// A gated repository reads without access, as on the Hub: Gated is set and
// the files listed. Whether the token may download them is CanDownload's
// question.
func (c *Client) Repo(ctx context.Context, id, revision string) (Repo, error) {
	if err := CheckRepoID(id); err != nil {
		return Repo{}, err
	}
	if err := CheckRevision(revision); err != nil {
		return Repo{}, err
	}
	if revision == "" {
		revision = "main"
	}
	repo, err := c.modelInfo(ctx, id, revision)
	if err != nil {
		return Repo{}, err
	}
	if repo.Files, err = c.tree(ctx, repo.ID, repo.Commit); err != nil {
		return Repo{}, err
	}
	return repo, nil
}

func (c *Client) modelInfo(ctx context.Context, id, revision string) (Repo, error) {
	s := subject{id: id, revision: revision}
	u := c.endpoint + "/api/models/" + id + "/revision/" + url.PathEscape(revision)
	var info struct {
		ID      string          `json:"id"`
		SHA     string          `json:"sha"`
		Private bool            `json:"private"`
		Gated   json.RawMessage `json:"gated"`
	}
	if _, err := c.getJSON(ctx, u, s, &info); err != nil {
		return Repo{}, err
	}
	if !isCommit(info.SHA) {
		return Repo{}, fmt.Errorf("%s described %s at %q without a commit id (it said %q)", c.host(), id, revision, info.SHA)
	}
	gated, err := parseGated(info.Gated)
	if err != nil {
		return Repo{}, fmt.Errorf("%s described %s: %w", c.host(), id, err)
	}
	repo := Repo{ID: id, Revision: revision, Commit: info.SHA, Gated: gated, Private: info.Private}
	// The registry's spelling wins (its case may differ from what was asked),
	// as long as it is still a name that is safe to use as a folder.
	if info.ID != "" && CheckRepoID(info.ID) == nil {
		repo.ID = info.ID
	}
	return repo, nil
}

// parseGated reads the model info's gated field: false, "auto" or "manual"
// (older answers said true).
func parseGated(raw json.RawMessage) (string, error) {
	switch v := strings.TrimSpace(string(raw)); v {
	case "", "null", "false":
		return "", nil
	case "true":
		return "auto", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("gated is %s, which is neither false nor a kind of gating", raw)
	}
	return s, nil
}

type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// tree lists every file at a commit, following the Link header's next page
// until there is none: the Hub cuts large listings into pages.
func (c *Client) tree(ctx context.Context, id, commit string) ([]File, error) {
	s := subject{id: id, revision: commit}
	next := c.endpoint + "/api/models/" + id + "/tree/" + url.PathEscape(commit) + "?recursive=true&expand=false"
	seen := map[string]bool{}
	files := []File{}
	listed := map[string]bool{}
	for pages := 0; next != ""; pages++ {
		if seen[next] || pages == maxTreePages {
			return nil, fmt.Errorf("%s kept sending more pages of %s's file list after %d; the listing does not end",
				c.host(), id, pages)
		}
		seen[next] = true
		var page []treeEntry
		resp, err := c.getJSON(ctx, next, s, &page)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.Type != "file" {
				continue // folders come with their files' paths anyway
			}
			f, err := fileFromEntry(e)
			if err != nil {
				// The registry's listing is at fault, not the request: a
				// refusal said in a sentence, never a 500.
				msg, _ := operr.Sentence(err)
				return nil, operr.Wrap(operr.Refused, err, "%s at %s: %s", id, shortRev(commit), msg)
			}
			if listed[f.Path] {
				return nil, operr.New(operr.Refused, "%s listed %s twice in %s at %s; the listing cannot be trusted, and the repository is not served",
					c.host(), operr.Quote(f.Path), id, shortRev(commit))
			}
			listed[f.Path] = true
			files = append(files, f)
		}
		if next, err = nextPage(resp); err != nil {
			return nil, fmt.Errorf("%s's file list for %s: %w", c.host(), id, err)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

func fileFromEntry(e treeEntry) (File, error) {
	if err := CheckPath(e.Path); err != nil {
		return File{}, err
	}
	f := File{Path: e.Path, Size: e.Size}
	if e.LFS != nil {
		f.Size, f.SHA256 = e.LFS.Size, e.LFS.OID
		if !isHex(f.SHA256, 64) {
			// The path has passed CheckPath: safe to show as it is.
			return File{}, operr.New(operr.Refused, "the registry published %s as the sha256 of %s, which is not a sha256",
				operr.Quote(f.SHA256), e.Path)
		}
	}
	if f.Size < 0 {
		return File{}, operr.New(operr.Refused, "the registry gave %s a size of %d bytes", e.Path, f.Size)
	}
	return f, nil
}

// nextPage is the URL of the Link header's rel="next", resolved against the
// page it came with; "" when there is none.
func nextPage(resp *http.Response) (string, error) {
	for _, h := range resp.Header.Values("Link") {
		for rest := h; ; {
			open := strings.IndexByte(rest, '<')
			if open < 0 {
				break
			}
			end := strings.IndexByte(rest[open:], '>')
			if end < 0 {
				return "", fmt.Errorf("a Link header does not close its URL: %q", h)
			}
			target := rest[open+1 : open+end]
			rest = rest[open+end+1:]
			params := rest
			if i := strings.IndexByte(rest, '<'); i >= 0 {
				params = rest[:i]
			}
			if !relIsNext(params) {
				continue
			}
			u, err := resp.Request.URL.Parse(target)
			if err != nil {
				return "", fmt.Errorf("the next page's URL %q does not parse: %w", target, err)
			}
			return u.String(), nil
		}
	}
	return "", nil
}

// relIsNext reads `; rel="next"` (or rel=next, or one of several rels).
func relIsNext(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(p), ",")), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
			continue
		}
		for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
			if strings.EqualFold(rel, "next") {
				return true
			}
		}
	}
	return false
}

// CanDownload asks the Hub whether this client's token may download a file
// of repo (the first file when path is ""), without downloading it: a HEAD
// on its resolve URL, not following the redirect. It returns nil when the
// Hub would hand it over, and the gated sentence (errors.Is ErrGated) when
// the repository is gated and the token has no access.
func (c *Client) CanDownload(ctx context.Context, repo Repo, path string) error {
	rev := repo.Commit
	if rev == "" {
		rev = repo.Revision
	}
	if path == "" {
		if len(repo.Files) == 0 {
			return nil
		}
		path = repo.Files[0].Path
	}
	s := subject{id: repo.ID, revision: rev, path: path}
	resp, err := c.send(ctx, http.MethodHead, c.DownloadURL(repo.ID, rev, path), nil, s, c.noFollow)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 {
		return nil // 200 for files kept in git, 302 to the CDN for LFS
	}
	return c.refused(resp, s, authorized(resp))
}

// getJSON reads a JSON answer of at most maxPageBytes into v.
func (c *Client) getJSON(ctx context.Context, u string, s subject, v any) (*http.Response, error) {
	return c.getJSONAtMost(ctx, u, s, v, maxPageBytes)
}

// getJSONAtMost reads a JSON answer of at most limit bytes into v: what is
// cut off by the limit fails to decode.
func (c *Client) getJSONAtMost(ctx context.Context, u string, s subject, v any, limit int64) (*http.Response, error) {
	resp, err := c.send(ctx, http.MethodGet, u, nil, s, c.http)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.refused(resp, s, authorized(resp))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, limit)).Decode(v); err != nil {
		return nil, fmt.Errorf("%s's answer about %s was not the JSON expected: %w", c.host(), s.id, err)
	}
	return resp, nil
}

func authorized(resp *http.Response) bool {
	return resp.Request != nil && resp.Request.Header.Get("Authorization") != ""
}

// send makes a request with the given headers, trying again with
// exponential backoff while the answer is 429 or 5xx or the connection
// fails, at most maxRetries times. Any other answer is returned for the
// caller to read.
func (c *Client) send(ctx context.Context, method, u string, header http.Header, s subject, hc *http.Client) (*http.Response, error) {
	if c.offline {
		return nil, refusal(ErrOffline, "%s is on %s, and HF_HUB_OFFLINE is set: modelserve serves from its mirror and "+
			"local folders only; unset HF_HUB_OFFLINE to read it, or put it in --models-dir and serve it as %s/<folder>",
			s.id, c.host(), LocalOwner)
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", s.id, err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		req.Header.Set("User-Agent", "modelserve")
		c.authorize(req)
		resp, err := hc.Do(req)
		var failure error
		wait := c.backoff
		for i := 0; i < attempt && wait < maxBackoff; i++ {
			wait *= 2
		}
		wait = min(wait, maxBackoff)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("reading %s from %s: %w", s.id, c.endpoint, ctx.Err())
		case err != nil:
			failure = fmt.Errorf("could not reach %s to read %s: %w", c.endpoint, s.id, err)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			if d, ok := retryAfter(resp); ok {
				wait = d
			}
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			why := "it is having trouble"
			if resp.StatusCode == http.StatusTooManyRequests {
				why = "it is limiting how often this machine may ask"
			}
			failure = refusal(ErrUnavailable, "%s kept answering %s for %s through %d tries (%s): try again later",
				c.host(), resp.Status, s.id, attempt+1, why)
			if attempt == 0 {
				// A client told not to retry asked once.
				failure = refusal(ErrUnavailable, "%s answered %s for %s (%s): try again later",
					c.host(), resp.Status, s.id, why)
			}
		default:
			return resp, nil
		}
		if attempt >= c.maxRetries {
			return nil, failure
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("reading %s from %s: %w", s.id, c.endpoint, ctx.Err())
		}
	}
}

// retryAfter reads Retry-After in seconds (or as a date), capped.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), maxRetryAfter), true
	}
	return 0, false
}

func isCommit(s string) bool { return isHex(s, 40) }

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}
