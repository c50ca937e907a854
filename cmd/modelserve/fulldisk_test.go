package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// With the data folder on a disk that fills while jobs fetch, as a disk
// shared with other writers does, the jobs end failed in a sentence, the
// API shows them failed though the database could not take it, cancelling
// one and removing a model answer in sentences rather than 500, and once
// there is room the database has the truth.
func TestFullDataDiskThroughTheAPI(t *testing.T) {
	data := smallDisk(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-GGUF", "tiny-Q4_K_M.gguf", ggufgen.Spec{})
	mustMakeData(t, data)
	mustRun(t, "a long enough password\n", "user", "add", "--data", data, "alice")
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL()})

	// A model in the catalog, loaded on demand: something to remove later.
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-GGUF", "replicas": 0}, &job); code != 202 {
		t.Fatalf("serve: %d", code)
	}
	if seen := s.watch(job.ID, time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("the tiny model's job ended %+v", seen[len(seen)-1])
	}

	var ids []string
	for i := range 3 {
		repo, file := fmt.Sprintf("acme/Big%d-GGUF", i), fmt.Sprintf("big%d-Q4_K_M.gguf", i)
		hub.AddRepo(repo, hubtest.RepoOptions{})
		hub.AddFile(repo, file, ggufgen.Bytes(ggufgen.Spec{Name: repo, PadTo: 3 << 20}))
		hub.Trickle(repo, file, 256<<10)
		if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "replicas": 0}, &job); code != 202 {
			t.Fatalf("serve %s: %d", repo, code)
		}
		ids = append(ids, job.ID)
	}
	testkit.WaitFor(t, 30*time.Second, "every job fetching", func() (bool, string) {
		for _, id := range ids {
			var j jobs.Job
			s.do("GET", "/api/v1/jobs/"+id, nil, &j)
			if st, ok := j.Step(jobs.StepMirror); !ok || st.BytesDone == 0 {
				return false, jobSaw(j)
			}
		}
		return true, ""
	})
	filler := fillUp(t, data)

	ended := map[string]jobs.Job{}
	testkit.WaitFor(t, 30*time.Second, "every job ended", func() (bool, string) {
		for _, id := range ids {
			var j jobs.Job
			s.do("GET", "/api/v1/jobs/"+id, nil, &j)
			if !j.Ended() {
				return false, jobSaw(j)
			}
			ended[id] = j
		}
		return true, ""
	})
	for id, j := range ended {
		if j.State != jobs.Failed || !strings.Contains(j.Error, "disk is full") || strings.Contains(j.Error, "no space left") ||
			strings.Contains(j.Error, data) {
			t.Errorf("job %s ended %s: %q, want failed with a sentence saying the disk is full", id, j.State, j.Error)
		}
	}
	var e struct{ Error string }
	if code := s.do("POST", "/api/v1/jobs/"+ids[0]+"/cancel", nil, &e); code != 409 || !strings.Contains(e.Error, "already ended") {
		t.Errorf("cancelling a job failed on a full disk: %d %q, want 409 with a sentence", code, e.Error)
	}
	e.Error = ""
	switch code := s.do("DELETE", "/api/v1/catalog/tiny", nil, &e); {
	case code == 503 && strings.Contains(e.Error, "disk is full") && strings.Contains(e.Error, "free some space"):
	case code == 204: // the database had room left in its log for it
		t.Logf("the database took the removal of a model on a full disk")
	default:
		t.Errorf("removing a model on a full disk: %d %q, want 503 saying the disk is full (or 204)", code, e.Error)
	}

	// Signing in writes a session: on a full disk the form says so.
	c := newConsole(t, s.base, nil)
	c.page("/login")
	resp := c.do("POST", "/login", url.Values{"name": {"alice"}, "password": {"a long enough password"}, "csrf": {c.csrf}})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == 503 && strings.Contains(string(b), "you could not be signed in: modelserve&#39;s disk is full"):
	case resp.StatusCode == http.StatusSeeOther: // the database had room left in its log for it
		t.Logf("the database took a session on a full disk")
	default:
		t.Errorf("signing in on a full disk: %s, want 503 saying the disk is full (or signed in):\n%.400s", resp.Status, b)
	}

	// Room again: the saves the full disk refused are retried (at most
	// 30 s apart) until the database says what the API said; then the
	// process stops, as it may at any time.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	live := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	testkit.WaitFor(t, 40*time.Second, "the jobs saved as failed once there was room", func() (bool, string) {
		for _, id := range ids {
			var state, msg string
			if err := live.QueryRow(`SELECT state, error FROM jobs WHERE id = ?`, id).Scan(&state, &msg); err != nil {
				return false, err.Error()
			}
			if state != jobs.Failed || msg != ended[id].Error {
				return false, fmt.Sprintf("job %s %s (%q)", id, state, msg)
			}
		}
		return true, ""
	})
	live.Close()
	s.stop()
	db := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	defer db.Close()
	for _, id := range ids {
		var state, msg string
		if err := db.QueryRow(`SELECT state, error FROM jobs WHERE id = ?`, id).Scan(&state, &msg); err != nil {
			t.Fatal(err)
		}
		if state != jobs.Failed || msg != ended[id].Error {
			t.Errorf("once there was room, the database has job %s %s (%q), want it failed as the API said", id, state, msg)
		}
	}
}

// smallDisk is a data folder on a 20 MB filesystem of its own, which a
// test can fill: a tmpfs, which root mounts (the test is skipped for
// another user).
func smallDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a size-limited filesystem is a tmpfs mounted by root, and this test runs as another user")
	}
	data := t.TempDir()
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", 20<<20)); err != nil {
		t.Fatalf("mounting a 20 MB tmpfs on %s as root: %v", data, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(data, 0); err != nil {
			t.Errorf("unmounting the tmpfs on %s: %v", data, err)
		}
	})
	return data
}

// jobSaw is a job as a wait for it last saw it: its state and steps.
func jobSaw(j jobs.Job) string {
	return fmt.Sprintf("job %s %s, steps %+v", j.ID, j.State, j.Steps)
}

// fillUp writes a file in dir until the disk has no byte left, and
// returns it.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := len(buf); n > 0; {
		if _, err := f.Write(buf[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			n /= 2 // what is left may be less than a buffer
		}
	}
	return name
}
