package render

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

func renderParsed(t *testing.T, p *fqv1alpha1.FairQueuePolicy) (*Rendered, *config.Config) {
	t.Helper()
	r, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	c, err := config.Parse(r.Data)
	if err != nil {
		t.Fatalf("the rendered config does not parse: %v", err)
	}
	return r, c
}

func tokenLimit(tokens int64) *fqv1alpha1.TokenLimit {
	return &fqv1alpha1.TokenLimit{Tokens: tokens}
}

// TestRenderDeferredAdmissionOffKeepsBytes checks that a policy with deferred
// admission off renders exactly what it rendered before the mode existed,
// whatever it stages in the off block, and that cost Requests renders
// nothing: every existing ConfigMap keeps its bytes and hash.
func TestRenderDeferredAdmissionOffKeepsBytes(t *testing.T) {
	before, _ := renderParsed(t, unitPolicy())
	staged := unitPolicy()
	staged.Spec.FairQueuing.Cost = fqv1alpha1.FairQueuingCostRequests
	staged.Spec.DeferredAdmission = fqv1alpha1.DeferredAdmission{
		TokenLimits: fqv1alpha1.TokenLimits{PerAPIKey: tokenLimit(1000)},
		Bounds:      fqv1alpha1.DeferredAdmissionBounds{MaxHeld: 4},
	}
	after, c := renderParsed(t, staged)
	if !bytes.Equal(before.Data, after.Data) || before.Hash != after.Hash {
		t.Errorf("staging a disabled deferredAdmission or cost Requests changed the rendered bytes:\n%s\nvs\n%s", before.Data, after.Data)
	}
	if c.DeferredAdmission != nil || c.FairQueuing.Cost != "" {
		t.Errorf("rendered deferredAdmission %+v, cost %q; want neither", c.DeferredAdmission, c.FairQueuing.Cost)
	}
	for _, key := range []string{`"deferredAdmission"`, `"cost"`} {
		if bytes.Contains(after.Data, []byte(key)) {
			t.Errorf("the rendered config holds %s while it is off", key)
		}
	}
}

func TestRenderDeferredAdmission(t *testing.T) {
	off := false
	tests := []struct {
		name string
		spec fqv1alpha1.DeferredAdmission
		want *config.DeferredAdmission
	}{
		{
			name: "defaults filled without an API server",
			spec: fqv1alpha1.DeferredAdmission{
				Enabled: true,
				TokenLimits: fqv1alpha1.TokenLimits{
					PerAPIKey: tokenLimit(20000),
					PerModel: &fqv1alpha1.ModelTokenLimit{
						Tokens: 100000,
						Overrides: []fqv1alpha1.ModelTokenLimitOverride{
							{Model: "small", TokenLimit: fqv1alpha1.TokenLimit{Tokens: 500000, TokenBucket: fqv1alpha1.TokenBucket{Burst: 600000}}},
							{Model: "big", TokenLimit: fqv1alpha1.TokenLimit{Tokens: 30000, TokenBucket: fqv1alpha1.TokenBucket{Period: "1h"}}},
						},
					},
				},
			},
			want: &config.DeferredAdmission{
				TokenLimits: config.TokenLimits{
					PerAPIKey: &config.Limit{Tokens: 20000, Period: config.Duration{Duration: time.Minute}, Burst: 20000},
					PerModel: &config.ModelLimits{
						Default: &config.Limit{Tokens: 100000, Period: config.Duration{Duration: time.Minute}, Burst: 100000},
						Overrides: []config.ModelOverride{
							{Model: "big", Limit: config.Limit{Tokens: 30000, Period: config.Duration{Duration: time.Hour}, Burst: 30000}},
							{Model: "small", Limit: config.Limit{Tokens: 500000, Period: config.Duration{Duration: time.Minute}, Burst: 600000}},
						},
					},
				},
				Estimation: config.TokenEstimation{DefaultMaxTokens: config.DefaultMaxTokensReserved, IncludeUsage: true},
				Bounds:     config.DefaultDeferredBounds(),
			},
		},
		{
			name: "every field set, overrides only, no usage injection",
			spec: fqv1alpha1.DeferredAdmission{
				Enabled: true,
				TokenLimits: fqv1alpha1.TokenLimits{
					PerUser: &fqv1alpha1.TokenLimit{Tokens: 10, TokenBucket: fqv1alpha1.TokenBucket{Period: "1s", Burst: 50}},
					PerTeam: tokenLimit(70),
					PerModel: &fqv1alpha1.ModelTokenLimit{
						Overrides: []fqv1alpha1.ModelTokenLimitOverride{{Model: "m", TokenLimit: fqv1alpha1.TokenLimit{Tokens: 5}}},
					},
				},
				Estimation: fqv1alpha1.TokenEstimation{DefaultMaxTokens: 256, IncludeUsage: &off},
				Bounds:     fqv1alpha1.DeferredAdmissionBounds{MaxHeld: 10, MaxHeldPerTenant: 2, MaxWait: fqv1alpha1.Duration("1m")},
			},
			want: &config.DeferredAdmission{
				TokenLimits: config.TokenLimits{
					PerUser: &config.Limit{Tokens: 10, Period: config.Duration{Duration: time.Second}, Burst: 50},
					PerTeam: &config.Limit{Tokens: 70, Period: config.Duration{Duration: time.Minute}, Burst: 70},
					PerModel: &config.ModelLimits{Overrides: []config.ModelOverride{
						{Model: "m", Limit: config.Limit{Tokens: 5, Period: config.Duration{Duration: time.Minute}, Burst: 5}},
					}},
				},
				Estimation: config.TokenEstimation{DefaultMaxTokens: 256, IncludeUsage: false},
				Bounds:     config.DeferredBounds{MaxHeld: 10, MaxHeldPerTenant: 2, MaxWait: config.Duration{Duration: time.Minute}},
			},
		},
		{
			name: "on without token limits (token-weighted fairness only)",
			spec: fqv1alpha1.DeferredAdmission{Enabled: true},
			want: &config.DeferredAdmission{
				Estimation: config.DefaultTokenEstimation(),
				Bounds:     config.DefaultDeferredBounds(),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := unitPolicy()
			p.Spec.DeferredAdmission = tt.spec
			_, c := renderParsed(t, p)
			if !reflect.DeepEqual(c.DeferredAdmission, tt.want) {
				t.Errorf("rendered deferredAdmission\n got %+v\nwant %+v", c.DeferredAdmission, tt.want)
			}
		})
	}
}

func TestRenderCost(t *testing.T) {
	tests := []struct {
		name      string
		fqEnabled bool
		cost      fqv1alpha1.FairQueuingCost
		want      config.Cost
	}{
		{"tokens while fair queuing is on", true, fqv1alpha1.FairQueuingCostTokens, config.CostTokens},
		{"requests renders nothing", true, fqv1alpha1.FairQueuingCostRequests, ""},
		{"unset renders nothing", true, "", ""},
		{"tokens staged while fair queuing is off", false, fqv1alpha1.FairQueuingCostTokens, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := unitPolicy()
			p.Spec.FairQueuing.Enabled = tt.fqEnabled
			p.Spec.FairQueuing.Cost = tt.cost
			p.Spec.DeferredAdmission.Enabled = true
			_, c := renderParsed(t, p)
			if c.FairQueuing.Cost != tt.want {
				t.Errorf("rendered cost %q, want %q", c.FairQueuing.Cost, tt.want)
			}
		})
	}
}
