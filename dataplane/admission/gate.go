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

package admission

import (
	"sync/atomic"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// Gate paces a tenant's admissions on a model bucket that several replicas
// share, so that grants follow the fleet's fair shares rather than which
// replica happens to retry first (dataplane/fleet implements it). It is
// consulted only for requests with a tenant identity and a model, after the
// pre-authentication buckets and before every check of the identity buckets.
// Implementations must be safe for concurrent use, fast and non-blocking.
type Gate interface {
	// Arrive records a new request of tenant needing the model bucket key.
	Arrive(tenant, key string)
	// Allow reports whether tenant may check the bucket of key now, and
	// otherwise how long it should wait first.
	Allow(now time.Time, tenant, key string) (ok bool, retryAfter time.Duration)
	// Done reports the outcome of a check Allow let through: admitted, or
	// refused by the model bucket of key. Other refusals are not reported.
	Done(tenant, key string, admitted bool)
}

// BandGate is a Gate that tells priority bands apart (dataplane/fleet
// implements it). A request that lowered its band (fairqueue.Request.Band)
// must use the Band methods, with the band it gives the fair queue, so the
// gate paces it as demand of its tenant in that band and it never takes a
// turn of the tenant's own band; a band of 0, or at or above the tenant's
// own, means the tenant's band, exactly like the plain methods.
type BandGate interface {
	Gate
	// ArriveBand is Arrive for a request that asked for band.
	ArriveBand(tenant string, band int, key string)
	// AllowBand is Allow for a request that asked for band.
	AllowBand(now time.Time, tenant string, band int, key string) (ok bool, retryAfter time.Duration)
	// DoneBand is Done for a check AllowBand let through.
	DoneBand(tenant string, band int, key string, admitted bool)
}

// gateRef holds the optional Gate.
type gateRef struct{ p atomic.Pointer[Gate] }

// SetGate installs g (nil removes it) for the requests that arrive next.
// Without a Gate, admission behaves exactly as before it existed.
func (c *Controller) SetGate(g Gate) {
	if g == nil {
		c.gate.p.Store(nil)
		return
	}
	c.gate.p.Store(&g)
}

// gateFor returns the Gate that applies to a queueable request on keys, or nil.
func (c *Controller) gateFor(keys limiter.Keys) Gate {
	if keys.Model == "" {
		return nil
	}
	if g := c.gate.p.Load(); g != nil {
		return *g
	}
	return nil
}

// gated returns the decision of a request the Gate held back: refused by the
// model dimension, to retry after retryAfter.
func gated(retryAfter time.Duration) limiter.Decision {
	return limiter.Decision{
		LimitType:  limiter.DimensionModel,
		RefusedBy:  limiter.DimensionSet(0).Add(limiter.DimensionModel),
		RetryAfter: retryAfter,
	}
}

// gateDone reports d to g, when set, if it concerns the model bucket of key.
// A gated refusal (from gated) reports nothing: the bucket was not checked.
func gateDone(g Gate, tenant, key string, d limiter.Decision) {
	if g != nil && (d.Allowed || d.RefusedBy.Has(limiter.DimensionModel)) {
		g.Done(tenant, key, d.Allowed)
	}
}

// gateAllow asks g, when set, whether tenant may check the bucket of key now.
func gateAllow(g Gate, now time.Time, tenant, key string) (bool, time.Duration) {
	if g == nil {
		return true, 0
	}
	return g.Allow(now, tenant, key)
}
