package kubefleet_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
)

// answerTokens is how long the streamed answers are: seconds of the tiny
// model's writing, long enough for a scale-down, a restart or a swap to
// act while it streams.
const answerTokens = 8000

// TestKubernetesDrainsBeforeDeleting: no pod is deleted by the fleet's own
// decision while it streams an answer. The pod answering is the real
// engine, run here as the kubelet would run it, held as the gateway holds
// a pod for each request it sends; each case checks the answer ends whole
// and the pod goes (or stays) as the case says.
func TestKubernetesDrainsBeforeDeleting(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, onDemand, admin, ready := w.f, w.cat, w.onDemand, w.c.Admin, w.ready

	t.Run("a drain is chosen once, and kept when its model wants the pod again", func(t *testing.T) {
		trio := onDemand("trio")
		trio.Profiles[0].RAMBytes = 1 << 30
		trio.Scaling.Max = 3
		cat.Put(trio)
		use := f.Use("trio", 3, time.Now())
		defer use()
		pods := testkit.WaitForValue(t, time.Minute, "three ready replicas of trio", func() ([]fleet.Replica, bool) {
			rs := f.Serving("trio")
			return rs, len(rs) == 3
		})
		// Each pod holds one request more than the one before: the least
		// busy go first.
		var releases []func()
		defer func() {
			for _, release := range releases {
				release()
			}
		}()
		for i, r := range pods {
			for range i + 1 {
				release, ok := f.Hold(r.ID, time.Now())
				if !ok {
					t.Fatalf("a ready pod refused a request")
				}
				releases = append(releases, release)
			}
		}
		scale := func(max int) {
			t.Helper()
			m := trio
			m.Scaling.Max = max
			cat.Put(m)
			if err := f.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(context.Background()); err != nil { // and a pass after it
				t.Fatal(err)
			}
		}
		draining := func() []string {
			var out []string
			for _, r := range replicasOf(f, "trio") {
				if r.State == fleet.Draining {
					out = append(out, r.ID)
				}
			}
			return out
		}
		scale(2)
		if d := draining(); len(d) != 1 || d[0] != pods[0].ID {
			t.Fatalf("draining after max 3 to 2: %v, want %s, the least busy", d, pods[0].ID)
		}
		if n := *deploymentOf(t, admin, "trio").Spec.Replicas; n != 3 {
			t.Errorf("trio's Deployment is at %d replicas while a pod drains, want 3 (one kept for it)", n)
		}
		scale(1)
		if d := draining(); len(d) != 2 || !slices.Contains(d, pods[0].ID) || !slices.Contains(d, pods[1].ID) {
			t.Fatalf("draining after max 2 to 1: %v, want %s still and %s, the next least busy", d, pods[0].ID, pods[1].ID)
		}
		scale(3)
		if d := draining(); len(d) != 0 {
			t.Errorf("draining after max back to 3: %v, want none: the pods are wanted again", d)
		}
		if rs := f.Serving("trio"); len(rs) != 3 || len(replicasOf(f, "trio")) != 3 {
			t.Errorf("trio wanted again: serving %+v, of %d pods; want its 3 pods back, and no new one", rs, len(replicasOf(f, "trio")))
		}
		for _, r := range pods {
			if w.deleting(r.ID) {
				t.Errorf("%s, answering, is being deleted", r.ID)
			}
		}
		use()
		for _, release := range releases {
			release() // removed, its pods drain first (TestKubernetesRemovalDrains)
		}
		removeAndWait(t, f, cat, "trio")
	})

	t.Run("lowering max deletes the idle pod, not the one answering", func(t *testing.T) {
		duo := onDemand("duo")
		duo.Profiles[0].RAMBytes = 1 << 30
		duo.Scaling.Max = 2
		cat.Put(duo)
		first := f.Use("duo", 1, time.Now())
		a := ready("duo")
		// b is ready seconds after a: the ReplicaSet controller, left to
		// choose, deletes the pod ready last, which is the one answering.
		time.Sleep(3 * time.Second)
		second := f.Use("duo", 2, time.Now())
		defer second()
		b := testkit.WaitForValue(t, time.Minute, "a second ready replica of duo", func() (fleet.Replica, bool) {
			for _, r := range f.Serving("duo") {
				if r.ID != a.ID {
					return r, true
				}
			}
			return fleet.Replica{}, false
		})
		first()
		s, release := w.answering(t, b)
		defer release()
		// Deleting a may have its ReplicaSet make a replacement for a
		// moment, which kwok calls ready at once (a node would take
		// seconds: weights to fetch, an engine to load): b is to be ready
		// a while longer than it, as a real pod answering is.
		time.Sleep(time.Until(b.ReadyAt.Add(4 * time.Second)))

		lower := duo
		lower.Scaling.Max = 1
		cat.Put(lower)
		f.Poke()
		testkit.WaitForValue(t, time.Minute, "a pod of duo to be deleted", func() (string, bool) { return a.ID, w.deleting(a.ID) || w.deleting(b.ID) })
		if w.deleting(b.ID) {
			t.Fatalf("%s, answering, was deleted by the scale-down, not %s, idle", b.ID, a.ID)
		}
		s.stillStreaming(t, "the scale-down")
		s.complete(t)
		release()
		testkit.WaitForValue(t, time.Minute, "duo left with "+b.ID+" alone, at 1 replica", func() ([]fleet.Replica, bool) {
			rs := replicasOf(f, "duo")
			return rs, len(rs) == 1 && rs[0].ID == b.ID && *deploymentOf(t, admin, "duo").Spec.Replicas == 1
		})
		second()
		removeAndWait(t, f, cat, "duo")
	})

	t.Run("a restarted pod ends its answer, then a new pod comes", func(t *testing.T) {
		use := f.Use("alpha", 1, time.Now())
		defer use()
		p := ready("alpha")
		s, release := w.answering(t, p)
		defer release()
		if err := f.Restart(p.ID); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		if rs := f.Serving("alpha"); len(rs) != 0 {
			t.Errorf("a pod restarting with an answer in flight is still served: %+v", rs)
		}
		// Passes in which the pod must stay, and time for the ReplicaSet
		// controller, which runs on Kubernetes' clock, to delete it
		// were its Deployment lowered under it.
		time.Sleep(2 * time.Second)
		s.stillStreaming(t, "the restart")
		if w.deleting(p.ID) {
			t.Fatalf("%s was deleted with its answer in flight", p.ID)
		}
		if rs := replicasOf(f, "alpha"); len(rs) != 1 || rs[0].State != fleet.Draining || !strings.Contains(rs[0].Detail, "restarted by an operator") {
			t.Errorf("alpha's replicas while its pod restarts: %+v, want %s draining, restarted by an operator", rs, p.ID)
		}
		s.complete(t)
		release()
		testkit.WaitForValue(t, time.Minute, "a new ready pod of alpha", func() ([]fleet.Replica, bool) {
			rs := f.Serving("alpha")
			return rs, len(rs) == 1 && rs[0].ID != p.ID
		})
	})

	t.Run("a model given back ends its answer first, and the other waits for it", func(t *testing.T) {
		askedBefore := time.Now()
		before := f.Use("alpha", 1, askedBefore) // asked before beta: alpha keeps its room for it
		q := ready("alpha")
		w.runEngine(q)
		// The answer's request is asked after beta's, and reaches the
		// fleet, and q, before it (beta's took longer to read).
		askedB := askedBefore.Add(time.Millisecond)
		askedAfter := askedB.Add(time.Millisecond)
		after := f.Use("alpha", 1, askedAfter)
		defer after()
		release, ok := f.Hold(q.ID, askedAfter)
		if !ok {
			t.Fatalf("a ready pod refused a request")
		}
		defer release()
		useB := f.Use("beta", 1, askedB)
		defer useB()
		testkit.WaitForValue(t, time.Minute, "beta to wait for alpha", func() (fleet.ModelHealth, bool) {
			h := health(f, "beta")
			return h, strings.Contains(h.Placement, "waiting for "+q.ID)
		})
		s := startStream(t, q, f.EngineKey(q.ID))
		before() // alpha's requests are all behind beta's now
		testkit.WaitForValue(t, time.Minute, "alpha given back for beta", func() (string, bool) {
			h := health(f, "alpha")
			return h.LastStop, strings.Contains(h.LastStop, "given back for beta once the answers it has end")
		})
		// Passes in which the pod must stay, and time for the ReplicaSet
		// controller, which runs on Kubernetes' clock, to delete it
		// were its Deployment lowered under it.
		time.Sleep(2 * time.Second)
		s.stillStreaming(t, "the give-back")
		if w.deleting(q.ID) {
			t.Fatalf("%s, given back, was deleted with its answer in flight", q.ID)
		}
		if rs := f.Serving("beta"); len(rs) != 0 {
			t.Errorf("beta serves before alpha's answer has ended: %+v", rs)
		}
		s.complete(t)
		release()
		ready("beta")
		testkit.WaitForValue(t, time.Minute, q.ID+" to be gone", func() (string, bool) { return q.ID, w.deleting(q.ID) })
	})
}

// runEngine runs replica r's pod here, as its node's kubelet would: the
// weights fetched from the mirror in busybox, then the real engine, until
// the pod is deleted. kwok calls the pod ready before anything runs, so
// this waits for the engine's own /health.
func (w *swapWorld) runEngine(r fleet.Replica) {
	w.t.Helper()
	engine, busybox := llamatest.Path(w.t), kubetest.Busybox(w.t)
	pod, err := w.c.Admin.CoreV1().Pods(ns).Get(context.Background(), r.ID, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.c.RunPod(w.t, pod, map[string]kubetest.Image{
		"busybox:1.37":                      {Path: busybox},
		"ghcr.io/ggml-org/llama.cpp:server": {Entrypoint: engine},
	})
	testkit.WaitForValue(w.t, time.Minute, r.ID+"'s engine to answer /health", func() (string, bool) {
		resp, err := http.Get(r.Endpoint + "/health")
		if err != nil {
			return err.Error(), false
		}
		resp.Body.Close()
		return resp.Status, resp.StatusCode == http.StatusOK
	})
}

// always has model name run always (min 1), and waits for its ready
// replica.
func (w *swapWorld) always(name string) (catalog.Model, fleet.Replica) {
	w.t.Helper()
	m := w.onDemand(name)
	m.Scaling.Min = 1
	w.cat.Put(m)
	w.f.Poke()
	return m, w.ready(name)
}

// answering runs replica r's engine (runEngine) and has it stream an
// answer, held as the gateway holds a pod for each request it sends, until
// release.
func (w *swapWorld) answering(t *testing.T, r fleet.Replica) (s *stream, release func()) {
	t.Helper()
	w.runEngine(r)
	release, ok := w.f.Hold(r.ID, time.Now())
	if !ok {
		t.Fatalf("a ready pod refused a request")
	}
	return startStream(t, r, w.f.EngineKey(r.ID)), release
}

// deleting is whether pod id is gone or being deleted.
func (w *swapWorld) deleting(id string) bool {
	p, err := w.c.Admin.CoreV1().Pods(ns).Get(context.Background(), id, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
}

// stream is a streamed chat answer being read, as a client reads it.
type stream struct {
	started, done chan struct{}
	// What was read, once done is closed: the [DONE] line, the last
	// chunk's finish reason and usage, and how reading ended.
	sawDone bool
	finish  string
	tokens  int
	chunks  int
	err     error
}

// startStream asks r's engine, with its key, for a streamed answer of
// answerTokens tokens, and returns once its first chunk has come.
func startStream(t *testing.T, r fleet.Replica, key string) *stream {
	t.Helper()
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": %d,
		"ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}`, r.Model, answerTokens)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", r.Endpoint+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	s := &stream{started: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.err = err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			s.err = fmt.Errorf("the engine answered %s", resp.Status)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				s.sawDone = true
				continue
			}
			var c struct {
				Choices []struct {
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				s.err = fmt.Errorf("a chunk that is not JSON: %q", data)
				return
			}
			if s.chunks++; s.chunks == 1 {
				close(s.started)
			}
			for _, ch := range c.Choices {
				if ch.FinishReason != nil {
					s.finish = *ch.FinishReason
				}
			}
			if c.Usage != nil {
				s.tokens = c.Usage.CompletionTokens
			}
		}
		s.err = sc.Err()
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	select {
	case <-s.started:
	case <-s.done:
		t.Fatalf("the answer ended before its first chunk: %v", s.err)
	case <-time.After(time.Minute):
		t.Fatal("no chunk of the answer came within a minute")
	}
	return s
}

// stillStreaming fails t when the answer has ended: cut by what acted on
// it, or whole before it could act (then the case would prove nothing).
func (s *stream) stillStreaming(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.done:
		if !s.whole() {
			t.Fatalf("the answer was cut by %s: %s", what, s)
		}
		t.Fatalf("the answer ended before %s could act on it (%s): it must be longer", what, s)
	default:
	}
}

// whole is whether the ended answer is all there: every token asked for,
// finished for its length, and the stream's last line.
func (s *stream) whole() bool {
	return s.err == nil && s.sawDone && s.finish == "length" && s.tokens == answerTokens
}

func (s *stream) String() string {
	return fmt.Sprintf("%d chunks, %d of %d tokens, finish %q, [DONE] %v, error %v", s.chunks, s.tokens, answerTokens, s.finish, s.sawDone, s.err)
}

// complete waits for the answer's end and checks it is whole.
func (s *stream) complete(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the answer did not end within 3 minutes")
	}
	if !s.whole() {
		t.Errorf("the answer was cut: %s", s)
	}
}

// fakeClock has the fleet go by a clock the test steps, its drains
// bounded by a minute of it.
func fakeClock(c *clocktesting.FakeClock) func(*kubefleet.Options) {
	return func(o *kubefleet.Options) { o.Clock, o.DrainTimeout = c, time.Minute }
}

// TestKubernetesDrainIsBounded: a request that never ends does not keep a
// pod its Deployment is losing for ever: past the drain timeout it is
// deleted, and its Deployment lowered. Until then it is not deleted, and
// not offered to a request.
func TestKubernetesDrainIsBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	w := startSwapWorld(t, fakeClock(clk))
	f, admin := w.f, w.c.Admin
	use := f.Use("alpha", 1, time.Now())
	p := w.ready("alpha")
	if _, ok := f.Hold(p.ID, time.Now()); !ok { // never released
		t.Fatalf("a ready pod refused a request")
	}
	use()
	// Given back for beta while it holds a request that never ends.
	useB := f.Use("beta", 1, time.Now())
	defer useB()
	testkit.WaitForValue(t, time.Minute, p.ID+" draining", func() ([]fleet.Replica, bool) {
		rs := replicasOf(f, "alpha")
		return rs, len(rs) == 1 && rs[0].State == fleet.Draining
	})
	clk.Step(59 * time.Second)
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.deleting(p.ID) {
		t.Fatalf("%s was deleted before its drain timeout, with its request in flight", p.ID)
	}
	if rs := f.Serving("alpha"); len(rs) != 0 {
		t.Errorf("a draining pod is offered to requests: %+v", rs)
	}
	clk.Step(time.Second)
	testkit.WaitForValue(t, time.Minute, p.ID+" deleted past its drain timeout", func() ([]fleet.Replica, bool) {
		return replicasOf(f, "alpha"), w.deleting(p.ID)
	})
	w.ready("beta")
	if n := *deploymentOf(t, admin, "alpha").Spec.Replicas; n != 0 {
		t.Errorf("alpha's Deployment is at %d replicas after its pod was given back, want 0", n)
	}
}

// TestKubernetesAChangedEntryDrains: a model whose catalog entry changes
// has its pods replaced, each once the requests it holds have ended: the
// Deployment keeps its template, and its pod, until then, and the pod
// takes no new request meanwhile.
func TestKubernetesAChangedEntryDrains(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, admin := w.f, w.cat, w.c.Admin
	alpha, p := w.always("alpha")
	release, ok := f.Hold(p.ID, time.Now())
	if !ok {
		t.Fatalf("a ready pod refused a request")
	}
	before := deploymentOf(t, admin, "alpha").Spec.Template.Annotations["modelserve.io/fingerprint"]

	alpha.Profiles[0].RAMBytes = 3 << 30
	cat.Put(alpha)
	for range 2 { // a pass, and one after it
		if err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if w.deleting(p.ID) {
		t.Fatalf("%s, answering, is being deleted as its entry changed", p.ID)
	}
	if got := deploymentOf(t, admin, "alpha").Spec.Template.Annotations["modelserve.io/fingerprint"]; got != before {
		t.Errorf("alpha's Deployment took the new entry with its pod answering")
	}
	if rs := f.Serving("alpha"); len(rs) != 0 {
		t.Errorf("a pod of the old entry is offered to requests: %+v", rs)
	}
	if _, ok := f.Hold(p.ID, time.Now()); ok {
		t.Errorf("a pod of the old entry took a new request")
	}
	rs := replicasOf(f, "alpha")
	if len(rs) != 1 || rs[0].State != fleet.Draining || !strings.Contains(rs[0].Detail, "catalog entry changed") {
		t.Errorf("alpha's pods: %+v, want %s draining for the changed entry", rs, p.ID)
	}

	release()
	testkit.WaitForValue(t, time.Minute, p.ID+" replaced by a pod of the new entry", func() ([]fleet.Replica, bool) {
		rs := f.Serving("alpha")
		return rs, w.deleting(p.ID) && len(rs) == 1 && rs[0].ID != p.ID
	})
	if got := deploymentOf(t, admin, "alpha").Spec.Template.Annotations["modelserve.io/fingerprint"]; got != fleet.Fingerprint(alpha) {
		t.Errorf("alpha's Deployment runs fingerprint %s, want the new entry's %s", got, fleet.Fingerprint(alpha))
	}
}

// TestKubernetesATemplateChangeDrains: a change to what a model's pods run
// that leaves its catalog entry as it was (here its class, and so its
// pods' PriorityClass) replaces its pod as a changed entry does: the
// answer the pod streams ends whole, the pod takes no new request
// meanwhile, and the pod that replaces it runs the change.
func TestKubernetesATemplateChangeDrains(t *testing.T) {
	w := startSwapWorldThrough(t, func(c *kubetest.Cluster, client kubernetes.Interface) kubernetes.Interface {
		c.Apply(t, "../../deploy/priority.yaml")
		return client
	})
	f, cat, admin := w.f, w.cat, w.c.Admin
	alpha, p := w.always("alpha")
	s, release := w.answering(t, p)
	defer release()
	before := deploymentOf(t, admin, "alpha").Spec.Template

	critical := alpha
	critical.Class = catalog.ClassCritical
	if fleet.Fingerprint(critical) != fleet.Fingerprint(alpha) {
		t.Fatal("a model's class changes its fingerprint: this test would not test a change of the template alone")
	}
	cat.Put(critical)
	for range 2 { // a pass, and one after it
		if err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Time for the Deployment and ReplicaSet controllers, on Kubernetes'
	// clock, to roll the pod were its template written.
	time.Sleep(2 * time.Second)
	s.stillStreaming(t, "the change of class")
	if w.deleting(p.ID) {
		t.Fatalf("%s, answering, is being deleted as its model's class changed", p.ID)
	}
	if got := deploymentOf(t, admin, "alpha").Spec.Template.Spec.PriorityClassName; got != before.Spec.PriorityClassName {
		t.Errorf("alpha's Deployment took PriorityClass %s with its pod answering", got)
	}
	if rs := f.Serving("alpha"); len(rs) != 0 {
		t.Errorf("a pod of the template before is offered to requests: %+v", rs)
	}
	if _, ok := f.Hold(p.ID, time.Now()); ok {
		t.Errorf("a pod of the template before took a new request")
	}
	if rs := replicasOf(f, "alpha"); len(rs) != 1 || rs[0].State != fleet.Draining || !strings.Contains(rs[0].Detail, "its model's class") {
		t.Errorf("alpha's pods: %+v, want %s draining for what its pods run", rs, p.ID)
	}

	s.complete(t)
	release()
	r := testkit.WaitForValue(t, time.Minute, p.ID+" replaced by a pod of the new template", func() (fleet.Replica, bool) {
		rs := f.Serving("alpha")
		return first(rs), w.deleting(p.ID) && len(rs) == 1 && rs[0].ID != p.ID
	})
	pod, err := admin.CoreV1().Pods(ns).Get(context.Background(), r.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.PriorityClassName != "modelserve-critical" || pod.Spec.Priority == nil || *pod.Spec.Priority != 100000 {
		t.Errorf("alpha's new pod names PriorityClass %q with priority %v, want modelserve-critical, 100000", pod.Spec.PriorityClassName, pod.Spec.Priority)
	}
}

// TestKubernetesRemovalDrains: a model removed from the catalog, or a
// profile from its entry, loses its objects only once the answers its
// pods hold have ended, as the drains of a scale-down do.
func TestKubernetesRemovalDrains(t *testing.T) {
	w := startSwapWorld(t)
	f, cat, onDemand, admin := w.f, w.cat, w.onDemand, w.c.Admin
	// drainsOn checks, over a pass or two, that the Deployment named dep
	// and held pod p stay, p draining for why, and that p takes no new
	// request.
	drainsOn := func(t *testing.T, dep string, p fleet.Replica, why string) {
		t.Helper()
		for range 2 {
			if err := f.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second) // for the ReplicaSet controller, on Kubernetes' clock, to act were the Deployment lowered
		if !hasDeployment(t, admin, dep) {
			t.Fatalf("Deployment %s was deleted with %s answering", dep, p.ID)
		}
		if w.deleting(p.ID) {
			t.Fatalf("%s was deleted with its answer in flight", p.ID)
		}
		rs := replicasOf(f, p.Model)
		if i := slices.IndexFunc(rs, func(r fleet.Replica) bool { return r.ID == p.ID }); i < 0 || rs[i].State != fleet.Draining ||
			!strings.Contains(rs[i].Detail, why+"; draining: waiting for 1 request in flight to end") {
			t.Errorf("%s's replicas %+v; want %s draining, %s", p.Model, rs, p.ID, why)
		}
		if _, ok := f.Hold(p.ID, time.Now()); ok {
			t.Errorf("%s, draining, took a new request", p.ID)
		}
	}

	t.Run("a model removed from the catalog drains before its objects go", func(t *testing.T) {
		use := f.Use("alpha", 1, time.Now())
		p := w.ready("alpha")
		release, ok := f.Hold(p.ID, time.Now())
		if !ok {
			t.Fatalf("a ready pod refused a request")
		}
		defer release()
		dep := deploymentOf(t, admin, "alpha").Name
		cat.Remove("alpha")
		use()
		drainsOn(t, dep, p, "its model was removed from the catalog")
		release()
		testkit.WaitForValue(t, time.Minute, "alpha's Deployment and pod gone", func() (string, bool) {
			return dep, !hasDeployment(t, admin, dep) && w.deleting(p.ID)
		})
	})

	t.Run("a profile removed from its model's entry drains before its Deployment goes", func(t *testing.T) {
		// Its first profile fits no node: its pods go to the second.
		duo := onDemand("duo")
		duo.Scaling.Min = 1
		big, small := duo.Profiles[0], duo.Profiles[0]
		big.Name, big.RAMBytes = "big", 8<<30
		small.Name, small.RAMBytes = "small", 1<<30
		duo.Profiles = []catalog.Profile{big, small}
		cat.Put(duo)
		f.Poke()
		p := testkit.WaitForValue(t, time.Minute, "a ready replica of duo on its second profile", func() (fleet.Replica, bool) {
			rs := f.Serving("duo")
			return first(rs), len(rs) == 1
		})
		pod, err := admin.CoreV1().Pods(ns).Get(context.Background(), p.ID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep := pod.Labels["modelserve.io/deployment"]
		if !strings.HasSuffix(dep, "-p1") {
			t.Fatalf("duo's pod %s is of Deployment %q, want its second profile's", p.ID, dep)
		}
		release, ok := f.Hold(p.ID, time.Now())
		if !ok {
			t.Fatalf("a ready pod refused a request")
		}
		defer release()
		one := duo
		one.Profiles = []catalog.Profile{big}
		cat.Put(one)
		drainsOn(t, dep, p, "its profile was removed from its model's catalog entry")
		release()
		testkit.WaitForValue(t, time.Minute, "duo's second Deployment and its pod gone", func() (string, bool) {
			return dep, !hasDeployment(t, admin, dep) && w.deleting(p.ID)
		})
		if !hasDeployment(t, admin, strings.TrimSuffix(dep, "-p1")+"-p0") {
			t.Errorf("duo's first profile's Deployment went with the second's")
		}
	})
}

// hasDeployment is whether Deployment name is there, and not being
// deleted.
func hasDeployment(t *testing.T, admin kubernetes.Interface, name string) bool {
	t.Helper()
	d, err := admin.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && d.DeletionTimestamp == nil
}

// removeAndWait removes model from the catalog and waits for its pods to
// be gone.
func removeAndWait(t *testing.T, f *kubefleet.Fleet, cat *catalogtest.Catalog, model string) {
	t.Helper()
	cat.Remove(model)
	f.Poke()
	testkit.WaitForValue(t, time.Minute, model+"'s pods to be gone", func() ([]fleet.Replica, bool) {
		rs := replicasOf(f, model)
		return rs, len(rs) == 0
	})
}
