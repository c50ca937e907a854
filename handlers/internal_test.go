package handlers

import (
	"bufio"
	"context"
	"modelserve/catalog"
	"modelserve/jobs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"modelserve/internal/plan"
	"modelserve/views"
)

func TestLocalPath(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"/jobs", "/jobs"},
		{"/jobs/serve-1-ab?x=1", "/jobs/serve-1-ab?x=1"},
		{"", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{`/\evil.example`, "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(1)", "/"},
		{"jobs", "/"},
		{"/jobs\r\nSet-Cookie: x=1", "/"},
	} {
		if got := localPath(tc.next); got != tc.want {
			t.Errorf("localPath(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}

func TestRateMeter(t *testing.T) {
	m := &rateMeter{}
	at := time.Unix(1_000_000, 0)
	if _, ok := m.rate(); ok {
		t.Fatal("a rate with no reading")
	}
	m.add(at, 0)
	if _, ok := m.rate(); ok {
		t.Fatal("a rate from one reading")
	}
	m.add(at, 0) // the same reading again is not a second one
	if _, ok := m.rate(); ok {
		t.Fatal("a rate from one reading seen twice")
	}
	m.add(at.Add(500*time.Millisecond), 50<<20)
	if r, ok := m.rate(); !ok || r != 100<<20 {
		t.Fatalf("rate %v, %v; want 100 MB/s", r, ok)
	}
	if m.steady() {
		t.Fatal("steady after two readings")
	}
	m.add(at.Add(time.Second), 100<<20)
	if !m.steady() {
		t.Fatal("not steady after three readings over a second")
	}
	m.add(at.Add(2*time.Second), 10) // started over
	if _, ok := m.rate(); ok {
		t.Fatal("a rate across a restarted download")
	}
}

func TestRequestFromForm(t *testing.T) {
	f := views.ServeForm{Repo: "a/b", Chosen: "b-Q4_K_M", Format: "gguf", Where: "gpu:A100-80GB:2:1",
		CtxPool: "65536", Replicas: "", Aliases: "x, y z", Env: "# tuning\nGGML_X=1\n"}
	req, err := requestFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	if req.File != "b-Q4_K_M" || req.GPUClass != "A100-80GB" || req.GPUsPerNode != 2 || req.Nodes != 1 || req.CPU ||
		req.CtxPool != 65536 || req.ContextLength != 0 || req.Replicas != 1 || len(req.Aliases) != 3 || req.Env["GGML_X"] != "1" {
		t.Fatalf("a pool without slots is left for the job to divide, as the API's is: %+v", req)
	}
	f.Slots = "4"
	if req, err = requestFrom(f); err != nil || req.CtxPool != 65536 || req.ContextLength != 16384 {
		t.Fatalf("4 slots of a 65536-token pool: %+v, %v", req, err)
	}
	for _, bad := range []views.ServeForm{
		{Repo: "a/b", Where: "gpu:L4"},
		{Repo: "a/b", Slots: "0", CtxPool: "4096"},
		{Repo: "a/b", Env: "NOT A PAIR"},
		{Repo: "a/b", Replicas: "-1"},
	} {
		if _, err := requestFrom(bad); err == nil {
			t.Errorf("%+v was accepted", bad)
		} else if _, ok := operatorStatus(err); !ok {
			t.Errorf("%+v: %v is not a sentence for the operator", bad, err)
		}
	}
}

func TestMemoryBar(t *testing.T) {
	const gb, mb = int64(1e9), int64(1e6)
	sizing := func(kv, room int64, fit string) plan.Option {
		return plan.Option{Class: "L4", GPUsPerNode: 1, Engine: plan.EngineLlamaCpp, Sizing: plan.Sizing{
			Size: catalog.Size{Pool: 16384}, WeightsBytes: 8 * gb, KVBytes: kv, ComputeBytes: gb / 2, ProjectorBytes: gb / 2,
			NeedBytes: 9*gb + kv, RoomBytes: room, Fit: fit,
		}}
	}
	if b := memoryBar(sizing(2*gb, 11*gb+gb/10, plan.FitsNow), 0); b.Over || !strings.HasSuffix(b.Text, "= 11 GB of 11.1 GB free of the card: fits, 100 MB left") {
		t.Fatalf("nearly full: %q", b.Text)
	}
	b := memoryBar(sizing(2*gb, 24*gb, plan.FitsNow), 0)
	if b.Over || b.Text != "weights 8 GB + KV cache 2 GB for 16384 tokens + engine 1 GB = 11 GB of 24 GB free of the card: fits, 13 GB left" {
		t.Fatalf("%+v", b)
	}
	b = memoryBar(sizing(20*gb, 24*gb, plan.FitsNowhere), 0)
	if !b.Over || b.Capacity >= 100 || b.Text != "weights 8 GB + KV cache 20 GB for 16384 tokens + engine 1 GB = 29 GB, more than the 24 GB of the card: 5 GB too much" {
		t.Fatalf("%+v", b)
	}
	// Small figures keep their unit rather than rounding to "0 GB".
	small := plan.Option{CPU: true, Engine: plan.EngineLlamaCpp, Sizing: plan.Sizing{Size: catalog.Size{Pool: 4096}, WeightsBytes: 300 * mb,
		KVBytes: 4 * mb, ComputeBytes: 150 * mb, NeedBytes: 454 * mb, RoomBytes: 8 * gb, Fit: plan.FitsNow}}
	if b := memoryBar(small, 0); !strings.HasPrefix(b.Text, "weights 300 MB + KV cache 4 MB for 4096 tokens + engine 150 MB = 454 MB of 8 GB free of a node's RAM") {
		t.Fatalf("small: %q", b.Text)
	}
	// The room is what is left once the headroom is kept, and the bar
	// says that it was.
	if b := memoryBar(small, gb); !strings.HasSuffix(b.Text, "= 454 MB of 8 GB free of a node's RAM: fits, 7.5 GB left, 1 GB kept free for the system") {
		t.Fatalf("with headroom: %q", b.Text)
	}
}

// TestQuietStreamsGetAHeartbeat: a stream with nothing new to say still
// writes a comment line every heartbeat, so that no proxy closes it as idle.
func TestQuietStreamsGetAHeartbeat(t *testing.T) {
	e := newEvents(nil)
	e.heartbeat = 20 * time.Millisecond
	ch := make(chan jobs.Event)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.serve(w, r, ch, func(jobs.Event) ([]byte, string, error) { return []byte("{}"), "job", nil })
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	beats := 0
	for beats < 2 && sc.Scan() {
		if sc.Text() == ": still here" {
			beats++
		}
	}
	if beats < 2 {
		t.Fatalf("saw %d heartbeats before the stream ended (%v)", beats, sc.Err())
	}
}
