package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fairqueue/fairqueue/internal/testenv"
)

// namespace is where config/default installs the operator, and
// dataPlaneNamespace where it installs the data plane and its policy, the
// namespace the operator watches.
const (
	namespace          = "fairqueue-system"
	dataPlaneNamespace = "fairqueue-dataplane"
)

// managerRole and managerAccount are the rendered names of the operator's
// generated ClusterRole and of its ServiceAccount.
const (
	managerRole    = "fairqueue-manager-role"
	managerAccount = "fairqueue-controller-manager"
)

// writeVerbs are the RBAC verbs that change objects.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection", rbacv1.VerbAll}

// codecs decodes every kind config/default renders: the built-in types and
// CustomResourceDefinitions.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), apiextensionsv1.AddToScheme(s)); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s)
}()

// render runs `kubectl kustomize config/default` and returns its output.
func render(t *testing.T, kubectlPath, root string) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "config", "rbac", "role.yaml")); err != nil {
		t.Fatalf("config/rbac/role.yaml is missing: run `make manifests` to generate the operator's RBAC from the controllers' markers: %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectlPath, "kustomize", filepath.Join(root, "config", "default"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl kustomize config/default: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

// decode splits rendered YAML into typed objects.
func decode(t *testing.T, rendered []byte) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("rendered document does not decode as a Kubernetes object: %v\n%s", err, doc)
		}
		objs = append(objs, obj)
	}
	return objs
}

// key names an object for comparisons and messages.
func key(obj runtime.Object) string {
	o := obj.(client.Object)
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if o.GetNamespace() == "" {
		return kind + "/" + o.GetName()
	}
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

func find[T runtime.Object](t *testing.T, objs []runtime.Object, want string) T {
	t.Helper()
	var typed T
	ok := false
	for _, o := range objs {
		if key(o) == want {
			if typed, ok = o.(T); ok {
				break
			}
		}
	}
	if !ok {
		t.Fatalf("rendered output has no %s", want)
	}
	return typed
}

// TestKustomizeRendersDeployment checks that config/default renders exactly
// the expected objects, with the properties a production cluster needs.
func TestKustomizeRendersDeployment(t *testing.T) {
	root := repoRoot(t)
	objs := decode(t, render(t, kubectl(t, root), root))

	var got []string
	for _, o := range objs {
		got = append(got, key(o))
	}
	want := []string{
		"Namespace/fairqueue-system",
		"Namespace/fairqueue-dataplane",
		"CustomResourceDefinition/fairqueuepolicies.fairqueue.dev",
		"ServiceAccount/fairqueue-system/fairqueue-controller-manager",
		"ServiceAccount/fairqueue-dataplane/fairqueue-dataplane",
		"Role/fairqueue-dataplane/fairqueue-dataplane-config-reader",
		"Role/fairqueue-system/fairqueue-manager-role",
		"ClusterRole/fairqueue-manager-role",
		"RoleBinding/fairqueue-dataplane/fairqueue-dataplane-config-reader",
		"RoleBinding/fairqueue-system/fairqueue-leader-election-rolebinding",
		"RoleBinding/fairqueue-dataplane/fairqueue-manager-rolebinding",
		"Service/fairqueue-dataplane/fairqueue-dataplane",
		"Deployment/fairqueue-system/fairqueue-controller-manager",
		"Deployment/fairqueue-dataplane/fairqueue-dataplane",
		"PodDisruptionBudget/fairqueue-dataplane/fairqueue-dataplane",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rendered objects:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	t.Run("hardened pods", func(t *testing.T) {
		images := map[string]string{
			namespace + "/fairqueue-controller-manager": "ghcr.io/fairqueue/manager:dev",
			dataPlaneNamespace + "/fairqueue-dataplane": "ghcr.io/fairqueue/dataplane:dev",
		}
		for name, image := range images {
			d := find[*appsv1.Deployment](t, objs, "Deployment/"+name)
			checkHardenedPod(t, name, &d.Spec.Template.Spec, image)
		}
	})

	t.Run("data plane is highly available", func(t *testing.T) {
		d := find[*appsv1.Deployment](t, objs, "Deployment/"+dataPlaneNamespace+"/fairqueue-dataplane")
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("data plane replicas %v, want 2", d.Spec.Replicas)
		}
		pods := labels.Set(d.Spec.Template.Labels)
		pdb := find[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/"+dataPlaneNamespace+"/fairqueue-dataplane")
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
			t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
		}
		if sel := labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels); !sel.Matches(pods) {
			t.Errorf("PodDisruptionBudget selector %v does not select the data-plane pods %v", sel, pods)
		}
		svc := find[*corev1.Service](t, objs, "Service/"+dataPlaneNamespace+"/fairqueue-dataplane")
		if sel := labels.SelectorFromSet(svc.Spec.Selector); !sel.Matches(pods) {
			t.Errorf("Service selector %v does not select the data-plane pods %v", sel, pods)
		}
		mgr := find[*appsv1.Deployment](t, objs, "Deployment/"+namespace+"/fairqueue-controller-manager")
		if sel := labels.SelectorFromSet(svc.Spec.Selector); sel.Matches(labels.Set(mgr.Spec.Template.Labels)) {
			t.Error("the data-plane Service also selects the operator's pods")
		}
	})

	t.Run("data plane reads only its ConfigMap and hash-key Secret and writes only Leases", func(t *testing.T) {
		role := find[*rbacv1.Role](t, objs, "Role/"+dataPlaneNamespace+"/fairqueue-dataplane-config-reader")
		wantRules := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"default-dataplane"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"default-hash-key"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		}
		if !slices.EqualFunc(role.Rules, wantRules, ruleEqual) {
			t.Errorf("data-plane rules %+v, want exactly %+v", role.Rules, wantRules)
		}
		d := find[*appsv1.Deployment](t, objs, "Deployment/"+dataPlaneNamespace+"/fairqueue-dataplane")
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--configmap=default-dataplane") {
			t.Errorf("data-plane args %v do not name the ConfigMap the Role grants", d.Spec.Template.Spec.Containers[0].Args)
		}
	})

	t.Run("no ClusterRoleBinding grants cluster-wide write", func(t *testing.T) {
		for _, problem := range clusterWideWrites(objs) {
			t.Error(problem)
		}
	})

	t.Run("operator is granted its ClusterRole in exactly the namespaces it watches", func(t *testing.T) {
		watched := managerNamespaces(t, objs)
		if len(watched) == 0 {
			t.Fatal("the operator has no --namespaces argument: it would watch every namespace, which needs cluster-wide write")
		}
		var bound []string
		for _, o := range objs {
			if b, ok := o.(*rbacv1.RoleBinding); ok && bindsManagerRole(b) {
				bound = append(bound, b.Namespace)
			}
		}
		slices.Sort(watched)
		slices.Sort(bound)
		if !slices.Equal(watched, bound) {
			t.Errorf("operator watches %v but its ClusterRole is bound by RoleBindings in %v", watched, bound)
		}
	})

	t.Run("operator's own namespace Role grants leader election only", func(t *testing.T) {
		role := find[*rbacv1.Role](t, objs, "Role/"+namespace+"/"+managerRole)
		wantRules := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"fairqueue-operator.fairqueue.dev"}, Verbs: []string{"get", "update"}},
		}
		if !slices.EqualFunc(role.Rules, wantRules, ruleEqual) {
			t.Errorf("leader-election rules %+v, want exactly %+v", role.Rules, wantRules)
		}
	})

	t.Run("watched-namespace example binds the rendered ClusterRole and ServiceAccount", func(t *testing.T) {
		b := exampleBinding(t, root, "team-a")
		if b.Namespace != "team-a" {
			t.Errorf("example RoleBinding is in namespace %q, want the substituted team-a", b.Namespace)
		}
		find[*rbacv1.ClusterRole](t, objs, "ClusterRole/"+b.RoleRef.Name)
		if !bindsManagerRole(b) {
			t.Errorf("example binds %s %s to %+v, want ClusterRole %s to ServiceAccount %s/%s",
				b.RoleRef.Kind, b.RoleRef.Name, b.Subjects, managerRole, namespace, managerAccount)
		}
	})

	t.Run("bindings name existing service accounts and roles", func(t *testing.T) {
		have := map[string]bool{}
		for _, o := range objs {
			have[key(o)] = true
		}
		for _, o := range objs {
			var ref rbacv1.RoleRef
			var subjects []rbacv1.Subject
			var ns string
			switch b := o.(type) {
			case *rbacv1.RoleBinding:
				ref, subjects, ns = b.RoleRef, b.Subjects, b.Namespace
			case *rbacv1.ClusterRoleBinding:
				ref, subjects, ns = b.RoleRef, b.Subjects, ""
			default:
				continue
			}
			roleKey := ref.Kind + "/" + ref.Name
			if ns != "" && ref.Kind == "Role" {
				roleKey = ref.Kind + "/" + ns + "/" + ref.Name
			}
			if !have[roleKey] {
				t.Errorf("%s refers to %s, which is not rendered", key(o), roleKey)
			}
			for _, s := range subjects {
				if sa := "ServiceAccount/" + s.Namespace + "/" + s.Name; s.Kind != "ServiceAccount" || !have[sa] {
					t.Errorf("%s binds %s %s/%s, which is not a rendered ServiceAccount", key(o), s.Kind, s.Namespace, s.Name)
				}
			}
		}
	})
}

// clusterWideWrites lists, for every ClusterRoleBinding in objs, the write
// verbs it grants: any write rule of the ClusterRole it binds, or the binding
// itself when that ClusterRole is not in objs or is aggregated, since its
// rules cannot then be checked.
func clusterWideWrites(objs []runtime.Object) []string {
	roles := map[string]*rbacv1.ClusterRole{}
	for _, o := range objs {
		if r, ok := o.(*rbacv1.ClusterRole); ok {
			roles[r.Name] = r
		}
	}
	var out []string
	for _, o := range objs {
		b, ok := o.(*rbacv1.ClusterRoleBinding)
		if !ok {
			continue
		}
		role := roles[b.RoleRef.Name]
		switch {
		case b.RoleRef.Kind != "ClusterRole" || role == nil:
			out = append(out, fmt.Sprintf("%s binds %s %s, which is not rendered, so its verbs cannot be checked", key(b), b.RoleRef.Kind, b.RoleRef.Name))
			continue
		case role.AggregationRule != nil:
			out = append(out, fmt.Sprintf("%s binds the aggregated ClusterRole %s, whose verbs cannot be checked", key(b), role.Name))
			continue
		}
		for _, rule := range role.Rules {
			for _, v := range rule.Verbs {
				if slices.Contains(writeVerbs, v) {
					out = append(out, fmt.Sprintf("%s grants %q on %v %v cluster-wide through ClusterRole %s", key(b), v, rule.APIGroups, rule.Resources, role.Name))
				}
			}
		}
	}
	return out
}

// TestClusterWideWrites checks the check that guards the default deploy
// against cluster-wide write access.
func TestClusterWideWrites(t *testing.T) {
	clusterRole := func(name string, verbs ...string) *rbacv1.ClusterRole {
		r := &rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}}}
		r.Name, r.Kind = name, "ClusterRole"
		return r
	}
	binding := func(role string) *rbacv1.ClusterRoleBinding {
		b := &rbacv1.ClusterRoleBinding{RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
		b.Name, b.Kind = "b", "ClusterRoleBinding"
		return b
	}
	roleBinding := &rbacv1.RoleBinding{RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "writer"}}
	roleBinding.Name, roleBinding.Namespace, roleBinding.Kind = "rb", "ns", "RoleBinding"
	aggregated := clusterRole("aggregated")
	aggregated.AggregationRule = &rbacv1.AggregationRule{}

	tests := []struct {
		name  string
		objs  []runtime.Object
		flags int
	}{
		{"read-only ClusterRole bound cluster-wide", []runtime.Object{clusterRole("reader", "get", "list", "watch"), binding("reader")}, 0},
		{"write ClusterRole bound by a RoleBinding only", []runtime.Object{clusterRole("writer", "create", "update"), roleBinding}, 0},
		{"no bindings", []runtime.Object{clusterRole("writer", "create")}, 0},
		{"create bound cluster-wide", []runtime.Object{clusterRole("writer", "get", "create"), binding("writer")}, 1},
		{"every write verb bound cluster-wide", []runtime.Object{clusterRole("writer", writeVerbs...), binding("writer")}, len(writeVerbs)},
		{"ClusterRole that is not rendered", []runtime.Object{binding("cluster-admin")}, 1},
		{"aggregated ClusterRole", []runtime.Object{aggregated, binding("aggregated")}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clusterWideWrites(tc.objs); len(got) != tc.flags {
				t.Errorf("clusterWideWrites reported %d problems, want %d: %q", len(got), tc.flags, got)
			}
		})
	}
}

// managerNamespaces returns the namespaces the operator's Deployment watches
// (its --namespaces argument), or nil when it watches all.
func managerNamespaces(t *testing.T, objs []runtime.Object) []string {
	t.Helper()
	d := find[*appsv1.Deployment](t, objs, "Deployment/"+namespace+"/"+managerAccount)
	var out []string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, arg := range c.Args {
			if v, ok := strings.CutPrefix(arg, "--namespaces="); ok {
				out = append(out, strings.Split(v, ",")...)
			}
		}
	}
	return out
}

// bindsManagerRole reports whether b grants the operator's ClusterRole to the
// operator's ServiceAccount.
func bindsManagerRole(b *rbacv1.RoleBinding) bool {
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != managerRole {
		return false
	}
	return slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
		return s.Kind == "ServiceAccount" && s.Name == managerAccount && s.Namespace == namespace
	})
}

func ruleEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs)
}

// checkHardenedPod asserts the restricted pod security profile, probes,
// resources and the released image on every container.
func checkHardenedPod(t *testing.T, name string, pod *corev1.PodSpec, image string) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod does not set runAsNonRoot", name)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccomp profile is not RuntimeDefault", name)
	}
	if pod.ServiceAccountName == "" {
		t.Errorf("%s: pod runs as the default ServiceAccount", name)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s/%s: no container securityContext", name, c.Name)
			continue
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s/%s: root file system is writable", name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s/%s: privilege escalation is allowed", name, c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
			t.Errorf("%s/%s: capabilities are not all dropped", name, c.Name)
		}
		if c.Image != image {
			t.Errorf("%s/%s: image %q, want %q", name, c.Name, c.Image, image)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("%s/%s: no liveness probe on /healthz", name, c.Name)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s/%s: no readiness probe on /readyz", name, c.Name)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				t.Errorf("%s/%s: no %s request", name, c.Name, res)
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				t.Errorf("%s/%s: no %s limit", name, c.Name, res)
			}
		}
	}
}

// exampleBinding reads config/rbac/watched_namespace_binding.example.yaml
// with its placeholder replaced by ns.
func exampleBinding(t *testing.T, root, ns string) *rbacv1.RoleBinding {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "watched_namespace_binding.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(examplePlaceholder)) {
		t.Fatalf("the watched-namespace example no longer contains the placeholder %s its instructions replace", examplePlaceholder)
	}
	objs := decode(t, bytes.ReplaceAll(raw, []byte(examplePlaceholder), []byte(ns)))
	if len(objs) != 1 {
		t.Fatalf("the watched-namespace example holds %d objects, want one RoleBinding", len(objs))
	}
	b, ok := objs[0].(*rbacv1.RoleBinding)
	if !ok {
		t.Fatalf("the watched-namespace example is a %T, want a RoleBinding", objs[0])
	}
	return b
}

// examplePlaceholder is what a user replaces with their namespace in the
// watched-namespace example.
const examplePlaceholder = "TEAM-NAMESPACE"

// TestServerDryRunAcceptsEveryObject applies the rendered manifests with a
// server-side dry run against a real API server with the CRDs installed,
// so schema errors, admission (Pod Security "restricted" included) and RBAC
// escalation checks are the API server's own.
func TestServerDryRunAcceptsEveryObject(t *testing.T) {
	root := repoRoot(t)
	kc := kubectl(t, root)
	rendered := render(t, kc, root)
	objs := decode(t, rendered)
	env := testenv.Start(t)

	// Namespaced objects can only be dry-run into a namespace that exists, and
	// Pod Security admission reads the labels of the stored namespace: create
	// the rendered one for real first.
	for _, name := range []string{namespace, dataPlaneNamespace} {
		ns := find[*corev1.Namespace](t, objs, "Namespace/"+name)
		if err := env.Client.Create(t.Context(), ns); err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), kc, "--kubeconfig", env.Kubeconfig,
		"apply", "--server-side", "--field-manager=fairqueue-deploy-test", "--dry-run=server", "-f", "-")
	cmd.Stdin = bytes.NewReader(rendered)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the API server refused the rendered manifests: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "Warning:") {
		t.Errorf("the API server warned about the rendered manifests:\n%s", stderr.String())
	}
	applied := 0
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasSuffix(line, "serverside-applied (server dry run)") {
			applied++
		}
	}
	if applied != len(objs) {
		t.Errorf("%d objects accepted, want all %d:\n%s", applied, len(objs), stdout.String())
	}
}

// TestDataPlaneGarbageCollectorSettings keeps the data plane's GOGC and
// GOMEMLIMIT in its Deployment: GOGC above Go's default, so the collector
// does not run every few hundred requests, and GOMEMLIMIT read from the
// container's memory limit, so the larger heap stays bounded by whatever
// limit an overlay sets.
func TestDataPlaneGarbageCollectorSettings(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "dataplane", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, raw)
	d, ok := objs[0].(*appsv1.Deployment)
	if len(objs) != 1 || !ok {
		t.Fatalf("config/dataplane/deployment.yaml holds %d objects, want one Deployment", len(objs))
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if gogc, err := strconv.Atoi(env["GOGC"].Value); err != nil || gogc <= 100 {
		t.Errorf("GOGC = %q, want a number above Go's default 100", env["GOGC"].Value)
	}
	ref := env["GOMEMLIMIT"].ValueFrom
	if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" ||
		(!ref.ResourceFieldRef.Divisor.IsZero() && ref.ResourceFieldRef.Divisor.Value() != 1) {
		t.Errorf("GOMEMLIMIT = %+v, want the container's limits.memory in bytes (resourceFieldRef)", env["GOMEMLIMIT"])
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("the data plane has no memory limit for GOMEMLIMIT to follow")
	}
}
