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

package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Token-budget metric names (SPEC section 6).
const (
	// DeferredHeldName is the gauge of requests held for their token reservation now.
	DeferredHeldName = "rate_limit_deferred_held"
	// DeferredWaitName is the histogram of time held before the reservation was granted.
	DeferredWaitName = "rate_limit_deferred_wait_seconds"
	// DeferredGrantsName counts held requests whose reservation was granted.
	DeferredGrantsName = "rate_limit_deferred_grants_total"
	// DeferredRefusedName counts token-budget refusals, held or not, by reason.
	DeferredRefusedName = "rate_limit_deferred_refused_total"
	// TokensReservedName counts tokens reserved, by the token bucket's limit_type.
	TokensReservedName = "rate_limit_tokens_reserved_total"
	// TokensSettledName counts tokens requests actually used, by limit_type.
	TokensSettledName = "rate_limit_tokens_settled_total"
	// TokensEstimateRatioName is the histogram of used / reserved tokens per
	// settled request: below 1 the reservation was too large.
	TokensEstimateRatioName = "rate_limit_tokens_estimate_ratio"
)

// deferredReasons are the reason label values of DeferredRefusedName.
var deferredReasons = [...]string{
	string(fairqueue.ReasonQueueFull), string(fairqueue.ReasonTenantQueueFull), string(fairqueue.ReasonTenantTableFull),
	string(fairqueue.ReasonWaitExceedsBudget), string(fairqueue.ReasonDeadlineExceeded),
	string(fairqueue.ReasonShutdown), "table_full",
}

// tokenDimensions are the limit_type label values of the token counters.
var tokenDimensions = [...]limiter.Dimension{
	limiter.DimensionAPIKeyTokens, limiter.DimensionUserTokens, limiter.DimensionTeamTokens, limiter.DimensionModelTokens,
}

// RatioBuckets are the estimate-ratio histogram's upper bounds.
var RatioBuckets = []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 4}

// Tokens holds the token-budget collectors. It implements fairqueue.Observer
// for the deferral queue and admission.TokenObserver. The deferral series
// carry the band the request was held in, bounded like the queue series'
// (MaxBandSeries); every other label value comes from a fixed set.
type Tokens struct {
	held     *prometheus.GaugeVec
	wait     *prometheus.HistogramVec
	grants   *prometheus.CounterVec
	refused  *prometheus.CounterVec
	reserved *prometheus.CounterVec
	settled  *prometheus.CounterVec
	ratio    prometheus.Histogram

	// bands are the deferral series by band; bands.mu guards total and
	// each band's queued and ahead.
	bands heldBands

	reservedBy [len(tokenDimensions)]prometheus.Counter
	settledBy  [len(tokenDimensions)]prometheus.Counter
}

// heldBand are one band's label children of the deferral series.
type heldBand struct {
	name    string
	held    prometheus.Gauge
	wait    prometheus.Observer
	grants  prometheus.Counter
	refused [len(deferredReasons)]prometheus.Counter
	// queued is the band's last reported depth in the deferral queue, ahead
	// its admitted holds waiting for the tokens they overdrew.
	queued, ahead int
}

// heldBands are the deferral series of every band seen. Like the queue's
// (bandTable), band "" counts the held requests in no named band, so the
// series keep their identity without bands and sum to the total with them.
type heldBands struct {
	bandLabels[*heldBand]
	// total is the deferral queue's whole depth.
	total int
}

var _ fairqueue.Observer = (*Tokens)(nil)

// NewTokens creates the token-budget collectors and registers them on reg.
// It fails when they are already registered there.
func NewTokens(reg prometheus.Registerer) (*Tokens, error) {
	t := &Tokens{
		held:   collector.GaugeVec(DeferredHeldName, "Requests held now for their token reservation (deferred admission), by priority band.", "band"),
		wait:   collector.HistogramVec(DeferredWaitName, "Time a request was held before its token reservation was granted, by priority band.", WaitBuckets, "band"),
		grants: collector.CounterVec(DeferredGrantsName, "Held requests whose token reservation was granted, by priority band.", "band"),
		refused: collector.CounterVec(DeferredRefusedName, "Token-budget refusals by reason and priority band: wait_exceeds_budget and table_full are answered without holding; the others after or instead of a hold.",
			"reason", "band"),
		reserved: collector.CounterVec(TokensReservedName, "Tokens reserved at admission, by the token bucket's limit_type.", "limit_type"),
		settled: collector.CounterVec(TokensSettledName, "Tokens requests actually used (settled from the response's usage, or counted), by limit_type.",
			"limit_type"),
		ratio: collector.Histogram(TokensEstimateRatioName, "Tokens used divided by tokens reserved, per settled request.", RatioBuckets),
	}
	t.bands.init(func(band string) *heldBand {
		b := &heldBand{name: band, held: t.held.WithLabelValues(band), wait: t.wait.WithLabelValues(band), grants: t.grants.WithLabelValues(band)}
		for i, r := range deferredReasons {
			b.refused[i] = t.refused.WithLabelValues(r, band)
		}
		return b
	})
	for i, d := range tokenDimensions {
		t.reservedBy[i] = t.reserved.WithLabelValues(d.String())
		t.settledBy[i] = t.settled.WithLabelValues(d.String())
	}
	if err := registerAll(reg, "token-budget metrics", "NewTokens", t.held, t.wait, t.grants, t.refused, t.reserved, t.settled, t.ratio); err != nil {
		return nil, err
	}
	return t, nil
}

// QueueChanged implements fairqueue.Observer for the deferral queue.
func (t *Tokens) QueueChanged(depth, _ int) {
	t.bands.mu.Lock()
	defer t.bands.mu.Unlock()
	t.bands.total = depth
	t.setHeldLocked(t.bands.none)
}

// BandQueueChanged implements fairqueue.Observer for the deferral queue.
func (t *Tokens) BandQueueChanged(band string, depth int) {
	if band == "" {
		return // the depth outside every band follows from the total
	}
	t.bands.mu.Lock()
	defer t.bands.mu.Unlock()
	b := t.bands.ofLocked(band)
	b.queued = depth
	t.setHeldLocked(b)
}

// HeldAhead implements admission.TokenObserver: a change in band's admitted
// holds waiting for the tokens they overdrew, which rate_limit_deferred_held
// includes.
func (t *Tokens) HeldAhead(band string, delta int) {
	t.bands.mu.Lock()
	defer t.bands.mu.Unlock()
	b := t.bands.ofLocked(band)
	b.ahead += delta
	t.setHeldLocked(b)
}

// setHeldLocked sets the held gauge of b, and of band "" whose queued part
// is the deferral queue's depth outside every named band.
func (t *Tokens) setHeldLocked(b *heldBand) {
	none := t.bands.none
	if b != none {
		b.held.Set(float64(b.queued + b.ahead))
	}
	n := t.bands.total
	for _, nb := range t.bands.named {
		n -= nb.queued
	}
	none.queued = max(n, 0)
	none.held.Set(float64(none.queued + none.ahead))
}

// Granted implements fairqueue.Observer for the deferral queue.
func (t *Tokens) Granted(_, _, band string, waited time.Duration) {
	b := t.bands.of(band)
	b.wait.Observe(waited.Seconds())
	b.grants.Inc()
}

// Refused implements fairqueue.Observer for the deferral queue. Disabling
// deferred admission admits held requests, so ReasonDisabled is not a refusal.
func (t *Tokens) Refused(_, _, band string, reason fairqueue.Reason) {
	if reason != fairqueue.ReasonDisabled {
		t.DeferralRefused(band, string(reason))
	}
}

// DeferralRefused implements admission.TokenObserver: it counts a
// token-budget refusal in band; an unknown reason is recorded as "unknown".
func (t *Tokens) DeferralRefused(band, reason string) {
	b := t.bands.of(band)
	if i := slices.Index(deferredReasons[:], reason); i >= 0 {
		b.refused[i].Inc()
		return
	}
	t.refused.WithLabelValues(unknownLabel, b.name).Inc()
}

// TokensReserved counts n tokens reserved in a bucket of dimension d.
func (t *Tokens) TokensReserved(d limiter.Dimension, n int64) {
	if i := tokenIndex(d); i >= 0 && n > 0 {
		t.reservedBy[i].Add(float64(n))
	}
}

// TokensSettled counts n tokens used, settled in a bucket of dimension d.
func (t *Tokens) TokensSettled(d limiter.Dimension, n int64) {
	if i := tokenIndex(d); i >= 0 && n > 0 {
		t.settledBy[i].Add(float64(n))
	}
}

// Estimated records one settled request's used / reserved ratio.
func (t *Tokens) Estimated(reserved, used int64) {
	if reserved > 0 {
		t.ratio.Observe(float64(used) / float64(reserved))
	}
}

// tokenIndex returns the index of d in tokenDimensions, or -1.
func tokenIndex(d limiter.Dimension) int { return slices.Index(tokenDimensions[:], d) }
