package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

var rbacMarker = regexp.MustCompile(`(?m)^// \+kubebuilder:rbac:groups=([^,]*),resources=([^,]+),verbs=([^,\s]+)(?:,resourceNames=([^,\s]+))?(?:,namespace=(\S+))?$`)

// markerRules reads the +kubebuilder:rbac markers of the reconciler, split
// into the cluster-wide rules and the rules of each namespaced Role: exactly
// what controller-gen turns into config/rbac/role.yaml.
func markerRules(t *testing.T) (cluster []rbacv1.PolicyRule, namespaced map[string][]rbacv1.PolicyRule) {
	t.Helper()
	src, err := os.ReadFile("fairqueuepolicy_controller.go")
	if err != nil {
		t.Fatal(err)
	}
	namespaced = map[string][]rbacv1.PolicyRule{}
	for _, m := range rbacMarker.FindAllStringSubmatch(string(src), -1) {
		groups := strings.Split(strings.Trim(m[1], `"`), ";")
		rule := rbacv1.PolicyRule{APIGroups: groups, Resources: strings.Split(m[2], ";"), Verbs: strings.Split(m[3], ";")}
		if m[4] != "" {
			rule.ResourceNames = strings.Split(m[4], ";")
		}
		if m[5] == "" {
			cluster = append(cluster, rule)
		} else {
			namespaced[m[5]] = append(namespaced[m[5]], rule)
		}
	}
	if len(cluster) == 0 {
		t.Fatal("no +kubebuilder:rbac markers found")
	}
	return cluster, namespaced
}

// grant is one permission of a rule set: a verb on a resource of an API
// group, in a namespace ("" for a ClusterRole's rules), on the object named
// name ("" for any).
type grant struct{ namespace, group, resource, name, verb string }

// String names g as namespace/group/resource[/name]:verb.
func (g grant) String() string {
	s := g.namespace + "/" + g.group + "/" + g.resource
	if g.name != "" {
		s += "/" + g.name
	}
	return s + ":" + g.verb
}

// grants expands rules in namespace into single permissions, so rule sets
// that merge or order rules differently compare equal.
func grants(namespace string, rules []rbacv1.PolicyRule) []grant {
	var out []grant
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						out = append(out, grant{namespace, g, res, n, v})
					}
				}
			}
		}
	}
	return out
}

// TestGeneratedRoleMatchesMarkers fails when config/rbac/role.yaml, which the
// deploy binds, grants other permissions than the markers TestRBACMarkersSuffice
// proves sufficient: a marker changed without `make manifests`.
func TestGeneratedRoleMatchesMarkers(t *testing.T) {
	cluster, namespaced := markerRules(t)
	want := grants("", cluster)
	for ns, rules := range namespaced {
		want = append(want, grants(ns, rules)...)
	}

	path := filepath.Join("..", "config", "rbac", "role.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []grant
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch r := obj.(type) {
		case *rbacv1.ClusterRole:
			got = append(got, grants("", r.Rules)...)
		case *rbacv1.Role:
			got = append(got, grants(r.Namespace, r.Rules)...)
		default:
			t.Fatalf("%s holds a %T, want only the generated ClusterRole and Roles", path, obj)
		}
	}

	for _, g := range want {
		if !slices.Contains(got, g) {
			t.Errorf("%s lacks %s that the markers grant: run `make manifests` and commit it", path, g)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s grants %s that no marker does: run `make manifests` and commit it", path, g)
		}
	}
}

// TestRBACMarkersSuffice runs the reconciler as a user holding only the
// permissions of the RBAC markers, bound in a single watched namespace the way
// --namespaces deployments are, and expects a policy to become Ready with its
// hash key Secret, ConfigMap and Event. A verb missing from the markers makes
// this test fail.
func TestRBACMarkersSuffice(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	const user = "fairqueue-operator-under-test"
	cluster, namespaced := markerRules(t)

	for _, ns := range []string{rbacNamespace, "fairqueue-system"} {
		err := k8s.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	clusterRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fairqueue-test-manager-role"}, Rules: cluster}
	objs := []client.Object{
		clusterRole,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: rbacNamespace, Name: "manager"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name},
			Subjects:   subjects,
		},
	}
	for ns, rules := range namespaced {
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fairqueue-test-manager-role"}, Rules: rules},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fairqueue-test-manager"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "fairqueue-test-manager-role"},
				Subjects:   subjects,
			})
	}
	for _, o := range objs {
		g.Expect(k8s.Create(ctx(t), o)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  env.Scheme,
		Cache:                   CacheOptions([]string{rbacNamespace}),
		Client:                  ClientOptions(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionNamespace: "fairqueue-system",
		LeaderElectionID:        LeaderElectionID,
		LeaseDuration:           ptr.To(2 * time.Second),
		RenewDeadline:           ptr.To(time.Second),
		RetryPeriod:             ptr.To(200 * time.Millisecond),
	})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(context.Background())
	g.Expect((&FairQueuePolicyReconciler{}).SetupWithManager(mctx, mgr, controller.Options{SkipNameValidation: ptr.To(true)})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// The namespace is fixed (the shared manager ignores it by name), and
	// envtest never deletes namespaces: tolerate an earlier run's Secrets
	// (go test -count=2) and name the policy uniquely.
	for _, s := range newSecrets(rbacNamespace) {
		if err := k8s.Create(ctx(t), s); !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	p := newPolicy(rbacNamespace)
	p.Name = fmt.Sprintf("llm-%d", nsCounter.Add(1))
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	waitReady(t, p)
	getConfigMap(t, p)
	g.Expect(hashKeyOf(t, p)).NotTo(BeEmpty())
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(k8s.List(ctx(t), &list, client.InNamespace(rbacNamespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(And(HaveField("Reason", fqv1alpha1.ReasonRendered), HaveField("Regarding.Name", p.Name))))
	}).Should(Succeed())
}
