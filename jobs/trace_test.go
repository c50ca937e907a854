package jobs

import (
	"context"
	"fmt"
	"modelserve/internal/fleet"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/trace"
	"modelserve/internal/trace/otlptest"
)

// withTracing records the jobs' traces, and the Hub client's requests as
// client spans, to a receiver; flush sends what is queued.
func withTracing(rcv *otlptest.Receiver) (envOption, func()) {
	var tr *trace.Tracing
	opt := func(e *testEnv) {
		var err error
		tr, err = trace.New(func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" {
				return rcv.URL
			}
			return ""
		}, trace.Options{})
		if err != nil {
			e.t.Fatal(err)
		}
		e.deps.Tracer = tr.Tracer("modelserve/jobs")
		c, err := hf.NewClient(hf.Options{Endpoint: e.hub.URL(), MaxRetries: -1, HTTP: &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithTracerProvider(tr.Provider), otelhttp.WithPropagators(tr.Propagator))}})
		if err != nil {
			e.t.Fatal(err)
		}
		e.client = c
	}
	return opt, func() { tr.Shutdown(context.Background()) }
}

func TestAServeJobIsATraceWithASpanPerStep(t *testing.T) {
	rcv := otlptest.Start(t)
	opt, flush := withTracing(rcv)
	e := newEnv(t, opt)
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {ContextLength: 2048}})
	j := MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Replicas: 1})
	end := MustEnd(t, e.srv, j.ID)
	if end.State != Done || len(end.TraceID) != 32 {
		t.Fatalf("job ended %s with trace id %q; want done with a trace id", end.State, end.TraceID)
	}
	if got, _ := e.srv.Get(context.Background(), j.ID); got.TraceID != end.TraceID {
		t.Fatalf("the stored job's trace id is %q, want %q", got.TraceID, end.TraceID)
	}
	e.srv.Close() // the job's goroutine has ended its spans
	flush()
	root := rcv.WaitFor(t, "serve job")
	if root.TraceID != end.TraceID || root.Attrs["modelserve.job.id"] != j.ID || root.Attrs["modelserve.job.state"] != Done {
		t.Fatalf("root span %+v; want the job's trace, id and state", root)
	}
	byName := map[string]otlptest.Span{}
	for _, s := range rcv.Spans() {
		if s.TraceID == root.TraceID {
			byName[s.Name] = s
		}
	}
	for _, st := range end.Steps {
		sp, ok := byName[st.Name]
		if !ok {
			t.Errorf("no span for step %s; spans %v", st.Name, byName)
			continue
		}
		if sp.ParentID != root.SpanID || sp.Attrs["modelserve.step.state"] != st.State || sp.Attrs["modelserve.step.detail"] != st.Detail {
			t.Errorf("step %s span %+v; want a child of the root with state %s and detail %q", st.Name, sp, st.State, st.Detail)
		}
	}
	mir := byName[StepMirror]
	if mir.Attrs["modelserve.file"] != "tiny-Q4_K_M.gguf" || mir.Attrs["modelserve.bytes_total"] == "" || mir.Attrs["modelserve.model"] == "" {
		t.Errorf("mirror span attributes %v; want file, bytes and model", mir.Attrs)
	}
	// The Hub's requests are client spans of the step that asked.
	clients := map[string]int{}
	for _, s := range rcv.Spans() {
		if s.TraceID == root.TraceID && s.Kind == "SPAN_KIND_CLIENT" {
			for name, st := range byName {
				if st.SpanID == s.ParentID {
					clients[name]++
				}
			}
		}
	}
	if clients[StepRegistry] == 0 || clients[StepMirror] == 0 {
		t.Errorf("client spans by step %v; want the registry's and the mirror's requests", clients)
	}
}

// TestTheSmokeTestsAnswerLeavesInATraceOnlyWithContentOn: the smoke
// test's step says what the model answered, on the job's page; its span
// carries how fast, and what it said only with --trace-content, as the
// gateway's prompts and answers: a collector may be another team's.
func TestTheSmokeTestsAnswerLeavesInATraceOnlyWithContentOn(t *testing.T) {
	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content %t", content), func(t *testing.T) {
			rcv := otlptest.Start(t)
			opt, flush := withTracing(rcv)
			f := &fakeFleet{readyAt: 1, health: fleet.ModelHealth{Model: "tiny"}}
			f.endpoint = engine(t, http.StatusOK, 0).URL
			e := newEnv(t, withNodeMemory(64<<30), withFleet(f), opt, func(e *testEnv) { e.deps.TraceContent = content })
			e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
			j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
			end := MustEnd(t, e.srv, j.ID)
			st, _ := end.Step(StepSmoke)
			quoted := strconv.Quote(end.Reply)
			if end.State != Done || end.Reply == "" || !strings.HasSuffix(st.Detail, quoted) {
				t.Fatalf("job ended %s, smoke test %q; want done, quoting the reply %s", end.State, st.Detail, quoted)
			}
			e.srv.Close()
			flush()
			got := rcv.WaitFor(t, StepSmoke).Attrs["modelserve.step.detail"]
			want := fmt.Sprintf("answered at %.1f tokens/s", end.TokensPerSecond)
			if content {
				want = st.Detail
			}
			if got != want {
				t.Errorf("the smoke test's span detail %q; want %q", got, want)
			}
		})
	}
}

func TestAFailedStepSpanCarriesTheSentence(t *testing.T) {
	rcv := otlptest.Start(t)
	opt, flush := withTracing(rcv)
	e := newEnv(t, opt)
	j := MustStart(t, e.srv, Request{Repo: "acme/Nowhere-GGUF", Replicas: 1})
	end := MustEnd(t, e.srv, j.ID)
	if end.State != Failed {
		t.Fatalf("job ended %s, want failed", end.State)
	}
	e.srv.Close()
	flush()
	sp := rcv.WaitFor(t, StepRegistry)
	if !sp.StatusError || sp.StatusMessage != end.Error || sp.Attrs["modelserve.step.state"] != Failed {
		t.Fatalf("registry span %+v; want an error status with the job's sentence %q", sp, end.Error)
	}
	if root := rcv.WaitFor(t, "serve job"); !root.StatusError {
		t.Fatalf("root span %+v is not marked failed", root)
	}
}

func TestWithoutATracerAJobHasNoTraceID(t *testing.T) {
	e := newEnv(t)
	e.addModel("acme/Tiny-GGUF", hubtest.RepoOptions{}, map[string]ggufgen.Spec{"tiny-Q4_K_M.gguf": {ContextLength: 2048}})
	j := MustStart(t, e.srv, Request{Repo: "acme/Tiny-GGUF", Replicas: 1})
	if end := MustEnd(t, e.srv, j.ID); end.TraceID != "" {
		t.Fatalf("job has trace id %q with tracing off", end.TraceID)
	}
}

func TestAResumedJobsTraceLinksToTheRunBefore(t *testing.T) {
	rcv := otlptest.Start(t)
	opt, flush := withTracing(rcv)
	e := newEnv(t, withNodeMemory(64<<30), opt)
	e.hub.AddRepo(tinyRepo, hubtest.RepoOptions{})
	e.hub.AddFile(tinyRepo, tinyFile, ggufgen.Bytes(ggufgen.Spec{}))
	e.hub.Trickle(tinyRepo, tinyFile, 256<<10)
	j := MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1})
	waitFetching(t, e.srv, j.ID, 0.2)
	e.srv.Close()
	first, _, err := load(context.Background(), e.db, j.ID)
	if err != nil || first.TraceID == "" {
		t.Fatalf("the stopped job's trace id %q (err %v)", first.TraceID, err)
	}
	e.hub.ClearFaults(tinyRepo, tinyFile)
	d := e.deps
	d.Mirror = MustMirror(t, e.mirrorDir, e.client)
	again := MustServer(t, d)
	if err := again.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	end := MustEnd(t, again, j.ID)
	if end.State != Done || end.TraceID == first.TraceID || end.TraceID == "" {
		t.Fatalf("resumed job ended %s with trace %q (first %q); want done in a trace of its own", end.State, end.TraceID, first.TraceID)
	}
	again.Close() // the job's goroutine has ended its spans
	flush()
	for _, s := range rcv.Spans() {
		if s.Name == "serve job" && s.TraceID == end.TraceID {
			if len(s.Links) != 1 || s.Links[0] != first.TraceID || s.Attrs["modelserve.job.resumed"] != "true" {
				t.Fatalf("resumed run's root %+v; want a link to the first run's trace %s", s, first.TraceID)
			}
			return
		}
	}
	t.Fatalf("no root span of the resumed run's trace %s", end.TraceID)
}
