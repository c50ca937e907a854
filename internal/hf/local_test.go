package hf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// longAgo is the modification time given to test files, so that their
// hashes are old enough to trust (see racyWindow).
var longAgo = time.Now().Add(-time.Hour).Truncate(time.Second)

// mustWriteLocal writes a file under dir, making its folders, dated long ago.
func mustWriteLocal(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// hashCounter counts the files a Local hashes.
type hashCounter struct {
	mu    sync.Mutex
	paths []string
}

func (c *hashCounter) watch(l *Local) { l.onHash = c.add }

func (c *hashCounter) add(rel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, rel)
}

func (c *hashCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.paths
	c.paths = nil
	return p
}

// mustLocalRepo reads a repository and fails the test on an error.
func mustLocalRepo(t *testing.T, l *Local, id, revision string) Repo {
	t.Helper()
	r, err := l.Repo(context.Background(), id, revision)
	if err != nil {
		t.Fatalf("Repo(%q, %q): %v", id, revision, err)
	}
	return r
}

// newLocalModels makes a models directory holding one GGUF repository.
func newLocalModels(t *testing.T) (root string) {
	t.Helper()
	root = t.TempDir()
	mustWriteLocal(t, root, "qwen/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", "GGUF weights")
	mustWriteLocal(t, root, "qwen/README.md", "# Qwen")
	mustWriteLocal(t, root, "qwen/Q8_0/Qwen2.5-0.5B-Instruct-Q8_0-00001-of-00002.gguf", "shard one")
	mustWriteLocal(t, root, "qwen/Q8_0/Qwen2.5-0.5B-Instruct-Q8_0-00002-of-00002.gguf", "shard two")
	mustWriteLocal(t, root, "qwen/.git/HEAD", "ref: refs/heads/main")
	mustWriteLocal(t, root, "qwen/.cache/huggingface/download/x.metadata", "hf cli")
	mustWriteLocal(t, root, "qwen/.DS_Store", "finder")
	mustWriteLocal(t, root, "qwen/big-Q2_K.gguf.partial", "half")
	return root
}

func TestLocalRepoListsFilesWithTheirHashes(t *testing.T) {
	l := NewLocal(newLocalModels(t), "")
	r := mustLocalRepo(t, l, "local/qwen", "")

	want := []File{
		{Path: "Q8_0/Qwen2.5-0.5B-Instruct-Q8_0-00001-of-00002.gguf", Size: 9, SHA256: sha256Hex("shard one")},
		{Path: "Q8_0/Qwen2.5-0.5B-Instruct-Q8_0-00002-of-00002.gguf", Size: 9, SHA256: sha256Hex("shard two")},
		{Path: "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", Size: 12, SHA256: sha256Hex("GGUF weights")},
		{Path: "README.md", Size: 6, SHA256: sha256Hex("# Qwen")},
	}
	if !reflect.DeepEqual(r.Files, want) {
		t.Errorf("Files:\n got %+v\nwant %+v", r.Files, want)
	}
	if r.ID != "local/qwen" || r.Revision != "main" {
		t.Errorf("ID, Revision = %q, %q; want local/qwen, main", r.ID, r.Revision)
	}
	if len(r.Commit) != 40 || strings.Trim(r.Commit, "0123456789abcdef") != "" {
		t.Errorf("Commit = %q, want 40 hex digits like a git commit", r.Commit)
	}
	for _, f := range r.Files {
		if err := CheckPath(f.Path); err != nil {
			t.Errorf("listed path fails CheckPath: %v", err)
		}
	}
	if sets := Group(r.Files); len(sets) != 2 || sets[0].Name != "Q8_0/Qwen2.5-0.5B-Instruct-Q8_0" || sets[0].Shards != 2 {
		t.Errorf("Group of the listing = %+v, want the Q8_0 shards and the Q4_K_M file", sets)
	}
}

func TestLocalRepoHashesOnlyWhatChanged(t *testing.T) {
	root := newLocalModels(t)
	cacheFile := filepath.Join(t.TempDir(), "state", "local-hashes.json")
	var hashed hashCounter
	l := NewLocal(root, cacheFile)
	hashed.watch(l)

	first := mustLocalRepo(t, l, "local/qwen", "")
	if got := hashed.take(); len(got) != 4 {
		t.Fatalf("first read hashed %q, want all 4 files", got)
	}
	second := mustLocalRepo(t, l, "local/qwen", "main")
	if got := hashed.take(); len(got) != 0 {
		t.Errorf("second read of an unchanged folder hashed %q, want nothing", got)
	}
	if second.Commit != first.Commit {
		t.Errorf("commit moved from %s to %s with nothing changed", first.Commit, second.Commit)
	}

	// A restart: a new Local with the same cache file hashes nothing either.
	restarted := NewLocal(root, cacheFile)
	hashed.watch(restarted)
	again := mustLocalRepo(t, restarted, "local/qwen", first.Commit)
	if got := hashed.take(); len(got) != 0 {
		t.Errorf("after a restart, reading an unchanged folder hashed %q, want nothing", got)
	}
	if !reflect.DeepEqual(again.Files, first.Files) {
		t.Errorf("after a restart the listing changed:\n got %+v\nwant %+v", again.Files, first.Files)
	}

	// One file changes: only it is hashed, and the commit moves.
	mustWriteLocal(t, root, "qwen/README.md", "# Qwen, revised")
	changed := mustLocalRepo(t, restarted, "local/qwen", "")
	if got := hashed.take(); !reflect.DeepEqual(got, []string{"README.md"}) {
		t.Errorf("after README.md changed, hashed %q, want only README.md", got)
	}
	if changed.Commit == first.Commit {
		t.Errorf("commit stayed %s after README.md changed", changed.Commit)
	}
	if _, err := restarted.Repo(context.Background(), "local/qwen", first.Commit); err == nil ||
		!strings.Contains(err.Error(), "has no revision") {
		t.Errorf("Repo at the old commit: err = %v, want it refused as a revision the folder no longer has", err)
	}

	// No temporary files are left beside the cache.
	entries, err := os.ReadDir(filepath.Dir(cacheFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "local-hashes.json" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache folder holds %q, want only local-hashes.json", names)
	}
}

// TestLocalRepoSeesSameSizeRewrite covers a file rewritten with the same
// size and modification time just after it was hashed: its hash must not
// be taken from the cache.
func TestLocalRepoSeesSameSizeRewrite(t *testing.T) {
	root := t.TempDir()
	mustWriteLocal(t, root, "m/model-Q4_0.gguf", "aaaa")
	p := filepath.Join(root, "m", "model-Q4_0.gguf")
	recent := time.Now()
	if err := os.Chtimes(p, recent, recent); err != nil {
		t.Fatal(err)
	}
	l := NewLocal(root, "")
	before := mustLocalRepo(t, l, "local/m", "")

	if err := os.WriteFile(p, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, recent, recent); err != nil {
		t.Fatal(err)
	}
	after := mustLocalRepo(t, l, "local/m", "")
	if got := after.Files[0].SHA256; got != sha256Hex("bbbb") {
		t.Errorf("after a same-size rewrite sha256 = %s, want %s (the new content's)", got, sha256Hex("bbbb"))
	}
	if after.Commit == before.Commit {
		t.Errorf("commit stayed %s after the file's content changed", after.Commit)
	}
}

func TestLocalRepoRefuses(t *testing.T) {
	root := newLocalModels(t)
	mustWriteLocal(t, root, "notafolder", "x")
	outside := t.TempDir()
	mustWriteLocal(t, outside, "secret.gguf", "not yours")
	mustWriteLocal(t, root, "linked/config.json", "{}")
	if err := os.Symlink(filepath.Join(outside, "secret.gguf"), filepath.Join(root, "linked", "model.gguf")); err != nil {
		t.Fatal(err)
	}
	mustWriteLocal(t, root, "uplink/config.json", "{}")
	if err := os.Symlink("../qwen/README.md", filepath.Join(root, "uplink", "README.md")); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		id       string
		revision string
		want     []string // all must appear in the error
		is       error    // the registry case it must classify as, if any
	}{
		{"hub id", "bartowski/Qwen2.5-7B-Instruct-GGUF", "", []string{`"bartowski/Qwen2.5-7B-Instruct-GGUF" is not a local repository`, "local/<folder>"}, nil},
		{"climbing out", "local/..", "", []string{"is not a local repository"}, nil},
		{"nested folder", "local/qwen/Q8_0", "", []string{"is not a local repository"}, nil},
		{"bare folder name", "qwen", "", []string{"is not a local repository"}, nil},
		{"missing folder", "local/llama", "", []string{`no folder "llama"`, "in the models directory"}, ErrNotFound},
		{"a file, not a folder", "local/notafolder", "", []string{"is a file, not a folder"}, nil},
		{"branch", "local/qwen", "dev", []string{`local/qwen has no revision "dev"`, "only its current contents"}, ErrRevisionNotFound},
		{"someone else's commit", "local/qwen", strings.Repeat("ab", 20), []string{"has no revision"}, ErrRevisionNotFound},
		{"link out of the root", "local/linked", "", []string{"model.gguf is a link to", "outside the model's folder"}, nil},
		{"link to a sibling folder", "local/uplink", "", []string{"README.md is a link to", "outside the model's folder"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLocal(root, "")
			_, err := l.Repo(context.Background(), tt.id, tt.revision)
			if err == nil {
				t.Fatalf("Repo(%q, %q) succeeded; want it refused", tt.id, tt.revision)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// A sentence reaches pages and API answers: never a path of
			// this machine.
			if strings.Contains(err.Error(), root) {
				t.Errorf("error %q shows the models directory's path", err)
			}
			if msg := err.Error(); strings.HasSuffix(msg, ".") || msg[:1] != strings.ToLower(msg[:1]) && msg[0] != '"' {
				t.Errorf("error %q should start lower case and end without a period", msg)
			}
		})
	}
}

func TestLocalRepoFollowsLinksInsideTheFolder(t *testing.T) {
	root := t.TempDir()
	mustWriteLocal(t, root, "m/blobs/abc", "weights")
	if err := os.Symlink("blobs/abc", filepath.Join(root, "m", "model-F16.gguf")); err != nil {
		t.Fatal(err)
	}
	r := mustLocalRepo(t, NewLocal(root, ""), "local/m", "")
	want := []File{
		{Path: "blobs/abc", Size: 7, SHA256: sha256Hex("weights")},
		{Path: "model-F16.gguf", Size: 7, SHA256: sha256Hex("weights")},
	}
	if !reflect.DeepEqual(r.Files, want) {
		t.Errorf("Files:\n got %+v\nwant %+v", r.Files, want)
	}
}

func TestLocalRepoStopsWhenCancelled(t *testing.T) {
	root := t.TempDir()
	mustWriteLocal(t, root, "m/a.gguf", strings.Repeat("a", 3<<20))
	mustWriteLocal(t, root, "m/b.gguf", "b")
	l := NewLocal(root, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hashed hashCounter
	l.onHash = func(rel string) {
		hashed.add(rel)
		cancel()
	}
	_, err := l.Repo(ctx, "local/m", "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Repo with a cancelled context: err = %v, want context.Canceled", err)
	}
	if got := hashed.take(); len(got) != 1 {
		t.Errorf("hashing went on after cancel: started %q", got)
	}
}

func TestLocalList(t *testing.T) {
	root := newLocalModels(t)
	mustWriteLocal(t, root, "Llama-3.2-1B-Instruct/model.gguf", "x")
	mustWriteLocal(t, root, ".trash/model.gguf", "x")
	mustWriteLocal(t, root, "has space/model.gguf", "x")
	mustWriteLocal(t, root, "loose-file.gguf", "x")
	elsewhere := t.TempDir()
	mustWriteLocal(t, elsewhere, "model.gguf", "x")
	if err := os.Symlink(elsewhere, filepath.Join(root, "on-other-disk")); err != nil {
		t.Fatal(err)
	}

	got, err := NewLocal(root, "").List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"local/Llama-3.2-1B-Instruct", "local/on-other-disk", "local/qwen"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	for _, id := range got {
		if err := CheckRepoID(id); err != nil {
			t.Errorf("List gave %q, which CheckRepoID refuses: %v", id, err)
		}
	}
	// The linked folder is readable like any other.
	if r := mustLocalRepo(t, NewLocal(root, ""), "local/on-other-disk", ""); len(r.Files) != 1 {
		t.Errorf("local/on-other-disk lists %+v, want its one file", r.Files)
	}

	missing := filepath.Join(root, "nope")
	if _, err := NewLocal(missing, "").List(context.Background()); err == nil || !strings.Contains(err.Error(), "the models directory does not exist") ||
		strings.Contains(err.Error(), missing) {
		t.Errorf("List of a missing models directory: err = %v, want a sentence saying so without its path", err)
	}
}

// TestLocalDownloadURL reads a listed file the way the mirror and the
// header reader do, from an offset.
func TestLocalDownloadURL(t *testing.T) {
	root := t.TempDir()
	mustWriteLocal(t, root, "m/Q8_0/weights #1.gguf", "0123456789")
	l := NewLocal(root, "")
	r := mustLocalRepo(t, l, "local/m", "")

	u := l.DownloadURL("local/m", r.Commit, r.Files[0].Path)
	if !strings.HasPrefix(u, "file:///") || !strings.Contains(u, "weights%20%231.gguf") {
		t.Errorf("DownloadURL = %q, want a file:/// URL with the name escaped", u)
	}

	b, err := Registries{Local: l}.Open(context.Background(), u, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	body, _ := io.ReadAll(b)
	if b.Offset != 4 || b.Size != 10 || string(body) != "456789" {
		t.Errorf("Open(%s) from byte 4: offset %d, size %d, %q; want 4, 10, \"456789\"", u, b.Offset, b.Size, body)
	}

	if u := l.DownloadURL("bartowski/x", r.Commit, "a.gguf"); u != "" {
		t.Errorf("DownloadURL of a Hub id = %q, want \"\"", u)
	}
}
