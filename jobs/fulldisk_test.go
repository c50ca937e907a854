package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
)

// MustSmallDisk mounts a tmpfs of size bytes and returns its folder: a
// disk that really fills. Mounting needs root; make test runs as root, so
// it is skipped only for a user who is not.
func MustSmallDisk(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a size-limited filesystem is a tmpfs mounted by root, and this test runs as another user")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mounting a %d-byte tmpfs on %s as root: %v", size, dir, err)
	}
	// Registered after TempDir's removal, so it runs before it; and before
	// whatever the test opens on the disk after this, which closes first.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until the disk has no byte left, and
// returns it.
func fillDisk(t testing.TB, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		_, err := f.Write(buf)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The last bytes a page at a time: a write of 64 KiB that did not fit
	// may leave a few pages free.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
	return name
}

// TestFullDiskFailsJobsInASentenceAndSavesThemOnceThereIsRoom runs four
// fetches at once on a 20 MB disk that also holds the database. Each
// passes the free-space check; then something else takes the rest of the
// disk, as on a shared disk, and the fetches and the database's writes both
// meet a full disk. No job may stay running, each says why in a sentence,
// the jobs as read show the truth though the database could not take it,
// and once there is room again the database has it too.
func TestFullDiskFailsJobsInASentenceAndSavesThemOnceThereIsRoom(t *testing.T) {
	disk := MustSmallDisk(t, 20<<20)
	e := &testEnv{t: t, hub: hubtest.New(t), mirrorDir: filepath.Join(disk, "mirror")}
	db := testkit.OpenDBFile(t, filepath.Join(disk, "modelserve.db"))
	e.db, e.catalog = db, catalog.NewStore(db)
	e.client = MustClient(t, e.hub, "")
	e.mirror = MustMirror(t, e.mirrorDir, e.client)
	e.deps = Deps{DB: db, Catalog: e.catalog, Registry: e.client, Mirror: e.mirror, EngineBuild: 6000, Log: quietLog()}
	e.srv = MustServer(t, e.deps)

	const n, fileSize = 4, 3 << 20
	var ids []string
	for i := range n {
		repo, file := fmt.Sprintf("acme/Big%d-GGUF", i), fmt.Sprintf("big%d-Q4_K_M.gguf", i)
		e.addModel(repo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{file: {Name: repo, PadTo: fileSize}})
		// Slow enough that every fetch is under way, its room promised,
		// before the disk fills.
		e.hub.Trickle(repo, file, 256<<10)
		ids = append(ids, MustStart(t, e.srv, Request{Repo: repo, Replicas: 1}).ID)
	}
	ctx := context.Background()
	testkit.WaitFor(t, 20*time.Second, "every job fetching", func() (bool, string) {
		for _, id := range ids {
			j, _ := e.srv.Get(ctx, id)
			if st, ok := j.Step(StepMirror); !ok || st.BytesDone == 0 {
				return false, fmt.Sprintf("job %s: %s, %d bytes fetched", id, j.State, st.BytesDone)
			}
		}
		return true, ""
	})
	filler := fillDisk(t, disk)

	// 1. Every job ends, failed, saying the disk is full and what to do,
	// in a sentence: no Go error's words, no path on this machine.
	ended := map[string]Job{}
	for _, id := range ids {
		ended[id] = MustEnd(t, e.srv, id)
	}
	for id, j := range ended {
		if j.State != Failed {
			t.Errorf("job %s on a full disk ended %s (%q), want failed", id, j.State, j.Error)
		}
		for _, bad := range []string{"no space left on device", disk, "unexpected error"} {
			if strings.Contains(j.Error, bad) {
				t.Errorf("job %s failed with %q, which says %q to the operator", id, j.Error, bad)
			}
		}
		if !strings.Contains(j.Error, "disk is full") || !strings.Contains(j.Error, "free some space") {
			t.Errorf("job %s failed with %q, want a sentence saying the disk is full and to free some space", id, j.Error)
		}
	}
	// 2. Read back as the API and the console read them, they are failed,
	// though the database could not take it.
	list, _, err := e.srv.List(ctx, ListOptions{})
	if err != nil {
		t.Fatalf("listing jobs on a full disk: %v", err)
	}
	if len(list) != n {
		t.Fatalf("the list has %d jobs, want %d", len(list), n)
	}
	for _, j := range list {
		if j.State != Failed || j.Error != ended[j.ID].Error {
			t.Errorf("the list shows job %s %s (%q), want it failed as it ended", j.ID, j.State, j.Error)
		}
	}
	stored := storedStates(t, db, ids)
	unsaved := 0
	for _, id := range ids {
		if stored[id] == Running {
			unsaved++
		}
		j, err := e.srv.Get(ctx, id)
		if err != nil || j.State != Failed {
			t.Errorf("Get(%s) on a full disk: %s, %v; want it failed", id, j.State, err)
		}
	}
	if unsaved == 0 {
		t.Errorf("the database took every job's end on a full disk (%v): the test did not fill it", stored)
	}
	// Cancelling one is refused with a sentence, not an internal error.
	_, err = e.srv.Cancel(ctx, ids[0])
	if oe, ok := operr.As(err); !ok || oe.Kind != operr.Conflict {
		t.Errorf("cancelling a failed job on a full disk: %v, want a conflict said in a sentence", err)
	}
	// A new job is refused in a sentence too.
	_, err = e.srv.Start(ctx, Request{Repo: "acme/Big0-GGUF", Replicas: 1})
	if msg, ok := operr.Sentence(err); !ok || !strings.Contains(msg, "disk is full") {
		t.Errorf("starting a job on a full disk: %v, want a sentence saying the disk is full", err)
	}
	// What was fetched stays for a retry: the cause was no fault of the
	// files.
	if got := partials(t, e.mirrorDir); len(got) != n {
		t.Errorf("the mirror keeps %d partial files after a full disk, want the %d fetched so far: %v", len(got), n, got)
	}

	// 3. Room again: the database comes to hold the truth, without
	// anyone doing anything but freeing space.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		stored = storedStates(t, db, ids)
		all := true
		for _, id := range ids {
			all = all && stored[id] == Failed
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after space was freed, the database has the jobs as %v, want every one failed", stored)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range ids {
		j, _, err := load(ctx, db, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Error != ended[id].Error || MustStep(t, j, StepMirror).State != Failed {
			t.Errorf("the database has job %s as %q with steps %+v, want it as it ended: %q", id, j.Error, j.Steps, ended[id].Error)
		}
	}

	// 4. A retry carries on from what was fetched, and gets there.
	e.hub.Trickle("acme/Big0-GGUF", "big0-Q4_K_M.gguf", 0)
	retried, err := e.srv.Retry(ctx, ids[0])
	if err != nil {
		t.Fatalf("retrying once there is room: %v", err)
	}
	if j := MustEnd(t, e.srv, retried.ID); j.State != Done {
		t.Errorf("the retry ended %s: %q", j.State, j.Error)
	}
}

// storedStates are the jobs' states as the database has them.
func storedStates(t testing.TB, db *sql.DB, ids []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range ids {
		var state string
		if err := db.QueryRowContext(context.Background(), `SELECT state FROM jobs WHERE id = ?`, id).Scan(&state); err != nil {
			t.Fatalf("reading job %s from the database: %v", id, err)
		}
		out[id] = state
	}
	return out
}
