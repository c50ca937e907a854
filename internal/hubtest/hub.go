package hubtest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Hub's own error messages, so that a client which shows them shows
// what the real one would.
const (
	msgBadToken     = "Invalid credentials in Authorization header"
	msgRepoNotFound = "Repository not found"
	msgEntry        = "Entry not found"
	msgDisabled     = "Access to this resource is disabled."
	msgNoPage       = "Sorry, we can't find the page you are looking for."
)

// lastModified is fixed so answers are the same from run to run.
var lastModified = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// serveHub routes by hand rather than with a ServeMux: the resolve route
// (/{owner}/{name}/resolve/...) and the API routes overlap in ways the mux
// refuses, and a revision must stay one escaped segment ("refs%2Fpr%2F1").
func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	segs := splitEscaped(r.URL.EscapedPath())
	if segs == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		writeError(w, r, http.StatusNotFound, "", msgNoPage)
		return
	}
	if len(segs) == 2 && segs[0] == "api" && segs[1] == "models" {
		s.search(w, r)
		return
	}
	if len(segs) >= 4 && segs[0] == "api" && segs[1] == "models" {
		id, rest := segs[2]+"/"+segs[3], segs[4:]
		switch {
		case len(rest) == 0:
			s.modelInfo(w, r, id, "")
			return
		case len(rest) == 2 && rest[0] == "revision":
			s.modelInfo(w, r, id, rest[1])
			return
		case len(rest) == 1 && rest[0] == "refs":
			s.refs(w, r, id)
			return
		case len(rest) >= 2 && rest[0] == "tree":
			s.tree(w, r, id, rest[1], strings.Join(rest[2:], "/"))
			return
		}
	}
	if len(segs) >= 5 && segs[2] == "resolve" {
		s.resolve(w, r, segs[0]+"/"+segs[1], segs[3], strings.Join(segs[4:], "/"))
		return
	}
	writeError(w, r, http.StatusNotFound, "", msgNoPage)
}

// splitEscaped splits an escaped path into unescaped segments; nil when a
// segment does not unescape.
func splitEscaped(p string) []string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, seg := range segs {
		u, err := url.PathUnescape(seg)
		if err != nil {
			return nil
		}
		segs[i] = u
	}
	return segs
}

func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	if msg != "" {
		w.Header().Set("X-Error-Message", msg)
	}
	body, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// writeInjected answers an injected failure; false when there is none.
func (s *Server) writeInjected(w http.ResponseWriter, r *http.Request, k fileKey) bool {
	status, retryAfter, say := s.takeFailure(k)
	if status == 0 {
		return false
	}
	msg := "Internal Error - We're working hard to fix this as soon as possible!"
	if status == http.StatusTooManyRequests {
		msg = "You have exceeded our request rate limit; retry later."
		if retryAfter >= 0 {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		}
	}
	if say != nil {
		msg = say(r)
	}
	writeError(w, r, status, "", msg)
	return true
}

// view is what one request may see of a repository, taken under the lock.
type view struct {
	repo    *repo
	gated   string
	granted bool // the token was granted this repository
	authed  bool // a valid token came with the request
	commit  *commit
	rev     string
}

// access makes the checks every Hub route makes, in the Hub's order: the
// token, the repository's existence (hidden from the anonymous), whether it
// is disabled. It writes the answer and returns false when one fails.
func (s *Server) access(w http.ResponseWriter, r *http.Request, id string) (view, bool) {
	if s.writeInjected(w, r, fileKey{id, ""}) {
		return view{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var v view
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		grants := s.tokens[tok]
		if !ok || grants == nil {
			writeError(w, r, http.StatusUnauthorized, "", msgBadToken)
			return v, false
		}
		v.authed, v.granted = true, grants[id]
	}
	rp := s.repos[id]
	if rp == nil || (rp.private && !v.granted) {
		// The Hub will not say whether a repository exists to someone who
		// has not signed in: private and missing look the same.
		status := http.StatusNotFound
		if !v.authed {
			status = http.StatusUnauthorized
		}
		writeError(w, r, status, "RepoNotFound", msgRepoNotFound)
		return v, false
	}
	if rp.disabled {
		writeError(w, r, http.StatusForbidden, "", msgDisabled)
		return v, false
	}
	v.repo, v.gated = rp, rp.gated
	return v, true
}

// revision resolves a branch, tag, refs/pr/N or full commit id; it writes
// the 404 and returns false when there is none.
func (s *Server) revision(w http.ResponseWriter, r *http.Request, v *view, rev string) bool {
	s.mu.Lock()
	sha, ok := v.repo.refs[rev]
	if !ok {
		sha = rev
	}
	c := v.repo.commits[sha]
	s.mu.Unlock()
	if c == nil {
		writeError(w, r, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return false
	}
	v.commit, v.rev = c, rev
	return true
}

func (s *Server) defaultBranch(v view) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return v.repo.branches[0]
}

type siblingLFS struct {
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

type sibling struct {
	RFilename string      `json:"rfilename"`
	BlobID    string      `json:"blobId,omitempty"`
	Size      *int64      `json:"size,omitempty"`
	LFS       *siblingLFS `json:"lfs,omitempty"`
}

func (s *Server) modelInfo(w http.ResponseWriter, r *http.Request, id, rev string) {
	v, ok := s.access(w, r, id)
	if !ok {
		return
	}
	if rev == "" {
		rev = s.defaultBranch(v)
	}
	if !s.revision(w, r, &v, rev) {
		return
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	siblings := []sibling{}
	var used int64
	for _, e := range sortedEntries(v.commit) {
		if e.Type != "file" {
			continue
		}
		sb := sibling{RFilename: e.Path}
		if blobs {
			size := e.Size
			sb.BlobID, sb.Size = e.OID, &size
			if e.LFS != nil {
				sb.LFS = &siblingLFS{SHA256: e.LFS.OID, Size: e.LFS.Size, PointerSize: e.LFS.PointerSize}
			}
		}
		used += e.Size
		siblings = append(siblings, sb)
	}
	var gated any = false
	if v.gated != "" {
		gated = v.gated
	}
	owner, _, _ := strings.Cut(id, "/")
	oid := sha256.Sum256([]byte(id))
	writeJSON(w, r, http.StatusOK, map[string]any{
		"_id":          hex.EncodeToString(oid[:12]),
		"id":           id,
		"modelId":      id,
		"author":       owner,
		"sha":          v.commit.sha,
		"lastModified": lastModified,
		"createdAt":    lastModified,
		"private":      v.repo.private,
		"disabled":     false,
		"gated":        gated,
		"downloads":    0,
		"likes":        0,
		"tags":         []string{"gguf"},
		"siblings":     siblings,
		"usedStorage":  used,
	})
}

// gitRef is one entry of the refs listing, as the Hub writes it.
type gitRef struct {
	Name         string `json:"name"`
	Ref          string `json:"ref"`
	TargetCommit string `json:"targetCommit"`
}

// refs answers GET /api/models/{id}/refs as the Hub does: the branches
// (the default first, then in the order they were made), the convert refs
// and the tags, each with the commit it points at; the pull requests' refs
// only with ?include_prs=1. The same checks as every route come first: a
// gated repository's refs are readable by anyone, as its info and tree are.
func (s *Server) refs(w http.ResponseWriter, r *http.Request, id string) {
	v, ok := s.access(w, r, id)
	if !ok {
		return
	}
	out := struct {
		Branches     []gitRef  `json:"branches"`
		Converts     []gitRef  `json:"converts"`
		Tags         []gitRef  `json:"tags"`
		PullRequests *[]gitRef `json:"pullRequests,omitempty"`
	}{Branches: []gitRef{}, Converts: []gitRef{}, Tags: []gitRef{}}
	prs := []gitRef{}
	s.mu.Lock()
	branch := map[string]bool{}
	for _, b := range v.repo.branches {
		branch[b] = true
		out.Branches = append(out.Branches, gitRef{Name: b, Ref: "refs/heads/" + b, TargetCommit: v.repo.refs[b]})
	}
	names := make([]string, 0, len(v.repo.refs))
	for name := range v.repo.refs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sha := v.repo.refs[name]
		switch {
		case branch[name]:
		case strings.HasPrefix(name, "refs/convert/"):
			out.Converts = append(out.Converts, gitRef{Name: strings.TrimPrefix(name, "refs/convert/"), Ref: name, TargetCommit: sha})
		case strings.HasPrefix(name, "refs/pr/"):
			prs = append(prs, gitRef{Name: name, Ref: name, TargetCommit: sha})
		default:
			out.Tags = append(out.Tags, gitRef{Name: name, Ref: "refs/tags/" + name, TargetCommit: sha})
		}
	}
	s.mu.Unlock()
	if q := r.URL.Query().Get("include_prs"); q == "1" || q == "true" {
		out.PullRequests = &prs
	}
	writeJSON(w, r, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types are marshalled
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

func encodeCursor(i int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("at:" + strconv.Itoa(i)))
}

func decodeCursor(c string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	n, ok := strings.CutPrefix(string(b), "at:")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0
}

func (s *Server) tree(w http.ResponseWriter, r *http.Request, id, rev, dir string) {
	v, ok := s.access(w, r, id)
	if !ok || !s.revision(w, r, &v, rev) {
		return
	}
	q := r.URL.Query()
	recursive := q.Get("recursive") == "true" || q.Get("recursive") == "1"
	var list []TreeEntry
	for _, e := range sortedEntries(v.commit) {
		rel := e.Path
		if dir != "" {
			var in bool
			if rel, in = strings.CutPrefix(e.Path, dir+"/"); !in {
				continue
			}
		}
		if !recursive && strings.Contains(rel, "/") {
			continue
		}
		list = append(list, e)
	}
	if dir != "" && len(list) == 0 {
		writeError(w, r, http.StatusNotFound, "EntryNotFound", msgEntry)
		return
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		if start, ok = decodeCursor(c); !ok || start > len(list) {
			writeError(w, r, http.StatusBadRequest, "", "Invalid cursor")
			return
		}
	}
	s.mu.Lock()
	size := s.pageSize
	s.mu.Unlock()
	end := min(start+size, len(list))
	if end < len(list) {
		// The next page's URL is absolute and keeps the query as it came,
		// as the Hub's does.
		q.Set("cursor", encodeCursor(end))
		next := s.hub.URL + r.URL.EscapedPath() + "?" + q.Encode()
		w.Header().Set("Link", "<"+next+`>; rel="next"`)
	}
	page := list[start:end]
	if page == nil {
		page = []TreeEntry{}
	}
	writeJSON(w, r, http.StatusOK, page)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, id, rev, p string) {
	v, ok := s.access(w, r, id)
	if !ok {
		return
	}
	// A gated repository lists its files to anyone but hands them only to
	// accounts granted access.
	if v.gated != "" && !v.granted {
		if !v.authed {
			writeError(w, r, http.StatusUnauthorized, "GatedRepo", fmt.Sprintf(
				"Access to model %s is restricted. You must have access to it and be authenticated to access it. Please log in.", id))
		} else {
			writeError(w, r, http.StatusForbidden, "GatedRepo", fmt.Sprintf(
				"Access to model %s is restricted and you are not in the authorized list. Visit %s/%s to ask for access.", id, s.hub.URL, id))
		}
		return
	}
	if !s.revision(w, r, &v, rev) {
		return
	}
	e, ok := v.commit.entries[p]
	if !ok || e.Type != "file" || e.file == nil {
		writeError(w, r, http.StatusNotFound, "EntryNotFound", msgEntry)
		return
	}
	h := w.Header()
	h.Set("X-Repo-Commit", v.commit.sha)
	if e.file.inGit {
		// Small files kept in git come from the Hub itself, no redirect.
		h.Set("ETag", `"`+e.file.oid+`"`)
		h.Set("Content-Type", "application/octet-stream")
		k := fileKey{id, p}
		if r.Method == http.MethodGet {
			s.mu.Lock()
			s.gets[k]++
			s.mu.Unlock()
		}
		cw := &countingWriter{ResponseWriter: w, count: func(n int) { s.count(k, int64(n)) }}
		http.ServeContent(cw, r, "", lastModified, io.NewSectionReader(e.file, 0, e.file.size))
		return
	}
	token := blobToken(id, v.commit.sha, p)
	s.mu.Lock()
	s.blobs[token] = blobRef{key: fileKey{id, p}, file: e.file}
	s.mu.Unlock()
	expires := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	loc := s.cdn.URL + "/repos/" + token + "/" + url.PathEscape(path.Base(p)) +
		"?Expires=" + expires + "&Signature=" + s.sign(token, expires)
	body := "Found. Redirecting to " + loc
	h.Set("Location", loc)
	h.Set("X-Linked-Etag", `"`+e.file.sha256+`"`)
	h.Set("X-Linked-Size", strconv.FormatInt(e.file.size, 10))
	h.Set("ETag", `"`+e.file.sha256+`"`)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusFound)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

// blobToken names a file at a commit in a CDN URL without saying which.
func blobToken(id, commit, p string) string {
	h := sha256.Sum256([]byte(id + "\x00" + commit + "\x00" + p))
	return hex.EncodeToString(h[:16])
}

// ReadAt lets a file be served through http.ServeContent.
func (f *blobFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	n := len(p)
	if rem := f.size - off; int64(n) > rem {
		n = int(rem)
	}
	f.read(off, p[:n])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

type countingWriter struct {
	http.ResponseWriter
	count func(int)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.count(n)
	return n, err
}
