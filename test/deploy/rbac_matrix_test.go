package deploy

import (
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fairqueue/fairqueue/internal/testenv"
)

// access is one row of the RBAC matrix: may user do verb on the object?
type access struct {
	who                   string // "dataplane" or "operator"
	verb, group, resource string
	subresource           string
	namespace, name       string
	allowed               bool
	why                   string
}

func (a access) String() string {
	obj := a.resource
	if a.group != "" {
		obj += "." + a.group
	}
	if a.subresource != "" {
		obj += "/" + a.subresource
	}
	target := a.namespace + "/"
	if a.name != "" {
		target += a.name
	} else {
		target += "*"
	}
	verdict := "deny"
	if a.allowed {
		verdict = "allow"
	}
	return fmt.Sprintf("%-9s %-6s %-33s %-58s %s", a.who, a.verb, obj, target, verdict)
}

// serviceAccounts are the rendered ServiceAccounts the matrix asks about.
var serviceAccounts = map[string][2]string{
	"dataplane": {dataPlaneNamespace, "fairqueue-dataplane"},
	"operator":  {namespace, managerAccount},
}

// rbacMatrix is what the rendered config/default must allow and deny. The
// data plane serves policy "default" in fairqueue-dataplane; "other" is a
// second policy there.
func rbacMatrix() []access {
	const (
		lease     = "fairqueue-operator.fairqueue.dev"
		coord     = "coordination.k8s.io"
		dp, op    = "dataplane", "operator"
		fq        = "fairqueue.dev"
		fqp       = "fairqueuepolicies"
		dpNS, sys = dataPlaneNamespace, namespace
	)
	rows := []access{
		// The data plane and the operator's leader-election Lease.
		{dp, "get", coord, "leases", "", sys, lease, false, "operator's Lease is in a namespace the data plane has no grant in"},
		{dp, "update", coord, "leases", "", sys, lease, false, ""},
		{dp, "delete", coord, "leases", "", sys, lease, false, ""},
		{dp, "create", coord, "leases", "", sys, "", false, ""},
		{dp, "list", coord, "leases", "", sys, "", false, ""},
		// Its own report Leases.
		{dp, "create", coord, "leases", "", dpNS, "", true, "report Lease <policy>-dataplane-<pod>"},
		{dp, "update", coord, "leases", "", dpNS, "default-dataplane-pod-a", true, ""},
		{dp, "get", coord, "leases", "", dpNS, "default-dataplane-pod-a", true, ""},
		{dp, "delete", coord, "leases", "", dpNS, "default-dataplane-pod-a", true, ""},
		{dp, "list", coord, "leases", "", dpNS, "", true, "counts live replicas for the fail-open store"},
		// ConfigMaps: its policy's, read-only.
		{dp, "get", "", "configmaps", "", dpNS, "default-dataplane", true, ""},
		{dp, "watch", "", "configmaps", "", dpNS, "default-dataplane", true, ""},
		{dp, "update", "", "configmaps", "", dpNS, "default-dataplane", false, ""},
		{dp, "get", "", "configmaps", "", dpNS, "other-dataplane", false, "another policy's ConfigMap"},
		{dp, "watch", "", "configmaps", "", dpNS, "other-dataplane", false, ""},
		{dp, "list", "", "configmaps", "", dpNS, "", false, ""},
		{dp, "create", "", "configmaps", "", dpNS, "", false, ""},
		{dp, "get", "", "configmaps", "", sys, "default-dataplane", false, ""},
		// Secrets: its policy's hash key, read-only.
		{dp, "get", "", "secrets", "", dpNS, "default-hash-key", true, ""},
		{dp, "watch", "", "secrets", "", dpNS, "default-hash-key", true, "follows key rotation"},
		{dp, "update", "", "secrets", "", dpNS, "default-hash-key", false, ""},
		{dp, "delete", "", "secrets", "", dpNS, "default-hash-key", false, ""},
		{dp, "get", "", "secrets", "", dpNS, "other-hash-key", false, "another policy's key"},
		{dp, "get", "", "secrets", "", dpNS, "tenant-ids", false, "weightsFrom Secret"},
		{dp, "list", "", "secrets", "", dpNS, "", false, ""},
		{dp, "watch", "", "secrets", "", dpNS, "", false, ""},
		{dp, "get", "", "secrets", "", sys, "default-hash-key", false, ""},
		{dp, "get", "", "secrets", "", "kube-system", "", false, ""},
		// Nothing else.
		{dp, "get", fq, fqp, "", dpNS, "default", false, ""},
		{dp, "create", "", "pods", "", dpNS, "", false, ""},
		{dp, "create", "", "events", "", dpNS, "", false, ""},

		// The operator in its watched namespace.
		{op, "create", "", "configmaps", "", dpNS, "", true, "renders ConfigMaps"},
		{op, "update", "", "configmaps", "", dpNS, "default-dataplane", true, ""},
		{op, "delete", "", "configmaps", "", dpNS, "default-dataplane", false, "the garbage collector deletes them"},
		{op, "create", "", "secrets", "", dpNS, "", true, "generates hash keys"},
		{op, "update", "", "secrets", "", dpNS, "default-hash-key", false, ""},
		{op, "patch", fq, fqp, "status", dpNS, "default", true, ""},
		{op, "update", fq, fqp, "", dpNS, "default", false, "never writes spec"},
		{op, "create", "events.k8s.io", "events", "", dpNS, "", true, ""},
		{op, "list", coord, "leases", "", dpNS, "", true, "counts report Leases"},
		{op, "update", coord, "leases", "", dpNS, "default-dataplane-pod-a", false, ""},
		// Its own namespace: its Lease and the elector's Events only.
		{op, "update", coord, "leases", "", sys, lease, true, "leader election"},
		{op, "create", coord, "leases", "", sys, "", true, "first election"},
		{op, "update", coord, "leases", "", sys, "some-other-lease", false, ""},
		{op, "delete", coord, "leases", "", sys, lease, false, ""},
		{op, "create", "", "events", "", sys, "", true, "elector's Events"},
		{op, "create", "", "configmaps", "", sys, "", false, "not a watched namespace"},
		{op, "create", "", "secrets", "", sys, "", false, ""},
		{op, "patch", fq, fqp, "status", sys, "x", false, ""},
	}
	// Outside the namespaces it watches, the operator writes nothing.
	for _, ns := range []string{"default", "kube-system", "team-unwatched"} {
		for _, r := range []struct{ group, resource, sub string }{
			{"", "configmaps", ""}, {"", "secrets", ""}, {coord, "leases", ""}, {"events.k8s.io", "events", ""},
			{"", "events", ""}, {fq, fqp, "status"}, {fq, fqp, ""}, {"", "pods", ""}, {"apps", "deployments", ""},
			{"rbac.authorization.k8s.io", "rolebindings", ""},
		} {
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				rows = append(rows, access{op, verb, r.group, r.resource, r.sub, ns, "x", false, "unwatched namespace"})
			}
		}
	}
	return rows
}

// TestRBACMatrix installs the RBAC objects of the rendered config/default on
// a real API server and asks it, by SubjectAccessReview, what each
// ServiceAccount may do: the data plane cannot touch the operator's Lease,
// another policy's ConfigMap or any Secret but its policy's hash key, and
// the operator cannot write outside the namespaces it watches.
func TestRBACMatrix(t *testing.T) {
	root := repoRoot(t)
	objs := decode(t, render(t, kubectl(t, root), root))
	env := testenv.Start(t)
	ctx := t.Context()
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Namespace, *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.ClusterRole, *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding:
			if err := env.Client.Create(ctx, o.(client.Object)); err != nil {
				t.Fatalf("creating %s: %v", key(o), err)
			}
		}
	}

	var table strings.Builder
	allowed := 0
	for _, a := range rbacMatrix() {
		sa := serviceAccounts[a.who]
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + sa[0] + ":" + sa[1],
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa[0], "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Name: a.name,
			},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview %s: %v", a, err)
		}
		if sar.Status.Allowed {
			allowed++
		}
		if sar.Status.Allowed != a.allowed {
			t.Errorf("%s, but the API server says allowed=%v (%s)", a, sar.Status.Allowed, sar.Status.Reason)
		}
		if a.why != "unwatched namespace" {
			table.WriteString(a.String() + "\n")
		}
	}
	t.Logf("%d SubjectAccessReviews, %d allowed; the rows other than the unwatched-namespace sweep:\n%s",
		len(rbacMatrix()), allowed, table.String())
}
