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
	"time"
)

// HashKeySecretName returns the name of the Secret holding the policy's hash
// key: spec.hashKeySecretRef when set, "<policy name>-hash-key" otherwise.
func (p *FairQueuePolicy) HashKeySecretName() string {
	if ref := p.Spec.HashKeySecretRef; ref != nil && ref.Name != "" {
		return ref.Name
	}
	return p.Name + HashKeySecretSuffix
}

// WithDefaults returns b with every unset (zero) bound replaced by its default,
// the same values the API server fills in. Use it on objects that did not pass
// through the API server.
func (b FairQueuingBounds) WithDefaults() FairQueuingBounds {
	if b.MaxQueueDepthPerTenant == 0 {
		b.MaxQueueDepthPerTenant = DefaultMaxQueueDepthPerTenant
	}
	if b.MaxTotalQueued == 0 {
		b.MaxTotalQueued = DefaultMaxTotalQueued
	}
	if b.MaxTenants == 0 {
		b.MaxTenants = DefaultMaxTenants
	}
	if b.MaxInFlight == 0 {
		b.MaxInFlight = DefaultMaxInFlight
	}
	if b.MaxWait.Duration() == 0 {
		b.MaxWait = Duration(DefaultMaxWait)
	}
	return b
}

// EffectivePeriod returns the limit's period, or the default period when unset.
func (r RateLimit) EffectivePeriod() time.Duration {
	if r.Period.Duration() > 0 {
		return r.Period.Duration()
	}
	return Duration(DefaultRatePeriod).Duration()
}

// EffectiveBurst returns the limit's bucket capacity: burst when set, requests
// otherwise.
func (r RateLimit) EffectiveBurst() int64 {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Requests
}

// For returns the rate limit of model: its override when one names it, the
// perModel default when requests is set, and false when the model is not
// limited.
func (m ModelRateLimit) For(model string) (RateLimit, bool) {
	for _, o := range m.Overrides {
		if o.Model == model {
			return o.RateLimit, true
		}
	}
	if m.Requests == 0 {
		return RateLimit{}, false
	}
	return RateLimit{Requests: m.Requests, Period: m.Period, Burst: m.Burst}, true
}

// For returns the total timeout of a request for model: its models entry when
// one names it, the default total otherwise.
func (t RequestTimeouts) For(model string) time.Duration {
	for _, m := range t.Models {
		if m.Model == model && m.Total.Duration() > 0 {
			return m.Total.Duration()
		}
	}
	return t.defaultTotal()
}

func (t RequestTimeouts) defaultTotal() time.Duration {
	if d := t.Default.Total.Duration(); d > 0 {
		return d
	}
	return Duration(DefaultRequestTotalTimeout).Duration()
}

// WithDefaults returns b with every unset (zero) bound replaced by its
// default, the same values the API server fills in.
func (b DeferredAdmissionBounds) WithDefaults() DeferredAdmissionBounds {
	if b.MaxHeld == 0 {
		b.MaxHeld = DefaultMaxHeld
	}
	if b.MaxHeldPerTenant == 0 {
		b.MaxHeldPerTenant = DefaultMaxHeldPerTenant
	}
	if b.MaxWait.Duration() == 0 {
		b.MaxWait = Duration(DefaultMaxHoldWait)
	}
	return b
}

// EffectiveDefaultMaxTokens returns defaultMaxTokens, or its default when
// unset.
func (e TokenEstimation) EffectiveDefaultMaxTokens() int64 {
	if e.DefaultMaxTokens > 0 {
		return e.DefaultMaxTokens
	}
	return DefaultMaxTokensReserved
}

// EffectiveIncludeUsage returns includeUsage, or its default when unset.
func (e TokenEstimation) EffectiveIncludeUsage() bool {
	if e.IncludeUsage != nil {
		return *e.IncludeUsage
	}
	return DefaultIncludeUsage
}

// EffectivePeriod returns the token limit's period, or the default token
// period when unset.
func (l TokenLimit) EffectivePeriod() time.Duration {
	if l.Period.Duration() > 0 {
		return l.Period.Duration()
	}
	return Duration(DefaultTokenPeriod).Duration()
}

// EffectiveBurst returns the token limit's bucket capacity: burst when set,
// tokens otherwise.
func (l TokenLimit) EffectiveBurst() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Tokens
}
