//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/hubtest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testlog"
)

// chromium is Debian's browser; Playwright's own builds cannot be fetched
// here.
const chromium = "/usr/bin/chromium"

// chromiumFlags keep Chromium off the network: without the background
// networking flags it keeps trying Google's hosts, and the closed network
// refuses those connections many at a time.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
}

// The operator the tests sign in as, added with `modelserve user add`
// before the server starts.
const (
	operator = "operator"
	password = "e2e-operator-passphrase"
)

// Timeouts, so that a page that never shows what it should fails the test
// in seconds rather than hang the run.
const (
	// quick is for what follows a click at once.
	quick = 10 * time.Second
	// jobLimit is for a whole job: a download of a few seconds, then an
	// engine loading a tiny model and answering once.
	jobLimit = 3 * time.Minute
)

// env is one scenario's world: a Hub, the server pointed at it, and a
// browser. Cleanups run in reverse: the browser closes first, so that no
// event stream holds the server's shutdown open, then the server stops, then
// the Hub.
type env struct {
	t       *testing.T
	hub     *hubtest.Server
	srv     *server
	front   *front
	browser playwright.Browser
}

// setup starts a scenario's world; flags are more of the server's own (a
// machine of less memory).
func setup(t *testing.T, flags ...string) *env {
	t.Helper()
	hub := hubtest.New(t)
	srv := startServer(t, hub, flags...)
	e := &env{t: t, hub: hub, srv: srv, front: newFront(t, strings.TrimPrefix(srv.URL, "http://"))}
	e.browser = launch(t)
	return e
}

// front is a loopback relay between the browser and the server that a test
// can cut as a network would: every open connection drops at once, an event
// stream's included, and new ones are closed as they arrive until it is
// restored. (Chromium's offline emulation leaves an open event stream
// flowing, so it cannot stand in for a dropped connection.)
type front struct {
	URL      string
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newFront(t *testing.T, upstream string) *front {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{URL: "http://" + ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !f.track(c) {
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.relay(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.cut()
		wg.Wait()
	})
	return f
}

// track keeps c to be cut later; false when the front is down.
func (f *front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *front) relay(c net.Conn) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", f.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !f.track(u) {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		u.Close()
		close(done)
	}()
	io.Copy(c, u)
	c.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, u)
	f.mu.Unlock()
}

// cut drops every connection and refuses new ones.
func (f *front) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// restore lets connections through again.
func (f *front) restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
}

// engine is llama-server's path. Without it every scenario would be
// skipped, so its absence is a failure here, whatever the environment.
func engine(t *testing.T) string {
	t.Helper()
	t.Setenv("MODELSERVE_REQUIRE_ENGINE", "1")
	return llamatest.Path(t)
}

// server is `modelserve serve` running as a process.
type server struct {
	t     *testing.T
	URL   string
	data  string
	token string
	cmd   *exec.Cmd
	log   *testlog.Buffer
	done  chan struct{}
	err   error // Wait's, once done is closed
}

var listening = regexp.MustCompile(`msg="modelserve listening" addr=(\S+)`)

// startServer adds the operator and an API token to a new data directory,
// the way an operator would with the CLI, then starts the server on a free
// loopback port against hub and the test engine. It is stopped with SIGTERM
// at cleanup, which must end it cleanly.
func startServer(t *testing.T, hub *hubtest.Server, flags ...string) *server {
	t.Helper()
	s := &server{t: t, data: t.TempDir(), log: &testlog.Buffer{}, done: make(chan struct{})}
	llama := engine(t)
	cli := func(stdin string, args ...string) string {
		t.Helper()
		c := exec.Command(binary, args...)
		c.Env = s.environ(t)
		c.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("modelserve %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	cli("", "init", "--data", s.data)
	cli(password+"\n", "user", "add", "--data", s.data, operator)
	s.token = cli("", "token", "create", "--data", s.data, "e2e")

	s.cmd = exec.Command(binary, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", s.data,
		"--hf-endpoint", hub.URL(), "--llama-server", llama}, flags...)...)
	s.cmd.Env = s.environ(t)
	// Its own process group, so that should it hang, the cleanup can end
	// it with whatever it started.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting modelserve: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.log.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("modelserve's log:\n%s", s.log.String())
		}
	})
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case <-s.done:
		t.Fatalf("modelserve exited before listening: %v\n%s", s.err, s.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("modelserve did not say it was listening within 30s\n%s", s.log.String())
	}
	return s
}

// environ is the test's environment without anything that would give the
// server another registry, token or data directory than the test's.
func (s *server) environ(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HF_") || strings.HasPrefix(k, "HUGGING_FACE") || strings.HasPrefix(k, "MODELSERVE_") {
			continue
		}
		env = append(env, kv)
	}
	// The token file huggingface_hub writes is read from $HF_HOME: an
	// empty one here, so a machine's own token never reaches the tests.
	// The engines stop with the server (they outlive it by default, for
	// the next to adopt): none outlives a test.
	return append(env, "HF_HOME="+filepath.Join(s.data, "hf-home"), "MODELSERVE_STOP_ENGINES_ON_EXIT=true")
}

// stop sends SIGTERM and waits: the server must exit by itself, with
// status 0, and leave none of the engines it started running.
func (s *server) stop() {
	t := s.t
	select {
	case <-s.done:
		t.Errorf("modelserve had exited before the test ended: %v", s.err)
		return
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM to modelserve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("modelserve exited with %v after SIGTERM, want status 0", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("modelserve (pid %d) did not exit within 30s of SIGTERM; killing its process group", s.cmd.Process.Pid)
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	// Engines run in process groups of their own; a model's path names
	// the data directory, which is how a leftover one is recognised.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesMentioning(s.data)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes still running after modelserve stopped: %v", left)
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesMentioning lists the processes whose command line holds s.
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// apiJob is the job as the JSON API reports it: the truth the page is
// compared with.
type apiJob struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Error string `json:"error"`
	Model string `json:"model"`
	Reply string `json:"reply"`
	Steps []struct {
		Name       string `json:"name"`
		State      string `json:"state"`
		Detail     string `json:"detail"`
		BytesDone  int64  `json:"bytes_done"`
		BytesTotal int64  `json:"bytes_total"`
	} `json:"steps"`
}

func (j apiJob) mirrorBytes() int64 {
	for _, s := range j.Steps {
		if s.Name == "mirror" {
			return s.BytesDone
		}
	}
	return 0
}

func (s *server) api(method, path string, body any, out any) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.URL+path, r)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		s.t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// serveModel serves what req asks (POST /api/v1/serve's body) as a script
// would, and waits for the job to end: it must end done, within jobLimit.
func (s *server) serveModel(req map[string]any) apiJob {
	s.t.Helper()
	var job apiJob
	s.api("POST", "/api/v1/serve", req, &job)
	if err := poll(jobLimit, func() bool {
		job = s.job(job.ID)
		return job.State != "running"
	}); err != nil || job.State != "done" {
		s.t.Fatalf("the job did not serve the model within %s: %s %s", jobLimit, job.State, job.Error)
	}
	return job
}

func (s *server) job(id string) apiJob {
	s.t.Helper()
	var j apiJob
	s.api("GET", "/api/v1/jobs/"+id, nil, &j)
	return j
}

// launch starts Chromium for one test and closes it at cleanup.
func launch(t *testing.T) playwright.Browser {
	t.Helper()
	b, err := pw.Chromium.Launch(playwright.BrowserTypeLaunchOptions{
		ExecutablePath: playwright.String(chromium),
		Headless:       playwright.Bool(true),
		Args:           chromiumFlags,
		Timeout:        playwright.Float(30000),
	})
	if err != nil {
		t.Fatalf("launching %s: %v", chromium, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the browser: %v", err)
		}
	})
	return b
}

// tab is a page in a browser context of its own (its own cookies), with
// what the page logged kept for a failing test.
type tab struct {
	t    *testing.T
	e    *env
	page playwright.Page
	ctx  playwright.BrowserContext

	mu       sync.Mutex
	console  []string
	crashes  []string
	requests []string
}

// newTab opens a page in a new browser context for t (a test or subtest of
// e's), closed when t ends.
func (e *env) newTab(t *testing.T) *tab {
	t.Helper()
	ctx, err := e.browser.NewContext(playwright.BrowserNewContextOptions{
		BaseURL:  playwright.String(e.front.URL),
		Viewport: &playwright.Size{Width: 1280, Height: 900},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx.SetDefaultTimeout(float64(quick.Milliseconds()))
	page, err := ctx.NewPage()
	if err != nil {
		t.Fatal(err)
	}
	tb := &tab{t: t, e: e, page: page, ctx: ctx}
	page.OnConsole(func(m playwright.ConsoleMessage) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		tb.console = append(tb.console, m.Type()+": "+m.Text())
	})
	page.OnPageError(func(err error) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		tb.crashes = append(tb.crashes, err.Error())
	})
	page.OnResponse(func(r playwright.Response) {
		if r.Status() >= 400 {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.console = append(tb.console, fmt.Sprintf("response: %d %s", r.Status(), r.URL()))
		}
	})
	page.OnRequest(func(r playwright.Request) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		tb.requests = append(tb.requests, r.Method()+" "+r.URL())
	})
	t.Cleanup(func() {
		if t.Failed() {
			name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
			tb.screenshot(name + "-failed.png")
			tb.mu.Lock()
			t.Logf("the browser's console:\n  %s", strings.Join(tb.console, "\n  "))
			tb.mu.Unlock()
		}
		tb.mu.Lock()
		crashes := tb.crashes
		tb.mu.Unlock()
		if len(crashes) > 0 {
			t.Errorf("scripts on the page threw: %v", crashes)
		}
		ctx.Close()
	})
	return tb
}

// requestsTo counts the requests the page made whose URL holds s.
func (tb *tab) requestsTo(s string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	n := 0
	for _, r := range tb.requests {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

func (tb *tab) screenshot(name string) string {
	p := filepath.Join(artifacts, name)
	if _, err := tb.page.Screenshot(playwright.PageScreenshotOptions{Path: playwright.String(p), FullPage: playwright.Bool(true)}); err != nil {
		tb.t.Logf("screenshot %s: %v", p, err)
	}
	return p
}

func (tb *tab) expect() playwright.PlaywrightAssertions {
	return playwright.NewPlaywrightAssertions(float64(quick.Milliseconds()))
}

func (tb *tab) must(err error, what string, args ...any) {
	tb.t.Helper()
	if err != nil {
		tb.t.Fatalf("%s: %v (page at %s)", fmt.Sprintf(what, args...), err, tb.page.URL())
	}
}

func (tb *tab) loc(selector string) playwright.Locator {
	return tb.page.Locator(selector)
}

// path is the page's URL without the server's address.
func (tb *tab) path() string {
	return strings.TrimPrefix(tb.page.URL(), tb.e.front.URL)
}

// signIn fills in the sign-in form the page shows now.
func (tb *tab) signIn() {
	tb.t.Helper()
	tb.must(tb.expect().Locator(tb.loc("[data-testid=login-form]")).ToBeVisible(), "the sign-in form")
	tb.must(tb.page.GetByLabel("Name").Fill(operator), "typing the name")
	tb.must(tb.page.GetByLabel("Password").Fill(password), "typing the password")
	tb.must(tb.page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Sign in"}).Click(), "clicking Sign in")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=user]")).ToContainText(operator), "signed in as %s", operator)
}

// open goes to path, signing in on the way when sent to.
func (tb *tab) open(path string) {
	tb.t.Helper()
	_, err := tb.page.Goto(path)
	tb.must(err, "opening %s", path)
	if strings.HasPrefix(tb.path(), "/login") {
		tb.signIn()
	}
	tb.atPath(path, "back at %s after signing in", path)
}

// atPath waits for the page to be at path (with its query), as the address
// bar shows it.
func (tb *tab) atPath(path string, what string, args ...any) {
	tb.t.Helper()
	if err := poll(quick, func() bool { return tb.path() == path }); err != nil {
		tb.t.Fatalf("%s: the page is at %s, not %s", fmt.Sprintf(what, args...), tb.path(), path)
	}
}

// serve fills in the serve form as an operator does: types the repository,
// waits for its files, chooses the file set (a file's name without .gguf,
// as the table lists it), keeps the suggested context, and presses Serve.
// It returns the job's id from the job page it lands on.
func (tb *tab) serve(repo, set string, shot string) string {
	tb.t.Helper()
	tb.open("/serve")
	tb.typeRepo(repo)
	row := tb.loc(fmt.Sprintf("[data-testid=set-row][data-set=%q]", set))
	tb.must(tb.expect().Locator(row).ToBeVisible(), "the row of %s in the file table", set)
	tb.must(row.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Choose"}).Click(), "choosing %s", set)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=chosen]")).ToHaveText(set), "the sizing for %s", set)
	tb.must(tb.expect().Locator(row.Locator("[data-testid=chosen-mark]")).ToBeVisible(), "%s marked chosen in the table", set)
	ctx, err := tb.loc("[data-testid=ctx-pool]").InputValue()
	tb.must(err, "reading the context pool")
	if n, err := strconv.Atoi(ctx); err != nil || n <= 0 {
		tb.t.Fatalf("the context pool suggested for %s is %q; want a number of tokens", set, ctx)
	}
	if shot != "" {
		tb.screenshot(shot)
	}
	tb.must(tb.loc("[data-testid=serve-submit]").Click(), "pressing Serve")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`/jobs/[^/]+$`)), "on the job's page after Serve")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=job-source]")).ToHaveText(repo), "the job page names %s", repo)
	id, err := tb.loc("[data-testid=job-id]").TextContent()
	tb.must(err, "reading the job's id")
	return strings.TrimSpace(id)
}

// typeRepo types into the Repository field, as a person would.
func (tb *tab) typeRepo(repo string) {
	tb.t.Helper()
	field := tb.page.GetByRole("textbox", playwright.PageGetByRoleOptions{Name: regexp.MustCompile(`^Repository`)})
	tb.must(field.PressSequentially(repo, playwright.LocatorPressSequentiallyOptions{Delay: playwright.Float(10)}), "typing the repository")
}

// waitEnded waits for the job on the page to end and returns its state.
func (tb *tab) waitEnded(limit time.Duration) string {
	tb.t.Helper()
	job := tb.loc("[data-testid=job]:is([data-state=done],[data-state=failed],[data-state=cancelled])")
	if err := job.WaitFor(playwright.LocatorWaitForOptions{Timeout: playwright.Float(float64(limit.Milliseconds()))}); err != nil {
		steps, _ := tb.loc("[data-testid=steps]").InnerText()
		tb.t.Fatalf("the job did not end within %s on the page: %v\nsteps:\n%s", limit, err, steps)
	}
	state, err := job.GetAttribute("data-state")
	tb.must(err, "reading the job's state")
	return state
}

// showsTruth checks that the ended job on the page is the job the API
// reports: its state and every step's, and the page's reply when there is
// one. The stream ends with the job, so what the page shows then stays.
func (tb *tab) showsTruth(id string) {
	tb.t.Helper()
	truth := tb.e.srv.job(id)
	var diffs []string
	state, _ := tb.loc("[data-testid=job]").GetAttribute("data-state")
	if state != truth.State {
		diffs = append(diffs, fmt.Sprintf("job %s on the page, %s in the API", state, truth.State))
	}
	for _, st := range truth.Steps {
		if got := tb.stepStateNow(st.Name); got != st.State {
			diffs = append(diffs, fmt.Sprintf("%s %s on the page, %s in the API (%s)", st.Name, got, st.State, st.Detail))
		}
	}
	if len(diffs) > 0 {
		html, _ := tb.loc("#job-live").InnerHTML()
		tb.t.Errorf("the ended job's page disagrees with the API: %s\nthe API's reply: %q\nthe page's live part:\n%s",
			strings.Join(diffs, "; "), truth.Reply, html)
	}
}

// stepStateNow is a step's state as the page shows it now, "" when the page
// shows no such step.
func (tb *tab) stepStateNow(name string) string {
	tb.t.Helper()
	v, err := tb.page.Evaluate(`name => {
		const li = [...document.querySelectorAll('[data-testid=step]')].find(li => li.dataset.step === name);
		return li ? ([...li.classList].find(c => c.startsWith('step-')) || '').slice(5) : '';
	}`, name)
	tb.must(err, "reading the %s step", name)
	s, _ := v.(string)
	return s
}

// stepState is a step's state as its row's class says (step-done, ...).
func (tb *tab) stepState(name string) string {
	tb.t.Helper()
	class, err := tb.loc(fmt.Sprintf("[data-testid=step][data-step=%q]", name)).GetAttribute("class")
	tb.must(err, "reading the %s step", name)
	for _, c := range strings.Fields(class) {
		if s, ok := strings.CutPrefix(c, "step-"); ok {
			return s
		}
	}
	return ""
}

// progress is the mirror's <progress> value, or -1 when there is none.
func (tb *tab) progress() float64 {
	tb.t.Helper()
	v, err := tb.page.Evaluate(`() => {
		const p = document.querySelector('[data-testid=step][data-step=mirror] progress');
		return p ? p.value : -1;
	}`)
	tb.must(err, "reading the progress bar")
	return toFloat(v)
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return -1
}

var errTimeout = errors.New("timed out")

// poll calls f every 50ms until it says true or limit passes.
func poll(limit time.Duration, f func() bool) error {
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
