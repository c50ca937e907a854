package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"modelserve/internal/evals"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
	"modelserve/jobs"
)

// hostileRSS is the most memory the modelserve process may hold while it
// is given hostile suites; past it the test ends the process and fails.
const hostileRSS = 1 << 30

// A suite built to exhaust the server, put through the real binary with
// the real engine: the costly schemas are refused with a sentence and the
// suite kept before is left as it was; a costly suite already kept (as an
// earlier modelserve kept it) runs to its end, its case failed with the
// sentence why; the process's memory stays bounded and it keeps answering.
func TestHostileEvalSuiteThroughTheBinary(t *testing.T) {
	engine := llamatest.Path(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	s, rss := startBinary(t, hub, engine, nil)

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("serving ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}
	good := `{"cases": [{"name": "says something", "prompt": "Say hello.", "max_tokens": 8, "expect": {"regex": "\\S"}}]}`
	if code, body := putSuite(t, s, "chatty", good); code != http.StatusOK {
		t.Fatalf("PUT a good suite: %d %s", code, body)
	}
	var before evals.Stored
	s.do("GET", "/api/v1/catalog/chatty/evals", nil, &before)

	doubling := hostileSuite(refChain(40))
	for _, tc := range []struct{ name, suite, want string }{
		{"references doubling forty times", doubling, `case 1 (\"hostile\"): expect.json_schema expands to more than 2000 subschemas`},
		{"a not chain 2,000 deep", hostileSuite(strings.Repeat(`{"not": `, 2000) + `{}` + strings.Repeat(`}`, 2000)), `case 1 (\"hostile\"): expect.json_schema nests 2001 levels deep`},
		{"a suite that grows past 1 MiB written out", wideSuite(), "the suite, written out as it is kept (indented), is"},
	} {
		code, body := putSuite(t, s, "chatty", tc.suite)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("PUT %s: %d %.300s; want 400 saying %s", tc.name, code, body, tc.want)
		}
		var after evals.Stored
		if code := s.do("GET", "/api/v1/catalog/chatty/evals", nil, &after); code != http.StatusOK || after.Digest != before.Digest || !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("after PUT %s was refused, GET answers %d with suite %s of %s; want the suite kept before, %s of %s",
				tc.name, code, after.Digest, after.UpdatedAt, before.Digest, before.UpdatedAt)
		}
	}

	// As a modelserve without the bounds kept it, with a case beside it.
	kept := strings.TrimSuffix(doubling, `]}`) + `, {"name": "says something", "prompt": "Say hello.", "max_tokens": 8, "expect": {"regex": "\\S"}}]}`
	db := testkit.OpenDBFile(t, filepath.Join(s.data, "modelserve.db"))
	_, err := db.Exec(`UPDATE eval_suites SET cases = ? WHERE model = 'chatty'`, kept)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	run := runEvals(t, s.apiServer, "chatty")
	if run.State != evals.StateDone || run.Total != 2 || len(run.Results) != 2 {
		t.Fatalf("the kept hostile suite's run ended %s (%q) with %d of %d results; want done", run.State, run.Error, len(run.Results), run.Total)
	}
	if r := run.Results[0]; r.Pass || !strings.Contains(r.Reason, `not asked: case 1 ("hostile"): expect.json_schema expands to more than 2000 subschemas`) {
		t.Errorf("the hostile case: pass %v, %q; want it failed, saying why it was not asked", r.Pass, r.Reason)
	}
	if r := run.Results[1]; !r.Pass {
		t.Errorf("the case beside it: %q, want it passed", r.Reason)
	}
	if code := s.do("GET", "/healthz", nil, nil); code != http.StatusOK {
		t.Errorf("GET /healthz after the hostile suites: %d", code)
	}
	t.Logf("modelserve's largest resident set: %d MiB", rss.Load()>>20)
}

// binaryServer is modelserve's own executable, run as an operator runs it.
type binaryServer struct {
	*apiServer
	data string
}

var listeningAt = regexp.MustCompile(`msg="modelserve listening" addr=(\S+)`)

// startBinary builds modelserve and runs it against hub and engine, on a
// free loopback port with a new data folder and an API token made by its
// own token command, with env added to its environment and args to its
// serve command. Its resident memory is watched: past hostileRSS the test
// kills it and fails. The largest seen is in the returned value.
func startBinary(t *testing.T, hub *hubtest.Server, engine string, env []string, args ...string) (*binaryServer, *atomic.Int64) {
	t.Helper()
	dir := t.TempDir()
	bin := buildModelserve(t, dir)
	data := mustMakeData(t, filepath.Join(dir, "data"))
	env = append(slices.Clip(env), binaryEnv(dir)...)
	tc := exec.Command(bin, "token", "create", "--data", data, "hostile")
	tc.Env = env
	out, err := tc.Output()
	if err != nil {
		t.Fatalf("modelserve token create: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--hf-endpoint", hub.URL(), "--llama-server", engine}, args...)...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logs testlog.Buffer
	cmd.Stdout = &logs
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	addr, done := make(chan string, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := listeningAt.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(done)
	}()
	var most atomic.Int64
	var killed atomic.Bool
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			n := residentBytes(pid)
			if n > most.Load() {
				most.Store(n)
			}
			if n > hostileRSS {
				killed.Store(true)
				syscall.Kill(-pid, syscall.SIGKILL)
				return
			}
		}
	}()
	stop := func() {
		select {
		case <-done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("modelserve (pid %d) did not stop within 30s of SIGTERM; killing its process group", pid)
				syscall.Kill(-pid, syscall.SIGKILL)
				<-done
			}
		}
		if killed.Load() {
			t.Errorf("modelserve's resident memory passed %d MiB: it was killed", hostileRSS>>20)
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("modelserve's log:\n%s", logs.String())
		}
	})
	s := &binaryServer{apiServer: &apiServer{t: t, token: strings.TrimSpace(string(out)), stop: stop}, data: data}
	select {
	case a := <-addr:
		s.base = "http://" + a
	case <-done:
		t.Fatalf("modelserve exited before listening\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("modelserve did not say it was listening within 30s\n%s", logs.String())
	}
	return s, &most
}

// residentBytes is process pid's resident memory, from /proc; 0 once it
// has gone.
func residentBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// putSuite PUTs suite as model's, answering the status and the body.
func putSuite(t *testing.T, s *binaryServer, model, suite string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.base+"/api/v1/catalog/"+model+"/evals", strings.NewReader(suite))
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// refChain is a schema of n definitions, each any of two references to
// the next: 2^n checks of one value, were each $ref followed every time.
func refChain(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref": "#/$defs/d0", "$defs": {`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d": {"anyOf": [{"$ref": "#/$defs/d%d"}, {"$ref": "#/$defs/d%d"}]}, `, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d": {"type": "string"}}}`, n)
	return b.String()
}

// hostileSuite is a suite of one JSON Schema case named hostile.
func hostileSuite(schema string) string {
	return `{"cases": [{"name": "hostile", "prompt": "Answer with JSON.", "expect": {"json_schema": ` + schema + `}}]}`
}

// wideSuite is under 1 MiB, and over it written out indented as kept.
func wideSuite() string {
	schema := strings.Repeat(`{"items": `, 29) + `{"enum": [` + strings.Repeat(`[0,0,0,0,0,0,0,0],`, 750) + `0]}` + strings.Repeat(`}`, 29)
	cases := make([]string, 5)
	for i := range cases {
		cases[i] = fmt.Sprintf(`{"name": "w%d", "prompt": "p", "expect": {"json_schema": %s}}`, i, schema)
	}
	return `{"cases": [` + strings.Join(cases, ",") + `]}`
}

// On a full data disk, putting a suite says the disk is full and what to
// do, as serving does, rather than a 500; the suite kept before stays.
func TestEvalSuiteOnAFullDisk(t *testing.T) {
	data := smallDisk(t)
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-GGUF", "tiny-Q4_K_M.gguf", ggufgen.Spec{})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: data, HFEndpoint: hub.URL()})
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Tiny-GGUF", "replicas": 0}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	if seen := s.watch(job.ID, time.Minute); seen[len(seen)-1].State != jobs.Done {
		t.Fatalf("the tiny model's job ended %+v", seen[len(seen)-1])
	}
	b := &binaryServer{apiServer: s, data: data}
	if code, body := putSuite(t, b, "tiny", `{"cases": [{"name": "a", "prompt": "p", "expect": {"regex": "."}}]}`); code != http.StatusOK {
		t.Fatalf("PUT a suite: %d %s", code, body)
	}
	fillUp(t, data)
	// Large enough that the database needs pages the disk does not have.
	cases := make([]string, evals.MaxCases)
	for i := range cases {
		cases[i] = fmt.Sprintf(`{"name": "c%d", "prompt": %q, "expect": {"regex": "."}}`, i, strings.Repeat("x", 8000))
	}
	code, body := putSuite(t, b, "tiny", `{"cases": [`+strings.Join(cases, ",")+`]}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `the eval suite of \"tiny\" could not be kept: modelserve's disk is full`) ||
		!strings.Contains(body, "free some space") {
		t.Errorf("PUT a suite on a full disk: %d %s; want 503 saying the disk is full", code, body)
	}
	var st evals.Stored
	if code := s.do("GET", "/api/v1/catalog/tiny/evals", nil, &st); code != http.StatusOK || len(st.Suite.Cases) != 1 {
		t.Errorf("after the full disk, GET answers %d with %d cases; want the suite kept before", code, len(st.Suite.Cases))
	}
}
