package reload

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestEmbeddedCRDIsCurrent: --policy validates with a copy of the generated
// CRD; `make manifests` refreshes it, and this fails when it was not run.
func TestEmbeddedCRDIsCurrent(t *testing.T) {
	want, err := os.ReadFile("../../config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(crdYAML, want) {
		t.Fatal("dataplane/reload/fairqueuepolicy_crd.yaml differs from config/crd/bases: run `make manifests`")
	}
}

// TestDecodePolicyRefusesWhatTheAPIServerRefuses: a policy the API server
// would refuse is refused from a file with the same field and message
// (SPEC 10), whichever kind of rule refuses it: a minimum the renderer would
// otherwise read as "unset", a maximum, an enum, a pattern, a list bound, a
// list-map key, a required field or a CEL rule that needs the CRD's
// defaults. The wanted substrings are the ones test/api checks against a
// real API server.
func TestDecodePolicyRefusesWhatTheAPIServerRefuses(t *testing.T) {
	const base = "apiVersion: fairqueue.dev/v1alpha1\nkind: FairQueuePolicy\nmetadata: {name: p}\nspec:\n  backends: [{name: b, url: 'http://b'}]\n"
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"requests 0", "  rateLimits: {global: {requests: 0}}",
			[]string{"spec.rateLimits.global.requests: Invalid value: 0: spec.rateLimits.global.requests in body should be greater than or equal to 1"}},
		{"perModel requests 0", "  rateLimits: {perModel: {requests: 0}}",
			[]string{"spec.rateLimits.perModel.requests", "should be greater than or equal to 1"}},
		{"maxInFlight above the maximum", "  fairQueuing: {bounds: {maxInFlight: 5000}}",
			[]string{"spec.fairQueuing.bounds.maxInFlight", "should be less than or equal to 4096"}},
		{"enum", "  fairQueuing: {tenantDimension: tenant}",
			[]string{"spec.fairQueuing.tenantDimension", `Unsupported value: "tenant"`, `"apiKey"`}},
		{"pattern", "  identity: {userHeader: 'x-user:'}", []string{"spec.identity.userHeader", "should match"}},
		{"list bound", "  identity: {apiKeyHeaders: []}", []string{"spec.identity.apiKeyHeaders", "should have at least 1 items"}},
		{"list-map key", "  rateLimits: {perModel: {overrides: [{model: m, requests: 1}, {model: m, requests: 2}]}}",
			[]string{"spec.rateLimits.perModel.overrides[1]", "Duplicate value"}},
		{"required", "  timeouts: {request: {models: [{model: m}]}}", []string{"spec.timeouts.request.models[0].total", "Required value"}},
		{"CEL rule on a defaulted field", "  rateLimits: {perModel: {requests: 1, unknownModel: {chargeAs: m}}}",
			[]string{"spec.rateLimits.perModel.unknownModel", "set chargeAs exactly when action is Charge"}},
		{"CEL rule with a field path", "  fairQueuing: {bounds: {maxQueueDepthPerTenant: 100, maxTotalQueued: 99}}",
			[]string{"spec.fairQueuing.bounds.maxTotalQueued", "maxTotalQueued must be at least maxQueueDepthPerTenant"}},
		{"null for a required list", "  backends: null", []string{"spec.backends: Required value"}},
		{"duration the Go types cannot hold", "  fairQueuing: {bounds: {maxWait: 1d}}",
			[]string{"spec.fairQueuing.bounds.maxWait", "maxWait: Invalid value: \"1d\": must be a duration such as 5s"}},
		{"URL with credentials", "  backends: [{name: a, url: 'https://user:secret@a.example.com/v1'}]",
			[]string{"spec.backends[0].url", "url must not hold credentials"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := base
			if strings.HasPrefix(tc.spec, "  backends:") {
				doc = strings.Replace(base, "  backends: [{name: b, url: 'http://b'}]\n", "", 1)
			}
			_, _, err := DecodePolicy([]byte(doc + tc.spec + "\n"))
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("DecodePolicy() = %v, want the API server's refusal", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret@") {
				t.Errorf("the error echoes the URL's password: %v", err)
			}
		})
	}
	// The defaults the API server fills make a minimal policy valid.
	if _, _, err := DecodePolicy([]byte(base)); err != nil {
		t.Fatalf("a minimal policy: %v", err)
	}
}
