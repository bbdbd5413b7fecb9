package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/internal/testenv"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// startOperator runs the real operator against env until the test ends.
func startOperator(t *testing.T, env *testenv.Env) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Cache: controllers.CacheOptions(nil), Client: controllers.ClientOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&controllers.FairQueuePolicyReconciler{UnwatchedRetry: time.Second}).SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the operator did not stop within 30s")
		}
	})
}

// TestAgainstTheControlPlane runs render and status against a real API server
// and the real operator, with the full sample policy and its Secrets.
func TestAgainstTheControlPlane(t *testing.T) {
	env := testenv.Start(t)
	startOperator(t, env)
	ctx := context.Background()
	const ns = "team-a"
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "fairqueue_v1alpha1_fairqueuepolicy_full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := reload.DecodePolicy(data)
	if err != nil {
		t.Fatal(err)
	}
	p.Namespace = ns
	secrets, err := reload.ReadSecrets(filepath.Join("..", "..", "config", "samples"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		s.Namespace = ns
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	hashKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "full-hash-key"},
		Data: map[string][]byte{"key": []byte("0123456789abcdef0123456789abcdef")}}
	if err := c.Create(ctx, hashKey); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	testutil.Eventually(t, "the operator to render the policy", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.ConfigMapName("full")}, cm) == nil
	})

	kube := []string{"--kubeconfig", env.Kubeconfig}
	plugin := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append(args, kube...), &out, &errOut)
		return out.String(), err
	}

	t.Run("render prints the operator's ConfigMap", func(t *testing.T) {
		out, err := plugin("render", "full", "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		if out != cm.Data[config.ConfigMapKey] {
			t.Errorf("render printed\n%s\nthe operator wrote\n%s", out, cm.Data[config.ConfigMapKey])
		}
		out, err = plugin("render", "-n", ns, "full", "--diff")
		if err != nil || !strings.Contains(out, "up to date") {
			t.Errorf("render --diff = %q, %v; want up to date", out, err)
		}
	})

	t.Run("render errors say what to do", func(t *testing.T) {
		if _, err := plugin("render", "nope", "-n", ns); err == nil || !strings.Contains(err.Error(), "kubectl get fairqueuepolicies -n "+ns) {
			t.Errorf("render of a missing policy: %v", err)
		}
		if err := c.Delete(ctx, secrets["api-key-registry"]); err != nil {
			t.Fatal(err)
		}
		defer func() {
			// The operator must see the Secret gone before it comes back, or
			// the next subtest can take the Ready it had before for the one
			// after and find it False a moment later.
			testutil.Eventually(t, "the operator to report the missing Secret", func() bool {
				return readyStatus(ctx, c, ns, "full") == metav1.ConditionFalse
			})
			s := secrets["api-key-registry"].DeepCopy()
			s.ResourceVersion = ""
			_ = c.Create(ctx, s)
		}()
		_, err := plugin("render", "full", "-n", ns)
		if err == nil || !strings.Contains(err.Error(), `key registry Secret "api-key-registry" named in spec.identity.keyRegistry.secretRef does not exist; create it`) {
			t.Errorf("render with a missing Secret: %v", err)
		}
	})

	t.Run("status shows conditions and every replica", func(t *testing.T) {
		hash := cm.Annotations[config.ConfigHashAnnotation]
		testutil.Eventually(t, "the policy to be Ready again after the Secret came back", func() bool {
			return readyStatus(ctx, c, ns, "full") == metav1.ConditionTrue
		})
		lease := func(pod, loaded string, renewed time.Duration) *coordinationv1.Lease {
			return &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "full-dataplane-" + pod,
					Labels:      map[string]string{reload.LeasePolicyLabel: "full", reload.LeaseComponentLabel: reload.LeaseComponentValue},
					Annotations: map[string]string{reload.LeaseConfigHashAnnotation: loaded}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod), LeaseDurationSeconds: ptr.To[int32](30),
					RenewTime: &metav1.MicroTime{Time: time.Now().Add(-renewed)}},
			}
		}
		for _, l := range []*coordinationv1.Lease{
			lease("dp-current", hash, time.Second), lease("dp-stale", "0000000000000000", 2*time.Second), lease("dp-gone", hash, time.Hour),
		} {
			if err := c.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		out, err := plugin("status", "full", "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"Config hash:       " + hash,
			"Ready ", "True", "Rendered",
			"SecretsResolved",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		rows := map[string][]string{}
		for line := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "dp-") {
				rows[f[0]] = f
			}
		}
		for pod, want := range map[string]string{"dp-current": hash + " yes", "dp-stale": "0000000000000000 no", "dp-gone": hash + " yes"} {
			if got := strings.Join(rows[pod][1:3], " "); got != want {
				t.Errorf("replica %s: hash and current %q, want %q:\n%s", pod, got, want, out)
			}
		}
		if live := rows["dp-current"][len(rows["dp-current"])-1]; live != "yes" {
			t.Errorf("dp-current live = %q, want yes", live)
		}
		if !strings.Contains(strings.Join(rows["dp-gone"], " "), "no (expired)") {
			t.Errorf("dp-gone (renewed an hour ago) is not shown expired: %v", rows["dp-gone"])
		}
	})

	t.Run("top --resolve names the weighted tenants, only for who may read the Secrets", func(t *testing.T) {
		key := hashKey.Data["key"]
		acme := identity.Hash(key, "sk-example-acme-0000000000000000")
		stranger := identity.Hash(key, "sk-unknown")
		rep := newTenantReplica(t, fairqueue.Weights{Default: 1, ByTenant: map[string]int{acme: 3}})
		now := time.Now()
		scrape := func(context.Context, string, string, string) ([]byte, error) {
			rep.tm.TenantAdmitted(now, acme, identity.DimensionAPIKey, 0)
			rep.tm.TenantAdmitted(now, stranger, identity.DimensionAPIKey, 0)
			return rep.page(t), nil
		}
		if err := c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "full-dataplane-dp-top",
			Labels: map[string]string{reload.LeasePolicyLabel: "full", reload.LeaseComponentLabel: reload.LeaseComponentValue}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dp-top")}}); err != nil {
			t.Fatal(err)
		}
		opts := topOptions{port: "9090", interval: time.Millisecond, count: 1, resolve: true}
		var out bytes.Buffer
		if err := runTop(ctx, &globals{namespace: ns, client: c}, "full", opts, scrape, &out); err != nil {
			t.Fatal(err)
		}
		rows := tenantTable(out.String())
		if f := strings.Fields(rows[identity.Short(acme)]); len(f) < 2 || f[1] != "${ACME_KEY}" {
			t.Errorf("acme's row %q, want it named ${ACME_KEY}:\n%s", rows[identity.Short(acme)], out.String())
		}
		if f := strings.Fields(rows[identity.Short(stranger)]); len(f) < 2 || f[1] != "-" {
			t.Errorf("an unweighted tenant's row %q, want no name:\n%s", rows[identity.Short(stranger)], out.String())
		}
		if strings.Contains(out.String(), "sk-example") {
			t.Errorf("top --resolve printed a raw API key:\n%s", out.String())
		}

		// A user who may read the policy and the Leases but not Secrets.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fairqueue-viewer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{fqv1alpha1.GroupVersion.Group}, Resources: []string{"fairqueuepolicies"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}},
		}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fairqueue-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "viewer"}}}
		for _, o := range []client.Object{role, binding} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		rc := rest.CopyConfig(env.Config)
		rc.Impersonate = rest.ImpersonationConfig{UserName: "viewer"}
		viewer, err := client.New(rc, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		out.Reset()
		err = runTop(ctx, &globals{namespace: ns, client: viewer}, "full", opts, scrape, &out)
		if err == nil || !strings.Contains(err.Error(), "--resolve needs get on secrets in namespace "+ns) || !strings.Contains(err.Error(), `hash-key Secret "full-hash-key"`) {
			t.Fatalf("top --resolve without get on secrets: %v, want an error naming the missing permission", err)
		}
		t.Logf("top --resolve without get on secrets: %v", err)
		opts.resolve = false
		if err := runTop(ctx, &globals{namespace: ns, client: viewer}, "full", opts, scrape, &out); err != nil {
			t.Errorf("top without --resolve for the same user: %v", err)
		}
		if !strings.Contains(out.String(), identity.Short(acme)) {
			t.Errorf("top without --resolve does not show the tenant by hash prefix:\n%s", out.String())
		}
	})
	t.Run("the standard flags reach the API server: --as, -A, -o json", func(t *testing.T) {
		// viewer (bound above) may read policies and Leases, not Secrets.
		out, err := plugin("status", "full", "-n", ns, "--as", "viewer", "-o", "json")
		if err != nil {
			t.Fatalf("status --as viewer: %v", err)
		}
		var s PolicyStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil || s.Name != "full" || s.ConfigHash == "" || len(s.Replicas) == 0 {
			t.Errorf("status -o json: %v, %+v", err, s)
		}
		if _, err := plugin("render", "full", "-n", ns, "--as", "viewer"); err == nil || !strings.Contains(err.Error(), `User "viewer" cannot get resource "secrets"`) {
			t.Errorf("render --as viewer: %v, want the API server's refusal to read Secrets", err)
		}
		out, err = plugin("status", "-A")
		if err != nil || !strings.Contains(out, "NAMESPACE") || !strings.Contains(out, ns) || !strings.Contains(out, "full") {
			t.Errorf("status -A: %v\n%s", err, out)
		}
	})
	t.Run("top says a replica's pod is gone, and names pods/proxy only when it is forbidden", func(t *testing.T) {
		// The policy's report Leases (above) name pods that do not exist.
		admin, err := kubernetes.NewForConfig(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		opts := topOptions{port: "9090", interval: time.Millisecond, count: 1}
		g := &globals{namespace: ns, client: c, kube: admin}
		var out bytes.Buffer
		err = runTop(ctx, g, "full", opts, g.podProxy, &out)
		if err == nil || !strings.Contains(err.Error(), "no replica could be scraped") || !strings.Contains(err.Error(), "does not exist, but a report Lease names it") {
			t.Errorf("top with every replica's pod gone: %v, want a failure saying the pods do not exist", err)
		}
		if strings.Contains(out.String(), "pods/proxy") {
			t.Errorf("a missing pod blamed on RBAC:\n%s", out.String())
		}
		t.Logf("%v", err)

		rc := rest.CopyConfig(env.Config)
		rc.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
		nobody, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		g.kube = nobody
		err = runTop(ctx, g, "full", opts, g.podProxy, &out)
		if err == nil || !strings.Contains(err.Error(), "it needs get on pods/proxy in "+ns) {
			t.Errorf("top by a user without get on pods/proxy: %v, want the permission named", err)
		}
	})
}

// readyStatus returns the status of the policy's Ready condition, or "" when
// it cannot be read or has none.
func readyStatus(ctx context.Context, c client.Client, ns, name string) metav1.ConditionStatus {
	got := &fqv1alpha1.FairQueuePolicy{}
	if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got) != nil {
		return ""
	}
	if r := meta.FindStatusCondition(got.Status.Conditions, fqv1alpha1.ConditionReady); r != nil {
		return r.Status
	}
	return ""
}
