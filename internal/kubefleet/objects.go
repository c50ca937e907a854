package kubefleet

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// Labels and annotations on every object the fleet writes. The model label
// holds the model's object name (objName), which is always a valid label
// value; the annotation holds the catalog's own name.
const (
	labelManagedBy   = "app.kubernetes.io/managed-by"
	managedBy        = "modelserve"
	labelModel       = "modelserve.io/model"
	labelDeployment  = "modelserve.io/deployment"
	annotationModel  = "modelserve.io/model"
	annotationFinger = "modelserve.io/fingerprint"
	// annotationTemplate, on a Deployment, is the hash of the pod
	// template modelserve wrote it with (templateHash): a template that
	// changes without its fingerprint (the model's class, the engine
	// image, a node's card) is told by it, and rolled as a changed entry
	// is (rolled).
	annotationTemplate = "modelserve.io/template"
	// A park kept on the model's owner object by a modelserve before the
	// controller kept them (parks.go): read, never written.
	annotationParkedFor = "modelserve.io/parked-for"
	annotationParkedWhy = "modelserve.io/parked-reason"

	fieldManager = "modelserve"
	// enginePort is where the engine listens in its pod.
	enginePort = 8080
	// keySecretKey is the replica key's entry in its Deployment's Secret;
	// the engine reads it from LLAMA_API_KEY (VLLM_API_KEY).
	keySecretKey = "api-key"
	// MirrorSecret holds the token nodes fetch weights from the mirror
	// with (entry "token").
	MirrorSecret = "modelserve-mirror"
	weightsDir   = "/weights"
)

// objName is the name of a model's objects: readable, a valid DNS label
// (Services need one) whatever the catalog name holds, and unique by the
// hash of the full name.
func objName(model string) string {
	sum := sha256.Sum256([]byte(model))
	clean := strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(model)), "-")
	if len(clean) > 40 {
		clean = strings.TrimRight(clean[:40], "-")
	}
	return "ms-" + clean + "-" + hex.EncodeToString(sum[:4])
}

func deploymentName(model string, profile int) string {
	return objName(model) + "-p" + strconv.Itoa(profile)
}

// keySecretName is the Secret holding the key of the replicas of one
// Deployment (a model's profile), owned by it: a key leaks no further than
// the replicas of one profile of one model. A key per pod would need each
// pod to differ from its Deployment's template, which a Deployment cannot
// do (only an admission webhook rewriting pods could): the Deployment is
// the finest thing the fleet writes a pod's environment for.
func keySecretName(deployment string) string { return deployment + "-key" }

// modelKeySecretName is the Secret one key of a whole model was kept in
// before keys were per Deployment: the Deployments written then go on
// naming it until their pods start afresh (keyOf), and it is removed once
// no pod reads it (dropModelKey).
func modelKeySecretName(model string) string { return objName(model) + "-key" }

func modelLabels(model string) map[string]string {
	return map[string]string{labelManagedBy: managedBy, labelModel: objName(model)}
}

// byPriority are a model's profiles, the preferred first, with their index
// in the catalog entry (which names their Deployment).
func byPriority(m catalog.Model) []int {
	idx := make([]int, len(m.Profiles))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return m.Profiles[b].Priority - m.Profiles[a].Priority })
	return idx
}

// weights are the files a replica of m fetches from the mirror, and the
// mirror folder they are under (<model>/<revision>), from where the mirror
// keeps them (m.Source, under mirrorDir).
type weights struct {
	folder    string
	files     []catalog.OriginFile
	model     string // the path the engine opens, under weightsDir
	projector string
	bytes     int64
}

func weightsOf(m catalog.Model, mirrorDir string) (weights, error) {
	var w weights
	if m.Origin == nil || len(m.Origin.Files) == 0 {
		return w, fmt.Errorf("%s lists no files of its repository, so nodes cannot fetch its weights: serve it again from its repository", m.Name)
	}
	rel, err := filepath.Rel(mirrorDir, m.Source)
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if err != nil || len(parts) < 2 || parts[0] == ".." {
		return w, fmt.Errorf("the weights of %s (%s) are not on modelserve's mirror, which is where nodes fetch them: serve it again to fetch them into the mirror", m.Name, m.Source)
	}
	w.folder = parts[0] + "/" + parts[1]
	w.files = m.Origin.Files
	for _, f := range m.Origin.Files {
		w.bytes += f.Bytes
	}
	if len(m.Weights) == 0 {
		return w, fmt.Errorf("%s names no weights for llama-server to load: serve a GGUF file of its repository again", m.Name)
	}
	w.model = weightsDir + "/" + m.Weights[0]
	if m.Projector != "" {
		w.projector = weightsDir + "/" + m.Projector
	}
	return w, nil
}

// fetchScript is the init container's program (busybox sh and wget): each
// file is fetched into <path>.part, resumed from where it stopped after a
// restart (wget -c sends a Range), checked against its sha256, and only
// then renamed: a file under its own name on the volume is whole and
// verified, and a restarted pod (or a node keeping the volume) skips it.
// A .part already as long as the file is not asked for again (the mirror
// would answer 416, which wget takes for a failure), and one longer than
// the file is thrown away. Each line of $MODELSERVE_FILES is
// "<sha256|-> <bytes|-> <path>".
const fetchScript = `set -eu
cd "$MODELSERVE_WEIGHTS"
printf '%s\n' "$MODELSERVE_FILES" | while read -r sum size file; do
  [ -n "$file" ] || continue
  [ -f "$file" ] && continue
  mkdir -p "$(dirname "$file")"
  have=0
  [ -f "$file.part" ] && have=$(wc -c < "$file.part")
  if [ "$size" != "-" ] && [ "$have" -gt "$size" ]; then
    echo "$file.part is longer than the file: fetching it again from the start"
    rm -f "$file.part"
    have=0
  fi
  if [ "$size" = "-" ] || [ "$have" -lt "$size" ]; then
    echo "fetching $file"
    wget -q -c --header "Authorization: Bearer $MODELSERVE_MIRROR_TOKEN" -O "$file.part" "$MODELSERVE_MIRROR/$file"
  fi
  if [ "$sum" != "-" ] && ! echo "$sum  $file.part" | sha256sum -c -s; then
    rm -f "$file.part"
    echo "$file is not what the mirror's sha256 says it is: it is fetched again from the start" >&2
    exit 1
  fi
  mv "$file.part" "$file"
done
`

// deployment is the Deployment of m's profile pi with replicas replicas.
func (f *cluster) deployment(m catalog.Model, pi int, replicas int32, w weights, owner metav1.OwnerReference, products []string) *appsv1.Deployment {
	p := m.Profiles[pi]
	name := deploymentName(m.Name, pi)
	podLabels := modelLabels(m.Name)
	podLabels[labelDeployment] = name

	image, args, keyEnv := f.engine(m, p, w)
	env := []corev1.EnvVar{{Name: keyEnv, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: f.keyOf(m, name)}, Key: keySecretKey}}}}
	settings, _ := catalog.EngineEnv(p) // what is left out, the local fleet logs as it starts
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}

	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	// RAM for what the engine holds in RAM, never what its cards hold: a
	// pod on cards asks for the cards, whole, and its host memory beside
	// (the plan's figure; an entry written before it, the fleet's
	// assumption then). Asked for nothing, a pod on cards was BestEffort
	// for memory: unseen by the scheduler and the first evicted.
	if mem := p.HostBytes(); mem > 0 {
		q := *resource.NewQuantity(mem, resource.BinarySI)
		res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory] = q, q
	}
	if p.CPUCores > 0 {
		res.Requests[corev1.ResourceCPU] = *resource.NewQuantity(int64(p.CPUCores), resource.DecimalSI)
	}
	var affinity *corev1.Affinity
	if p.GPUClass != "" {
		q := *resource.NewQuantity(int64(p.Cards()), resource.DecimalSI)
		res.Requests[f.opts.GPUResource], res.Limits[f.opts.GPUResource] = q, q
		affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: f.opts.GPUProductLabel, Operator: corev1.NodeSelectorOpIn, Values: products}},
			}}}}}
	}

	var lines []string
	for _, file := range w.files {
		size := "-"
		if file.Bytes > 0 {
			size = strconv.FormatInt(file.Bytes, 10)
		}
		lines = append(lines, cmp.Or(file.SHA256, "-")+" "+size+" "+file.Path)
	}
	health := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(enginePort)}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2,
		}
	}
	shmVolumes, shmMounts := shm(p)
	// Loading reads every byte of the weights: the engine has as long as
	// the local fleet gives it before liveness may restart it.
	startup := health(10, int32(fleet.StartupTimeout(p, w.bytes).Seconds()/10)+1)

	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels,
			Annotations: map[string]string{annotationModel: m.Name, annotationFinger: fleet.Fingerprint(m)}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false),
			EnableServiceLinks:           ptr(false),
			Affinity:                     affinity,
			PriorityClassName:            f.priorityClass(m),
			InitContainers: []corev1.Container{{
				Name: "fetch-weights", Image: f.opts.FetchImage,
				Command: []string{"sh", "-c", fetchScript},
				Env: []corev1.EnvVar{
					{Name: "MODELSERVE_WEIGHTS", Value: weightsDir},
					{Name: "MODELSERVE_MIRROR", Value: strings.TrimRight(f.opts.MirrorURL, "/") + "/mirror/" + w.folder},
					{Name: "MODELSERVE_FILES", Value: strings.Join(lines, "\n")},
					{Name: "MODELSERVE_MIRROR_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: MirrorSecret}, Key: "token"}}},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "weights", MountPath: weightsDir}},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Containers: []corev1.Container{{
				Name: "engine", Image: image, Args: args, Env: env,
				Ports:                    []corev1.ContainerPort{{Name: "http", ContainerPort: enginePort}},
				Resources:                res,
				StartupProbe:             startup,
				ReadinessProbe:           health(5, 2),
				LivenessProbe:            health(10, 6),
				VolumeMounts:             append([]corev1.VolumeMount{{Name: "weights", MountPath: weightsDir, ReadOnly: true}}, shmMounts...),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: append([]corev1.Volume{{Name: "weights", VolumeSource: f.weightsVolume()}}, shmVolumes...),
		},
	}

	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: f.opts.Namespace, Labels: podLabels,
			Annotations:     map[string]string{annotationModel: m.Name, annotationTemplate: templateHash(template)},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{labelDeployment: name}},
			Template: template,
			Strategy: replaceAtOnce(),
		},
	}
}

// templateHash is the hash of a pod template as modelserve writes it
// (before the API server fills in its defaults): the same template, the
// same hash, pass after pass.
func templateHash(t corev1.PodTemplateSpec) string {
	b, _ := json.Marshal(t) // a template always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// keySecret is the Secret of a new key for Deployment d's replicas, owned
// by d: it goes when d goes.
func (f *cluster) keySecret(model string, d metav1.Object) *corev1.Secret {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	labels := modelLabels(model)
	labels[labelDeployment] = d.GetName()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: keySecretName(d.GetName()), Namespace: f.opts.Namespace, Labels: labels,
			Annotations:     map[string]string{annotationModel: model},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.GetName(), UID: d.GetUID()}}},
		StringData: map[string]string{keySecretKey: hex.EncodeToString(b)},
	}
}

// keyOf is the Secret the pods of m's Deployment name read their key
// from: the Deployment's own, or the model's one key for a Deployment
// written before keys were per Deployment, until its pods start afresh
// for another reason (its fingerprint changed). Moved at once, every
// replica of every upgraded model would restart for its key alone, each
// through a rollout, all at the upgrade.
func (f *cluster) keyOf(m catalog.Model, deployment string) string {
	d, err := f.deployments.Deployments(f.opts.Namespace).Get(deployment)
	if err != nil || d.Spec.Template.Annotations[annotationFinger] != fleet.Fingerprint(m) {
		return keySecretName(deployment)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Name == modelKeySecretName(m.Name) {
				return r.SecretKeyRef.Name
			}
		}
	}
	return keySecretName(deployment)
}

// podKeySecret is the Secret pod's engine reads its key from, as its own
// spec names it: a pod started before keys were per Deployment names its
// model's, and is answered with it until it goes.
func podKeySecret(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name != "engine" {
			continue
		}
		for _, e := range c.Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Key == keySecretKey {
				return r.SecretKeyRef.Name
			}
		}
	}
	return ""
}

// weightsVolume is where a replica's weights are kept: an emptyDir, fetched
// again by each pod; a claim or a node's folder keeps them across pods.
func (f *cluster) weightsVolume() corev1.VolumeSource {
	switch kind, where, _ := strings.Cut(f.opts.WeightsVolume, ":"); kind {
	case "pvc":
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: where}}
	case "hostPath":
		return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: where, Type: ptr(corev1.HostPathDirectoryOrCreate)}}
	}
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// service is the model's Service: one name for its replicas, for whoever
// reaches them from inside the cluster (the gateway reaches each pod).
func (f *cluster) service(m catalog.Model, owner metav1.OwnerReference) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: objName(m.Name), Namespace: f.opts.Namespace, Labels: modelLabels(m.Name),
			Annotations: map[string]string{annotationModel: m.Name}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.ServiceSpec{
			Selector: modelLabels(m.Name),
			Ports:    []corev1.ServicePort{{Name: "http", Port: enginePort, TargetPort: intstr.FromInt32(enginePort)}},
		},
	}
}

// ownerMap is the model's owner: every other object of the model is owned
// by it, so deleting it (the model removed) lets the garbage collector
// remove the rest.
func (f *cluster) ownerMap(m catalog.Model) *corev1.ConfigMap {
	ann := map[string]string{annotationModel: m.Name}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: objName(m.Name), Namespace: f.opts.Namespace, Labels: modelLabels(m.Name), Annotations: ann},
		Data:       map[string]string{"model": m.Name, "fingerprint": fleet.Fingerprint(m)},
	}
}

func ptr[T any](v T) *T { return &v }

// replaceAtOnce is the strategy of every Deployment the fleet writes: its
// rollout deletes its old pods first, all at once, then starts the new.
// A template changes only once the replicas of the entry before it have
// drained and gone (Backend.writeDeployments), so there are none to roll.
func replaceAtOnce() appsv1.DeploymentStrategy {
	none, all := intstr.FromInt32(0), intstr.FromString("100%")
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &none, MaxUnavailable: &all}}
}
