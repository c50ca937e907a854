package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"modelserve/internal/auth"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// BenchmarkHundredJobsBesideTheGateway: SQLite under load, through the
// real server. One model is served by the real engine and answers 64
// gateway clients, first alone and then while 100 serve jobs start at once
// and 200 console watchers keep the live pages' streams open (the jobs,
// catalog and fleet pages), and the jobs list, the catalog and the
// replicas are read through the API meanwhile.
//
// The 100 jobs serve tiny models on demand (no replicas until a request
// asks): each fetches its file from the Hub double, profiles it and puts
// it in the catalog, writing its steps as it goes, and ends without an
// engine — 100 engines do not fit a small machine, and the database's
// writers are the jobs, not the engines.
//
// It reports the count of "database is locked" (in the server's log, the
// jobs' errors and the API's answers: the goal is 0), the jobs that did
// not end in time (0), the longest any write waited for the write lock
// and the longest any held it (the gate's own figures, on /metrics), each
// API's 99th percentile during the run, the gateway's 99th percentile
// during the run beside its figure alone (goal: within 1.5×), with the
// 99th percentiles of the two parts its answers' Server-Timing names
// (waiting in modelserve for the replica's slot, and the engine), and how
// often the server ended a watcher's stream before the run did (a browser
// opens it again). It fails on a locked database, a job that did not end,
// or a job that failed.
func BenchmarkHundredJobsBesideTheGateway(b *testing.B) {
	const (
		jobCount = 100
		clients  = 64
		watchers = 200
		aloneAsk = 4               // requests each client sends alone
		bound    = 3 * time.Minute // for the jobs to end, well above what they take
	)
	hub := hubtest.New(b)
	s, _, data := startSwapWorldOn(b, hub, swapBudget, "alpha")
	for i := range b.N * jobCount {
		tinyRepo(b, hub, loadRepo(i), "load-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 4096})
	}
	console := signedInConsole(b, s, data)

	conns := make([]openai.Client, clients)
	for i := range conns {
		conns[i] = ownClient(s)
	}
	// Alone: every client, its connection warm, asks aloneAsk times.
	alone := askAll(b, conns, func(n int) bool { return n < aloneAsk })
	if len(alone.failed) > 0 {
		b.Fatalf("%d of the gateway's requests alone failed; the first: %s", len(alone.failed), alone.failed[0])
	}

	b.ResetTimer()
	for iter := range b.N {
		ctx, stop := context.WithCancel(context.Background())
		var bg sync.WaitGroup

		// The watchers, each on a connection of its own.
		var events, refused, dropped atomic.Int64
		streams := []string{"/jobs/stream", "/catalog/stream", "/fleet/stream"}
		opened := make(chan struct{}, watchers)
		for i := range watchers {
			bg.Go(func() { watchStream(ctx, console, s.base+streams[i%len(streams)], opened, &events, &refused, &dropped) })
		}
		for range watchers {
			<-opened
		}
		if n := refused.Load(); n > 0 {
			b.Fatalf("%d of %d watchers were refused their stream", n, watchers)
		}

		// The API's readers, two for each list, back to back.
		api := map[string]*timings{"/api/v1/jobs": {}, "/api/v1/catalog": {}, "/api/v1/replicas": {}}
		for path, t := range api {
			for range 2 {
				bg.Go(func() { readAPI(ctx, s, path, t) })
			}
		}
		// The gateway's clients, asking until the jobs are done.
		var during gatewayRun
		var asking sync.WaitGroup
		asking.Go(func() { during = askAll(b, conns, func(int) bool { return ctx.Err() == nil }) })

		// A hundred jobs at once.
		ids := make([]string, jobCount)
		startErrs := make([]string, jobCount)
		var starting sync.WaitGroup
		began := time.Now()
		for i := range jobCount {
			starting.Go(func() {
				n := iter*jobCount + i
				code, body := apiCall(ctx, s, "POST", "/api/v1/serve", map[string]any{"repo": loadRepo(n), "name": fmt.Sprintf("load-%04d", n),
					"replicas": 0, "idle_after": "1h", "context_length": 2048, "ctx_pool": 2048})
				var j jobs.Job
				if code != http.StatusAccepted || json.Unmarshal(body, &j) != nil {
					startErrs[i] = fmt.Sprintf("%d %s", code, body)
					return
				}
				ids[i] = j.ID
			})
		}
		starting.Wait()
		ended, stuck, failed := waitForJobs(ctx, s, ids, began.Add(bound))
		took := time.Since(began)
		stop()
		asking.Wait()
		bg.Wait()
		b.StopTimer()

		locked := strings.Count(s.logs.String(), "database is locked")
		for _, e := range slices.Concat(startErrs, failed, during.failed) {
			locked += strings.Count(e, "database is locked")
		}
		for _, t := range api {
			locked += t.locked
		}
		longest := metricValue(b, s, "modelserve_store_write_wait_longest_seconds")
		held := metricValue(b, s, "modelserve_store_write_hold_longest_seconds")
		writes := metricValue(b, s, "modelserve_store_write_wait_seconds_count")
		gwAlone, gwDuring := alone.p99(), during.p99()
		var startFailed []string
		for _, e := range startErrs {
			if e != "" {
				startFailed = append(startFailed, e)
			}
		}
		b.Logf("%d jobs at once: %d ended within %s, %d refused at the start, %d failed, %d not ended; %d writes, the longest waited %.1f ms "+
			"for the write lock, the longest held it %.1f ms; %d database-locked errors; gateway p99 %s alone (%d requests), %s during (%d requests, %d failed), "+
			"of which waiting for a replica %s alone, %s during, and the engine %s alone, %s during; "+
			"API p99 jobs %s (%d reads), catalog %s (%d), replicas %s (%d); %d events to %d watchers, whose streams the server ended %d times",
			jobCount, ended, took.Round(time.Millisecond), len(startFailed), len(failed), len(stuck), int(writes), longest*1000, held*1000, locked,
			gwAlone.Round(100*time.Microsecond), len(alone.took), gwDuring.Round(100*time.Microsecond), len(during.took), len(during.failed),
			p99(alone.waited).Round(100*time.Microsecond), p99(during.waited).Round(100*time.Microsecond),
			p99(alone.engine).Round(100*time.Microsecond), p99(during.engine).Round(100*time.Microsecond),
			api["/api/v1/jobs"].p99(), len(api["/api/v1/jobs"].took), api["/api/v1/catalog"].p99(), len(api["/api/v1/catalog"].took),
			api["/api/v1/replicas"].p99(), len(api["/api/v1/replicas"].took), events.Load(), watchers, dropped.Load())

		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(float64(locked), "db-locked")
		b.ReportMetric(float64(len(stuck)), "jobs-not-ended")
		b.ReportMetric(ms(took), "all-jobs-ended-ms")
		b.ReportMetric(longest*1000, "longest-write-wait-ms")
		b.ReportMetric(held*1000, "longest-write-hold-ms")
		b.ReportMetric(ms(gwAlone), "gateway-p99-alone-ms")
		b.ReportMetric(ms(gwDuring), "gateway-p99-during-ms")
		if gwAlone > 0 {
			b.ReportMetric(float64(gwDuring)/float64(gwAlone), "gateway-p99-x-alone")
		}
		b.ReportMetric(ms(p99(during.waited)), "gateway-wait-p99-during-ms")
		b.ReportMetric(ms(p99(during.engine)), "gateway-engine-p99-during-ms")
		b.ReportMetric(ms(api["/api/v1/jobs"].p99()), "jobs-api-p99-ms")
		b.ReportMetric(ms(api["/api/v1/catalog"].p99()), "catalog-api-p99-ms")
		b.ReportMetric(ms(api["/api/v1/replicas"].p99()), "replicas-api-p99-ms")
		b.ReportMetric(float64(dropped.Load()), "streams-ended-early")

		if locked > 0 {
			b.Errorf("%d \"database is locked\" errors; want none", locked)
		}
		if len(startFailed) > 0 {
			b.Errorf("%d of %d jobs were refused at the start; the first: %s", len(startFailed), jobCount, startFailed[0])
		}
		if len(stuck) > 0 {
			b.Errorf("%d of %d jobs had not ended %s after they started: %v", len(stuck), jobCount, bound, stuck[:min(5, len(stuck))])
		}
		if len(failed) > 0 {
			b.Errorf("%d of %d jobs failed; the first: %s", len(failed), jobCount, failed[0])
		}
		if len(during.failed) > 0 {
			b.Errorf("%d of the gateway's %d requests during the jobs failed; the first: %s", len(during.failed), len(during.took)+len(during.failed), during.failed[0])
		}
		for path, t := range api {
			if len(t.failed) > 0 {
				b.Errorf("%d reads of %s failed; the first: %s", len(t.failed), path, t.failed[0])
			}
		}
		if n := refused.Load(); n > 0 {
			b.Errorf("%d watchers were refused their stream when they opened it again", n)
		}
		b.StartTimer()
	}
}

func loadRepo(i int) string { return fmt.Sprintf("acme/load-%04d-GGUF", i) }

// timings are one kind of request's durations, and its failures.
type timings struct {
	mu     sync.Mutex
	took   []time.Duration
	failed []string
	locked int
}

func (t *timings) p99() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p99(t.took)
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// gatewayRun is what the gateway's clients saw of their requests: how
// long each took, and the parts of it the answer's Server-Timing names
// (waiting in modelserve for a replica, from the request's arrival; the
// engine, to its answer), so a slow run says where its time went.
type gatewayRun struct {
	took, waited, engine []time.Duration
	failed               []string
}

func (g gatewayRun) p99() time.Duration { return p99(g.took) }

// askAll has every client ask model alpha, one request after another,
// while more(the count it has sent) says so, and returns how long each
// answer took as its client saw it.
func askAll(b *testing.B, conns []openai.Client, more func(n int) bool) gatewayRun {
	var mu sync.Mutex
	var out gatewayRun
	var wg sync.WaitGroup
	for ci, c := range conns {
		wg.Go(func() {
			for n := 0; more(n); n++ {
				start := time.Now()
				a, err := askSeen(c, "alpha", fmt.Sprintf("client %d request %d", ci, n))
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					out.failed = append(out.failed, err.Error())
				} else {
					out.took = append(out.took, took)
					out.waited = append(out.waited, a.timing["wait"])
					out.engine = append(out.engine, a.timing["engine"])
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// apiCall sends one API request with s's token; code 0 and the error's
// text when it could not be sent.
func apiCall(ctx context.Context, s *apiServer, method, path string, body any) (int, []byte) {
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = strings.NewReader(string(j))
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, r)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// readAPI reads path back to back until ctx ends, timing each read.
func readAPI(ctx context.Context, s *apiServer, path string, t *timings) {
	for ctx.Err() == nil {
		start := time.Now()
		code, body := apiCall(ctx, s, "GET", path, nil)
		took := time.Since(start)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		if code == http.StatusOK {
			t.took = append(t.took, took)
		} else {
			t.failed = append(t.failed, fmt.Sprintf("%d %.200s", code, body))
			t.locked += strings.Count(string(body), "database is locked")
		}
		t.mu.Unlock()
	}
}

// waitForJobs reads each job until it ends or deadline passes, and
// returns how many ended, the ids of those that had not, and the errors
// of those that ended otherwise than done.
func waitForJobs(ctx context.Context, s *apiServer, ids []string, deadline time.Time) (ended int, stuck, failed []string) {
	pending := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []string
		for _, id := range pending {
			code, body := apiCall(ctx, s, "GET", "/api/v1/jobs/"+id, nil)
			var j jobs.Job
			if code != http.StatusOK || json.Unmarshal(body, &j) != nil || !j.Ended() {
				still = append(still, id)
				continue
			}
			ended++
			if j.State != jobs.Done {
				failed = append(failed, fmt.Sprintf("%s ended %s: %s", id, j.State, j.Error))
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	return ended, pending, failed
}

// signedInConsole is a browser signed in to s's console as a user added
// for the benchmark, its connections unbounded (each watcher keeps one).
func signedInConsole(b *testing.B, s *apiServer, data string) *http.Client {
	b.Helper()
	const name, password = "watcher", "a long enough password"
	db := testkit.OpenDBFile(b, filepath.Join(data, "modelserve.db"))
	err := auth.NewUsers(db).Add(context.Background(), name, password)
	db.Close()
	if err != nil {
		b.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(s.base + "/login")
	if err != nil {
		b.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		b.Fatalf("the sign-in page has no csrf field:\n%.500s", page)
	}
	resp, err = c.PostForm(s.base+"/login", url.Values{"name": {name}, "password": {password}, "csrf": {string(m[1])}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("signing in as %s: %s", name, resp.Status)
	}
	return c
}

// watchStream keeps one watcher on a live page's stream until ctx ends,
// counting its events; opened is told once the stream first answered
// (refused counts one that did not). A stream the server ends before ctx
// is opened again, as a browser's EventSource does, and counted in
// dropped.
func watchStream(ctx context.Context, c *http.Client, u string, opened chan<- struct{}, events, refused, dropped *atomic.Int64) {
	once := sync.OnceFunc(func() { opened <- struct{}{} })
	defer once()
	for first := true; ctx.Err() == nil; first = false {
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				refused.Add(1)
			}
			return
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body.Close()
			refused.Add(1)
			return
		}
		if first {
			once()
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		inEvent := false // an event is its data lines, ended by a blank one
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "data:"):
				inEvent = true
			case line == "" && inEvent:
				inEvent = false
				events.Add(1)
			}
		}
		resp.Body.Close()
		if ctx.Err() == nil {
			dropped.Add(1)
		}
	}
}

// metricValue is one unlabelled figure of s's /metrics.
func metricValue(b *testing.B, s *apiServer, name string) float64 {
	b.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for l := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("/metrics: %q: %v", l, err)
			}
			return f
		}
	}
	b.Fatalf("/metrics has no %s", name)
	return 0
}
