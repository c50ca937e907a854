package kubefleet_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"modelserve/catalog"
	"modelserve/internal/catalogtest"
	"modelserve/internal/fleet"
	"modelserve/internal/kubefleet"
	"modelserve/internal/kubetest"
	"modelserve/internal/testkit"
	"modelserve/internal/vllmtest"
)

// vllmModel is a catalog entry of original weights on the mirror: shards,
// config.json and tokenizer, served on cards by vLLM.
func vllmModel(mirrorDir, name string, cards int) catalog.Model {
	files := []catalog.OriginFile{
		{Path: "config.json", Bytes: 700, SHA256: strings.Repeat("c1", 32)},
		{Path: "model-00001-of-00002.safetensors", Bytes: 8 << 30, SHA256: strings.Repeat("a1", 32)},
		{Path: "model-00002-of-00002.safetensors", Bytes: 7 << 30, SHA256: strings.Repeat("a2", 32)},
		{Path: "model.safetensors.index.json", Bytes: 24000, SHA256: strings.Repeat("d1", 32)},
		{Path: "tokenizer.json", Bytes: 9 << 20, SHA256: strings.Repeat("e1", 32)},
	}
	return catalog.Model{
		Name: name, Source: filepath.Join(mirrorDir, name, "abc1234"), Weights: []string{files[1].Path, files[2].Path},
		Profiles: []catalog.Profile{{Name: "gpu-2xl4", Engine: fleet.EngineVLLM, GPUClass: "L4", GPUsPerNode: cards,
			CardBytes: 18 << 30, RAMBytes: 4 << 30, Size: catalog.Size{Pool: 16384, Slots: 4}, Priority: 100, Weight: 1}},
		Scaling: catalog.Scaling{Min: 1}, AddedAt: time.Now(),
		Origin: &catalog.Origin{Repo: "meta-llama/Llama-3.1-8B-Instruct", Revision: "abc1234", Files: files},
	}
}

// TestAVLLMModelIsADeploymentOfVLLM runs the fleet on a real control
// plane with --vllm-image: a model of original weights is a Deployment
// whose container is vLLM's OpenAI server on the fetched folder, asserted
// field by field, with arguments the vLLM release of the image takes.
func TestAVLLMModelIsADeploymentOfVLLM(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 2,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	mirrorDir := t.TempDir()
	cat := &catalogtest.Catalog{}
	f := newKubeFleet(t, kubefleet.Options{
		Client: client, Catalog: cat, Namespace: ns, EngineImage: "ghcr.io/ggml-org/llama.cpp:server", VLLMImage: vllmtest.Image,
		MirrorURL: "http://modelserve.modelserve.svc:8080/", MirrorDir: mirrorDir, MirrorToken: "ms_nodes",
		Resync: 5 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	cat.Put(vllmModel(mirrorDir, "llama", 2))
	f.Poke()
	r := testkit.WaitForValue(t, time.Minute, "a ready replica of llama", func() (fleet.Replica, bool) {
		rs := f.Serving("llama")
		return first(rs), len(rs) == 1
	})
	key := f.EngineKey(r.ID)
	d := deploymentOf(t, c.Admin, "llama")
	checkDeploymentSafety(t, d.Spec.Template.Spec, key)
	spec := d.Spec.Template.Spec
	e := spec.Containers[0]
	if e.Image != "vllm/vllm-openai:v0.11.0" || len(e.Command) != 0 {
		t.Errorf("engine image %q command %q; want vLLM's image with its own entrypoint", e.Image, e.Command)
	}
	want := []string{"--model", "/weights", "--served-model-name", "llama", "--tensor-parallel-size", "2",
		"--gpu-memory-utilization", "0.9", "--max-model-len", "4096", "--max-num-seqs", "4", "--enable-prompt-tokens-details",
		"--host", "0.0.0.0", "--port", "8080"}
	if !slices.Equal(e.Args, want) {
		t.Errorf("engine args %q, want %q", e.Args, want)
	}
	if _, err := vllmtest.ParseArgs(e.Args, nil); err != nil {
		t.Errorf("vLLM %s would refuse the engine's arguments: %v", vllmtest.Version, err)
	}
	if k := envRef(e.Env, "VLLM_API_KEY"); k == nil || !strings.HasSuffix(k.Name, "-key") || envRef(e.Env, "LLAMA_API_KEY") != nil {
		t.Errorf("the key is not VLLM_API_KEY from the model's Secret: %+v", e.Env)
	}
	gpus := e.Resources.Requests[corev1.ResourceName("nvidia.com/gpu")]
	lim := e.Resources.Limits[corev1.ResourceName("nvidia.com/gpu")]
	if gpus.Value() != 2 || lim.Value() != 2 {
		t.Errorf("engine resources %v, want nvidia.com/gpu 2 requested and limited", e.Resources)
	}
	if p := e.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("readiness probe %+v, want GET /health on 8080", p)
	}
	var shm *corev1.Volume
	for i, v := range spec.Volumes {
		if v.Name == "shm" {
			shm = &spec.Volumes[i]
		}
	}
	if shm == nil || shm.EmptyDir == nil || shm.EmptyDir.Medium != corev1.StorageMediumMemory || shm.EmptyDir.SizeLimit == nil ||
		shm.EmptyDir.SizeLimit.Value() != 2<<30 {
		t.Errorf("volumes %+v, want a memory-backed shm of 2 GiB (one for each card)", spec.Volumes)
	}
	if !slices.ContainsFunc(e.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "shm" && m.MountPath == "/dev/shm" }) {
		t.Errorf("engine mounts %+v, want shm at /dev/shm", e.VolumeMounts)
	}
	ic := spec.InitContainers[0]
	files := envValue(ic.Env, "MODELSERVE_FILES")
	for _, f := range []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json"} {
		if !strings.Contains(files, " "+f) {
			t.Errorf("the init container does not fetch %s: %q", f, files)
		}
	}
	if !strings.Contains(files, strings.Repeat("a1", 32)+" 8589934592 model-00001-of-00002.safetensors") {
		t.Errorf("the init container fetches %q, without each file's sha256 and size", files)
	}
	aff := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
	if aff.Key != "nvidia.com/gpu.product" || !slices.Contains(aff.Values, "NVIDIA-L4") {
		t.Errorf("node affinity %+v, want the L4's product label", aff)
	}

	// Four cards where the node has two: never placed, and said so.
	cat.Put(vllmModel(mirrorDir, "wide", 4))
	f.Poke()
	h := testkit.WaitForValue(t, time.Minute, "wide to be unplaceable", func() (fleet.ModelHealth, bool) {
		h := health(f, "wide")
		return h, h.Unplaceable
	})
	if !strings.Contains(h.Placement, "no node could ever host it") || !strings.Contains(h.Placement, "needs 4 L4 cards") {
		t.Errorf("placement %q, want the fleet's sentence naming the 4 L4 cards it needs", h.Placement)
	}
}

// checkDeploymentSafety: the key is never in a pod's spec in clear.
func checkDeploymentSafety(t *testing.T, spec corev1.PodSpec, key string) {
	t.Helper()
	for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, a := range ctr.Args {
			if a == "--api-key" || a == key {
				t.Errorf("the replica key is in %s's args: %q", ctr.Name, ctr.Args)
			}
		}
		for _, v := range ctr.Env {
			if v.Value == key {
				t.Errorf("the replica key is in %s's env %s in clear", ctr.Name, v.Name)
			}
		}
	}
}

// TestWithoutAVLLMImageAVLLMModelIsParked: a cluster fleet given no
// --vllm-image cannot run original weights. A model of them is parked
// with a sentence naming the flag to set, and no pod is asked for it,
// while a model of GGUF files beside it runs.
func TestWithoutAVLLMImageAVLLMModelIsParked(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, kubetest.Node{Name: "gpu-1", CPU: 16, Memory: "64Gi", GPUs: 2,
		Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-L4"}})
	client := c.Client(t, c.Account(t, "../../deploy/rbac.yaml"))
	mirrorDir := t.TempDir()
	cat := &catalogtest.Catalog{}
	f, _ := runFleet(t, client, cat, mirrorDir)

	cat.Put(vllmModel(mirrorDir, "llama", 2))
	cat.Put(model(mirrorDir, "tiny", catalog.Profile{RAMBytes: 1 << 30, CPUCores: 1}))
	f.Poke()
	h := testkit.WaitForValue(t, time.Minute, "llama to be parked", func() (fleet.ModelHealth, bool) {
		h := health(f, "llama")
		return h, h.Parked
	})
	if !strings.Contains(h.Reason, "runs on vLLM") || !strings.Contains(h.Reason, "--vllm-image") {
		t.Errorf("parked for %q, want a sentence saying it runs on vLLM and to pass --vllm-image", h.Reason)
	}
	testkit.WaitForValue(t, time.Minute, "a ready replica of tiny", func() ([]fleet.Replica, bool) {
		rs := f.Serving("tiny")
		return rs, len(rs) == 1
	})
	pods, err := c.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tiny := deploymentOf(t, c.Admin, "tiny").Labels["modelserve.io/model"]
	for _, p := range pods.Items {
		if p.Labels["modelserve.io/model"] != tiny {
			t.Errorf("pod %s (%s) was asked for, and only tiny's pods should be", p.Name, p.Labels["modelserve.io/model"])
		}
	}
	if rs := f.Serving("llama"); len(rs) != 0 {
		t.Errorf("llama has replicas %+v without a vLLM to run them", rs)
	}
}
