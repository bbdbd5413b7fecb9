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

import (
	"math"
	"time"
)

// This file is the GCRA arithmetic every store decides by. MemoryStore keeps
// each bucket's state here in the process; a store keeping it elsewhere (the
// Redis store's script) reads each bucket's debt, calls DecisionFromDebts,
// and mirrors Charge, AdjustedDebt and the rescaling below in its own
// language, so every store answers the same Decision, Retry-After and quota
// for the same bucket state. redisstore's conformance test runs one table of
// calls against the memory store, miniredis and a real redis-server.
//
// A bucket is one GCRA cell: its state is its debt, the time in nanoseconds
// until it is full again (0 for a full or unknown bucket). Interval is the
// time to refill one token and window the capacity times interval; a bucket
// holds (window-debt)/interval tokens, negative in debt.

const (
	// MaxAdjustDebt bounds the debt a positive Adjust (a settled usage above
	// the reservation) can leave: at most this many capacities below empty,
	// so the bucket holds a token again within MaxAdjustDebt full refills
	// and is full within MaxAdjustDebt+1. Honest overshoots (a tokenizer
	// that under-counted the prompt, an output cap the upstream ignored) are
	// a fraction of one capacity and are charged in full; a runaway usage of
	// many capacities cannot lock a key, a team or a model for hours. A debt
	// already beyond the bound (a Take whose cost exceeded the capacity) is
	// never raised further by Adjust, nor forgiven.
	MaxAdjustDebt = 2

	// maxDebt saturates every GCRA time span (window, charge, debt) so a
	// timestamp plus a few of them cannot overflow.
	maxDebt = math.MaxInt64 / 4
)

// shaped is a Limit with its GCRA shape computed once.
type shaped struct {
	Limit
	interval, window int64
}

// shapeOf returns l with its GCRA interval and window, saturating the window
// so that additions to a timestamp cannot overflow.
func shapeOf(l Limit) shaped {
	s := shaped{Limit: l, interval: l.interval()}
	if c := l.capacity(); c > maxDebt/s.interval {
		s.window = maxDebt
	} else {
		s.window = c * s.interval
	}
	return s
}

// Shape returns r's GCRA cell in nanoseconds: interval refills one token and
// window is the capacity times interval (saturated so a timestamp plus the
// window cannot overflow).
func (r Request) Shape() (interval, window int64) { return r.interval, r.window }

// DecisionFromDebts decides b from each bucket's debt: the time, in
// nanoseconds and never negative, until that bucket is full again (debts[i]
// belongs to b.At(i); 0 for a full or unknown bucket). charge says whether the
// decision is a Take (the quota after charging) or a Peek. MemoryStore
// decides by it too, so a store holding the debts elsewhere answers
// identically. A Take that is allowed leaves bucket i owing
// debts[i]+b.At(i).Charge().
func DecisionFromDebts(b *Batch, debts *[MaxBatch]int64, charge bool) Decision {
	var d Decision
	decideDebts(&d, b, debts, charge)
	return d
}

// decideDebts is DecisionFromDebts into d, which must be zero.
func decideDebts(d *Decision, b *Batch, debts *[MaxBatch]int64, charge bool) {
	d.Allowed = true
	for i := 0; i < b.n; i++ {
		judge(d, &b.reqs[i], debts[i], charge)
	}
}

// Charge returns the GCRA time, in nanoseconds, that a Take or Peek of r
// charges: Cost refill intervals (one for a Cost of 0 or 1), saturated so a
// timestamp plus a charge cannot overflow.
func (r Request) Charge() int64 { return r.charge() }

// charge is Charge without copying r.
func (r *Request) charge() int64 {
	if r.Cost <= 1 {
		return r.interval
	}
	if r.Cost > maxDebt/r.interval {
		return maxDebt
	}
	return r.Cost * r.interval
}

// AdjustedDebt returns the debt, in nanoseconds until full, of a bucket that
// was debt nanoseconds from full after an Adjust of r: a positive Cost adds
// Cost intervals but never beyond MaxAdjustDebt capacities below empty (nor
// lowers a debt already beyond that), a negative Cost removes -Cost
// intervals down to a full bucket (0). Stores keeping bucket state elsewhere
// use it to settle exactly as MemoryStore does.
func (r Request) AdjustedDebt(debt int64) int64 {
	switch {
	case r.Cost > 0:
		ceiling := max(debt, r.window*(MaxAdjustDebt+1)) // window <= maxDebt: no overflow
		add := int64(maxDebt)
		if r.Cost <= maxDebt/r.interval {
			add = r.Cost * r.interval
		}
		return min(debt+min(add, ceiling), ceiling)
	case r.Cost < 0:
		if r.Cost < -(debt / r.interval) {
			return 0
		}
		return debt + r.Cost*r.interval
	}
	return debt
}

// refundedDebt is the debt of r's bucket after a Refund: one token back,
// never above full. Request.Cost is ignored.
func (r *Request) refundedDebt(debt int64) int64 { return max(debt-r.interval, 0) }

// rescaledDebt converts a debt under a bucket's old window to its new one,
// keeping the fraction of the capacity in use (above 1 for a token bucket in
// debt), so a hot-swapped limit neither forgives nor invents debt.
func rescaledDebt(debt, oldWindow, newWindow int64) int64 {
	if debt <= 0 {
		return 0
	}
	used := float64(debt) / float64(oldWindow)
	return int64(math.Min(used*float64(newWindow), maxDebt))
}

// refuse records a refusal by dim that lasts wait, and reports whether dim
// became the decision's LimitType (the refusal with the longest wait).
func refuse(d *Decision, dim Dimension, wait time.Duration) bool {
	first := d.RefusedBy == 0 || wait > d.RetryAfter
	if first {
		d.LimitType = dim
	}
	d.Allowed = false
	d.RefusedBy = d.RefusedBy.Add(dim)
	d.RetryAfter = max(d.RetryAfter, wait)
	return first
}

// judge records in d the verdict of bucket r, which is debt nanoseconds
// from full: every store decides each bucket with it, so they all answer the
// same. The bucket must hold the request's cost, or be full when the cost
// exceeds its capacity. An allowed decision's quota is the bucket with the
// fewest tokens left; a refusal's quota is the bucket named by LimitType, so
// the x-ratelimit-* headers never describe a bucket that let the request pass.
func judge(d *Decision, r *Request, debt int64, charge bool) {
	cost := r.charge()
	capacity := r.Limit.capacity()
	if over := debt + min(cost, r.window) - r.window; over > 0 {
		// Too few tokens: the wait is until the deficit has refilled.
		if refuse(d, r.Dimension, time.Duration(over)) {
			d.Tightest, d.HasQuota = Quota{Dimension: r.Dimension, Limit: capacity, Remaining: 0, Reset: time.Duration(debt)}, true
		}
		return
	}
	if !d.Allowed {
		return // a refusal's quota is the refusing bucket's
	}
	next := debt + cost
	remaining, reset := max(r.window-next, 0)/r.interval, next
	if !charge {
		remaining, reset = (r.window-debt)/r.interval, debt
	}
	q := Quota{Dimension: r.Dimension, Limit: capacity, Remaining: remaining, Reset: time.Duration(reset)}
	if !d.HasQuota || q.Remaining < d.Tightest.Remaining ||
		(q.Remaining == d.Tightest.Remaining && q.Reset > d.Tightest.Reset) {
		d.Tightest, d.HasQuota = q, true
	}
}
