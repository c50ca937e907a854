package kubefleet

import (
	"errors"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/plan"
)

// A profile on vLLM runs vLLM's OpenAI server image (--vllm-image) on the
// folder of the model's files, where llama.cpp's runs llama-server on one
// file: the same Deployment otherwise, fetching the same files the same
// way, asking for the same cards.

// engine is the image, command line and key variable of p's container.
func (f *cluster) engine(m catalog.Model, p catalog.Profile, w weights) (image string, args []string, keyEnv string) {
	listen := []string{"--host", "0.0.0.0", "--port", strconv.Itoa(enginePort)}
	if p.Engine == fleet.EngineVLLM {
		return f.opts.VLLMImage, append(fleet.VLLMArgs(m, p, weightsDir), listen...), fleet.VLLMKeyEnv
	}
	return f.opts.EngineImage, append(fleet.EngineArgs(m, p, w.model, w.projector, p.CPUCores), listen...), fleet.KeyEnv
}

// shm is the memory-backed /dev/shm of a vLLM profile's pod, sized for its
// cards as the plan counts it in the pod's memory
// (plan.VLLMShmBytesPerCard); none for llama.cpp's.
func shm(p catalog.Profile) ([]corev1.Volume, []corev1.VolumeMount) {
	if p.Engine != fleet.EngineVLLM {
		return nil, nil
	}
	size := resource.NewQuantity(int64(max(p.GPUsPerNode, 1))*plan.VLLMShmBytesPerCard, resource.BinarySI)
	return []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: size}}}},
		[]corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}}
}

// canRun says in a sentence why the fleet cannot start m's engine: a
// profile on vLLM with no --vllm-image to run it.
func (f *cluster) canRun(m catalog.Model) error {
	for _, p := range m.Profiles {
		if p.Engine == fleet.EngineVLLM && f.opts.VLLMImage == "" {
			return errors.New(m.Name + " runs on vLLM, and no vLLM image is configured: pass --vllm-image (for example vllm/vllm-openai:v0.11.0)")
		}
	}
	return nil
}

// engineOfImage is the engine a pod's engine container runs, by the key
// variable the fleet gave it: VLLM_API_KEY for vLLM's.
func engineOfImage(env []corev1.EnvVar) string {
	for _, e := range env {
		if e.Name == fleet.VLLMKeyEnv {
			return fleet.EngineVLLM
		}
	}
	return "llamacpp"
}
