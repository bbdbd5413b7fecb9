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
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// overridesYAML returns n distinct per-model token overrides in flow style.
func overridesYAML(n int) string {
	entries := make([]string, n)
	for i := range entries {
		entries[i] = fmt.Sprintf("{model: m%d, tokens: 1}", i)
	}
	return "[" + strings.Join(entries, ", ") + "]"
}

// TestDeferredAdmissionValidation checks the rules of spec.deferredAdmission
// and fairQueuing.cost on the API server: each invalid object is refused
// with a message naming the field and what to fix, and the valid objects
// next to each rule's boundary are accepted.
func TestDeferredAdmissionValidation(t *testing.T) {
	ns := newNamespace(t)
	rejects := []specCase{
		{name: "cost Tokens without deferredAdmission", spec: "fairQueuing: {enabled: true, cost: Tokens}",
			want: []string{"spec.fairQueuing.cost", "fairQueuing.cost Tokens needs deferredAdmission.enabled: token-weighted fairness charges the reservation that deferred admission estimates"}},
		{name: "cost Tokens with deferredAdmission staged but off", spec: "fairQueuing: {enabled: true, cost: Tokens}\ndeferredAdmission: {enabled: false, tokenLimits: {perUser: {tokens: 1000}}}",
			want: []string{"spec.fairQueuing.cost", "fairQueuing.cost Tokens needs deferredAdmission.enabled"}},
		{name: "cost Tokens staged while fair queuing is off, deferredAdmission off", spec: "fairQueuing: {cost: Tokens}",
			want: []string{"spec.fairQueuing.cost", "fairQueuing.cost Tokens needs deferredAdmission.enabled"}},
		{name: "unknown cost", spec: "fairQueuing: {cost: Bytes}",
			want: []string{"spec.fairQueuing.cost", "Unsupported value", `"Requests"`, `"Tokens"`}},
		{name: "zero tokens", spec: "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 0}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perAPIKey.tokens", "should be greater than or equal to 1"}},
		{name: "negative tokens", spec: "deferredAdmission: {enabled: true, tokenLimits: {perUser: {tokens: -5}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perUser.tokens", "should be greater than or equal to 1"}},
		{name: "token limit without tokens", spec: "deferredAdmission: {enabled: true, tokenLimits: {perTeam: {period: 1m}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perTeam.tokens", "Required value"}},
		{name: "zero burst", spec: "deferredAdmission: {enabled: true, tokenLimits: {perTeam: {tokens: 10, burst: 0}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perTeam.burst", "should be greater than or equal to 1"}},
		{name: "period not a duration", spec: "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 10, period: 1 minute}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perAPIKey.period", ": must be a duration such as 5s, 1m30s or 500ms"}},
		{name: "period above 24h", spec: "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 10, period: 25h}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perAPIKey.period", ": must be a positive duration of at most 24h"}},
		{name: "perModel without tokens or overrides", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {period: 1m}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel", "perModel needs tokens (a token limit for every model), overrides (token limits for named models), or both"}},
		{name: "perModel with empty overrides only", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: []}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel", "perModel needs tokens"}},
		{name: "perModel burst without tokens", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {burst: 5, overrides: [{model: m, tokens: 1}]}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel", "perModel.burst is set without perModel.tokens"}},
		{name: "duplicate model override", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: m, tokens: 1}, {model: m, tokens: 2}]}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel.overrides[1]", "Duplicate value", `"m"`}},
		{name: "override without model", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{tokens: 1}]}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel.overrides[0].model", "Required value"}},
		{name: "more than 64 overrides", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: " + overridesYAML(65) + "}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perModel.overrides", "must have at most 64 items"}},
		{name: "defaultMaxTokens zero", spec: "deferredAdmission: {enabled: true, estimation: {defaultMaxTokens: 0}}",
			want: []string{"spec.deferredAdmission.estimation.defaultMaxTokens", "should be greater than or equal to 1"}},
		{name: "defaultMaxTokens above 16777216", spec: "deferredAdmission: {enabled: true, estimation: {defaultMaxTokens: 16777217}}",
			want: []string{"spec.deferredAdmission.estimation.defaultMaxTokens", "should be less than or equal to 16777216"}},
		{name: "maxHeldPerTenant above maxHeld", spec: "deferredAdmission: {enabled: true, bounds: {maxHeld: 8, maxHeldPerTenant: 9}}",
			want: []string{"spec.deferredAdmission.bounds.maxHeldPerTenant", "maxHeldPerTenant must be at most maxHeld: one tenant cannot hold more requests than all tenants together"}},
		{name: "maxHeld below the default maxHeldPerTenant", spec: "deferredAdmission: {enabled: true, bounds: {maxHeld: 16}}",
			want: []string{"spec.deferredAdmission.bounds.maxHeldPerTenant", "maxHeldPerTenant must be at most maxHeld"}},
		{name: "maxHeld zero", spec: "deferredAdmission: {enabled: true, bounds: {maxHeld: 0}}",
			want: []string{"spec.deferredAdmission.bounds.maxHeld", "should be greater than or equal to 1"}},
		{name: "maxWait zero", spec: "deferredAdmission: {enabled: true, bounds: {maxWait: 0s}}",
			want: []string{"spec.deferredAdmission.bounds.maxWait", "maxWait must be a positive duration of at most 10m, such as 10s"}},
		{name: "maxWait above 10m", spec: "deferredAdmission: {enabled: true, bounds: {maxWait: 10m1s}}",
			want: []string{"spec.deferredAdmission.bounds.maxWait", "maxWait must be a positive duration of at most 10m"}},
		{name: "maxWait too large for a duration", spec: "deferredAdmission: {enabled: true, bounds: {maxWait: 9999999999999h}}",
			want: []string{"spec.deferredAdmission.bounds.maxWait", "maxWait must be a positive duration of at most 10m"}},
		{name: "maxWait not a duration", spec: "deferredAdmission: {enabled: true, bounds: {maxWait: '10'}}",
			want: []string{"spec.deferredAdmission.bounds.maxWait", ": must be a duration such as 5s"}},
		{name: "invalid token limits are refused while off too", spec: "deferredAdmission: {tokenLimits: {perAPIKey: {tokens: 0}}}",
			want: []string{"spec.deferredAdmission.tokenLimits.perAPIKey.tokens", "should be greater than or equal to 1"}},
	}
	expectRejected(t, ns, "tokens", rejects)

	accepts := []specCase{
		{name: "both modes with token-weighted fairness", spec: "fairQueuing: {enabled: true, cost: Tokens}\ndeferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 20000}}}"},
		{name: "token-weighted fairness without token limits", spec: "fairQueuing: {enabled: true, cost: Tokens}\ndeferredAdmission: {enabled: true}"},
		{name: "cost Tokens staged while fair queuing is off", spec: "fairQueuing: {enabled: false, cost: Tokens}\ndeferredAdmission: {enabled: true}"},
		{name: "cost Requests without deferredAdmission", spec: "fairQueuing: {enabled: true, cost: Requests}"},
		{name: "deferredAdmission without fair queuing", spec: "deferredAdmission: {enabled: true, tokenLimits: {perUser: {tokens: 1000, period: 1h, burst: 5000}}}"},
		{name: "token limits staged while off", spec: "deferredAdmission: {enabled: false, tokenLimits: {perTeam: {tokens: 1000}}}"},
		{name: "burst below tokens", spec: "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 100000, burst: 1}}}"},
		{name: "largest token limit", spec: "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 1000000000000, period: 24h0m0s, burst: 1000000000000}}}"},
		{name: "perModel overrides only", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {overrides: [{model: meta-llama/Llama-3.1-70B-Instruct, tokens: 30000}]}}}"},
		{name: "perModel default and 64 overrides", spec: "deferredAdmission: {enabled: true, tokenLimits: {perModel: {tokens: 100000, burst: 200000, overrides: " + overridesYAML(64) + "}}}"},
		{name: "equal hold bounds", spec: "deferredAdmission: {enabled: true, bounds: {maxHeld: 5, maxHeldPerTenant: 5}}"},
		{name: "largest hold bounds", spec: "deferredAdmission: {enabled: true, bounds: {maxHeld: 1048576, maxHeldPerTenant: 65536, maxWait: 10m}}"},
		{name: "usage injection off", spec: "deferredAdmission: {enabled: true, estimation: {includeUsage: false, defaultMaxTokens: 16777216}}"},
	}
	expectAccepted(t, ns, "tokens", accepts)

	t.Run("defaults", func(t *testing.T) {
		obj := policyFromSpec(t, ns, "tokens-defaults", "deferredAdmission: {enabled: true, tokenLimits: {perAPIKey: {tokens: 500}, perModel: {tokens: 9, overrides: [{model: m, tokens: 3}]}}}\n"+backendYAML)
		if err := env.Client.Create(testContext(t), obj); err != nil {
			t.Fatal(err)
		}
		var got fqv1alpha1.FairQueuePolicy
		if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(obj), &got); err != nil {
			t.Fatal(err)
		}
		minute := fqv1alpha1.Duration("1m")
		include := true
		want := fqv1alpha1.DeferredAdmission{
			Enabled: true,
			TokenLimits: fqv1alpha1.TokenLimits{
				PerAPIKey: &fqv1alpha1.TokenLimit{Tokens: 500, TokenBucket: fqv1alpha1.TokenBucket{Period: minute}},
				PerModel: &fqv1alpha1.ModelTokenLimit{Tokens: 9, TokenBucket: fqv1alpha1.TokenBucket{Period: minute}, Overrides: []fqv1alpha1.ModelTokenLimitOverride{
					{Model: "m", TokenLimit: fqv1alpha1.TokenLimit{Tokens: 3, TokenBucket: fqv1alpha1.TokenBucket{Period: minute}}},
				}},
			},
			Estimation: fqv1alpha1.TokenEstimation{DefaultMaxTokens: 1024, IncludeUsage: &include},
			Bounds:     fqv1alpha1.DeferredAdmissionBounds{MaxHeld: 1024, MaxHeldPerTenant: 32, MaxWait: fqv1alpha1.Duration("10s")},
		}
		if !reflect.DeepEqual(got.Spec.DeferredAdmission, want) {
			t.Errorf("defaulted deferredAdmission =\n%+v\nwant\n%+v", got.Spec.DeferredAdmission, want)
		}
		if got.Spec.FairQueuing.Cost != fqv1alpha1.FairQueuingCostRequests {
			t.Errorf("defaulted fairQueuing.cost = %q, want Requests", got.Spec.FairQueuing.Cost)
		}
	})

	// includeUsage false must survive a round trip through the Go types: a
	// plain bool with omitempty would drop it and the server would default
	// it back to true.
	t.Run("includeUsage false round-trips through the Go types", func(t *testing.T) {
		off := false
		p := &fqv1alpha1.FairQueuePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tokens-include-usage-off"},
			Spec: fqv1alpha1.FairQueuePolicySpec{
				DeferredAdmission: fqv1alpha1.DeferredAdmission{Enabled: true, Estimation: fqv1alpha1.TokenEstimation{IncludeUsage: &off}},
				Backends:          []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
			},
		}
		if err := env.Client.Create(testContext(t), p); err != nil {
			t.Fatal(err)
		}
		var got fqv1alpha1.FairQueuePolicy
		if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		if iu := got.Spec.DeferredAdmission.Estimation.IncludeUsage; iu == nil || *iu {
			t.Error("includeUsage false came back true")
		}
	})
}
