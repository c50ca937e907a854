package kubefleet_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/llamatest"
	"modelserve/internal/mirror"
	"modelserve/internal/testkit"
	"modelserve/internal/testlog"
)

// answerTokens is how long the streamed answers are: seconds of the tiny
// model's writing, long enough for a scale-down, a restart or a swap to
// act while it streams.
const answerTokens = 8000

// swapWorld is a real control plane with one node that has room for one
// model at a time, a catalog of three models on demand (alpha, beta,
// gamma) and a fleet running over them: the swap tests' common ground.
// Each model's weights are a tiny GGUF model on a mirror the pods fetch
// from, so a pod run here (runEngine) answers with the real engine.
type swapWorld struct {
	t *testing.T
	c *kubetest.Cluster
	f *kubeFleet
	// pods are the pods found answering for replicas, by replica.
	pods     map[string]string
	cat      *catalogtest.Catalog
	onDemand func(name string) catalog.Model
}

// mirrorToken is what the swap world's pods fetch weights with.
const mirrorToken = "ms_nodes"

// startSwapWorld starts the swap world; set, when given, changes the
// fleet's options (its drain timeout, its clock).
func startSwapWorld(t *testing.T, set ...func(*fleet.Options)) *swapWorld {
	t.Helper()
	return startSwapWorldThrough(t, nil, set...)
}

// startSwapWorldThrough is startSwapWorld with the fleet's client to the
// control plane passed through through (nil: as it is), which may also
// ready the cluster before the fleet starts.
func startSwapWorldThrough(t *testing.T, through func(*kubetest.Cluster, kubernetes.Interface) kubernetes.Interface, set ...func(*fleet.Options)) *swapWorld {
	t.Helper()
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "small-1", CPU: 8, Memory: "6Gi"})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	if through != nil {
		client = through(c, client)
	}
	mirrorDir := t.TempDir()
	mirrorURL := serveMirror(t, mirrorDir)
	// A context the engine lets an answer run to: seconds of writing.
	weights := ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192})
	sum := sha256.Sum256(weights)
	cat := &catalogtest.Catalog{}
	onDemand := func(name string) catalog.Model {
		m := model(mirrorDir, name, catalog.Profile{RAMBytes: 4 << 30, CPUCores: 1})
		m.Scaling = catalog.Scaling{Min: 0, Max: 1, IdleAfter: time.Hour}
		// One slot with a long context: a streamed answer lasts seconds.
		m.Profiles[0].Pool, m.Profiles[0].Slots = 8192, 1
		m.Origin.Files = []catalog.OriginFile{{Path: "tiny-Q8_0.gguf", Bytes: int64(len(weights)), SHA256: hex.EncodeToString(sum[:])}}
		if err := os.MkdirAll(filepath.Dir(m.Source), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.Source, weights, 0o644); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		cat.Put(onDemand(name))
	}
	var logs testlog.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the fleet's log:\n%s", logs.String())
		}
	})
	opts := kubefleet.Options{
		Client: client, Catalog: cat, Namespace: ns, EngineImage: "ghcr.io/ggml-org/llama.cpp:server",
		MirrorURL: mirrorURL, MirrorDir: mirrorDir, MirrorToken: mirrorToken, Resync: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	// Each swap asked for at once: a residency would have every one wait
	// seconds for the model before.
	f := newKubeFleet(t, opts, append([]func(*fleet.Options){func(o *fleet.Options) { o.Residency = -1 }}, set...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &swapWorld{t: t, c: c, f: f, cat: cat, onDemand: onDemand, pods: map[string]string{}}
}

// serveMirror serves the mirror of dir on loopback, to the pods' token
// only, as modelserve serves /mirror/ to the nodes.
func serveMirror(t *testing.T, dir string) string {
	t.Helper()
	m, err := mirror.New(mirror.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+mirrorToken {
			http.Error(w, "a token is needed", http.StatusUnauthorized)
			return
		}
		m.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ready waits for name's one ready replica.
func (w *swapWorld) ready(name string) fleet.Replica {
	w.t.Helper()
	type seen struct {
		Replicas []fleet.Replica
		Health   fleet.ModelHealth
	}
	testkit.WaitForValue(w.t, time.Minute, "a ready replica of "+name, func() (seen, bool) {
		rs := w.f.Serving(name)
		return seen{replicasOf(w.f, name), health(w.f, name)}, len(rs) == 1
	})
	return first(w.f.Serving(name))
}

// runEngine runs replica r's pod here, as its node's kubelet would: the
// weights fetched from the mirror in busybox, then the real engine, until
// the pod is deleted. kwok calls the pod ready before anything runs, so
// this waits for the engine's own /health.
func (w *swapWorld) runEngine(r fleet.Replica) {
	w.t.Helper()
	engine, busybox := llamatest.Path(w.t), kubetest.Busybox(w.t)
	w.c.RunPod(w.t, w.podOf(r), map[string]kubetest.Image{
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

// podOf is the pod answering for ready replica r, remembered for when
// it has gone.
func (w *swapWorld) podOf(r fleet.Replica) *corev1.Pod {
	w.t.Helper()
	p := podOf(w.t, w.c.Admin, r)
	w.pods[r.ID] = p.Name
	return p
}

// deleting is whether the pod answering for replica r is gone or being
// deleted.
func (w *swapWorld) deleting(r fleet.Replica) bool {
	name, ok := w.pods[r.ID]
	if !ok {
		name = w.podOf(r).Name
	}
	p, err := w.c.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
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
	if w.deleting(p) {
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
		return rs, w.deleting(p) && len(rs) == 1 && rs[0].ID != p.ID
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
	if w.deleting(p) {
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
	if rs := replicasOf(f, "alpha"); len(rs) != 1 || rs[0].State != fleet.Draining || !strings.Contains(rs[0].Detail, "its model's catalog entry changed") {
		t.Errorf("alpha's pods: %+v, want %s draining for its changed entry", rs, p.ID)
	}

	s.complete(t)
	release()
	r := testkit.WaitForValue(t, time.Minute, p.ID+" replaced by a pod of the new template", func() (fleet.Replica, bool) {
		rs := f.Serving("alpha")
		return first(rs), w.deleting(p) && len(rs) == 1 && rs[0].ID != p.ID
	})
	pod := w.podOf(r)
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
		if w.deleting(p) {
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
			return dep, !hasDeployment(t, admin, dep) && w.deleting(p)
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
		dep := w.podOf(p).Labels["modelserve.io/deployment"]
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
		drainsOn(t, dep, p, "its model's catalog entry changed: a replica of the new entry replaces it")
		release()
		testkit.WaitForValue(t, time.Minute, "duo's second Deployment and its pod gone", func() (string, bool) {
			return dep, !hasDeployment(t, admin, dep) && w.deleting(p)
		})
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
func removeAndWait(t *testing.T, f *kubeFleet, cat *catalogtest.Catalog, model string) {
	t.Helper()
	cat.Remove(model)
	f.Poke()
	testkit.WaitForValue(t, time.Minute, model+"'s pods to be gone", func() ([]fleet.Replica, bool) {
		rs := replicasOf(f, model)
		return rs, len(rs) == 0
	})
}
