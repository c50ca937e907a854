package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/internal/auth"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/kubetest"
	"modelserve/internal/llamatest"
	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestServeOnKubernetes runs modelserve as an operator would with
// --fleet kubernetes: a kubeconfig holding a token of deploy/rbac.yaml's
// ServiceAccount, a real control plane whose scheduler places the pod on a
// kwok node, and the pod's own containers run here as the kubelet would
// run them (the init container's script in busybox, fetching the weights
// from modelserve's mirror with the mirror token; then the real
// llama-server with the pod's args and its key from the Secret). The job
// ends with the model's answer, reached at the pod's address, and a client
// is answered through the gateway.
func TestServeOnKubernetes(t *testing.T) {
	w := startKubeWorld(t)
	c, s := w.c, w.s

	// The plan's pool is the cluster's node.
	var nodes struct {
		Nodes []struct {
			Name  string `json:"name"`
			Cores int    `json:"cpu_cores"`
			RAM   int64  `json:"ram_bytes"`
		} `json:"nodes"`
	}
	if code := s.do("GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 ||
		nodes.Nodes[0].Name != "node-1" || nodes.Nodes[0].Cores != 8 || nodes.Nodes[0].RAM != 32<<30 {
		t.Errorf("nodes: %d %+v, want the cluster's node-1 with its 8 cores and 32 GiB", code, nodes)
	}

	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	pod := waitForPod(t, c)
	if pod.Spec.NodeName != "node-1" {
		t.Errorf("the pod is on %q, want node-1", pod.Spec.NodeName)
	}
	// kwok calls the pod ready before anything runs in it: the smoke test
	// begins against an address nothing answers on yet, and must wait
	// for it, as it must for a pod whose address is still being routed.
	testkit.WaitFor(t, time.Minute, "the job's placement step ended", func() (bool, string) {
		var j jobs.Job
		s.do("GET", "/api/v1/jobs/"+job.ID, nil, &j)
		place, _ := j.Step(jobs.StepPlacement)
		return place.State == jobs.Done || j.Ended(), jobSaw(j)
	})
	w.runPod(t, pod)

	seen := s.watch(job.ID, 3*time.Minute)
	last := seen[len(seen)-1]
	if last.State != jobs.Done {
		t.Fatalf("job ended %s: %s\n%+v", last.State, last.Error, last.Steps)
	}
	if last.Reply == "" {
		t.Errorf("the smoke test has no answer: %+v", last.Steps)
	}

	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if code := s.do("POST", "/v1/chat/completions", map[string]any{"model": "chatty", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}}, &answer); code != http.StatusOK || len(answer.Choices) != 1 {
		t.Errorf("a client asking chatty through the gateway: %d %+v", code, answer)
	}
	// The replica is the controller's, answered for by the pod.
	var reps struct {
		Replicas []struct{ ID, Node, State, Endpoint string } `json:"replicas"`
	}
	endpoint := "http://" + pod.Status.PodIP + ":8080"
	if s.do("GET", "/api/v1/replicas", nil, &reps); len(reps.Replicas) != 1 || reps.Replicas[0].Endpoint != endpoint ||
		reps.Replicas[0].State != "ready" || reps.Replicas[0].Node != "node-1" {
		t.Fatalf("replicas %+v, want one ready on node-1 at its pod's %s", reps.Replicas, endpoint)
	}
	place, _ := last.Step(jobs.StepPlacement)
	if want := reps.Replicas[0].ID + " ready on node-1 at " + endpoint; place.Detail != want {
		t.Errorf("placement says %q, want %q", place.Detail, want)
	}

	// Removed from the catalog, it is removed from the cluster.
	if code := s.do("DELETE", "/api/v1/catalog/chatty", nil, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("removing chatty: %d", code)
	}
	testkit.WaitFor(t, time.Minute, "chatty's Deployment gone", func() (bool, string) {
		deps, err := c.Admin.AppsV1().Deployments("modelserve").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(deps.Items) == 0, fmt.Sprint(len(deps.Items), " deployments")
	})
}

// kubeWorld is modelserve with --fleet kubernetes as an operator runs it:
// a kubeconfig holding a token of deploy/rbac.yaml's ServiceAccount, a
// real control plane with one kwok node, and a registry holding
// acme/Chatty-GGUF. cfg starts it again on the same data.
type kubeWorld struct {
	c               *kubetest.Cluster
	cfg             config
	s               *apiServer
	engine, busybox string
}

// kubeEngineImage is the image the model's pods run: the real
// llama-server, run here as the kubelet would (runPod).
const kubeEngineImage = "ghcr.io/ggml-org/llama.cpp:server"

func startKubeWorld(t *testing.T) *kubeWorld {
	t.Helper()
	w := &kubeWorld{engine: llamatest.Path(t), busybox: kubetest.Busybox(t), c: kubetest.Start(t)}
	w.c.AddNode(t, kubetest.Node{Name: "node-1", CPU: 8, Memory: "32Gi"})
	kubeconfig := w.c.Kubeconfig(t, w.c.Account(t, "../../deploy/rbac.yaml"))
	w.c.Apply(t, "../../deploy/networkpolicy.yaml")

	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Chatty-GGUF", "Chatty-Q4_K_M.gguf", ggufgen.Spec{})
	data := t.TempDir()
	mirrorToken := apiToken(t, data, "nodes")
	addr := freeAddr(t)
	w.cfg = config{Addr: addr, Data: data, HFEndpoint: hub.URL(), Fleet: "kubernetes", Kubeconfig: kubeconfig, EngineImage: kubeEngineImage,
		MirrorURL: "http://" + addr, MirrorToken: mirrorToken}
	w.s = startAPI(t, w.cfg)
	return w
}

// runPod runs pod's containers here as the kubelet would: the init
// container's script in busybox, then the real llama-server.
func (w *kubeWorld) runPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	w.c.RunPod(t, pod, map[string]kubetest.Image{"busybox:1.37": {Path: w.busybox}, kubeEngineImage: {Entrypoint: w.engine}})
}

// waitForPod waits for the fleet's first pod to be placed and given an
// address, and returns it.
func waitForPod(t *testing.T, c *kubetest.Cluster) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testkit.WaitFor(t, time.Minute, "a pod of the model with an address", func() (bool, string) {
		pods, err := c.Admin.CoreV1().Pods("modelserve").List(context.Background(),
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=modelserve"})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
			return false, fmt.Sprint(len(pods.Items), " pods, none with an address")
		}
		pod = &pods.Items[0]
		return true, ""
	})
	return pod
}

// apiToken makes an API token in the database under data, as `modelserve
// token create` does.
func apiToken(t *testing.T, data, name string) string {
	t.Helper()
	db := testkit.OpenDBFile(t, filepath.Join(data, "modelserve.db"))
	defer db.Close()
	tok, err := auth.NewTokens(db).Create(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestDrainTimeoutFlag: the bound on a retiring replica's drain comes from
// the flag or the environment, 10 minutes unless set, and one that is not
// a duration from 1s to 24h is a usage error naming the flag.
func TestDrainTimeoutFlag(t *testing.T) {
	none := func(string) string { return "" }
	if c, err := parseServe(nil, none, io.Discard); err != nil || c.DrainTimeout != 10*time.Minute {
		t.Errorf("by default: %s, %v; want 10m", c.DrainTimeout, err)
	}
	env := func(k string) string {
		if k == "MODELSERVE_DRAIN_TIMEOUT" {
			return "90s"
		}
		return ""
	}
	if c, err := parseServe(nil, env, io.Discard); err != nil || c.DrainTimeout != 90*time.Second {
		t.Errorf("from the environment: %s, %v; want 90s", c.DrainTimeout, err)
	}
	if c, err := parseServe([]string{"--drain-timeout", "2h"}, env, io.Discard); err != nil || c.DrainTimeout != 2*time.Hour {
		t.Errorf("the flag over the environment: %s, %v; want 2h", c.DrainTimeout, err)
	}
	for _, bad := range []string{"0", "500ms", "forever", "48h"} {
		_, err := parseServe([]string{"--drain-timeout", bad}, none, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "--drain-timeout is a duration from 1s to 24h") {
			t.Errorf("--drain-timeout %s: %v, want a usage error naming the flag", bad, err)
		}
	}
}
