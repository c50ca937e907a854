package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"modelserve/internal/testkit"
	"modelserve/jobs"
)

// TestModelserveRestartOnKubernetes measures modelserve's own part of its
// pod's restart with --fleet kubernetes, on a real control plane: the
// model's pod, its llama-server run here as the kubelet would, outlives
// modelserve, and the next modelserve on the same data answers through it
// (the same pod) without a load. It reports how long modelserve took to
// stop, and from its start to the first /v1 answer; the rest of a pod's
// restart (the preStop wait, the new pod's scheduling, the volume's
// attach, the container's start, the readiness probe and the Service's
// endpoints) is the cluster's, which this control plane, with no kubelet,
// does not run.
func TestModelserveRestartOnKubernetes(t *testing.T) {
	w := startKubeWorld(t)
	s, cfg, addr := w.s, w.cfg, w.cfg.Addr
	var job jobs.Job
	if code := s.do("POST", "/api/v1/serve", map[string]any{"repo": "acme/Chatty-GGUF", "replicas": 1, "context_length": 1024, "ctx_pool": 2048}, &job); code != http.StatusAccepted {
		t.Fatalf("serve: %d", code)
	}
	pod := waitForPod(t, w.c)
	w.runPod(t, pod)
	if last := s.watch(job.ID, 3*time.Minute); last[len(last)-1].State != jobs.Done {
		t.Fatalf("job ended %s: %s", last[len(last)-1].State, last[len(last)-1].Error)
	}

	body, _ := json.Marshal(map[string]any{"model": "chatty", "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "hello"}}})
	client := &http.Client{Timeout: 5 * time.Second}
	ask := func() int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ask(); code != http.StatusOK {
		t.Fatalf("chatty answered %d before the restart", code)
	}

	began := time.Now()
	s.stop()
	stopped := time.Now()
	token := s.token
	s = startAPI(t, cfg)
	s.token = token
	testkit.WaitFor(t, time.Minute, "chatty answering through the new modelserve", func() (bool, string) {
		code := ask()
		return code == http.StatusOK, http.StatusText(code)
	})
	answered := time.Now()
	t.Logf("modelserve's part of its restart on Kubernetes: its stop took %s, and from its start to the first /v1 answer through the pod left running %s; %s in all",
		stopped.Sub(began).Round(time.Millisecond), answered.Sub(stopped).Round(time.Millisecond), answered.Sub(began).Round(time.Millisecond))

	var reps struct{ Replicas []struct{ ID, State string } }
	if s.do("GET", "/api/v1/replicas", nil, &reps); len(reps.Replicas) != 1 || reps.Replicas[0].ID != pod.Name {
		t.Errorf("replicas after the restart %+v, want the pod left running, %s", reps.Replicas, pod.Name)
	}
}
