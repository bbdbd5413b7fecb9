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
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

// bandsYAML returns n distinct priority bands in flow style, each below the
// first with the given minShare.
func bandsYAML(n int, minShare string) string {
	entries := make([]string, n)
	for i := range entries {
		entries[i] = fmt.Sprintf("{name: band-%d}", i)
		if i > 0 && minShare != "" {
			entries[i] = fmt.Sprintf("{name: band-%d, minShare: %s}", i, minShare)
		}
	}
	return "[" + strings.Join(entries, ", ") + "]"
}

// threeBands is the bands of SPEC 7's example.
const threeBands = "priorityBands: [{name: interactive}, {name: standard}, {name: batch, minShare: 0.05}]"

// TestPriorityBandsValidation checks the rules of the priority-band fields
// on the API server, and through expectRejected the same refusals by
// `dataplane --policy`: each invalid policy is refused with a message naming
// the field and what to fix, and the valid ones next to each rule's boundary
// are accepted by both.
func TestPriorityBandsValidation(t *testing.T) {
	ns := newNamespace(t)
	rejects := []specCase{
		{name: "duplicate band names", spec: "fairQueuing: {priorityBands: [{name: gold}, {name: gold}]}",
			want: []string{"spec.fairQueuing.priorityBands[1]", "Duplicate value"}},
		{name: "more than 8 bands", spec: "fairQueuing: {priorityBands: " + bandsYAML(9, "") + "}",
			want: []string{"spec.fairQueuing.priorityBands", "must have at most 8 items"}},
		{name: "an empty list of bands", spec: "fairQueuing: {priorityBands: []}",
			want: []string{"spec.fairQueuing.priorityBands", "should have at least 1 items"}},
		{name: "band without a name", spec: "fairQueuing: {priorityBands: [{minShare: 0.1}]}",
			want: []string{"spec.fairQueuing.priorityBands[0].name", "Required value"}},
		{name: "band name not a DNS label", spec: "fairQueuing: {priorityBands: [{name: Gold_Tier}]}",
			want: []string{"spec.fairQueuing.priorityBands[0].name", "should match"}},
		{name: "band name longer than 63", spec: "fairQueuing: {priorityBands: [{name: " + strings.Repeat("b", 64) + "}]}",
			want: []string{"spec.fairQueuing.priorityBands[0].name", "may not be more than 63 bytes"}},
		{name: "negative minShare", spec: "fairQueuing: {priorityBands: [{name: a}, {name: b, minShare: -0.1}]}",
			want: []string{"spec.fairQueuing.priorityBands[1].minShare", "should be greater than or equal to 0"}},
		{name: "minShare of 1", spec: "fairQueuing: {priorityBands: [{name: a}, {name: b, minShare: 1}]}",
			want: []string{"spec.fairQueuing.priorityBands[1].minShare", "should be less than 1"}},
		{name: "minShare as a percentage string", spec: "fairQueuing: {priorityBands: [{name: a}, {name: b, minShare: 5%}]}",
			want: []string{"spec.fairQueuing.priorityBands[1].minShare", "must be of type number"}},
		{name: "minShare summing to 1", spec: "fairQueuing: {priorityBands: [{name: a}, {name: b, minShare: 0.5}, {name: c, minShare: 0.5}]}",
			want: []string{"spec.fairQueuing.priorityBands", "the minShare of all priorityBands must sum to less than 1"}},
		{name: "minShare of 8 bands summing above 1", spec: "fairQueuing: {priorityBands: " + bandsYAML(8, "0.15") + "}",
			want: []string{"spec.fairQueuing.priorityBands", "must sum to less than 1"}},
		{name: "minShare on the highest band", spec: "fairQueuing: {priorityBands: [{name: a, minShare: 0.1}, {name: b}]}",
			want: []string{"spec.fairQueuing.priorityBands", "the highest band (the first of priorityBands) must not set minShare"}},
		{name: "defaultBand without priorityBands", spec: "fairQueuing: {defaultBand: standard}",
			want: []string{"spec.fairQueuing.defaultBand", "defaultBand is set but priorityBands is not"}},
		{name: "defaultBand not a band", spec: "fairQueuing: {" + threeBands + ", defaultBand: gold}",
			want: []string{"spec.fairQueuing.defaultBand", "defaultBand names no band of priorityBands"}},
		{name: "requestBandHeader without priorityBands", spec: "fairQueuing: {requestBandHeader: x-fair-queue-band}",
			want: []string{"spec.fairQueuing.requestBandHeader", "requestBandHeader is set but priorityBands is not"}},
		{name: "requestBandHeader not a header name", spec: "fairQueuing: {" + threeBands + ", requestBandHeader: 'x band'}",
			want: []string{"spec.fairQueuing.requestBandHeader", "should match"}},
		{name: "requestBandHeader Authorization", spec: "fairQueuing: {" + threeBands + ", requestBandHeader: authorization}",
			want: []string{"spec.fairQueuing.requestBandHeader", "must not be Authorization or one of identity.apiKeyHeaders"}},
		{name: "requestBandHeader a default API key header", spec: "fairQueuing: {" + threeBands + ", requestBandHeader: X-API-Key}",
			want: []string{"spec.fairQueuing.requestBandHeader", "must not be Authorization or one of identity.apiKeyHeaders"}},
		{name: "requestBandHeader a configured API key header", spec: "identity: {apiKeyHeaders: [x-key]}\nfairQueuing: {" + threeBands + ", requestBandHeader: x-key}",
			want: []string{"spec.fairQueuing.requestBandHeader", "it would read a credential as a band name"}},
		{name: "weights band without priorityBands", spec: "fairQueuing: {weights: [{identity: team-a, weight: 2, band: batch}]}",
			want: []string{"spec.fairQueuing.weights", "a weights entry names a band but priorityBands is not set"}},
		{name: "weights band not a band", spec: "fairQueuing: {" + threeBands + ", weights: [{identity: team-a, weight: 2}, {identity: team-b, weight: 2, band: gold}]}",
			want: []string{"spec.fairQueuing.weights", "a weights entry names a band that priorityBands does not list"}},
		{name: "weights band not a DNS label", spec: "fairQueuing: {" + threeBands + ", weights: [{identity: team-a, weight: 2, band: Batch}]}",
			want: []string{"spec.fairQueuing.weights[0].band", "should match"}},
		{name: "weightsFrom band without priorityBands", spec: "fairQueuing: {weightsFrom: [{secretRef: {name: premium-keys}, band: interactive}]}",
			want: []string{"spec.fairQueuing.weightsFrom", "a weightsFrom entry names a band but priorityBands is not set"}},
		{name: "weightsFrom band not a band", spec: "fairQueuing: {" + threeBands + ", weightsFrom: [{secretRef: {name: ids}}, {secretRef: {name: premium-keys}, band: premium}]}",
			want: []string{"spec.fairQueuing.weightsFrom", "a weightsFrom entry names a band that priorityBands does not list"}},
		{name: "band rules hold while fair queuing is off", spec: "fairQueuing: {enabled: false, defaultBand: standard}",
			want: []string{"spec.fairQueuing.defaultBand", "defaultBand is set but priorityBands is not"}},
	}
	expectRejected(t, ns, "bands", rejects)

	accepts := []specCase{
		{name: "SPEC 7's example", spec: "fairQueuing: {enabled: true, " + threeBands + ", defaultBand: standard, requestBandHeader: x-fair-queue-band, " +
			"weightsFrom: [{secretRef: {name: premium-keys}, band: interactive}, {secretRef: {name: ids}}], weights: [{identity: '${ACME_KEY}', weight: 3}, {identity: team-research, weight: 2, band: interactive}]}"},
		{name: "one band", spec: "fairQueuing: {enabled: true, priorityBands: [{name: all}]}"},
		{name: "8 bands sharing 98% of grants", spec: "fairQueuing: {enabled: true, priorityBands: " + bandsYAML(8, "0.14") + "}"},
		{name: "minShare just below 1", spec: "fairQueuing: {enabled: true, priorityBands: [{name: a}, {name: b, minShare: 0.999}]}"},
		{name: "minShare 0 written out, as an integer", spec: "fairQueuing: {enabled: true, priorityBands: [{name: a, minShare: 0}, {name: b, minShare: 0}]}"},
		{name: "bands without defaultBand", spec: "fairQueuing: {enabled: true, " + threeBands + "}"},
		{name: "a band name of 63 characters", spec: "fairQueuing: {enabled: true, priorityBands: [{name: " + strings.Repeat("b", 63) + "}]}"},
		{name: "bands staged while fair queuing is off", spec: "fairQueuing: {enabled: false, " + threeBands + ", defaultBand: batch, weights: [{identity: team-a, weight: 2, band: interactive}]}"},
		{name: "requestBandHeader beside custom API key headers", spec: "identity: {apiKeyHeaders: [x-key]}\nfairQueuing: {enabled: true, " + threeBands + ", requestBandHeader: x-api-key}"},
	}
	expectAccepted(t, ns, "bands", accepts)
}

// TestPriorityBandsRoundTrip checks that a minShare written as 0.05 reads
// back as 0.05 through the Go types, as kubectl get -o yaml shows it (see
// TestKubectlApplyAndGet), and that the band fields survive the trip.
func TestPriorityBandsRoundTrip(t *testing.T) {
	ns := newNamespace(t)
	p := &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bands-round-trip"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled:           true,
				PriorityBands:     []fqv1alpha1.PriorityBand{{Name: "interactive"}, {Name: "batch", MinShare: 0.05}},
				RequestBandHeader: "x-fair-queue-band",
				Weights:           []fqv1alpha1.TenantWeight{{Identity: "team-a", Weight: 2, Band: "interactive"}},
				WeightsFrom:       []fqv1alpha1.WeightsSource{{SecretRef: fqv1alpha1.LocalSecretReference{Name: "premium-keys"}, Band: "interactive"}},
			},
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
	if err := env.Client.Create(testContext(t), p); err != nil {
		t.Fatal(err)
	}
	var got fqv1alpha1.FairQueuePolicy
	if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	fq := got.Spec.FairQueuing
	if len(fq.PriorityBands) != 2 || fq.PriorityBands[1].MinShare != 0.05 || fq.Weights[0].Band != "interactive" ||
		fq.WeightsFrom[0].Band != "interactive" || fq.RequestBandHeader != "x-fair-queue-band" {
		t.Errorf("the band fields did not survive a round trip: %+v", fq)
	}
	if fq.DefaultBand != "" || fq.EffectiveDefaultBand() != "batch" {
		t.Errorf("defaultBand = %q (effective %q), want unset and the lowest band", fq.DefaultBand, fq.EffectiveDefaultBand())
	}
}

// TestMaxBandsAgree keeps the CRD's bound on priorityBands equal to the
// bands the data plane's config and scheduler hold.
func TestMaxBandsAgree(t *testing.T) {
	s := loadCRDSchema(t).Properties["spec"].Properties["fairQueuing"].Properties["priorityBands"]
	if s.MaxItems == nil || *s.MaxItems != int64(fairqueue.MaxBands) || config.MaxBands != fairqueue.MaxBands {
		t.Errorf("priorityBands maxItems = %v, config.MaxBands = %d, fairqueue.MaxBands = %d: they must agree", s.MaxItems, config.MaxBands, fairqueue.MaxBands)
	}
}
