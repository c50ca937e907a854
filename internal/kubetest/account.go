package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// Account creates what the manifest at path holds (a Namespace, a
// ServiceAccount and the roles bound to it, as deploy/rbac.yaml) and
// returns a token of its ServiceAccount: a test acting with it may do
// what the manifest grants and nothing more.
func (c *Cluster) Account(t testing.TB, path string) string {
	t.Helper()
	ctx := context.Background()
	var account *corev1.ServiceAccount
	for _, obj := range Objects(t, path) {
		if sa, ok := obj.(*corev1.ServiceAccount); ok && account == nil {
			account = sa
		}
		if err := create(ctx, c.Admin, obj); err != nil {
			t.Fatalf("creating %T from %s: %v", obj, path, err)
		}
	}
	if account == nil {
		t.Fatalf("%s holds no ServiceAccount", path)
	}
	tok, err := c.Admin.CoreV1().ServiceAccounts(account.Namespace).CreateToken(ctx, account.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// Apply creates, as the admin, what the manifest at path holds (the
// PriorityClasses of deploy/priority.yaml, or the NetworkPolicy of
// deploy/networkpolicy.yaml, say).
func (c *Cluster) Apply(t testing.TB, path string) {
	t.Helper()
	for _, obj := range Objects(t, path) {
		if err := create(context.Background(), c.Admin, obj); err != nil {
			t.Fatalf("creating %T from %s: %v", obj, path, err)
		}
	}
}

// Objects are the objects the manifest at path holds, decoded as the API
// server would read them.
func Objects(t testing.TB, path string) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
	return out
}

// Client is a client of the cluster acting with token.
func (c *Cluster) Client(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(c.ConfigFor(token))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// Kubeconfig writes a kubeconfig file for the cluster with token as the
// credentials, as an operator's would be, and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, path, c.Host, token)
	return path
}

func writeKubeconfig(t testing.TB, path, host, token string) {
	t.Helper()
	writeFile(t, path, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, host, token))
}

func create(ctx context.Context, k kubernetes.Interface, obj runtime.Object) error {
	var err error
	o := metav1.CreateOptions{}
	switch v := obj.(type) {
	case *corev1.Namespace:
		_, err = k.CoreV1().Namespaces().Create(ctx, v, o)
	case *corev1.ServiceAccount:
		_, err = k.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = k.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = k.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = k.RbacV1().ClusterRoles().Create(ctx, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = k.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
	case *networkingv1.NetworkPolicy:
		_, err = k.NetworkingV1().NetworkPolicies(v.Namespace).Create(ctx, v, o)
	case *schedulingv1.PriorityClass:
		_, err = k.SchedulingV1().PriorityClasses().Create(ctx, v, o)
	default:
		return fmt.Errorf("kubetest does not create a %T", obj)
	}
	return err
}
