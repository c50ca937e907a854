package hf

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"modelserve/internal/operr"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// localOwner is the owner half of every local repository's id.
const localOwner = "local"

// Local is a registry of model folders on local disk, for models that never
// were on the Hub or that an operator has already downloaded. Each folder
// directly under the root is a repository named "local/<folder>", laid out
// as a Hub repository would be.
//
// A folder has no commits and publishes no checksums, so Local makes both:
// it hashes every file (sha256, so the mirror can check what it copies) and
// takes a digest of the listing as the commit. Hashing a 40 GB model takes
// minutes, so hashes are kept, keyed by path, size and modification time,
// and saved to a cache file that survives restarts.
type Local struct {
	root      string
	cacheFile string

	mu     sync.Mutex // guards cache and loaded
	cache  map[string]localHash
	loaded bool

	saveMu sync.Mutex // one writer of cacheFile at a time

	// onHash, when set, is told of each file just before it is hashed;
	// the tests count with it.
	onHash func(rel string)
}

var _ Registry = (*Local)(nil)

// NewLocal returns the registry of the folders under root. cacheFile is
// where file hashes are kept between runs; "" keeps them in memory only.
func NewLocal(root, cacheFile string) *Local {
	// Download URLs are absolute file URLs, so the root must be absolute;
	// Abs only fails when the working directory is gone.
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	return &Local{root: filepath.Clean(root), cacheFile: cacheFile, cache: map[string]localHash{}}
}

// localFolder returns the folder a local repository id names.
func (l *Local) localFolder(id string) (string, error) {
	owner, folder, _ := strings.Cut(id, "/")
	if owner != localOwner || CheckRepoID(id) != nil {
		return "", operr.New(operr.Invalid, "%s is not a local repository; it looks like local/<folder>, naming a folder of the models directory", operr.Quote(id))
	}
	return folder, nil
}

// List returns the ids of the repositories under the root, sorted. Hidden
// folders and folders whose names cannot be a repository name (spaces,
// leading dashes) are left out: no id could ask for them.
func (l *Local) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(l.root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, operr.Wrap(operr.Unavailable, err, "the models directory does not exist; create it, or point --models-dir at the folder that holds the models")
		}
		return nil, fmt.Errorf("reading the models directory %s: %w", l.root, err)
	}
	var ids []string
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id := localOwner + "/" + e.Name()
		if strings.HasPrefix(e.Name(), ".") || CheckRepoID(id) != nil {
			continue
		}
		// Stat follows a link, so a folder linked in from another disk
		// counts as a folder.
		if info, err := os.Stat(filepath.Join(l.root, e.Name())); err != nil || !info.IsDir() {
			continue
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// localCommitPattern is what a local commit looks like: 40 hex digits.
var localCommitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Repo lists a folder's files with their sizes and sha256, and its commit:
// a digest of that listing, which changes whenever any file does. A folder
// has only its current contents, so the only revisions are "", "main" and
// that digest.
func (l *Local) Repo(ctx context.Context, id, revision string) (Repo, error) {
	folder, err := l.localFolder(id)
	if err != nil {
		return Repo{}, err
	}
	if err := CheckRevision(revision); err != nil {
		return Repo{}, err
	}
	noRevision := func() error {
		// The registry's own cases, for errors.Is: callers treat a
		// missing folder as they treat a missing Hub repository.
		return refusal(ErrRevisionNotFound, "%s has no revision %s; a local folder has only its current contents", id, operr.Quote(revision))
	}
	// Anything that cannot be a digest is refused before hashing anything.
	if revision != "" && revision != "main" && !localCommitPattern.MatchString(revision) {
		return Repo{}, noRevision()
	}

	dir, err := l.folderPath(folder)
	if err != nil {
		return Repo{}, err
	}
	found, err := l.walk(ctx, id, folder, dir)
	if err != nil {
		return Repo{}, err
	}
	if err := l.loadCache(); err != nil {
		return Repo{}, err
	}

	files := make([]File, 0, len(found))
	changed := false
	for _, lf := range found {
		sum, ok := l.cached(lf)
		if !ok {
			if sum, err = l.hash(ctx, lf); err != nil {
				// Keep what was hashed before the failure or the cancel: on
				// a large folder that is minutes of work. The error that
				// matters is the one returned.
				if changed {
					_ = l.saveCache()
				}
				return Repo{}, fmt.Errorf("%s: hashing %s: %w", id, lf.rel, err)
			}
			changed = true
		}
		files = append(files, File{Path: lf.rel, Size: lf.size, SHA256: sum})
	}
	if l.prune(folder, found) {
		changed = true
	}
	if changed {
		if err := l.saveCache(); err != nil {
			return Repo{}, err
		}
	}

	commit := listingDigest(files)
	if revision != "" && revision != "main" && revision != commit {
		return Repo{}, noRevision()
	}
	if revision == "" {
		revision = "main"
	}
	return Repo{ID: id, Revision: revision, Commit: commit, Files: files}, nil
}

// folderPath is the real path of a repository's folder, links resolved, so
// that links inside it can be checked against it.
func (l *Local) folderPath(folder string) (string, error) {
	dir, err := filepath.EvalSymlinks(filepath.Join(l.root, folder))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", refusal(ErrNotFound, "there is no folder %s in the models directory; put the model's files in a folder of that name there, or check the name", operr.Quote(folder))
		}
		return "", fmt.Errorf("opening the model folder %s: %w", filepath.Join(l.root, folder), err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("opening the model folder %s: %w", filepath.Join(l.root, folder), err)
	}
	if !info.IsDir() {
		return "", operr.New(operr.Invalid, "local/%s is a file, not a folder; a local model is a folder of files in the models directory", folder)
	}
	return dir, nil
}

// localFile is one file found in a folder.
type localFile struct {
	rel     string // relative to the folder, "/" between folders
	key     string // "<folder>/<rel>", its name in the hash cache
	abs     string
	size    int64
	modTime int64 // Unix nanoseconds
}

// walk lists the files of the folder dir, sorted by path. It leaves out
// what is not the model: hidden files and folders (".git", the ".cache"
// that huggingface-cli download leaves), ".partial" files still being
// written, and anything that is not a regular file. A link is followed only
// when it stays inside the folder: the mirror would otherwise copy, and
// serve to every node, whatever file the link points at.
func (l *Local) walk(ctx context.Context, id, folder, dir string) ([]localFile, error) {
	var found []localFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)

		var info fs.FileInfo
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return operr.Wrap(operr.Refused, err, "%s: %s is a link to nothing; remove it or copy the file in", id, rel)
			}
			if !insideFolder(dir, target) {
				return operr.New(operr.Refused, "%s: %s is a link to a file outside the model's folder; copy the file in instead of linking it", id, rel)
			}
			if info, err = os.Stat(target); err != nil {
				return err
			}
			if info.IsDir() {
				return operr.New(operr.Refused, "%s: %s is a link to a folder, which is not followed; put the folder itself there", id, rel)
			}
		} else {
			if d.IsDir() {
				return nil
			}
			if info, err = d.Info(); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() || strings.HasSuffix(name, ".partial") {
			return nil
		}
		if err := CheckPath(rel); err != nil {
			return operr.Wrap(operr.Refused, err, "%s: %s; rename the file", id, err)
		}
		found = append(found, localFile{rel: rel, key: folder + "/" + rel, abs: p, size: info.Size(), modTime: info.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	return found, nil
}

// insideFolder says whether the real path p is dir or under it.
func insideFolder(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// hash streams a file through sha256, stopping when ctx is cancelled, and
// remembers the result.
func (l *Local) hash(ctx context.Context, lf localFile) (string, error) {
	if l.onHash != nil {
		l.onHash(lf.rel)
	}
	// Taken before reading: a file written to while it is hashed then
	// looks too new to trust next time, and is hashed again.
	started := time.Now()
	f, err := os.Open(lf.abs)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	l.remember(lf, sum, started)
	return sum, nil
}

// listingDigest is a local folder's commit: a sha1 of its sorted listing,
// 40 hex digits like a git commit, so that it fits wherever a Hub commit
// does and changes when any file's path, size or content does.
func listingDigest(files []File) string {
	h := sha1.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", f.Path, f.Size, f.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DownloadURL is a file:// URL to the file on this machine's disk, which
// Registries.Open reads from any offset, so a copy resumes as it does from
// the Hub. The commit is not part of the URL: a folder has only
// its current contents, and the mirror's sha256 check catches a file that
// changed since Repo listed it. An id that is not a local repository gives
// "".
func (l *Local) DownloadURL(id, commit, path string) string {
	folder, err := l.localFolder(id)
	if err != nil {
		return ""
	}
	abs := filepath.ToSlash(filepath.Join(l.root, folder, filepath.FromSlash(path)))
	segs := strings.Split(abs, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "file://" + strings.Join(segs, "/")
}
