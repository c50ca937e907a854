package jobs

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	tracing "modelserve/internal/trace"
)

// A job is a trace: a root span for each run of it (a resumed job's run
// links to the trace of the run before), and a child for each step with
// its outcome. The spans live in the job's live record, guarded by its mu.

// tracer is the jobs' tracer, the no-op one when Deps has none.
func (s *Server) tracer() trace.Tracer { return tracing.Or(s.deps.Tracer) }

// startTrace begins the run's root span, and records its trace on the job
// (saved with the job's next change).
func (s *Server) startTrace(ctx context.Context, l *live) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("modelserve.job.id", l.job.ID), attribute.String("modelserve.job.kind", l.job.Kind),
		attribute.String("modelserve.repo", l.job.Request.Repo), attribute.String("modelserve.revision", l.job.Request.Revision),
	)}
	if prev := previousRun(l.job); prev.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev,
			Attributes: []attribute.KeyValue{attribute.String("modelserve.link", "the run this job resumes")}}))
		opts = append(opts, trace.WithAttributes(attribute.Bool("modelserve.job.resumed", true)))
	}
	ctx, l.root = s.tracer().Start(ctx, l.job.Kind+" job", opts...)
	if sc := l.root.SpanContext(); sc.IsValid() {
		l.job.TraceID, l.job.TraceSpan = sc.TraceID().String(), sc.SpanID().String()
	}
	return ctx
}

// previousRun is the root span of the run a job's record names, if any.
func previousRun(j Job) trace.SpanContext {
	tid, err1 := trace.TraceIDFromHex(j.TraceID)
	sid, err2 := trace.SpanIDFromHex(j.TraceSpan)
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// traceStepLocked follows the step at i: a child span begins when it
// runs (or at once for one that is skipped or failed without running)
// and ends with its outcome. l.mu is held.
func (s *Server) traceStepLocked(l *live, i int) {
	if l.root == nil || !l.root.IsRecording() {
		return
	}
	st := l.job.Steps[i]
	sp := l.steps[st.Name]
	if sp == nil {
		if l.steps == nil {
			l.steps = map[string]trace.Span{}
		}
		_, sp = s.tracer().Start(trace.ContextWithSpan(context.Background(), l.root), st.Name,
			trace.WithAttributes(attribute.String("modelserve.job.id", l.job.ID), attribute.String("modelserve.step", st.Name)))
		l.steps[st.Name] = sp
	}
	if st.State == Running {
		return
	}
	s.endStep(sp, l.job, st)
	delete(l.steps, st.Name)
}

func (s *Server) endStep(sp trace.Span, j Job, st Step) {
	sp.SetAttributes(attribute.String("modelserve.step.state", st.State), attribute.String("modelserve.step.detail", s.tracedDetail(j, st)))
	if j.Model != "" {
		sp.SetAttributes(attribute.String("modelserve.model", j.Model))
	}
	if st.BytesTotal > 0 {
		sp.SetAttributes(attribute.Int64("modelserve.bytes_done", st.BytesDone), attribute.Int64("modelserve.bytes_total", st.BytesTotal))
	}
	if st.State == Failed {
		sp.SetStatus(codes.Error, st.Detail)
	}
	sp.End()
}

// tracedDetail is st's detail as its span carries it: the smoke test's
// names what the model answered, which leaves for a collector only with
// Deps.TraceContent, as the gateway's prompts and answers do.
func (s *Server) tracedDetail(j Job, st Step) string {
	if st.Name == StepSmoke && st.State == Done && !s.deps.TraceContent {
		return answered(j.Reply, j.TokensPerSecond, j.Request.Embeddings, false)
	}
	return st.Detail
}

// annotate adds what a step learnt (the file, the node) to its span.
func (s *Server) annotate(l *live, step string, attrs ...attribute.KeyValue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp := l.steps[step]; sp != nil {
		sp.SetAttributes(attrs...)
	}
}

// inStep is ctx with the step's span, so that what the step asks over
// HTTP (the registry, the mirror's fetches) are its children.
func (s *Server) inStep(ctx context.Context, l *live, step string) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp := l.steps[step]; sp != nil {
		return trace.ContextWithSpan(ctx, sp)
	}
	return ctx
}

// endTrace ends the run's spans: a step still open (the server stopping)
// and the root, with how the job ended.
func (s *Server) endTrace(l *live) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.root == nil {
		return
	}
	for name, sp := range l.steps {
		st, _ := l.job.Step(name)
		s.endStep(sp, l.job, st)
	}
	l.steps = nil
	l.root.SetAttributes(attribute.String("modelserve.job.state", l.job.State))
	if l.job.Model != "" {
		l.root.SetAttributes(attribute.String("modelserve.model", l.job.Model))
	}
	if l.job.State == Failed {
		l.root.SetStatus(codes.Error, l.job.Error)
	}
	l.root.End()
	l.root = nil
}
