package controllers

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

var rbacMarker = regexp.MustCompile(`(?m)^// \+kubebuilder:rbac:groups=([^,]*),resources=([^,]+),verbs=([^,\s]+)(?:,namespace=(\S+))?$`)

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
		if m[4] == "" {
			cluster = append(cluster, rule)
		} else {
			namespaced[m[4]] = append(namespaced[m[4]], rule)
		}
	}
	if len(cluster) == 0 {
		t.Fatal("no +kubebuilder:rbac markers found")
	}
	return cluster, namespaced
}

// TestRBACMarkersSuffice runs the reconciler as a user holding only the
// permissions of the RBAC markers, bound in a single watched namespace the way
// --namespaces deployments are, and expects a policy to become Ready with its
// hash key Secret, ConfigMap and Event. A verb missing from the markers makes
// this test fail.
func TestRBACMarkersSuffice(t *testing.T) {
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
		LeaderElectionID:        "rbac-test.fairqueue.dev",
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

	for _, s := range newSecrets(rbacNamespace) {
		g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
	}
	p := newPolicy(rbacNamespace)
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	waitReady(t, p)
	getConfigMap(t, p)
	g.Expect(hashKeyOf(t, p)).NotTo(BeEmpty())
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(k8s.List(ctx(t), &list, client.InNamespace(rbacNamespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(HaveField("Reason", fqv1alpha1.ReasonRendered)))
	}).Should(Succeed())
}
