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

	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Refusal reasons a TenantObserver sees besides the fair queue's own.
const (
	// TenantRateLimited is a 429 answered at once, without queuing: the
	// refusing limit is not queueable or its key table is full.
	TenantRateLimited = "rate_limited"
	// TenantUnavailable is a 503 because the limiter store was unreachable.
	TenantUnavailable = "unavailable"
)

// TenantObserver is told, per tenant, what admission decided for the
// requests it resolved a tenant for (fair queuing on and a tenant identity).
// tenant is the identity hash the fair queue keys on. Implementations must be
// safe for concurrent use, fast and non-blocking: TenantAdmitted is on the
// fast path of every such request.
type TenantObserver interface {
	// TenantAdmitted reports an admitted request and the time it waited
	// queued (zero when admitted at once).
	TenantAdmitted(now time.Time, tenant string, dim identity.Dimension, waited time.Duration)
	// TenantRefused reports a refused request: reason is a fair-queue
	// refusal reason, TenantRateLimited or TenantUnavailable. A client that
	// left while queued is not a refusal and is not reported.
	TenantRefused(now time.Time, tenant string, dim identity.Dimension, reason string)
	// TenantWaiting reports a request of tenant entering (delta 1) or
	// leaving (delta -1) the fair queue, waiting for limitType: a limiter
	// dimension's limit type, or LimitTypeCapacity.
	TenantWaiting(tenant string, dim identity.Dimension, limitType string, delta int)
}

// obsRef holds the optional TenantObserver.
type obsRef struct {
	p atomic.Pointer[TenantObserver]
}

// SetTenantObserver installs o (nil removes it) for the requests that arrive next.
func (c *Controller) SetTenantObserver(o TenantObserver) {
	if o == nil {
		c.tenants.p.Store(nil)
		return
	}
	c.tenants.p.Store(&o)
}

// tenantObserver returns the installed TenantObserver, or nil.
func (c *Controller) tenantObserver() TenantObserver {
	if o := c.tenants.p.Load(); o != nil {
		return *o
	}
	return nil
}

// observe reports dec, the final decision for r (after its token
// reservation and its backend slot), to the tenant observer when r passed
// the pre-authentication buckets and has a tenant to queue as under the
// settings admission decided with (a policy swapped in since does not
// change it): reported earlier, a request refused by a later stage would
// count as a grant of its tenant.
func (c *Controller) observe(arrival time.Time, r *Request, dec *Decision) {
	o := c.tenantObserver()
	if o == nil || r.preAuthed == nil {
		return
	}
	if tenant, used, ok := r.preAuthed.tenant(r.Identity); ok {
		observeTenant(o, arrival, tenant, used, dec)
	}
}

// observeTenant reports dec, the decision for a request of tenant, to o.
func observeTenant(o TenantObserver, now time.Time, tenant string, dim identity.Dimension, dec *Decision) {
	switch {
	case dec.Allowed:
		o.TenantAdmitted(now, tenant, dim, dec.Queue.Waited)
	case dec.Status == StatusClientClosedRequest:
	case dec.Queue.Queued && dec.Queue.Reason != "":
		o.TenantRefused(now, tenant, dim, string(dec.Queue.Reason))
	case dec.Status == StatusServiceUnavailable:
		o.TenantRefused(now, tenant, dim, TenantUnavailable)
	default:
		o.TenantRefused(now, tenant, dim, TenantRateLimited)
	}
}
