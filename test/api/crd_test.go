/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package api_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

func TestCRDInstalled(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := env.Client.Get(testContext(t), client.ObjectKey{Name: "fairqueuepolicies.fairqueue.dev"}, u); err != nil {
		t.Fatalf("getting the FairQueuePolicy CRD: %v", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
		t.Fatalf("decoding the CRD: %v", err)
	}

	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		t.Errorf("CRD is not Established: %+v", crd.Status.Conditions)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
	}
	if !slices.Contains(crd.Spec.Names.ShortNames, "fqp") {
		t.Errorf("short names = %v, want fqp among them", crd.Spec.Names.ShortNames)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("versions = %d, want only v1alpha1", len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Name != "v1alpha1" || !v.Served || !v.Storage {
		t.Errorf("version %s served=%v storage=%v, want v1alpha1 served and stored", v.Name, v.Served, v.Storage)
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("the status subresource is not enabled")
	}
	// Secondary columns (priority 1) show with -o wide only.
	want := map[string]string{
		"Enabled":       ".spec.fairQueuing.enabled",
		"Tenant":        ".spec.fairQueuing.tenantDimension",
		"Ready":         `.status.conditions[?(@.type=="Ready")].status`,
		"Reason":        `.status.conditions[?(@.type=="Ready")].reason`,
		"Updated":       ".status.updatedReplicas",
		"Replicas":      ".status.dataPlaneReplicas",
		"Age":           ".metadata.creationTimestamp",
		"Config Hash/1": ".status.configHash",
		"Generation/1":  ".metadata.generation",
		"Observed/1":    ".status.observedGeneration",
	}
	got := map[string]string{}
	for _, c := range v.AdditionalPrinterColumns {
		name := c.Name
		if c.Priority != 0 {
			name = fmt.Sprintf("%s/%d", c.Name, c.Priority)
		}
		got[name] = c.JSONPath
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("printer columns = %v, want %v", got, want)
	}
}

// samples returns the objects of every file in config/samples, by file name.
func samples(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(env.Root, "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in %s: %v", dir, err)
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj) == 0 {
				continue
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], &unstructured.Unstructured{Object: obj})
		}
	}
	return out
}

func TestSamplesAccepted(t *testing.T) {
	ns := newNamespace(t)
	var policies []string
	for file, objs := range samples(t) {
		for _, obj := range objs {
			obj.SetNamespace(ns)
			if err := env.Client.Create(testContext(t), obj); err != nil {
				t.Errorf("%s: the API server rejected %s %s: %v", file, obj.GetKind(), obj.GetName(), err)
				continue
			}
			if obj.GetKind() == "FairQueuePolicy" {
				policies = append(policies, obj.GetName())
			}
		}
	}
	slices.Sort(policies)
	if want := []string{"bands", "capacity", "full", "minimal", "tokens"}; !slices.Equal(policies, want) {
		t.Errorf("sample policies = %v, want %v", policies, want)
	}
	// The stored objects must decode into the Go types the operator and the
	// data plane use, or their informers would fail on them.
	for _, name := range policies {
		var p fqv1alpha1.FairQueuePolicy
		if err := env.Client.Get(testContext(t), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Errorf("reading sample %s through the Go types: %v", name, err)
		}
	}
}

// TestFullSampleRoundTrips checks that every field of the full sample lands in
// the Go type, so a field the types drop or misname shows up here.
func TestFullSampleRoundTrips(t *testing.T) {
	ns := newNamespace(t)
	obj := samples(t)["fairqueue_v1alpha1_fairqueuepolicy_full.yaml"][0]
	obj.SetNamespace(ns)
	if err := env.Client.Create(testContext(t), obj); err != nil {
		t.Fatalf("creating the full sample: %v", err)
	}
	var p fqv1alpha1.FairQueuePolicy
	if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(obj), &p); err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	checks := []struct {
		field string
		ok    bool
	}{
		{"identity.trustHeaders", s.Identity.TrustHeaders && s.Identity.UserHeader == "x-auth-user" && s.Identity.TeamHeader == "x-auth-team"},
		{"identity.keyRegistry", s.Identity.KeyRegistry != nil && s.Identity.KeyRegistry.SecretRef.Name == "api-key-registry" && s.Identity.KeyRegistry.Key == "keys.json"},
		{"identity.modelHeader", s.Identity.ModelHeader == "x-model" && s.Identity.NoTeamValue == "none"},
		{"rateLimits.global", s.RateLimits.Global != nil && s.RateLimits.Global.Burst == 2000},
		{"rateLimits.perClient", s.RateLimits.PerClient != nil && s.RateLimits.PerClient.Requests == 100},
		{"rateLimits.perAPIKey", s.RateLimits.PerAPIKey != nil && s.RateLimits.PerAPIKey.Period.Duration() == time.Minute},
		{"rateLimits.perUser", s.RateLimits.PerUser != nil},
		{"rateLimits.perTeam", s.RateLimits.PerTeam != nil},
		{"rateLimits.perBackend", s.RateLimits.PerBackend != nil},
		{"rateLimits.perModel.overrides", s.RateLimits.PerModel != nil && len(s.RateLimits.PerModel.Overrides) == 1 && s.RateLimits.PerModel.Overrides[0].Burst == 5},
		{"fairQueuing", s.FairQueuing.Enabled && s.FairQueuing.TenantDimension == fqv1alpha1.TenantDimensionAPIKey},
		{"fairQueuing.weights", len(s.FairQueuing.Weights) == 2 && s.FairQueuing.Weights[0].Identity == "${ACME_KEY}" && s.FairQueuing.Weights[0].Weight == 3},
		{"fairQueuing.weightsFrom", len(s.FairQueuing.WeightsFrom) == 1 && s.FairQueuing.WeightsFrom[0].SecretRef.Name == "tenant-identities"},
		{"timeouts.request.models", len(s.Timeouts.Request.Models) == 1 && s.Timeouts.Request.Models[0].Total.Duration() == 2*time.Minute},
		{"backends", len(s.Backends) == 2 && s.Backends[0].Weight == 2 && s.Backends[1].Weight == 1},
		{"hashKeySecretRef", p.HashKeySecretName() == "full-hash-key"},
		{"fairQueuing.cost", s.FairQueuing.Cost == fqv1alpha1.FairQueuingCostRequests},
		{"deferredAdmission.tokenLimits", !s.DeferredAdmission.Enabled && s.DeferredAdmission.TokenLimits.PerAPIKey != nil && s.DeferredAdmission.TokenLimits.PerAPIKey.Burst == 40000 &&
			s.DeferredAdmission.TokenLimits.PerUser != nil && s.DeferredAdmission.TokenLimits.PerTeam != nil && s.DeferredAdmission.TokenLimits.PerTeam.Burst == 50000},
		{"deferredAdmission.tokenLimits.perModel.overrides", s.DeferredAdmission.TokenLimits.PerModel != nil && s.DeferredAdmission.TokenLimits.PerModel.Burst == 100000 &&
			len(s.DeferredAdmission.TokenLimits.PerModel.Overrides) == 1 && s.DeferredAdmission.TokenLimits.PerModel.Overrides[0].Burst == 10000},
		{"deferredAdmission.estimation", s.DeferredAdmission.Estimation.DefaultMaxTokens == 1024 && ptr.Deref(s.DeferredAdmission.Estimation.IncludeUsage, false)},
		{"deferredAdmission.bounds", s.DeferredAdmission.Bounds.MaxHeld == 1024 && s.DeferredAdmission.Bounds.MaxHeldPerTenant == 32 && s.DeferredAdmission.Bounds.MaxWait.Duration() == 10*time.Second},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s did not survive the round trip: %+v", c.field, s)
		}
	}
}

// TestMinimalObjectGetsDefaults creates a policy from the Go types with only a
// backend set, so it also proves the types send no zero durations or bounds
// the server would reject, and checks that every effective value comes back.
func TestMinimalObjectGetsDefaults(t *testing.T) {
	ns := newNamespace(t)
	p := &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "minimal"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
	if err := env.Client.Create(testContext(t), p); err != nil {
		t.Fatalf("creating a minimal policy from the Go types: %v", err)
	}
	var got fqv1alpha1.FairQueuePolicy
	if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	want := fqv1alpha1.FairQueuePolicySpec{
		Identity: fqv1alpha1.IdentitySpec{APIKeyHeaders: config.DefaultAPIKeyHeaders()},
		FairQueuing: fqv1alpha1.FairQueuing{
			Enabled:         false,
			TenantDimension: fqv1alpha1.TenantDimensionUser,
			DefaultWeight:   config.DefaultWeight,
			Bounds: fqv1alpha1.FairQueuingBounds{
				MaxQueueDepthPerTenant: config.DefaultMaxQueueDepthPerTenant,
				MaxTotalQueued:         config.DefaultMaxTotalQueued,
				MaxTenants:             config.DefaultMaxTenants,
				MaxInFlight:            config.DefaultMaxInFlight,
				MaxWait:                "5s",
			},
			Cost: fqv1alpha1.FairQueuingCostRequests,
		},
		DeferredAdmission: fqv1alpha1.DeferredAdmission{
			Estimation: fqv1alpha1.TokenEstimation{DefaultMaxTokens: config.DefaultMaxTokensReserved, IncludeUsage: ptr.To(config.DefaultIncludeUsage)},
			Bounds:     fqv1alpha1.DeferredAdmissionBounds{MaxHeld: config.DefaultMaxHeld, MaxHeldPerTenant: config.DefaultMaxHeldPerTenant, MaxWait: "10s"},
		},
		Timeouts: fqv1alpha1.Timeouts{Request: fqv1alpha1.RequestTimeouts{
			Default: fqv1alpha1.RequestTimeout{Total: fqv1alpha1.Duration("60s")},
		}},
		Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000", Weight: config.DefaultWeight}},
		Store:    fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeMemory},
	}
	if !reflect.DeepEqual(got.Spec, want) {
		t.Errorf("defaulted spec =\n%+v\nwant\n%+v", got.Spec, want)
	}

	// kubectl get -o yaml shows what the server stores: every bound must be
	// there explicitly, including the ones that are false or default.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(fqv1alpha1.GroupVersion.WithKind("FairQueuePolicy"))
	if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(p), u); err != nil {
		t.Fatal(err)
	}
	stored := map[string]any{
		"spec.fairQueuing.enabled":                       false,
		"spec.fairQueuing.tenantDimension":               "user",
		"spec.fairQueuing.defaultWeight":                 int64(1),
		"spec.fairQueuing.bounds.maxQueueDepthPerTenant": int64(32),
		"spec.fairQueuing.bounds.maxTotalQueued":         int64(4096),
		"spec.fairQueuing.bounds.maxTenants":             int64(1024),
		"spec.fairQueuing.bounds.maxInFlight":            int64(8),
		"spec.fairQueuing.bounds.maxWait":                "5s",
		"spec.identity.trustHeaders":                     false,
		"spec.fairQueuing.cost":                          "Requests",
		"spec.deferredAdmission.enabled":                 false,
		"spec.deferredAdmission.bounds.maxHeld":          int64(1024),
		"spec.deferredAdmission.bounds.maxWait":          "10s",
		"spec.timeouts.request.default.total":            "60s",
	}
	for path, want := range stored {
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, strings.Split(path, ".")...)
		if err != nil || !found || !reflect.DeepEqual(v, want) {
			t.Errorf("stored %s = %#v (found %v, %v), want %#v", path, v, found, err, want)
		}
	}
}
