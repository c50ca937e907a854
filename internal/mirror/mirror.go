// Package mirror keeps model files in the data directory, fetched from a
// registry, checked against the sha256 the registry published, and serves
// them over HTTP to the nodes that run replicas.
//
// Model files are tens of gigabytes, and fetching them by hand fails in dull
// ways that cost hours: a connection cut at 80% and a download started over,
// a CDN that ignores a Range request and appends the whole file to the half
// already there, a corrupted copy noticed only when a replica will not load
// it on every node, two jobs fetching the same shard side by side, a disk
// that fills up at 95%. The mirror fetches each file once, hashing as the
// bytes arrive, continues a partial file where it stopped, retries what is
// worth retrying, refuses to start what will not fit, and only ever shows a
// file to the nodes once it is whole and verified.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"modelserve/internal/operr"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/words"
)

// Metrics counts what the mirror fetches.
type Metrics interface {
	MirrorFetched(n int64)
	MirrorFailed()
}

// Registry opens the files the mirror fetches by the URL File.URL holds,
// from an offset to the file's end (n is 0): hf.Registries, or an
// hf.Client. It alone decides which requests carry the registry's token;
// the mirror never sees it.
type Registry interface {
	Open(ctx context.Context, downloadURL string, offset, n int64) (*hf.Body, error)
}

// Options configure a Mirror. Only Dir is required.
type Options struct {
	// Dir holds the files: <Dir>/<model>/<revision>/<path>. Usually <data>/mirror.
	Dir string
	// Registry reads the files; nil reads file:// URLs (the local-folder
	// registry's) only.
	Registry Registry
	// StallTimeout is how long no byte may arrive before the try counts
	// as failed and the next one resumes; default 60s.
	StallTimeout time.Duration
	// MaxRetries is how many times one file is tried again after a
	// transient failure; default 5. Negative means none.
	MaxRetries int
	// Backoff is the first wait before a retry, doubled for each further
	// one (at most a minute); default 1s.
	Backoff time.Duration
	// FreeSpace reports the bytes free for an unprivileged user in dir;
	// default statfs(2).
	FreeSpace func(dir string) (uint64, error)
	// ProgressEvery is the least time between two progress reports of a
	// Fetch; default 250ms.
	ProgressEvery time.Duration
	// Parallel is how many files are fetched at once across all callers;
	// default 4. More than a few only splits the same bandwidth.
	Parallel int
	// Connections is the most connections one file is fetched over at
	// once, from a registry that serves Range; default 16. 1 fetches each
	// file in one stream.
	Connections int
	// Fixed runs Connections from the start; by default a file starts
	// with 2 and the count is found as it arrives (adapt.go).
	Fixed bool
	// PartSize is how a ranged fetch cuts the file; default 64 MiB. A file
	// smaller than two parts comes in one stream.
	PartSize int64
	// RateWindow is how often a ranged fetch measures its connections and
	// chooses their count; default 500ms.
	RateWindow time.Duration
	// DownloadRate caps the bytes a second all fetches together take from
	// registries (--download-rate); 0 is no cap.
	DownloadRate int64
	// Metrics, when set, is told of bytes arriving and of files given up
	// on (internal/metrics implements it).
	Metrics Metrics
	// HFCache is the operator's Hugging Face cache (hf.HubCache): a file
	// already there with the published sha256 is linked or copied from it
	// rather than downloaded again (hfcache.go). "" looks nowhere.
	HFCache string
	// Log receives retries and failures; nil uses slog.Default().
	Log *slog.Logger
}

// Mirror is the set of files under one directory. Its methods are safe for
// concurrent use; two Mirrors must not share a directory at the same time.
type Mirror struct {
	dir   string
	opts  Options
	log   *slog.Logger
	slots chan struct{} // one token per file being fetched
	// limiter holds every fetch together to DownloadRate; nil for none.
	limiter *limiter

	mu      sync.Mutex
	flights map[string]*flight // local path → the fetch in progress
	failed  map[string]failure // local path → why the last fetch failed
}

// failure is what List shows for a file whose last fetch failed, until it
// is fetched again or removed.
type failure struct {
	file File
	err  string
	at   time.Time
}

// File is one file to have on the mirror.
type File struct {
	// Model is the catalog name: [a-z0-9][a-z0-9._-]*.
	Model string
	// Revision is the commit, short (7 hex digits or more).
	Revision string
	// Path is the file's path in the repository, "/" between folders.
	Path string
	// URL is where to fetch it: http(s), or file for a local folder.
	URL  string
	Size int64
	// SHA256 is the hex sha256 the registry published; "" checks the size only.
	SHA256 string
}

// State is where a file stands.
type State string

const (
	Queued   State = "queued"   // waiting for a free download slot
	Fetching State = "fetching" // bytes arriving
	Present  State = "present"  // whole and verified, served to nodes
	Failed   State = "failed"   // the last fetch failed; Err says why
	// Partial is a file part-fetched and not being fetched now (stopped by
	// a restart or a cancelled job); the next Fetch continues it.
	Partial State = "partial"
)

// FileProgress is how far one file of a Fetch has come.
//
// The json tags are the API's names (snake_case, like every route's).
type FileProgress struct {
	Path       string `json:"path"`
	State      State  `json:"state"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"`
	// Connections is how many connections the file comes over now.
	Connections int    `json:"connections,omitempty"`
	Err         string `json:"error,omitempty"`
}

// Progress is how far a Fetch has come, per file and in all.
type Progress struct {
	Files      []FileProgress `json:"files"`
	BytesDone  int64          `json:"bytes_done"`
	BytesTotal int64          `json:"bytes_total"`
	// Connections is how many connections its files come over now, in all.
	Connections int `json:"connections,omitempty"`
}

// Fetched says how far a download has come, as the job and mirror pages
// and the job's mirror step say it: "3.1 of 4.9 GB (63%)", and ", over 4
// connections" when it comes over more than one.
func Fetched(done, total int64, connections int) string {
	s := words.SizeOf(done, total) + " (" + words.Percent(float64(done)/float64(total)) + ")"
	if connections > 1 {
		s += fmt.Sprintf(", over %d connections", connections)
	}
	return s
}

// Entry is one file List knows of: on disk, partial, being fetched, or
// failed. GET /api/v1/mirror serves it as it is, under these json names.
type Entry struct {
	Model    string `json:"model"`
	Revision string `json:"revision"`
	Path     string `json:"path"`
	// Size is the bytes on disk (the partial file's, for one not present).
	Size int64 `json:"size"`
	// SHA256 is the verified sha256 of a present file; "" when the file
	// was put there by hand and never checked.
	SHA256     string `json:"sha256,omitempty"`
	State      State  `json:"state"`
	BytesDone  int64  `json:"bytes_done"`
	BytesTotal int64  `json:"bytes_total"` // 0 when unknown (a partial file left by a restart)
	// Connections is how many connections a file being fetched comes
	// over now.
	Connections int `json:"connections,omitempty"`
	// Err is why the last fetch failed, for a Failed file.
	Err      string    `json:"error,omitempty"`
	Modified time.Time `json:"modified,omitzero"`
}

// ErrNotFound is wrapped by errors about files the mirror does not have.
var ErrNotFound = errors.New("it is not on the mirror")

// New returns the mirror in o.Dir, creating the directory.
func New(o Options) (*Mirror, error) {
	if o.Dir == "" {
		return nil, errors.New("the mirror needs a directory to keep files in (Options.Dir)")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve the mirror directory %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create the mirror directory %s: %w", dir, err)
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 60 * time.Second
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.FreeSpace == nil {
		o.FreeSpace = freeSpace
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 250 * time.Millisecond
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Connections <= 0 {
		o.Connections = 16
	}
	if o.PartSize <= 0 {
		o.PartSize = 64 << 20
	}
	if o.RateWindow <= 0 {
		o.RateWindow = 500 * time.Millisecond
	}
	if o.Registry == nil {
		o.Registry = hf.Registries{}
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Mirror{
		dir:     dir,
		opts:    o,
		log:     log,
		slots:   make(chan struct{}, o.Parallel),
		limiter: newLimiter(o.DownloadRate),
		flights: map[string]*flight{},
		failed:  map[string]failure{},
	}, nil
}

// LocalPath is where a file is (or would be) kept, after checking every
// name that goes into it.
func (m *Mirror) LocalPath(model, revision, p string) (string, error) {
	if err := checkNames(model, revision, p); err != nil {
		return "", err
	}
	return filepath.Join(m.dir, model, revision, filepath.FromSlash(p)), nil
}

// Shown is a path on the mirror as an answer may show it: relative to the
// mirror ("chatty/3f2a1b0/chatty-Q4_K_M.gguf", as GET /api/v1/mirror lists
// its files), never where this machine keeps it. A path outside the mirror
// shows as "".
func (m *Mirror) Shown(local string) string {
	rel, err := filepath.Rel(m.dir, local)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return ""
	}
	return filepath.ToSlash(rel)
}

// ShownText is text that may quote paths on the mirror (an engine's log
// line: "loading model '/srv/data/mirror/chatty/...'") with each written
// relative to the mirror, as Shown writes one.
func (m *Mirror) ShownText(text string) string {
	return strings.ReplaceAll(text, m.dir+string(filepath.Separator), "")
}

var (
	modelPattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	revisionPattern = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
	sha256Pattern   = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// checkNames refuses anything that could not safely become a folder or file
// name under the mirror's directory. Names come from a registry and from
// requests; none reaches the filesystem before passing here.
func checkNames(model, revision, p string) error {
	if !modelPattern.MatchString(model) || len(model) > 128 {
		return operr.New(operr.Invalid, "%s is not a model name; it is lower-case letters, digits, '.', '_' and '-', starting with a letter or digit", operr.Quote(model))
	}
	if !revisionPattern.MatchString(revision) {
		return operr.New(operr.Invalid, "%s is not a revision the mirror keeps files under; it is a commit, 7 to 64 lower-case hex digits", operr.Quote(revision))
	}
	if err := hf.CheckPath(p); err != nil {
		return err
	}
	if reserved(path.Base(p)) {
		return operr.New(operr.Refused, "the registry named a file %s, a name the mirror keeps for its own bookkeeping; it is not fetched", operr.Quote(p))
	}
	return nil
}

// The mirror's own files sit beside the files they are about: <name>.partial
// while bytes arrive, and a hidden .<name>.sha256 once verified. The sidecar
// is hidden so that it cannot collide with a checksum file a repository
// publishes (model.gguf.sha256).
const (
	partialSuffix = ".partial"
	sidecarSuffix = ".sha256"
	tmpSuffix     = ".tmp"
)

func partialPath(local string) string { return local + partialSuffix }

func sidecarPath(local string) string {
	return filepath.Join(filepath.Dir(local), "."+filepath.Base(local)+sidecarSuffix)
}

// reserved says whether a file name is one of the mirror's own.
func reserved(name string) bool {
	if strings.HasSuffix(name, partialSuffix) {
		return true
	}
	return strings.HasPrefix(name, ".") &&
		(strings.HasSuffix(name, sidecarSuffix) || strings.HasSuffix(name, sidecarSuffix+tmpSuffix) ||
			strings.HasSuffix(name, partsSuffix) || strings.HasSuffix(name, partsSuffix+tmpSuffix))
}
