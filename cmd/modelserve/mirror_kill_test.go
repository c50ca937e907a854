package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testlog"
	"modelserve/jobs"
)

// TestKilledMidFetchResumesFromItsParts kills modelserve (SIGKILL: no
// shutdown, nothing flushed) while it fetches a large file over several
// connections, starts it again on the same data folder, and finds the job
// finishing the download: the parts the saved state says were on disk are
// not fetched again, and the file matches the published sha256.
func TestKilledMidFetchResumesFromItsParts(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches 256 MiB at a CDN's pace; not in -short")
	}
	engine := llamatest.Path(t)
	const repo, file, size = "acme/Big-GGUF", "Big-Q4_K_M.gguf", 256 << 20
	hub := hubtest.New(t)
	hub.AddRepo(repo, hubtest.RepoOptions{})
	// A real header, then bytes enough for four parts.
	head, fill := ggufgen.Bytes(ggufgen.Spec{}), hubtest.Pattern(9)
	gen := func(off int64, p []byte) {
		fill(off, p)
		if off < int64(len(head)) {
			copy(p, head[off:])
		}
	}
	hub.AddFileSpec(repo, hubtest.FileSpec{Path: file, Size: size, Gen: gen})
	hub.ConnRate(2 << 20) // each connection: the fetch takes several
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		gen(off, buf)
		h.Write(buf)
	}
	want := hex.EncodeToString(h.Sum(nil))

	b := newBinaryFolder(t, hub, engine, "resumer")
	data := b.data
	run := func() *killable { return b.start(t) }
	first := run()
	s := &apiServer{t: t, base: first.base, token: b.token}
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": repo, "replicas": 0, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}

	// Killed just after the parts were saved with a good share of the
	// file behind them, so that what a resume saves is plain to see.
	var parts string
	var saved int64
	deadline := time.Now().Add(2 * time.Minute)
	for saved < size/3 {
		if time.Now().After(deadline) {
			t.Fatalf("the saved parts held %d bytes after 2 minutes; want a third of %d\n%s", saved, size, first.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
		if parts == "" {
			m, _ := filepath.Glob(filepath.Join(data, "mirror", "*", "*", "."+file+".parts"))
			if len(m) == 0 {
				continue
			}
			parts = m[0]
		}
		saved = partsDone(parts)
	}
	first.kill()
	before := hub.BytesServed(repo, file)
	hub.ResetCounters()

	second := run()
	s.base = second.base
	deadline = time.Now().Add(2 * time.Minute)
	for {
		var j jobs.Job
		if code := s.do("GET", "/api/v1/jobs/"+job.ID, nil, &j); code != http.StatusOK {
			t.Fatalf("GET the job after the restart: %d", code)
		}
		st, _ := j.Step(jobs.StepMirror)
		if st.State == jobs.Done {
			if !strings.Contains(st.Detail, "checksums match the registry") {
				t.Errorf("the mirror step says %q", st.Detail)
			}
			break
		}
		if j.Ended() || time.Now().After(deadline) {
			t.Fatalf("after the restart the job is %s, its mirror step %s: %q\n%s", j.State, st.State, st.Detail, second.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// What was in flight on a connection as a part ended or was split may
	// come twice; a fetch started over would cost the whole file again.
	after := hub.BytesServed(repo, file)
	t.Logf("saved %d MiB of %d; served %d MiB before the kill, %d after", saved>>20, size>>20, before>>20, after>>20)
	if after > size-saved+16<<20 {
		t.Errorf("after the restart the registry served %d bytes; the saved parts held %d of %d, so want at most %d (%d served before the kill)",
			after, saved, size, size-saved+16<<20, before)
	}
	local := filepath.Join(filepath.Dir(parts), file)
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(local), "."+file+".sha256")); err != nil || !strings.HasPrefix(string(b), want) {
		t.Errorf("the recorded sha256 is %q (%v), want %s", b, err, want)
	}
	f, err := os.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.Reset()
	if n, err := bufio.NewReader(f).WriteTo(h); err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want {
		t.Errorf("the mirrored file: %d bytes (%v), sha256 %x; want %d bytes, %s", n, err, h.Sum(nil), size, want)
	}
}

// partsDone is how many bytes of its file a ranged fetch's saved state says
// are on disk; 0 while it cannot be read.
func partsDone(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var s struct {
		Parts [][3]int64 `json:"parts"` // start, end, next
	}
	if json.Unmarshal(b, &s) != nil {
		return 0
	}
	var n int64
	for _, p := range s.Parts {
		n += p[2] - p[0]
	}
	return n
}

// killable is modelserve's executable running in a process group of its
// own, which the test may kill outright.
type killable struct {
	base string
	logs *testlog.Buffer
	pid  int
	done chan struct{}
}

func startKillable(t testing.TB, bin string, env []string, args ...string) *killable {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	k := &killable{logs: &testlog.Buffer{}, done: make(chan struct{})}
	cmd.Stdout = k.logs
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k.pid = cmd.Process.Pid
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			k.logs.WriteString(sc.Text() + "\n")
			if m := listeningAt.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(k.done)
	}()
	t.Cleanup(func() {
		select {
		case <-k.done:
			return
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(30 * time.Second):
			t.Errorf("modelserve (pid %d) did not stop within 30s of SIGTERM; killing its process group", k.pid)
			k.kill()
		}
	})
	select {
	case a := <-addr:
		k.base = "http://" + a
	case <-k.done:
		t.Fatalf("modelserve exited before listening\n%s", k.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("modelserve did not say it was listening within 30s\n%s", k.logs.String())
	}
	return k
}

// kill ends the process group with SIGKILL and waits for it to be gone.
func (k *killable) kill() {
	syscall.Kill(-k.pid, syscall.SIGKILL)
	<-k.done
}
