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
)

func TestDeferredAdmissionBoundsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   DeferredAdmissionBounds
		want DeferredAdmissionBounds
	}{
		{"empty gets the documented defaults", DeferredAdmissionBounds{},
			DeferredAdmissionBounds{MaxHeld: 1024, MaxHeldPerTenant: 32, MaxWait: dur(10 * time.Second)}},
		{"set bounds are kept", DeferredAdmissionBounds{MaxHeld: 7, MaxHeldPerTenant: 3, MaxWait: dur(time.Minute)},
			DeferredAdmissionBounds{MaxHeld: 7, MaxHeldPerTenant: 3, MaxWait: dur(time.Minute)}},
		{"partly set", DeferredAdmissionBounds{MaxHeldPerTenant: 4},
			DeferredAdmissionBounds{MaxHeld: 1024, MaxHeldPerTenant: 4, MaxWait: dur(10 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.WithDefaults(); got != tt.want {
				t.Errorf("WithDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTokenLimitEffectiveValues(t *testing.T) {
	tests := []struct {
		name       string
		in         TokenLimit
		wantPeriod time.Duration
		wantBurst  int64
	}{
		{"period defaults to a minute, burst to tokens", TokenLimit{Tokens: 5000}, time.Minute, 5000},
		{"set values are kept", TokenLimit{Tokens: 5000, Period: dur(time.Hour), Burst: 100}, time.Hour, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.EffectivePeriod(); got != tt.wantPeriod {
				t.Errorf("EffectivePeriod() = %v, want %v", got, tt.wantPeriod)
			}
			if got := tt.in.EffectiveBurst(); got != tt.wantBurst {
				t.Errorf("EffectiveBurst() = %d, want %d", got, tt.wantBurst)
			}
		})
	}
}

func TestTokenEstimationEffectiveValues(t *testing.T) {
	off, on := false, true
	tests := []struct {
		name      string
		in        TokenEstimation
		wantMax   int64
		wantUsage bool
	}{
		{"unset gets the defaults", TokenEstimation{}, 1024, true},
		{"includeUsage false is kept", TokenEstimation{DefaultMaxTokens: 64, IncludeUsage: &off}, 64, false},
		{"includeUsage true is kept", TokenEstimation{IncludeUsage: &on}, 1024, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.EffectiveDefaultMaxTokens(); got != tt.wantMax {
				t.Errorf("EffectiveDefaultMaxTokens() = %d, want %d", got, tt.wantMax)
			}
			if got := tt.in.EffectiveIncludeUsage(); got != tt.wantUsage {
				t.Errorf("EffectiveIncludeUsage() = %v, want %v", got, tt.wantUsage)
			}
		})
	}
}
