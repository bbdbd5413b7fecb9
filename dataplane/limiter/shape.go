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

package limiter

import "time"

// LimitOf returns the limit in force for the bucket of key in dimension d
// (a model's override when one names it, for the model and model_tokens
// dimensions), and false when none applies.
// Admission uses it to describe a refusing bucket in the x-ratelimit-*
// headers and to seed the fair queue's grant spacing.
func (l *Limiter) LimitOf(d Dimension, key string) (Limit, bool) {
	r := l.cfg.Load()
	if int(d) >= NumDimensions {
		return Limit{}, false
	}
	switch d {
	case DimensionModel:
		if lim, ok := r.overrides[key]; ok {
			return lim.Limit, true
		}
	case DimensionModelTokens:
		if lim, ok := r.tokenOverrides[key]; ok {
			return lim.Limit, true
		}
	}
	if !r.on[d] {
		return Limit{}, false
	}
	return r.limits[d].Limit, true
}

// RefillInterval returns the time one token takes to refill.
func (l Limit) RefillInterval() time.Duration { return time.Duration(l.interval()) }

// Capacity returns the bucket size: Burst, or Requests when Burst is 0.
func (l Limit) Capacity() int64 { return l.capacity() }

// RefusedQuota describes a bucket that refused a request with retryAfter, for
// the x-ratelimit-* headers: no token remaining, full again once the missing
// token and the rest of its capacity have refilled.
func (l Limit) RefusedQuota(d Dimension, retryAfter time.Duration) Quota {
	c := l.capacity()
	return Quota{Dimension: d, Limit: c, Remaining: 0, Reset: retryAfter + time.Duration(c-1)*l.RefillInterval()}
}

// RefusedCostQuota is RefusedQuota for a request of cost tokens (a token
// dimension's reservation): retryAfter is the time until the bucket holds
// cost tokens, and it is full once the rest of its capacity has refilled.
// For a cost of 1 or less it equals RefusedQuota.
func (l Limit) RefusedCostQuota(d Dimension, retryAfter time.Duration, cost int64) Quota {
	c := l.capacity()
	rest := c - min(max(cost, 1), c)
	return Quota{Dimension: d, Limit: c, Remaining: 0, Reset: retryAfter + time.Duration(rest)*l.RefillInterval()}
}
