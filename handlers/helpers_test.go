package handlers_test

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/crypto/bcrypt"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/evals"
	"modelserve/internal/hf"
	"modelserve/internal/mirror"
	"modelserve/internal/operr"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
	"modelserve/internal/updates"
	"modelserve/jobs"
)

// The console's tests run the real mux from handlers.New over real HTTP,
// with a real database, catalog, mirror and job server; only what lies
// outside modelserve (the registry, the download) is a fake where a test
// needs to hold it still.

const (
	testUser     = "ada"
	testPassword = "correct horse battery"
)

// consoleEnv is a running console and what it is made of.
type consoleEnv struct {
	t       testing.TB
	db      *sql.DB
	srv     *httptest.Server
	jobs    *jobs.Server
	catalog *catalog.Store
	mirror  *mirror.Mirror
	reg     *fakeRegistry
	updates *updates.Watcher
	// evals runs suites through asker, which answers as a test says.
	evals *evals.Runner
	asker *fakeAsker
	fetch *fakeFetch
	logs  *testlog.Buffer
}

// newConsoleEnv starts a console; edit changes its dependencies first.
func newConsoleEnv(t testing.TB, edit ...func(*handlers.Deps)) *consoleEnv {
	t.Helper()
	dir := t.TempDir()
	db := testkit.OpenDBFile(t, filepath.Join(dir, "modelserve.db"))
	e := &consoleEnv{t: t, db: db, catalog: catalog.NewStore(db), reg: newFakeRegistry(),
		fetch: &fakeFetch{release: make(chan struct{})}, logs: &testlog.Buffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	var err error
	if e.mirror, err = mirror.New(mirror.Options{Dir: filepath.Join(dir, "mirror"), Log: log}); err != nil {
		t.Fatal(err)
	}
	if e.jobs, err = jobs.New(jobs.Deps{DB: db, Registry: e.reg, Mirror: e.fetch, Catalog: e.catalog, Log: log}); err != nil {
		t.Fatal(err)
	}
	// The watcher for new weights asks the same fake registry; its loop
	// is not run: a test checks by hand.
	if e.updates, err = updates.New(updates.Deps{DB: db, Catalog: e.catalog, Registry: e.reg, Interval: 6 * time.Hour, Log: log}); err != nil {
		t.Fatal(err)
	}
	e.asker = &fakeAsker{}
	if e.evals, err = evals.New(evals.Deps{DB: db, Catalog: e.catalog, Asker: e.asker, Log: log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.evals.Close)
	d := handlers.Deps{
		DB: db, Jobs: e.jobs, Catalog: e.catalog, Mirror: e.mirror, Registry: e.reg, Updates: e.updates, Evals: e.evals, Log: log,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "# metrics\n") }),
	}
	for _, f := range edit {
		f(&d)
	}
	h, err := handlers.New(d)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	// Streams first, then the jobs, then the database (cleanups run last
	// first).
	t.Cleanup(e.jobs.Close)
	t.Cleanup(func() {
		e.srv.CloseClientConnections()
		e.srv.Close()
	})
	mustAddUser(t, db, testUser, testPassword)
	return e
}

// mustAddUser adds a user as auth.Users does, with bcrypt's lowest cost:
// at the default, each sign-in under the race detector takes most of a
// second.
func mustAddUser(t testing.TB, db *sql.DB, name, password string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO users (name, password_hash, created_at) VALUES (?, ?, ?)`,
		name, string(hash), time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
}

// browser is a person at the console: a cookie jar, the session's CSRF
// token, and no following of redirects, so a test sees where it is sent.
type browser struct {
	t    testing.TB
	e    *consoleEnv
	c    *http.Client
	csrf string
}

func (e *consoleEnv) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, c: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}}
}

// signedIn is a browser that has signed in as the test user.
func (e *consoleEnv) signedIn() *browser {
	e.t.Helper()
	b := e.browser()
	resp := b.signIn(testUser, testPassword, "")
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("signing in: %s\n%s", resp.Status, body(e.t, resp))
	}
	resp.Body.Close()
	// The token changes at sign-in; any page has the new one.
	b.csrf = mustDoc(e.t, b.get("/jobs")).Find(`form[action="/logout"] input[name="csrf"]`).AttrOr("value", "")
	if b.csrf == "" {
		e.t.Fatal("the page after signing in has no sign-out form with a CSRF token")
	}
	return b
}

// signIn fills in the sign-in form as a person would: the page first (for
// its token), then the form.
func (b *browser) signIn(name, password, next string) *http.Response {
	b.t.Helper()
	page := "/login"
	if next != "" {
		page += "?next=" + url.QueryEscape(next)
	}
	doc := mustDoc(b.t, b.get(page))
	form := url.Values{"name": {name}, "password": {password}}
	doc.Find(`form[action="/login"] input[type="hidden"]`).Each(func(_ int, s *goquery.Selection) {
		form.Set(s.AttrOr("name", ""), s.AttrOr("value", ""))
	})
	if form.Get("csrf") == "" {
		b.t.Fatal("the sign-in form carries no CSRF token")
	}
	return b.do(http.MethodPost, "/login", form, nil)
}

func (b *browser) get(path string, header ...string) *http.Response {
	b.t.Helper()
	return b.do(http.MethodGet, path, nil, header)
}

// post sends a form with the session's token, as the page's forms do.
func (b *browser) post(path string, form url.Values) *http.Response {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if !form.Has("csrf") {
		form.Set("csrf", b.csrf)
	}
	return b.do(http.MethodPost, path, form, nil)
}

func (b *browser) do(method, path string, form url.Values, header []string) *http.Response {
	b.t.Helper()
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.e.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp
}

// htmx is the headers htmx sends with a request for a fragment.
var htmx = []string{"HX-Request", "true"}

func body(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustDoc(t testing.TB, resp *http.Response) *goquery.Document {
	t.Helper()
	defer resp.Body.Close()
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// mustStatus checks the status and returns the page.
func mustStatus(t testing.TB, resp *http.Response, want int) *goquery.Document {
	t.Helper()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d\n%s", resp.Request.Method, resp.Request.URL.Path, resp.Status, want, body(t, resp))
	}
	return mustDoc(t, resp)
}

// texts are the trimmed texts of what sel finds.
func texts(sel *goquery.Selection) []string {
	var out []string
	sel.Each(func(_ int, s *goquery.Selection) { out = append(out, strings.Join(strings.Fields(s.Text()), " ")) })
	return out
}

// fakeRegistry serves repositories a test puts in it; a repository not
// there is refused as the Hub refuses one.
type fakeRegistry struct {
	mu    sync.Mutex
	repos map[string]hf.Repo
	// any, when set, is returned for every id (a registry that names its
	// repositories as it likes).
	any *hf.Repo
}

func newFakeRegistry() *fakeRegistry { return &fakeRegistry{repos: map[string]hf.Repo{}} }

func (f *fakeRegistry) add(r hf.Repo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos[r.ID] = r
}

func (f *fakeRegistry) Repo(ctx context.Context, id, revision string) (hf.Repo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.any != nil {
		return *f.any, nil
	}
	r, ok := f.repos[id]
	if !ok {
		return hf.Repo{}, operr.Wrap(operr.NotFound, hf.ErrNotFound, "%s is not a repository on the registry; check its name", id)
	}
	r.Revision = revision
	return r, nil
}

// Refs lists one branch, main, at the repository's commit.
func (f *fakeRegistry) Refs(ctx context.Context, id string) (hf.Refs, error) {
	r, err := f.Repo(ctx, id, "main")
	if err != nil {
		return hf.Refs{}, err
	}
	return hf.Refs{Branches: []hf.Ref{{Name: "main", Commit: r.Commit}}}, nil
}

func (f *fakeRegistry) DownloadURL(id, commit, path string) string {
	return "http://127.0.0.1:1/" + id + "/resolve/" + commit + "/" + path
}

// fakeFetch is the mirror's download as a job sees it: it reports the
// bytes in steps, then holds until released and fails with err.
type fakeFetch struct {
	steps   []int64
	total   int64
	conns   int // the connections each step says the bytes come over
	release chan struct{}
	err     error
}

func (f *fakeFetch) Remove(ctx context.Context, model, revision, path string, inUse func(string) bool) error {
	return nil
}

func (f *fakeFetch) Fetch(ctx context.Context, files []mirror.File, progress func(mirror.Progress)) ([]string, error) {
	for _, done := range f.steps {
		progress(mirror.Progress{BytesDone: done, BytesTotal: f.total, Connections: f.conns})
		// The job saves progress at most every 250ms.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case <-f.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	return nil, operr.New(operr.Unavailable, "the mirror could not fetch it: the registry closed the connection")
}

// ggufRepo is a repository of one Q4_K_M file.
func ggufRepo(id string) hf.Repo {
	return hf.Repo{ID: id, Commit: strings.Repeat("ab12", 10), Files: []hf.File{
		{Path: "model-Q4_K_M.gguf", Size: 5 << 30, SHA256: strings.Repeat("0", 64)},
		{Path: "README.md", Size: 100},
	}}
}

// mustInsertJob writes a job as the job server stores it, for pages that
// show jobs in states a test cannot wait for.
func mustInsertJob(t testing.TB, db *sql.DB, j jobs.Job) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	insertJob(t, tx, j)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func insertJob(t testing.TB, tx *sql.Tx, j jobs.Job) {
	t.Helper()
	req, _ := json.Marshal(j.Request)
	var finished any
	if !j.Finished.IsZero() {
		finished = j.Finished.UnixNano()
	}
	kind := cmp.Or(j.Kind, jobs.KindServe)
	if _, err := tx.Exec(`INSERT INTO jobs (id, kind, state, request, error, model, commit_sha, reply,
		tokens_per_second, retry_of, seq, started, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.ID, kind, j.State, string(req), j.Error, j.Model, j.Commit, j.Reply, j.TokensPerSecond,
		j.RetryOf, len(j.Steps)+1, j.Started.UnixNano(), finished); err != nil {
		t.Fatal(err)
	}
	for i, st := range j.Steps {
		if _, err := tx.Exec(`INSERT INTO job_steps (job_id, position, name, state, detail, at, bytes_done, bytes_total)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, j.ID, i, st.Name, st.State, st.Detail, st.At.UnixNano(),
			st.BytesDone, st.BytesTotal); err != nil {
			t.Fatal(err)
		}
	}
}

// doneJob is a job that served its model, each step a few seconds, the
// mirror's most.
func doneJob(id string, started time.Time) jobs.Job {
	at := func(s int) time.Time { return started.Add(time.Duration(s) * time.Second) }
	return jobs.Job{
		ID: id, Kind: jobs.KindServe, State: jobs.Done, Model: "tiny-llama", Commit: strings.Repeat("c0ffee", 7)[:40],
		Request: jobs.Request{Repo: "test/tiny-llama-GGUF", Revision: "main", Replicas: 1},
		Started: started, Finished: at(70), Reply: "Hello there!", TokensPerSecond: 812.4,
		Steps: []jobs.Step{
			{Name: jobs.StepRegistry, State: jobs.Done, Detail: "test/tiny-llama-GGUF at c0ffee0: 3 files", At: at(1)},
			{Name: jobs.StepPlan, State: jobs.Done, Detail: "Q4_K_M, 4.4 GB in 1 file, revision c0ffee0; runs on CPU", At: at(2)},
			{Name: jobs.StepMirror, State: jobs.Done, Detail: "4.4 GB on the mirror, checksums match the registry", At: at(60)},
			{Name: jobs.StepCheck, State: jobs.Done, Detail: "llama, needs about 6 GB", At: at(61)},
			{Name: jobs.StepCatalog, State: jobs.Done, Detail: "tiny-llama added, 1 replica", At: at(62)},
			{Name: jobs.StepPlacement, State: jobs.Done, Detail: "r1 ready on node-1", At: at(68)},
			{Name: jobs.StepSmoke, State: jobs.Done, Detail: `answered at 812.4 tokens/s: "Hello there!"`, At: at(70)},
		},
	}
}

// sseEvent is one event of a stream as a browser's EventSource reads it.
type sseEvent struct {
	id, name, data string
}

// readEvents reads a stream's events as they come, until it ends.
func readEvents(t testing.TB, r io.Reader) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data != nil {
					ev.data = strings.Join(data, "\n")
					out <- ev
				}
				ev, data = sseEvent{}, nil
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			case strings.HasPrefix(line, "event:"):
				ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "id:"):
				ev.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
			}
		}
	}()
	return out
}
