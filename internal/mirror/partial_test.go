package mirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"modelserve/internal/operr"
)

// What a failed fetch leaves depends on why it failed: bytes that a retry
// can continue are kept, bytes no retry can use are removed rather than
// left to take room on the disk.
func TestFailedFetchKeepsPartialBytesOnlyForAResume(t *testing.T) {
	const size = 1 << 20
	content := randomish(size, 21)
	for _, tc := range []struct {
		name   string
		status int // what the CDN answers, every time; 0: the Hub has no such file
		kept   bool
		saying string
	}{
		{name: "the registry no longer has the file", kept: false, saying: "gone.gguf"},
		{name: "the registry stays busy through every retry", status: 503, kept: true, saying: "could not be fetched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			f := addFile(t, srv, "tiny.gguf", content)
			m := newMirror(t, srv, func(o *Options) { o.MaxRetries = 2 })
			local, _ := m.LocalPath(f.Model, f.Revision, f.Path)
			os.MkdirAll(filepath.Dir(local), 0o755)
			if err := os.WriteFile(local+".partial", content[:size/2], 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.status != 0 {
				srv.FailNext(repoID, f.Path, tc.status, 10)
			} else {
				f.URL = strings.Replace(f.URL, "/tiny.gguf", "/gone.gguf", 1)
			}

			_, err := m.Fetch(context.Background(), []File{f}, nil)
			msg, said := operr.Sentence(err)
			if !said || !strings.Contains(msg, tc.saying) {
				t.Fatalf("Fetch: %v, want a sentence saying %q", err, tc.saying)
			}
			st, statErr := os.Stat(local + ".partial")
			switch {
			case tc.kept && (statErr != nil || st.Size() != size/2):
				t.Errorf("the partial file a retry continues is gone or changed (%v)", statErr)
			case !tc.kept && statErr == nil:
				t.Errorf("the partial file of a file the registry refuses was kept (%d bytes)", st.Size())
			}
		})
	}
}

// On a disk that fills as it writes, the fetch fails in a sentence that
// says so and what to do, not "no space left on device" with a path, and
// what it wrote stays for a retry once there is room.
func TestFullDiskIsSaidInASentence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a size-limited filesystem is a tmpfs mounted by root, and this test runs as another user")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", 2<<20)); err != nil {
		t.Fatalf("mounting a 2 MB tmpfs on %s as root: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs on %s: %v", dir, err)
		}
	})
	srv := newHub(t)
	f := addFile(t, srv, "big.gguf", randomish(4<<20, 22))
	m := newMirror(t, srv, func(o *Options) {
		o.Dir = dir
		// As a disk shared with other writers does: room when the fetch
		// was checked, none when it writes.
		o.FreeSpace = func(string) (uint64, error) { return 1 << 30, nil }
	})

	_, err := m.Fetch(context.Background(), []File{f}, nil)
	msg, said := operr.Sentence(err)
	if !said || !strings.HasPrefix(msg, "the mirror's disk is full: big.gguf could not be written; free some space") {
		t.Fatalf("Fetch on a full disk: %v, want the operator's sentence", err)
	}
	if strings.Contains(msg, dir) || strings.Contains(msg, "no space left") {
		t.Errorf("the sentence %q has a path or the system's words", msg)
	}
	if oe, _ := operr.As(err); oe.Kind != operr.Unavailable || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("the error is %s and keeps ENOSPC %v, want unavailable, keeping it for the log", oe.Kind, errors.Is(err, syscall.ENOSPC))
	}
	local, _ := m.LocalPath(f.Model, f.Revision, f.Path)
	if st, err := os.Stat(local + ".partial"); err != nil || st.Size() == 0 {
		t.Errorf("what was fetched before the disk filled is gone (%v)", err)
	}
}
