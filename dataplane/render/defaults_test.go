package render

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

func dur(d time.Duration) fqv1alpha1.Duration { return fqv1alpha1.Duration(d.String()) }

func rateLimit(requests int64, period time.Duration, burst int64) *fqv1alpha1.RateLimit {
	l := &fqv1alpha1.RateLimit{Requests: requests, RequestBucket: fqv1alpha1.RequestBucket{Burst: burst}}
	if period > 0 {
		l.Period = dur(period)
	}
	return l
}

func tokenLimitOf(tokens int64, period time.Duration, burst int64) *fqv1alpha1.TokenLimit {
	l := &fqv1alpha1.TokenLimit{Tokens: tokens, TokenBucket: fqv1alpha1.TokenBucket{Burst: burst}}
	if period > 0 {
		l.Period = dur(period)
	}
	return l
}

func limit(requests, tokens int64, period time.Duration, burst int64) *config.Limit {
	return &config.Limit{Requests: requests, Tokens: tokens, Period: config.Duration{Duration: period}, Burst: burst}
}

// TestRenderFillsDefaults checks the defaults Render applies to a policy
// that did not pass through the API server (a policy file), the ones the
// CRD's markers apply otherwise: request and token buckets alike take their
// unit's period and a burst of their rate, and each unset bound its
// default, while set values are kept.
func TestRenderFillsDefaults(t *testing.T) {
	tests := []struct {
		name string
		spec func(s *fqv1alpha1.FairQueuePolicySpec)
		got  func(c *config.Config) any
		want any
	}{
		{
			name: "a request limit takes a period of 1s and a burst of its requests",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) { s.RateLimits.PerUser = rateLimit(10, 0, 0) },
			got:  func(c *config.Config) any { return c.RateLimits.PerUser },
			want: limit(10, 0, time.Second, 10),
		},
		{
			name: "a request limit keeps its period and a burst below its requests",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) { s.RateLimits.Global = rateLimit(10, time.Minute, 1) },
			got:  func(c *config.Config) any { return c.RateLimits.Global },
			want: limit(10, 0, time.Minute, 1),
		},
		{
			name: "a token limit takes a period of 1m and a burst of its tokens",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.DeferredAdmission.Enabled = true
				s.DeferredAdmission.TokenLimits.PerTeam = tokenLimitOf(5000, 0, 0)
			},
			got:  func(c *config.Config) any { return c.DeferredAdmission.TokenLimits.PerTeam },
			want: limit(0, 5000, time.Minute, 5000),
		},
		{
			name: "a token limit keeps its period and burst",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.DeferredAdmission.Enabled = true
				s.DeferredAdmission.TokenLimits.PerAPIKey = tokenLimitOf(5000, time.Hour, 100)
			},
			got:  func(c *config.Config) any { return c.DeferredAdmission.TokenLimits.PerAPIKey },
			want: limit(0, 5000, time.Hour, 100),
		},
		{
			name: "per-model requests: the default bucket and each override are filled alike",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.RateLimits.PerModel = &fqv1alpha1.ModelRateLimit{Requests: 100}
				s.RateLimits.PerModel.Burst = 150
				s.RateLimits.PerModel.Overrides = []fqv1alpha1.ModelRateLimitOverride{{Model: "big", RateLimit: *rateLimit(2, time.Minute, 0)}}
			},
			got: func(c *config.Config) any { return c.RateLimits.PerModel },
			want: &config.ModelLimits{
				Default:   limit(100, 0, time.Second, 150),
				Overrides: []config.ModelOverride{{Model: "big", Limit: *limit(2, 0, time.Minute, 2)}},
			},
		},
		{
			name: "per-model tokens with overrides only limit only the overridden models",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.DeferredAdmission.Enabled = true
				s.DeferredAdmission.TokenLimits.PerModel = &fqv1alpha1.ModelTokenLimit{
					Overrides: []fqv1alpha1.ModelTokenLimitOverride{{Model: "big", TokenLimit: *tokenLimitOf(300, 0, 0)}},
				}
			},
			got:  func(c *config.Config) any { return c.DeferredAdmission.TokenLimits.PerModel },
			want: &config.ModelLimits{Overrides: []config.ModelOverride{{Model: "big", Limit: *limit(0, 300, time.Minute, 300)}}},
		},
		{
			name: "unset fair-queuing bounds take their defaults, set ones are kept",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.FairQueuing.Bounds = fqv1alpha1.FairQueuingBounds{MaxInFlight: 2}
			},
			got:  func(c *config.Config) any { return c.FairQueuing.Bounds },
			want: config.Bounds{MaxQueueDepthPerTenant: 32, MaxTotalQueued: 4096, MaxTenants: 1024, MaxInFlight: 2, MaxWait: config.Duration{Duration: 5 * time.Second}},
		},
		{
			name: "set fair-queuing bounds are kept",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.FairQueuing.Bounds = fqv1alpha1.FairQueuingBounds{MaxQueueDepthPerTenant: 4, MaxTotalQueued: 10, MaxTenants: 2, MaxInFlight: 1, MaxWait: dur(time.Second)}
			},
			got:  func(c *config.Config) any { return c.FairQueuing.Bounds },
			want: config.Bounds{MaxQueueDepthPerTenant: 4, MaxTotalQueued: 10, MaxTenants: 2, MaxInFlight: 1, MaxWait: config.Duration{Duration: time.Second}},
		},
		{
			name: "deferred admission: unset bounds and estimation take their defaults",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.DeferredAdmission.Enabled = true
				s.DeferredAdmission.Bounds.MaxHeldPerTenant = 4
			},
			got: func(c *config.Config) any { return *c.DeferredAdmission },
			want: config.DeferredAdmission{
				Estimation: config.TokenEstimation{DefaultMaxTokens: 1024, IncludeUsage: true},
				Bounds:     config.DeferredBounds{MaxHeld: 1024, MaxHeldPerTenant: 4, MaxWait: config.Duration{Duration: 10 * time.Second}},
			},
		},
		{
			name: "deferred admission: includeUsage false and a set defaultMaxTokens are kept",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.DeferredAdmission.Enabled = true
				s.DeferredAdmission.Estimation = fqv1alpha1.TokenEstimation{DefaultMaxTokens: 64, IncludeUsage: ptr.To(false)}
			},
			got:  func(c *config.Config) any { return c.DeferredAdmission.Estimation },
			want: config.TokenEstimation{DefaultMaxTokens: 64},
		},
		{
			name: "the request total takes 60s, a set one is kept",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {
				s.Timeouts.Request.Models = []fqv1alpha1.ModelRequestTimeout{{Model: "m", Total: dur(time.Minute)}}
			},
			got: func(c *config.Config) any { return c.Timeouts },
			want: config.Timeouts{RequestTotal: config.Duration{Duration: 60 * time.Second},
				Models: []config.ModelTimeout{{Model: "m", Total: config.Duration{Duration: time.Minute}}}},
		},
		{
			name: "identity, weights and backends take their defaults",
			spec: func(s *fqv1alpha1.FairQueuePolicySpec) {},
			got: func(c *config.Config) any {
				return []any{c.Identity.APIKeyHeaders, c.FairQueuing.TenantDimension, c.FairQueuing.DefaultWeight, c.Backends[0].Weight}
			},
			want: []any{[]string{"Authorization", "x-api-key"}, identity.DimensionUser, int32(1), int32(1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fqv1alpha1.FairQueuePolicy{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "defaults"},
				Spec:       fqv1alpha1.FairQueuePolicySpec{Backends: []fqv1alpha1.Backend{{Name: "b", URL: "http://b:8000"}}},
			}
			tt.spec(&p.Spec)
			_, c := renderParsed(t, p)
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rendered %+v, want %+v", got, tt.want)
			}
		})
	}
}
