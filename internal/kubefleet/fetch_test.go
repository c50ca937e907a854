package kubefleet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"modelserve/internal/kubetest"
	"modelserve/internal/mirror"
)

// TestFetchScript runs the init container's script in busybox against the
// mirror's own handler, as a pod fetches the weights: whole, resumed,
// already fetched, and refused for a wrong sha256.
func TestFetchScript(t *testing.T) {
	bin := kubetest.Busybox(t)
	mirrorDir := t.TempDir()
	content := bytes.Repeat([]byte("weights!"), 64<<10) // 512 KiB
	sum := sha256.Sum256(content)
	good := hex.EncodeToString(sum[:])
	for _, p := range []string{"tiny.gguf", "split/tiny-00002-of-00002.gguf"} {
		local := filepath.Join(mirrorDir, "org--tiny", "abc1234", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(local, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := mirror.New(mirror.Options{Dir: mirrorDir})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer node-token" {
			http.Error(w, "a token is needed", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		mu.Unlock()
		m.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := ranges
		ranges = nil
		return out
	}

	size := strconv.Itoa(len(content))
	run := func(t *testing.T, weights, files string) (string, error) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "sh"), "-c", fetchScript)
		cmd.Env = []string{"PATH=" + bin, "MODELSERVE_WEIGHTS=" + weights, "MODELSERVE_FILES=" + files,
			"MODELSERVE_MIRROR=" + srv.URL + "/mirror/org--tiny/abc1234", "MODELSERVE_MIRROR_TOKEN=node-token"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	whole := func(t *testing.T, path string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("%s is not the mirror's file (%d bytes, %v)", path, len(got), err)
		}
		if _, err := os.Stat(path + ".part"); !os.IsNotExist(err) {
			t.Errorf("%s.part is left behind", path)
		}
	}

	t.Run("fetches every file, split ones into their folder", func(t *testing.T) {
		dir := t.TempDir()
		out, err := run(t, dir, good+" "+size+" tiny.gguf\n"+good+" "+size+" split/tiny-00002-of-00002.gguf\n")
		if err != nil {
			t.Fatalf("the script failed: %v\n%s", err, out)
		}
		whole(t, filepath.Join(dir, "tiny.gguf"))
		whole(t, filepath.Join(dir, "split", "tiny-00002-of-00002.gguf"))
		if got := requests(); len(got) != 2 {
			t.Errorf("%d requests for 2 files", len(got))
		}
		// A second run (the pod restarted, the volume kept) asks nothing.
		if out, err := run(t, dir, good+" "+size+" tiny.gguf\n"); err != nil {
			t.Fatalf("the second run failed: %v\n%s", err, out)
		}
		if got := requests(); len(got) != 0 {
			t.Errorf("a file already fetched was asked for again: %q", got)
		}
	})

	t.Run("resumes a partial file from where it stopped", func(t *testing.T) {
		dir := t.TempDir()
		half := len(content) / 2
		if err := os.WriteFile(filepath.Join(dir, "tiny.gguf.part"), content[:half], 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(t, dir, good+" "+size+" tiny.gguf"); err != nil {
			t.Fatalf("the script failed: %v\n%s", err, out)
		}
		whole(t, filepath.Join(dir, "tiny.gguf"))
		if got := requests(); len(got) != 1 || got[0] != "bytes="+strconv.Itoa(half)+"-" {
			t.Errorf("the resume asked with Range %q, want bytes=%d-", got, half)
		}
	})

	t.Run("a partial file already whole is not asked for again", func(t *testing.T) {
		// The pod died between the last byte and the rename: asking again
		// from the end is answered 416, which busybox wget fails on.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "tiny.gguf.part"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(t, dir, good+" "+size+" tiny.gguf"); err != nil {
			t.Fatalf("the script failed on a whole .part: %v\n%s", err, out)
		}
		whole(t, filepath.Join(dir, "tiny.gguf"))
		if got := requests(); len(got) != 0 {
			t.Errorf("a whole .part was asked for again: %q", got)
		}
	})

	t.Run("a partial file longer than the file is fetched again", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "tiny.gguf.part"), append(content, "junk"...), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(t, dir, good+" "+size+" tiny.gguf"); err != nil {
			t.Fatalf("the script failed: %v\n%s", err, out)
		}
		whole(t, filepath.Join(dir, "tiny.gguf"))
		if got := requests(); len(got) != 1 || got[0] != "" {
			t.Errorf("a too-long .part was fetched with Range %q, want one request from the start", got)
		}
	})

	t.Run("a wrong sha256 fails the container and keeps nothing", func(t *testing.T) {
		dir := t.TempDir()
		out, err := run(t, dir, strings.Repeat("0", 64)+" "+size+" tiny.gguf")
		if err == nil {
			t.Fatalf("the script passed a file whose sha256 is wrong:\n%s", out)
		}
		if !strings.Contains(out, "tiny.gguf is not what the mirror's sha256 says it is") {
			t.Errorf("the container's last words do not say why:\n%s", out)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("a file that failed its check was kept: %v", entries)
		}
		requests()
	})
}
