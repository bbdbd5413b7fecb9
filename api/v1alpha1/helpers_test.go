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

package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func dur(d time.Duration) Duration { return Duration(d.String()) }

func TestHashKeySecretName(t *testing.T) {
	tests := []struct {
		name string
		ref  *LocalSecretReference
		want string
	}{
		{name: "derived from the policy name", ref: nil, want: "prod-hash-key"},
		{name: "empty reference is unset", ref: &LocalSecretReference{}, want: "prod-hash-key"},
		{name: "explicit reference", ref: &LocalSecretReference{Name: "shared-key"}, want: "shared-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Spec: FairQueuePolicySpec{HashKeySecretRef: tt.ref}}
			if got := p.HashKeySecretName(); got != tt.want {
				t.Errorf("HashKeySecretName() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBoundsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   FairQueuingBounds
		want FairQueuingBounds
	}{
		{
			name: "empty gets the SPEC defaults",
			in:   FairQueuingBounds{},
			want: FairQueuingBounds{MaxQueueDepthPerTenant: 32, MaxTotalQueued: 4096, MaxTenants: 1024, MaxInFlight: 8, MaxWait: dur(5 * time.Second)},
		},
		{
			name: "set bounds are kept",
			in:   FairQueuingBounds{MaxQueueDepthPerTenant: 4, MaxTotalQueued: 10, MaxTenants: 2, MaxInFlight: 1, MaxWait: dur(time.Second)},
			want: FairQueuingBounds{MaxQueueDepthPerTenant: 4, MaxTotalQueued: 10, MaxTenants: 2, MaxInFlight: 1, MaxWait: dur(time.Second)},
		},
		{
			name: "only unset bounds are filled",
			in:   FairQueuingBounds{MaxInFlight: 2},
			want: FairQueuingBounds{MaxQueueDepthPerTenant: 32, MaxTotalQueued: 4096, MaxTenants: 1024, MaxInFlight: 2, MaxWait: dur(5 * time.Second)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.WithDefaults(); got != tt.want {
				t.Errorf("WithDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRateLimitEffective(t *testing.T) {
	tests := []struct {
		name       string
		in         RateLimit
		wantBurst  int64
		wantPeriod time.Duration
	}{
		{name: "burst defaults to requests", in: RateLimit{Requests: 10}, wantBurst: 10, wantPeriod: time.Second},
		{name: "burst set", in: RateLimit{Requests: 10, Burst: 25, Period: dur(time.Minute)}, wantBurst: 25, wantPeriod: time.Minute},
		{name: "burst below requests smooths", in: RateLimit{Requests: 10, Burst: 1}, wantBurst: 1, wantPeriod: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.EffectiveBurst(); got != tt.wantBurst {
				t.Errorf("EffectiveBurst() = %d, want %d", got, tt.wantBurst)
			}
			if got := tt.in.EffectivePeriod(); got != tt.wantPeriod {
				t.Errorf("EffectivePeriod() = %v, want %v", got, tt.wantPeriod)
			}
		})
	}
}

func TestModelRateLimitFor(t *testing.T) {
	override := ModelRateLimitOverride{Model: "big", RateLimit: RateLimit{Requests: 2, Period: dur(time.Minute)}}
	tests := []struct {
		name   string
		in     ModelRateLimit
		model  string
		want   RateLimit
		wantOK bool
	}{
		{
			name:   "override wins",
			in:     ModelRateLimit{Requests: 100, Period: dur(time.Second), Overrides: []ModelRateLimitOverride{override}},
			model:  "big",
			want:   override.RateLimit,
			wantOK: true,
		},
		{
			name:   "other models get the default",
			in:     ModelRateLimit{Requests: 100, Period: dur(time.Second), Burst: 150, Overrides: []ModelRateLimitOverride{override}},
			model:  "small",
			want:   RateLimit{Requests: 100, Period: dur(time.Second), Burst: 150},
			wantOK: true,
		},
		{
			name:   "overrides only leave other models unlimited",
			in:     ModelRateLimit{Overrides: []ModelRateLimitOverride{override}},
			model:  "small",
			wantOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.in.For(tt.model)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("For(%q) = %+v, %v; want %+v, %v", tt.model, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRequestTimeouts(t *testing.T) {
	tests := []struct {
		name    string
		in      RequestTimeouts
		model   string
		wantFor time.Duration
	}{
		{name: "unset uses the 60s default", in: RequestTimeouts{}, model: "m", wantFor: time.Minute},
		{
			name:    "model entry wins for its model",
			in:      RequestTimeouts{Default: RequestTimeout{Total: dur(30 * time.Second)}, Models: []ModelRequestTimeout{{Model: "fast", Total: dur(5 * time.Second)}}},
			model:   "fast",
			wantFor: 5 * time.Second,
		},
		{
			name:    "other models use the default",
			in:      RequestTimeouts{Default: RequestTimeout{Total: dur(30 * time.Second)}, Models: []ModelRequestTimeout{{Model: "fast", Total: dur(5 * time.Second)}, {Model: "slow", Total: dur(10 * time.Minute)}}},
			model:   "slow-ish",
			wantFor: 30 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.For(tt.model); got != tt.wantFor {
				t.Errorf("For(%q) = %v, want %v", tt.model, got, tt.wantFor)
			}
		})
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	in := &FairQueuePolicy{Spec: FairQueuePolicySpec{
		FairQueuing: FairQueuing{Weights: []TenantWeight{{Identity: "a", Weight: 2}}},
		Backends:    []Backend{{Name: "a", URL: "http://a"}},
		RateLimits:  RateLimits{PerModel: &ModelRateLimit{Overrides: []ModelRateLimitOverride{{Model: "m"}}}},
	}}
	out := in.DeepCopy()
	out.Spec.FairQueuing.Weights[0].Weight = 9
	out.Spec.Backends[0].Name = "b"
	out.Spec.RateLimits.PerModel.Overrides[0].Model = "n"
	if in.Spec.FairQueuing.Weights[0].Weight != 2 || in.Spec.Backends[0].Name != "a" || in.Spec.RateLimits.PerModel.Overrides[0].Model != "m" {
		t.Fatalf("DeepCopy shares memory with the original: %+v", in.Spec)
	}
}
