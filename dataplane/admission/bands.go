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

import "github.com/fairqueue/fairqueue/dataplane/fairqueue"

// Reasons a request's band (Request.Band) is ignored, as a BandObserver
// sees them.
const (
	// BandIgnoredUnknown: the name is not among the configured bands.
	BandIgnoredUnknown = "unknown"
	// BandIgnoredRaise: the band is above the tenant's; a request may only
	// lower its band.
	BandIgnoredRaise = "raise"
)

// BandObserver is told of the request bands admission ignored, so that a
// client sending a wrong band name is seen. It must be safe for concurrent
// use, fast and non-blocking: it is called on the request path.
type BandObserver interface {
	// BandIgnored reports a request band ignored for reason
	// (BandIgnoredUnknown or BandIgnoredRaise).
	BandIgnored(reason string)
}

// requestBand returns the index of the band r is scheduled in when it
// waits, in the fair queue or the token hold queue: the band r asked for
// when it is below its tenant's, else 0, which the queues read as the
// tenant's own band. A name that is not a band, or one above the tenant's,
// changes nothing and is reported to the BandObserver. Only a request that
// can queue (fair queuing on, a tenant identity) has a band to choose.
func (c *Controller) requestBand(r *Request) int {
	i, ignored := c.resolveBand(r)
	if ignored != "" {
		c.bandIgnored(ignored)
	}
	return i
}

// resolveBand is requestBand without counting: the band index r's header
// asks for when it takes effect (else 0), and why it was ignored, if it was.
// A capacity wait after Admit resolves the same band again with it.
func (c *Controller) resolveBand(r *Request) (int, string) {
	if r.Band == "" {
		return 0, ""
	}
	p := c.pol.Load()
	if !p.settings.Enabled || p.queues == nil {
		return 0, ""
	}
	tenant, _, ok := r.Identity.Tenant(p.settings.TenantDimension)
	if !ok {
		return 0, ""
	}
	w := &p.queues.weights
	i, known := w.BandIndex(r.Band)
	switch {
	case !known:
		return 0, BandIgnoredUnknown
	case i < w.BandOf(tenant):
		return 0, BandIgnoredRaise
	}
	return i, ""
}

// bandIgnored reports a request band ignored for reason.
func (c *Controller) bandIgnored(reason string) {
	if c.bandObs != nil {
		c.bandObs.BandIgnored(reason)
	}
}

// bandName returns the name of band i of the config in force, "" without
// bands (or for a Controller built by New, whose queue's bands are its
// caller's).
func (c *Controller) bandName(i int) string {
	if q := c.pol.Load().queues; q != nil {
		return q.weights.BandName(i)
	}
	return ""
}

// holdBand names the band the token hold queue schedules r in, "" without
// bands: the band r asked for when below its tenant's, else its tenant's
// (a hold without a fair-queue tenant is in the default band).
func (c *Controller) holdBand(r *Request) string {
	p := c.pol.Load()
	if p.queues == nil {
		return ""
	}
	w := &p.queues.weights
	tenant := ""
	if p.settings.Enabled {
		tenant, _, _ = r.Identity.Tenant(p.settings.TenantDimension)
	}
	return w.BandName(r.bandIn(w, tenant))
}

// bandIn is the index of the band r is scheduled in under w, its tenant's
// being tenant: the band r asked for when below its tenant's, else its
// tenant's. The token hold queue and a capacity wait's claim both use it.
func (r *Request) bandIn(w *fairqueue.Weights, tenant string) int {
	return max(r.band, w.BandOf(tenant))
}
