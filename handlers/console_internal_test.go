package handlers

import (
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

func TestThrottleWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newThrottle()
	th.now = func() time.Time { return now }
	keys := signInKeys("Ada", "192.0.2.1:5555")
	for range maxFailures {
		if th.wait(keys) != 0 {
			t.Fatal("refused before the limit")
		}
		th.fail(keys)
		now = now.Add(time.Minute)
	}
	// Five failures at minutes 0..4, now minute 5: the oldest frees the
	// name at minute 15.
	if got := th.wait(signInKeys("ADA", "198.51.100.7:1")); got != 10*time.Minute {
		t.Fatalf("the name (in another case, from elsewhere) waits %s, want 10m", got)
	}
	if got := th.wait(signInKeys("bob", "192.0.2.1:6666")); got != 10*time.Minute {
		t.Fatalf("the address (another port, another name) waits %s, want 10m", got)
	}
	now = now.Add(10 * time.Minute)
	if got := th.wait(keys); got != 0 {
		t.Fatalf("still refused %s once the oldest failure left the window", got)
	}
	th.fail(keys) // five again, minutes 1..4 and 15: the name and the address wait
	if th.wait(keys) == 0 {
		t.Fatal("a fifth failure within the window was let through")
	}
	th.reset(keys[:1])
	if th.wait(keys[:1]) != 0 {
		t.Fatal("the name is refused after a sign-in reset it")
	}
	if th.wait(keys[1:]) == 0 {
		t.Fatal("a sign-in reset the address too: one account would unlock guessing the others")
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
		req.CtxPool != 65536 || req.ContextLength != 16384 || req.Replicas != 1 || len(req.Aliases) != 3 || req.Env["GGML_X"] != "1" {
		t.Fatalf("%+v", req)
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
	o := plan.Option{Class: "L4", GPUsPerNode: 1, WeightsGB: 8, KVGB: 2, OverheadGB: 1, Context: 16384}
	if b := memoryBar(o, 11.05); b.Over || !strings.HasSuffix(b.Text, "= 11 GB of 11.1 GB of the card: fits, 0.1 GB left") {
		t.Fatalf("nearly full: %q", b.Text)
	}
	b := memoryBar(o, 24)
	if b.Over || b.Text != "weights 8 GB + KV cache 2 GB for 16384 tokens + engine 1 GB = 11 GB of 24 GB of the card: fits, 13 GB left" {
		t.Fatalf("%+v", b)
	}
	o.KVGB = 20
	b = memoryBar(o, 24)
	if !b.Over || b.Capacity >= 100 || b.Text != "weights 8 GB + KV cache 20 GB for 16384 tokens + engine 1 GB = 29 GB, more than the 24 GB of the card: 5 GB too much" {
		t.Fatalf("%+v", b)
	}
}
