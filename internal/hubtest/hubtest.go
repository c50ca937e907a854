// Package hubtest is a Hugging Face Hub for tests: the same URLs, JSON,
// headers, redirects and error answers as the real one, on two loopback
// listeners (the Hub, and a separate "CDN" the Hub redirects downloads to).
//
// Code that talks to a registry fails in ways a friendly fake never shows: a
// tree listing cut into pages, a revision with a slash in it, a token that
// must not follow a redirect to another host, a gated repository whose files
// are refused while its listing is not, a download cut half way, a CDN that
// answers a Range request with the whole file. This server behaves as the
// Hub does in each of those cases, and lets a
// test switch faults on and off per file while downloads run, so the client
// and the mirror are tested against the answers they will really get.
//
// Files may be generated rather than held: AddFileFunc serves a multi-GB
// file from a function of the offset, so tests can fetch large files without
// the memory.
package hubtest

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultPageSize is how many tree entries one page holds unless SetPageSize
// says otherwise; the real Hub cuts listings at 1000 without expand.
const DefaultPageSize = 1000

// Server is a running Hub and CDN. All methods are safe for concurrent use,
// including while requests are being served.
type Server struct {
	t   testing.TB
	hub *httptest.Server
	cdn *httptest.Server
	// secret signs CDN URLs so that a client that rewrites one is refused,
	// as a real signed URL would be.
	secret []byte
	done   chan struct{}
	once   sync.Once

	mu         sync.Mutex
	repos      map[string]*repo
	tokens     map[string]map[string]bool // token → repositories granted
	pageSize   int
	retryAfter int // seconds sent with an injected 429; negative: none
	blobs      map[string]blobRef
	counter    int
	faults     map[fileKey]*faults
	bytes      map[fileKey]int64
	gets       map[fileKey]int
	log        []LoggedRequest

	cdnSawAuth atomic.Bool
	manners    manners
}

// RepoOptions describe a repository when it is added.
type RepoOptions struct {
	// Gated is "", "auto" or "manual". The info and the tree of a gated
	// repository are readable by anyone; its files only with a granted token.
	Gated string
	// Private hides the repository from anyone without a granted token.
	Private bool
	// Branches to create, each at an empty first commit; the first is the
	// default branch. Empty means just "main".
	Branches []string
	// Downloads and Likes are what a search lists beside the id.
	Downloads, Likes int64
}

// FileSpec is a file to add in full. Exactly one of Content and Gen gives
// the bytes.
type FileSpec struct {
	// Branch the new commit goes on; empty means the default branch.
	Branch string
	Path   string
	// Content holds the whole file.
	Content []byte
	// Size and Gen serve a file without holding it: Gen fills p with the
	// bytes at offset off. It is called concurrently and must be pure.
	Size int64
	Gen  func(off int64, p []byte)
	// SHA256 skips hashing a generated file when the caller knows it.
	SHA256 string
	// InGit makes a small file kept in git rather than LFS: the tree shows
	// no lfs field (so no sha256 is published) and the Hub serves it
	// itself, without a redirect. Faults do not apply to such files.
	InGit bool
}

// TreeEntry is one entry of a tree listing as the Hub writes it. AddRawTree
// Entry puts one in a listing as given, to test what a client does with
// names no real file has.
type TreeEntry struct {
	Type string    `json:"type"`
	OID  string    `json:"oid"`
	Size int64     `json:"size"`
	Path string    `json:"path"`
	LFS  *TreeLFS  `json:"lfs,omitempty"`
	file *blobFile // nil for raw entries and directories
}

// TreeLFS is the lfs field of a tree entry; OID is the sha256.
type TreeLFS struct {
	OID         string `json:"oid"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

// LoggedRequest is one request either listener received.
type LoggedRequest struct {
	// Server is "hub" or "cdn".
	Server string
	Method string
	// URL is the escaped path and query, as sent.
	URL string
	// Authorization is the header as received, empty when absent.
	Authorization string
	Range         string
	Status        int
}

type repo struct {
	id       string
	gated    string
	private  bool
	disabled bool
	// downloads and likes are only listed by a search.
	downloads, likes int64
	branches         []string          // in creation order; [0] is the default
	refs             map[string]string // branch, tag or refs/pr/N → commit
	commits          map[string]*commit
}

type commit struct {
	sha     string
	entries map[string]TreeEntry // path → entry (files and raw entries)
}

// blobFile is the bytes of one file, shared by every commit that has it.
type blobFile struct {
	size    int64
	sha256  string
	oid     string // git blob id
	content []byte
	gen     func(off int64, p []byte)
	inGit   bool
}

func (f *blobFile) read(off int64, p []byte) {
	if f.gen != nil {
		f.gen(off, p)
		return
	}
	copy(p, f.content[off:])
}

type fileKey struct{ repo, path string }

// blobRef is what a signed CDN path points at.
type blobRef struct {
	key  fileKey
	file *blobFile
}

// New starts a Hub and a CDN on 127.0.0.1 and stops them when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		t:        t,
		secret:   []byte(fmt.Sprintf("hubtest-%d", time.Now().UnixNano())),
		done:     make(chan struct{}),
		repos:    map[string]*repo{},
		tokens:   map[string]map[string]bool{},
		pageSize: DefaultPageSize,
		blobs:    map[string]blobRef{},
		faults:   map[fileKey]*faults{},
		bytes:    map[fileKey]int64{},
		gets:     map[fileKey]int{},
	}
	s.hub = httptest.NewServer(s.logged("hub", http.HandlerFunc(s.serveHub)))
	s.cdn = httptest.NewServer(s.logged("cdn", http.HandlerFunc(s.serveCDN)))
	t.Cleanup(s.Close)
	return s
}

// Close stops both listeners. Slow (trickled) responses in flight end at
// once rather than holding the test open.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		s.hub.CloseClientConnections()
		s.cdn.CloseClientConnections()
		s.hub.Close()
		s.cdn.Close()
	})
}

// URL is the Hub's endpoint, what HF_ENDPOINT would be set to.
func (s *Server) URL() string { return s.hub.URL }

// CDNURL is the base of the URLs downloads are redirected to.
func (s *Server) CDNURL() string { return s.cdn.URL }

// AddRepo adds an empty repository.
func (s *Server) AddRepo(id string, opts RepoOptions) {
	s.t.Helper()
	switch opts.Gated {
	case "", "auto", "manual":
	default:
		s.t.Fatalf("hubtest: gated is \"\", \"auto\" or \"manual\", not %q", opts.Gated)
	}
	branches := opts.Branches
	if len(branches) == 0 {
		branches = []string{"main"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.repos[id]; ok {
		s.t.Fatalf("hubtest: %s was already added", id)
	}
	r := &repo{id: id, gated: opts.Gated, private: opts.Private, downloads: opts.Downloads, likes: opts.Likes,
		branches: branches, refs: map[string]string{}, commits: map[string]*commit{}}
	for _, b := range branches {
		c := &commit{sha: s.newSHA(id, "initial commit on "+b), entries: map[string]TreeEntry{}}
		r.commits[c.sha] = c
		r.refs[b] = c.sha
	}
	s.repos[id] = r
}

// AddFile adds (or replaces) a file on the default branch in a new commit,
// and returns the commit. The file is served through the CDN as LFS files are.
func (s *Server) AddFile(id, path string, content []byte) string {
	s.t.Helper()
	return s.AddFileSpec(id, FileSpec{Path: path, Content: content})
}

// AddFileFunc adds a generated file of size bytes on the default branch in a
// new commit, and returns the commit. Its sha256 is worked out now, by
// streaming gen once.
func (s *Server) AddFileFunc(id, path string, size int64, gen func(off int64, p []byte)) string {
	s.t.Helper()
	return s.AddFileSpec(id, FileSpec{Path: path, Size: size, Gen: gen})
}

// AddFileSpec adds (or replaces) a file in a new commit and returns the commit.
func (s *Server) AddFileSpec(id string, spec FileSpec) string {
	s.t.Helper()
	f := &blobFile{content: spec.Content, gen: spec.Gen, inGit: spec.InGit, size: spec.Size, sha256: spec.SHA256}
	switch {
	case spec.Gen != nil && spec.Content != nil:
		s.t.Fatalf("hubtest: %s: give Content or Gen, not both", spec.Path)
	case spec.Gen == nil:
		f.size = int64(len(spec.Content))
		sum := sha256.Sum256(spec.Content)
		f.sha256 = hex.EncodeToString(sum[:])
	case spec.Size < 0:
		s.t.Fatalf("hubtest: %s: a size cannot be negative", spec.Path)
	case f.sha256 == "":
		f.sha256 = hashGenerated(spec.Size, spec.Gen)
	}
	g := sha1.Sum([]byte(fmt.Sprintf("blob %d\x00%s", f.size, f.sha256)))
	f.oid = hex.EncodeToString(g[:])
	e := TreeEntry{Type: "file", OID: f.oid, Size: f.size, Path: spec.Path, file: f}
	if !spec.InGit {
		e.LFS = &TreeLFS{OID: f.sha256, Size: f.size, PointerSize: 134}
	}
	return s.change(id, spec.Branch, "add "+spec.Path, func(c *commit) { c.entries[spec.Path] = e })
}

// DeleteFile removes a file from the default branch in a new commit and
// returns the commit. Earlier commits keep it.
func (s *Server) DeleteFile(id, path string) string {
	s.t.Helper()
	return s.change(id, "", "delete "+path, func(c *commit) { delete(c.entries, path) })
}

// AddRawTreeEntry lists e in the default branch's tree in a new commit, as
// given, with nothing behind it: the way to make the registry name a path no
// real file could have ("../x", "a\\b", "/etc/passwd").
func (s *Server) AddRawTreeEntry(id string, e TreeEntry) string {
	s.t.Helper()
	e.file = nil
	return s.change(id, "", "raw entry", func(c *commit) { c.entries[e.Path] = e })
}

// change makes a new commit on a branch from its head, edited by edit.
func (s *Server) change(id, branch, what string, edit func(*commit)) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		s.t.Fatalf("hubtest: no repository %s; AddRepo it first", id)
		return ""
	}
	if branch == "" {
		branch = r.branches[0]
	}
	head, ok := r.refs[branch]
	if !ok {
		s.t.Fatalf("hubtest: %s has no branch %q", id, branch)
		return ""
	}
	c := &commit{sha: s.newSHA(id, head+" "+what), entries: map[string]TreeEntry{}}
	for p, e := range r.commits[head].entries {
		c.entries[p] = e
	}
	edit(c)
	r.commits[c.sha] = c
	r.refs[branch] = c.sha
	return c.sha
}

// newSHA makes a 40-hex commit id; s.mu is held.
func (s *Server) newSHA(id, what string) string {
	s.counter++
	h := sha1.Sum([]byte(fmt.Sprintf("%s\n%d\n%s", id, s.counter, what)))
	return hex.EncodeToString(h[:])
}

// Commit is the commit a branch (or tag, or refs/pr/N) points at now.
func (s *Server) Commit(id, ref string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil || r.refs[ref] == "" {
		s.t.Fatalf("hubtest: %s has no ref %q", id, ref)
		return ""
	}
	return r.refs[ref]
}

// SetRef points a ref at an existing commit. A branch's name moves the
// branch there (as a force-push would); "refs/pr/N" is a pull request's
// ref, which a client must URL-escape to reach; "refs/convert/..." a
// convert ref; any other name is a tag. The refs listing
// (GET /api/models/{id}/refs) lists each under its kind.
func (s *Server) SetRef(id, ref, commit string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil || r.commits[commit] == nil {
		s.t.Fatalf("hubtest: %s has no commit %s", id, commit)
		return
	}
	r.refs[ref] = commit
}

// AddToken makes a token valid. It reads every public repository, and the
// private and gated ones named here.
func (s *Server) AddToken(token string, grantedRepos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.tokens[token]
	if g == nil {
		g = map[string]bool{}
		s.tokens[token] = g
	}
	for _, id := range grantedRepos {
		g[id] = true
	}
}

// SetDisabled makes every request for the repository answer 403, as the Hub
// does for a repository disabled by its owner or by the Hub.
func (s *Server) SetDisabled(id string, disabled bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		s.t.Fatalf("hubtest: no repository %s", id)
		return
	}
	r.disabled = disabled
}

// SetPageSize sets how many entries a tree page holds.
func (s *Server) SetPageSize(n int) {
	if n < 1 {
		n = 1
	}
	s.mu.Lock()
	s.pageSize = n
	s.mu.Unlock()
}

// SetRetryAfter sets the Retry-After seconds sent with an injected 429
// (default 0); negative leaves the header out.
func (s *Server) SetRetryAfter(seconds int) {
	s.mu.Lock()
	s.retryAfter = seconds
	s.mu.Unlock()
}

// CDNSawAuthorization reports whether any request to the CDN carried an
// Authorization header: a client that lets the Hub token follow the
// redirect gives it to another host.
func (s *Server) CDNSawAuthorization() bool { return s.cdnSawAuth.Load() }

// BytesServed is how many bytes of a file's content have been written to
// clients (CDN bodies, and Hub bodies of files kept in git).
func (s *Server) BytesServed(id, path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes[fileKey{id, path}]
}

// Requests is how many GET requests for a file's content were answered
// (HEADs are not counted).
func (s *Server) Requests(id, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[fileKey{id, path}]
}

// ResetCounters zeroes BytesServed, Requests, the request log and
// CDNSawAuthorization.
func (s *Server) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes = map[fileKey]int64{}
	s.gets = map[fileKey]int{}
	s.log = nil
	s.cdnSawAuth.Store(false)
}

// Log is every request received so far, in order.
func (s *Server) Log() []LoggedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LoggedRequest(nil), s.log...)
}

func (s *Server) count(k fileKey, n int64) {
	s.mu.Lock()
	s.bytes[k] += n
	s.mu.Unlock()
}

// statusWriter keeps the status for the log and passes Flush and Hijack
// through, which the CDN's faults need.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) logged(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name == "cdn" && r.Header.Get("Authorization") != "" {
			s.cdnSawAuth.Store(true)
		}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		s.mu.Lock()
		s.log = append(s.log, LoggedRequest{Server: name, Method: r.Method, URL: r.URL.RequestURI(),
			Authorization: r.Header.Get("Authorization"), Range: r.Header.Get("Range"), Status: sw.status})
		s.mu.Unlock()
	})
}

// sign is the CDN URL's signature over its blob token and expiry.
func (s *Server) sign(token, expires string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(token + "\n" + expires))
	return hex.EncodeToString(m.Sum(nil))
}

// hashGenerated streams a generated file through sha256.
func hashGenerated(size int64, gen func(int64, []byte)) string {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n := int64(len(buf))
		if size-off < n {
			n = size - off
		}
		gen(off, buf[:n])
		h.Write(buf[:n])
		off += n
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Pattern returns a generator of deterministic, non-repeating bytes for
// AddFileFunc; different seeds give different files.
//
// Each 8-byte word is a multiplicative hash of its position: no short period
// that could hide an off-by-a-block error in a resume. Whole words are
// stored straight into p, four to a step, because the generator is the
// registry's work and a benchmark should spend as little of its cores on the
// registry as it can: a real registry's CPU is not the mirror's.
func Pattern(seed uint64) func(off int64, p []byte) {
	return func(off int64, p []byte) {
		pos := uint64(off)
		var w [8]byte
		i := 0
		if r := pos & 7; r != 0 { // the tail of a word cut by off
			binary.LittleEndian.PutUint64(w[:], patternWord(seed, pos>>3))
			i = copy(p, w[r:])
		}
		for ; i+32 <= len(p); i += 32 {
			q, n := p[i:i+32], (pos+uint64(i))>>3
			binary.LittleEndian.PutUint64(q[0:], patternWord(seed, n))
			binary.LittleEndian.PutUint64(q[8:], patternWord(seed, n+1))
			binary.LittleEndian.PutUint64(q[16:], patternWord(seed, n+2))
			binary.LittleEndian.PutUint64(q[24:], patternWord(seed, n+3))
		}
		for ; i+8 <= len(p); i += 8 {
			binary.LittleEndian.PutUint64(p[i:], patternWord(seed, (pos+uint64(i))>>3))
		}
		if i < len(p) { // the head of a word cut by the end of p
			binary.LittleEndian.PutUint64(w[:], patternWord(seed, (pos+uint64(i))>>3))
			copy(p[i:], w[:])
		}
	}
}

// patternWord is Pattern's word number i.
func patternWord(seed, i uint64) uint64 {
	v := (i + seed*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
	return v ^ v>>31
}

// sortedEntries lists a commit's entries and the folders they imply, by path.
func sortedEntries(c *commit) []TreeEntry {
	dirs := map[string]bool{}
	out := make([]TreeEntry, 0, len(c.entries))
	for p, e := range c.entries {
		out = append(out, e)
		for i := strings.Index(p, "/"); i > 0; {
			dirs[p[:i]] = true
			j := strings.Index(p[i+1:], "/")
			if j < 0 {
				break
			}
			i += j + 1
		}
	}
	for d := range dirs {
		if _, ok := c.entries[d]; ok {
			continue
		}
		h := sha1.Sum([]byte("tree " + d))
		out = append(out, TreeEntry{Type: "directory", OID: hex.EncodeToString(h[:]), Path: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
