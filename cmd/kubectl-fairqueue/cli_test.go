package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// noKubeconfig points the plugin at an empty kubeconfig, so a test never
// reads the user's.
func noKubeconfig(t *testing.T) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
}

func TestHelpListsTheStandardKubectlFlags(t *testing.T) {
	noKubeconfig(t)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{
		"--kubeconfig", "--context", "--cluster", "--user", "-n, --namespace", "--as ", "--as-group", "--token", "-s, --server",
		"--request-timeout", `(default "30s")`, "--insecure-skip-tls-verify", "--version",
		"status ", "top ", "render ", "simulate ", "version ",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("kubectl fairqueue --help lacks %q:\n%s", want, help)
		}
	}
	root := newRootCommand(newGlobals(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}))
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			continue
		}
		out.Reset()
		if err := run(context.Background(), []string{c.Name(), "--help"}, &out, &errOut); err != nil {
			t.Errorf("%s --help: %v", c.Name(), err)
		}
		for _, want := range []string{"kubectl fairqueue " + c.Use, "Global Flags:", "-n, --namespace", "--request-timeout"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s --help lacks %q:\n%s", c.Name(), want, out.String())
			}
		}
	}
	err := run(context.Background(), []string{"frobnicate"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate" for "kubectl fairqueue"`) {
		t.Errorf("an unknown command: %v", err)
	}
	err = run(context.Background(), []string{"status", "--frobnicate"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --frobnicate") || !strings.Contains(err.Error(), "kubectl fairqueue status --help") {
		t.Errorf("an unknown flag: %v, want it named with a pointer to --help", err)
	}
	if strings.Contains(errOut.String(), "Usage:") {
		t.Errorf("an error dumped the usage:\n%s", errOut.String())
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "kubectl-fairqueue ") || !strings.Contains(out.String(), "(revision ") {
			t.Errorf("%q printed %q", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version", "-o", "json"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var v versionOutput
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Kind != "Version" || v.Version == "" || v.GoVersion == "" {
		t.Errorf("version -o json: %v, %+v\n%s", err, v, out.String())
	}
}

func TestUnknownOutputFormatNamesTheFormats(t *testing.T) {
	noKubeconfig(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Refused before any API call: there is no server to call.
		{[]string{"status", "llm", "-o", "xml"}, `unknown output format -o "xml": use one of wide, json, yaml`},
		{[]string{"simulate", "llm", "-f", "load.yaml", "--output=table,json"}, `unknown output format -o "table,json": use one of table, json, yaml`},
		{[]string{"version", "-o", "wide"}, `unknown output format -o "wide": use one of json, yaml`},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), tc.args, &out, &errOut); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestRequestTimeoutIsHonoured points the plugin at an API server and a
// metrics endpoint that never answer: --request-timeout ends each command.
func TestRequestTimeoutIsHonoured(t *testing.T) {
	noKubeconfig(t)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	for _, args := range [][]string{
		{"status", "llm", "-n", "team-a", "--server", srv.URL, "--request-timeout", "300ms"},
		{"status", "-A", "--server", srv.URL, "--request-timeout", "300ms"},
		{"render", "llm", "--server", srv.URL, "--request-timeout", "300ms"},
		{"top", "--metrics-url", srv.URL, "--interval", "1ms", "--request-timeout", "300ms"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		var out, errOut bytes.Buffer
		err := run(ctx, args, &out, &errOut)
		cancel()
		took := time.Since(start)
		if err == nil {
			t.Errorf("%q: no error from a server that never answers", args)
			continue
		}
		t.Logf("%q: %v after %v", args, err, took)
		if took > 10*time.Second {
			t.Errorf("%q took %v, want about --request-timeout 300ms", args, took)
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"status", "llm", "--request-timeout", "soon"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `--request-timeout "soon" is not a duration`) {
		t.Errorf("a bad --request-timeout: %v", err)
	}
}

// statusFixture is a fake cluster with policy llm in team-a (two replicas
// reporting, one on the current config) and policy chat in team-b.
func statusFixture(t *testing.T) *globals {
	t.Helper()
	noKubeconfig(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := fqv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The plugin's clock stands still at t0, so every run sees the same ages.
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	saved := now
	now = func() time.Time { return t0 }
	t.Cleanup(func() { now = saved })
	renewed := metav1.NewMicroTime(t0.Add(-time.Second))
	lease := func(pod, hash string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm-dataplane-" + pod,
				Labels:      map[string]string{reload.LeasePolicyLabel: "llm", reload.LeaseComponentLabel: reload.LeaseComponentValue},
				Annotations: map[string]string{reload.LeaseConfigHashAnnotation: hash}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod), LeaseDurationSeconds: ptr.To[int32](30), RenewTime: &renewed},
		}
	}
	llm := &fqv1alpha1.FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm", Generation: 3}}
	llm.Spec.FairQueuing.Enabled = true
	llm.Spec.Backends = []fqv1alpha1.Backend{{Name: "vllm-a", URL: "http://vllm-a.models:8000/"}, {Name: "vllm-b", URL: "http://vllm-b.models:8000"}}
	llm.Spec.Capacity = &fqv1alpha1.Capacity{Backends: []fqv1alpha1.BackendCapacity{
		{Name: "vllm-a", MaxInFlight: 264, Saturation: &fqv1alpha1.Saturation{Interval: "100ms", Signals: []fqv1alpha1.SaturationSignal{
			{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}}},
		{Name: "vllm-b", MaxInFlight: 64},
	}}
	llm.Status = fqv1alpha1.FairQueuePolicyStatus{ObservedGeneration: 3, ConfigHash: "aaaa", ConfigMapName: "llm-dataplane",
		DataPlaneReplicas: 2, UpdatedReplicas: 1, WeightedTenants: 4,
		Conditions: []metav1.Condition{{Type: fqv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Rendered",
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}}
	chat := &fqv1alpha1.FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "chat"}}
	chat.Spec.FairQueuing = fqv1alpha1.FairQueuing{Enabled: true, TenantDimension: fqv1alpha1.TenantDimensionAPIKey,
		PriorityBands:     []fqv1alpha1.PriorityBand{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", MinShare: 0.05}},
		DefaultBand:       "standard",
		RequestBandHeader: "x-priority-band",
		Weights: []fqv1alpha1.TenantWeight{{Identity: "${PREMIUM_KEY}", Weight: 3, Band: "interactive"},
			{Identity: "sk-literal", Weight: 2, Band: "batch"}, {Identity: "${OTHER}", Weight: 1}},
		WeightsFrom: []fqv1alpha1.WeightsSource{{SecretRef: fqv1alpha1.LocalSecretReference{Name: "premium-keys"}, Band: "interactive"},
			{SecretRef: fqv1alpha1.LocalSecretReference{Name: "vars"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(llm).
		WithObjects(llm, chat, lease("dp-0", "aaaa"), lease("dp-1", "bbbb")).Build()
	g := newGlobals(genericiooptions.IOStreams{})
	g.client = c
	return g
}

// status runs kubectl fairqueue status against the fixture.
func status(t *testing.T, args ...string) string {
	t.Helper()
	g := statusFixture(t)
	var out, errOut bytes.Buffer
	g.streams = genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}
	if err := execute(context.Background(), g, append([]string{"status"}, args...)); err != nil {
		t.Fatalf("status %q: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

func TestStatusJSONAndYAMLParseBack(t *testing.T) {
	var fromJSON, fromYAML PolicyStatus
	out := status(t, "llm", "-n", "team-a", "-o", "json")
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fromJSON); err != nil {
		t.Fatalf("status -o json printed what does not decode: %v\n%s", err, out)
	}
	if err := yaml.UnmarshalStrict([]byte(status(t, "llm", "-n", "team-a", "-o", "yaml")), &fromYAML); err != nil {
		t.Fatalf("status -o yaml: %v", err)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("-o json and -o yaml differ:\n%+v\n%+v", fromJSON, fromYAML)
	}
	s := fromJSON
	if s.APIVersion != "kubectl-fairqueue/v1" || s.Kind != "PolicyStatus" || s.Namespace != "team-a" || s.Name != "llm" ||
		s.Generation != 3 || s.ObservedGeneration != 3 || !s.FairQueuing.Enabled || s.FairQueuing.TenantDimension != "user" ||
		s.ConfigHash != "aaaa" || s.ConfigMap != "llm-dataplane" || s.WeightedTenants != 4 || s.LiveReplicas != 2 || s.UpdatedReplicas != 1 ||
		len(s.Conditions) != 1 || s.Conditions[0].Reason != "Rendered" {
		t.Errorf("status -o json = %+v", s)
	}
	if len(s.Replicas) != 2 {
		t.Fatalf("replicas %+v, want dp-0 and dp-1", s.Replicas)
	}
	for i, want := range []ReplicaStatus{
		{Name: "dp-0", Lease: "llm-dataplane-dp-0", ConfigHash: "aaaa", Current: true, LeaseDurationSeconds: 30, Live: true},
		{Name: "dp-1", Lease: "llm-dataplane-dp-1", ConfigHash: "bbbb", Current: false, LeaseDurationSeconds: 30, Live: true},
	} {
		got := s.Replicas[i]
		if got.LastReport == nil || !got.LastReport.Equal(ptr.To(metav1.Date(2026, 5, 1, 11, 59, 59, 0, time.UTC))) {
			t.Errorf("replica %s lastReport %v, want a second before the clock", got.Name, got.LastReport)
		}
		got.LastReport = nil
		if got != want {
			t.Errorf("replica %d = %+v, want %+v", i, got, want)
		}
	}
}

func TestStatusNamespaces(t *testing.T) {
	// -n picks the namespace; without POLICY status lists its policies.
	out := status(t, "-n", "team-a")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "llm") || strings.Contains(out, "chat") || strings.Contains(out, "NAMESPACE") {
		t.Errorf("status -n team-a:\n%s", out)
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); strings.Join(f, " ") != "llm True aaaa 2 1 2" {
		t.Errorf("status -n team-a: row %q, want llm True aaaa 2 1 2", f)
	}
	// The kubeconfig's namespace (none here: default) holds no policy.
	g := statusFixture(t)
	var buf, errOut bytes.Buffer
	g.streams = genericiooptions.IOStreams{Out: &buf, ErrOut: &errOut}
	if err := execute(context.Background(), g, []string{"status"}); err != nil || buf.Len() != 0 || !strings.Contains(errOut.String(), "No FairQueuePolicies found in default") {
		t.Errorf("status in the default namespace: %v, %q, %q", err, buf.String(), errOut.String())
	}
	// -A lists every namespace's, with a NAMESPACE column.
	out = status(t, "-A")
	for _, want := range []string{"NAMESPACE", "team-a", "llm", "team-b", "chat"} {
		if !strings.Contains(out, want) {
			t.Errorf("status -A lacks %q:\n%s", want, out)
		}
	}
	var list PolicyStatusList
	if err := json.Unmarshal([]byte(status(t, "-A", "-o", "json")), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 ||
		list.Items[0].Name != "llm" || len(list.Items[0].Replicas) != 2 || list.Items[1].Name != "chat" || len(list.Items[1].Replicas) != 0 {
		t.Errorf("status -A -o json: %v, %+v", err, list)
	}
	if out := status(t, "-A", "-o", "wide"); !strings.Contains(out, "TENANT DIMENSION") || !strings.Contains(out, "llm-dataplane") {
		t.Errorf("status -A -o wide:\n%s", out)
	}
	if out := status(t, "llm", "-n", "team-a", "-o", "wide"); !strings.Contains(out, "RENEWED AT") || !strings.Contains(out, "llm-dataplane-dp-1") {
		t.Errorf("status llm -o wide:\n%s", out)
	}
	err := run(context.Background(), []string{"status", "llm", "-A"}, &buf, &errOut)
	if err == nil || !strings.Contains(err.Error(), "drop -A") {
		t.Errorf("status POLICY -A: %v, want an error", err)
	}
}

// TestStatusShowsBands checks the bands of a policy with priorityBands: in
// order, with minShare, the default band, the request band header and the
// members the spec places in each (API keys by their ${VAR} or entry, never
// raw), in the table, in -o json and in the list's BANDS column; and that a
// policy without bands shows none.
func TestStatusShowsBands(t *testing.T) {
	out := status(t, "chat", "-n", "team-b")
	for _, want := range []string{
		"Priority bands:    interactive > standard > batch (highest first); request band header: x-priority-band\n",
		"BAND                MIN SHARE  MEMBERS\n" +
			"interactive         -          weights: ${PREMIUM_KEY}; every identity in Secret premium-keys\n" +
			"standard (default)  -          every tenant placed in no band\n" +
			"batch               5%         weights: weights[1]\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status chat lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sk-literal") {
		t.Errorf("status printed a raw API key:\n%s", out)
	}
	var s PolicyStatus
	if err := json.Unmarshal([]byte(status(t, "chat", "-n", "team-b", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	want := []BandStatus{
		{Name: "interactive", Weights: []string{"${PREMIUM_KEY}"}, Secrets: []string{"premium-keys"}},
		{Name: "standard", Default: true, Weights: []string{}, Secrets: []string{}},
		{Name: "batch", MinShare: 0.05, Weights: []string{"weights[1]"}, Secrets: []string{}},
	}
	if !reflect.DeepEqual(s.Bands, want) || s.RequestBandHeader != "x-priority-band" {
		t.Errorf("status -o json bands %+v header %q, want %+v", s.Bands, s.RequestBandHeader, want)
	}
	if out := status(t, "-A", "-o", "wide"); !strings.Contains(out, "interactive>standard>batch") {
		t.Errorf("status -A -o wide lacks the bands:\n%s", out)
	}
	if out := status(t, "llm", "-n", "team-a"); strings.Contains(out, "Priority bands") || strings.Contains(status(t, "llm", "-n", "team-a", "-o", "json"), "bands") {
		t.Errorf("a policy without bands shows bands:\n%s", out)
	}
}

// TestStatusShowsCapacity checks the capacity section of a policy with
// spec.capacity: per backend maxInFlight, the metrics URL polled (the
// backend's url and the default path), interval and staleAfter with their
// defaults resolved, the signals and their max; -o wide adds the poll
// timeout, -o json the capacity object, the list's -o wide a CAPACITY
// column; and that a policy without capacity shows none.
func TestStatusShowsCapacity(t *testing.T) {
	out := status(t, "llm", "-n", "team-a")
	want := "BACKEND  MAX IN FLIGHT  SATURATION SOURCE                  INTERVAL  STALE AFTER  SIGNALS (saturated when over)\n" +
		"vllm-a   264            http://vllm-a.models:8000/metrics  100ms     1s           vllm:num_requests_waiting>4, vllm:kv_cache_usage_perc>0.9\n" +
		"vllm-b   64             none (maxInFlight alone decides)   -         -            -\n"
	if !strings.Contains(out, want) || !strings.Contains(out, "Capacity:") {
		t.Errorf("status llm lacks the capacity table:\n%s\nwant:\n%s", out, want)
	}
	if wide := status(t, "llm", "-n", "team-a", "-o", "wide"); !strings.Contains(wide, "STALE AFTER  TIMEOUT") || !strings.Contains(wide, " 200ms ") {
		t.Errorf("status -o wide lacks the poll timeout:\n%s", wide)
	}
	var s PolicyStatus
	if err := json.Unmarshal([]byte(status(t, "llm", "-n", "team-a", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	wantJSON := &CapacityStatus{Backends: []BackendCapacityStatus{
		{Name: "vllm-a", MaxInFlight: 264, Saturation: &SaturationStatus{MetricsURL: "http://vllm-a.models:8000/metrics",
			IntervalSeconds: 0.1, StaleAfterSeconds: 1, TimeoutSeconds: 0.2,
			Signals: []SignalStatus{{Metric: "vllm:num_requests_waiting", Max: 4}, {Metric: "vllm:kv_cache_usage_perc", Max: 0.9}}}},
		{Name: "vllm-b", MaxInFlight: 64},
	}}
	if !reflect.DeepEqual(s.Capacity, wantJSON) {
		t.Errorf("status -o json capacity %+v, want %+v", s.Capacity, wantJSON)
	}
	if out := status(t, "-A", "-o", "wide"); !strings.Contains(out, "vllm-a:264+sat,vllm-b:64") {
		t.Errorf("status -A -o wide lacks the CAPACITY column:\n%s", out)
	}
	if out := status(t, "chat", "-n", "team-b"); strings.Contains(out, "Capacity") || strings.Contains(status(t, "chat", "-n", "team-b", "-o", "json"), "capacity") {
		t.Errorf("a policy without capacity shows capacity:\n%s", out)
	}
}

func TestWithoutQueryHidesTokens(t *testing.T) {
	for raw, want := range map[string]string{
		"http://m:9400/metrics":               "http://m:9400/metrics",
		"https://m/metrics?token=s3cret#frag": "https://m/metrics?…",
	} {
		if got := withoutQuery(raw); got != want {
			t.Errorf("withoutQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}
