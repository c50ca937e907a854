package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// localHash is what is remembered of one hashed file. A file whose size and
// modification time are unchanged is taken to be unchanged, as git and
// rsync take it.
type localHash struct {
	Size     int64  `json:"size"`
	ModTime  int64  `json:"mtime_ns"`
	SHA256   string `json:"sha256"`
	HashedAt int64  `json:"hashed_at_ns"`
}

// racyWindow is how much older than its hashing a file's modification time
// must be before its hash is trusted. A file rewritten just after it was
// hashed can keep the same size and, on a clock or filesystem that ticks
// coarsely (FAT counts in 2 s), the same modification time; without this
// its stale hash would be served forever, and every copy of it refused by
// the mirror's check.
const racyWindow = 2 * time.Second

// localCacheVersion changes when the cache file's meaning does; a file of
// another version is ignored and rebuilt.
const localCacheVersion = 1

type localCacheFile struct {
	Version int                  `json:"version"`
	Files   map[string]localHash `json:"files"`
}

// loadCache reads the cache file once. A missing, damaged or outdated file
// is no error: the cache only saves time, and the hashes are made again and
// the file rewritten.
func (l *Local) loadCache() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded || l.cacheFile == "" {
		return nil
	}
	data, err := os.ReadFile(l.cacheFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading the hash cache %s: %w; check its permissions, or delete it to hash the local models again", l.cacheFile, err)
	}
	var c localCacheFile
	if err == nil && json.Unmarshal(data, &c) == nil && c.Version == localCacheVersion {
		for k, v := range c.Files {
			l.cache[k] = v
		}
	}
	l.loaded = true
	return nil
}

// cached returns the remembered sha256 of a file, if it can be trusted.
func (l *Local) cached(lf localFile) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.cache[lf.key]
	if !ok || h.Size != lf.size || h.ModTime != lf.modTime || h.SHA256 == "" {
		return "", false
	}
	if lf.modTime > h.HashedAt-int64(racyWindow) {
		return "", false
	}
	return h.SHA256, true
}

func (l *Local) remember(lf localFile, sum string, started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cache[lf.key] = localHash{Size: lf.size, ModTime: lf.modTime, SHA256: sum, HashedAt: started.UnixNano()}
}

// prune forgets the files of a folder that are gone, so that the cache
// does not grow with every model ever removed. It says whether it forgot
// any.
func (l *Local) prune(folder string, found []localFile) bool {
	present := make(map[string]bool, len(found))
	for _, lf := range found {
		present[lf.key] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	pruned := false
	for k := range l.cache {
		if strings.HasPrefix(k, folder+"/") && !present[k] {
			delete(l.cache, k)
			pruned = true
		}
	}
	return pruned
}

// saveCache writes the cache file whole, through a temporary file renamed
// over it, so that a crash mid-write leaves the old cache and never half of
// a new one.
func (l *Local) saveCache() error {
	if l.cacheFile == "" {
		return nil
	}
	l.saveMu.Lock()
	defer l.saveMu.Unlock()

	l.mu.Lock()
	data, err := json.Marshal(localCacheFile{Version: localCacheVersion, Files: l.cache})
	l.mu.Unlock()
	if err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("saving the hash cache %s: %w; check the folder is writable", l.cacheFile, err)
	}
	dir := filepath.Dir(l.cacheFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(l.cacheFile)+".*.tmp")
	if err != nil {
		return fail(err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), l.cacheFile)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fail(err)
	}
	return nil
}
