// Package kubetest starts a real Kubernetes control plane for a test: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, with kwok
// playing the nodes, all on loopback ports and stopped when the test ends.
//
// The kubernetes fleet is a contract with the control plane — the objects
// modelserve writes, what the scheduler and the controllers make of them,
// what the pods' statuses mean — and a fake client keeps none of it: it
// schedules nothing, garbage-collects nothing and authorizes everything.
// Here the real binaries (built once by install.sh into a cache folder
// outside the tree) do all of that; only the kubelet is played: by kwok
// alone, whose pods run nothing (Start), or by kwok giving each pod its
// address and a Kubelet (kubelet.go, pods.go) running every pod's
// containers as processes here (StartRunning), so what runs in a pod
// (the weights fetched, the engine answering) is tested for real.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the Kubernetes release install.sh builds; the cache folder is
// named after it.
const Version = "1.36.3"

// Dir is the folder install.sh builds the control plane into:
// $MODELSERVE_KUBE when set, else <cache>/kube-<Version> with <cache> as
// the script has it.
func Dir() string {
	if d := os.Getenv("MODELSERVE_KUBE"); d != "" {
		return d
	}
	cache := os.Getenv("MODELSERVE_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "modelserve")
	}
	return filepath.Join(cache, "kube-"+Version)
}

// binaries are what Start runs, from Dir()/bin.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// Cluster is a running control plane. Admin is a client with every right
// (system:masters); Config is its configuration, for clients of other
// kinds or with other credentials (ConfigFor).
type Cluster struct {
	Admin  kubernetes.Interface
	Config *rest.Config
	// Host is the API server's address, https://127.0.0.1:<port>.
	Host string
	dir  string
}

// podNet is where kwok gives one cluster's pods their addresses: a /24 of
// loopback (Linux answers on all of 127.0.0.0/8), chosen at random among
// 25,600 for each cluster. Every pod's engine listens on its address's
// port 8080, so two clusters on one range (two test packages run at
// once, as go test ./... does) answered each other's requests, or one's
// engine could not bind: one fixed range made their tests flake
// together. It says the range and the node's address, the range's first.
func podNet(t testing.TB) (cidr, nodeIP string) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("127.%d.%d", 100+int(b[0])%100, b[1])
	return base + ".1/24", base + ".1"
}

// FakeNode annotation: kwok plays only the nodes carrying it.
const (
	FakeNodeAnnotation = "kwok.x-k8s.io/node"
	FakeNodeValue      = "fake"
)

// Node is a fake node to add.
type Node struct {
	Name   string
	CPU    int
	Memory string // a quantity: "64Gi"
	GPUs   int    // nvidia.com/gpu
	Labels map[string]string
}

// Start runs a control plane for t and stops it when t ends. Without the
// built control plane it skips t, saying how to build it, unless
// MODELSERVE_REQUIRE_KUBE (or MODELSERVE_REQUIRE_ENGINE, make test's) is set:
// then a missing control plane is a failure, not a silent pass. kwok makes
// every pod Running and Ready as soon as it is placed, and deletes a pod
// as soon as its deletion begins: nothing runs in it (RunPod may run one).
func Start(t testing.TB) *Cluster { return start(t, false) }

// StartRunning is Start for a cluster whose pods are run by a Kubelet
// (kubelet.go): kwok only gives a placed pod its address, and leaves the
// rest of its status, and its deletion once its containers have stopped,
// to the Kubelet, as a node's kubelet does. A pod no Kubelet runs stays
// Pending.
func StartRunning(t testing.TB) *Cluster { return start(t, true) }

func start(t testing.TB, kubelet bool) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("the control plane takes seconds to start: skipped under -short")
	}
	dir := Dir()
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil {
			missing(t, fmt.Sprintf("the test control plane is not built (%s is missing): run make kube, or internal/kubetest/install.sh", filepath.Join(dir, "bin", b)))
		}
	}
	work := t.TempDir()
	c := &Cluster{dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Credentials: a static token for the admin (and the controllers, which
	// run as the admin here), and the key pair service-account tokens are
	// signed with, so a test can mint a token for a ServiceAccount.
	admin := randomHex(t)
	writeFile(t, filepath.Join(work, "tokens.csv"), admin+`,admin,admin,"system:masters"`+"\n")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(work, "sa.key"), string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	writeFile(t, filepath.Join(work, "sa.pub"), string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))

	etcdClient, etcdPeer, apiPort := freePort(t), freePort(t), freePort(t)
	c.Host = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.Config = &rest.Config{
		Host: c.Host, BearerToken: admin,
		// The API server's own self-signed certificate, on loopback.
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             100, Burst: 200,
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	writeKubeconfig(t, kubeconfig, c.Host, admin)

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	c.run(t, work, "etcd",
		"--name=test", "--data-dir="+filepath.Join(work, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL,
		// A test's data is thrown away: no fsync, much faster on a busy disk.
		"--unsafe-no-fsync", "--log-level=warn")
	c.run(t, work, "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+filepath.Join(work, "certs"),
		"--token-auth-file="+filepath.Join(work, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(work, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(work, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// No ServiceAccount admission: it holds pods back until the
		// controller has made the namespace's default account, and these
		// pods mount no token anyway.
		"--disable-admission-plugins=ServiceAccount",
		"--v=0")
	if err := c.waitReady(ctx, "/readyz"); err != nil {
		t.Fatalf("kube-apiserver did not become ready: %v", err)
	}
	c.run(t, work, "kube-controller-manager",
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+filepath.Join(work, "sa.key"),
		// Seconds, not the production minute: a removed model's objects
		// are collected while the test waits.
		"--concurrent-gc-syncs=5", "--v=0")
	c.run(t, work, "kube-scheduler",
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=0")
	cidr, nodeIP := podNet(t)
	kwokArgs := []string{
		"--kubeconfig=" + kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + FakeNodeAnnotation + "=" + FakeNodeValue,
		"--node-lease-duration-seconds=40",
		// Pods' addresses on loopback: what a test sends a pod stays on
		// this machine, where RunPod runs the pod's containers.
		"--cidr=" + cidr, "--node-ip=" + nodeIP,
		"--server-address=127.0.0.1:" + strconv.Itoa(freePort(t)),
	}
	stages, _ := filepath.Glob(filepath.Join(dir, "stages", "node", "*.yaml"))
	if kubelet {
		addr := filepath.Join(work, "pod-address.yaml")
		writeFile(t, addr, podAddressStage)
		stages = append(stages, addr)
	} else {
		pods, _ := filepath.Glob(filepath.Join(dir, "stages", "pod", "*.yaml"))
		stages = append(stages, pods...)
	}
	for _, s := range stages {
		kwokArgs = append(kwokArgs, "--config="+s)
	}
	c.run(t, work, "kwok", kwokArgs...)

	c.Admin, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The default namespace is the API server's own, made once it serves.
	for {
		if _, err := c.Admin.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if !sleep(ctx, 100*time.Millisecond) {
			t.Fatalf("the API server never made the default namespace")
		}
	}
	return c
}

// podAddressStage is the only pod Stage kwok plays under a Kubelet: a pod
// placed on one of its nodes gets the node's address and one of its own,
// and stays Pending; the Kubelet says the rest. Once it has an address the
// stage no longer matches it, so kwok never writes over the Kubelet.
const podAddressStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-address
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Pending
`

// missing fails t for a part the tests need and do not have under make
// test (MODELSERVE_REQUIRE_KUBE, or MODELSERVE_REQUIRE_ENGINE), where a
// skip would pass in silence; a bare go test skips, saying msg.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("MODELSERVE_REQUIRE_KUBE") != "" || os.Getenv("MODELSERVE_REQUIRE_ENGINE") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ConfigFor is the cluster's configuration with token as the credentials.
func (c *Cluster) ConfigFor(token string) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

// AddNode creates a fake node that kwok keeps Ready, with n's capacity as
// both capacity and allocatable, and waits until it is Ready.
func (c *Cluster) AddNode(t testing.TB, n Node) {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(n.CPU), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse(n.Memory),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if n.GPUs > 0 {
		res["nvidia.com/gpu"] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
	}
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "type": "kwok"}
	for k, v := range n.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels,
			Annotations: map[string]string{FakeNodeAnnotation: FakeNodeValue, "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", n.Name, err)
	}
	for {
		got, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if !sleep(ctx, 100*time.Millisecond) {
			t.Fatalf("kwok never made node %s Ready", n.Name)
		}
	}
}

// run starts one part of the control plane, its output in work/name.log,
// and keeps it running until t's cleanup stops it: a part that exits on
// its own (kwok has, on a busy machine, a second after it started) is
// started again, up to maxRestarts times, each restart said in its log,
// whose last lines a failed test prints.
func (c *Cluster) run(t testing.TB, work, name string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(work, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, chan struct{}, error) {
		cmd := exec.Command(filepath.Join(c.dir, "bin", name), args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Dir = work
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		return cmd, done, nil
	}
	cmd, done, err := start()
	if err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	var (
		mu       sync.Mutex
		stopping bool
		ended    = make(chan struct{})
	)
	go func() {
		defer close(ended)
		for restarts := 0; ; restarts++ {
			<-done
			mu.Lock()
			if stopping || restarts == maxRestarts {
				mu.Unlock()
				return
			}
			fmt.Fprintf(logf, "--- %s exited (%v): starting it again (%d of %d)\n", name, cmd.ProcessState, restarts+1, maxRestarts)
			mu.Unlock()
			time.Sleep(500 * time.Millisecond)
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			next, nextDone, err := start()
			if err != nil {
				fmt.Fprintf(logf, "--- starting %s again: %v\n", name, err)
				mu.Unlock()
				return
			}
			cmd, done = next, nextDone
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		defer logf.Close()
		mu.Lock()
		stopping = true
		pgid, running := cmd.Process.Pid, done
		mu.Unlock()
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-running:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-running
		}
		<-ended
		if t.Failed() {
			t.Logf("%s's last lines:\n%s", name, tail(filepath.Join(work, name+".log"), 15))
		}
	})
}

// maxRestarts bounds how often run starts a part again that keeps exiting.
const maxRestarts = 3

// waitReady waits until the API server answers path with 200.
func (c *Cluster) waitReady(ctx context.Context, path string) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Host+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.Config.BearerToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		if !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
