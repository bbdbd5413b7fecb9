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

// This file exports the GCRA arithmetic of MemoryStore for stores that keep
// bucket state elsewhere (a shared Redis), so every store answers the same
// Decision, Retry-After and quota for the same bucket state.

// Limit.Capacity (shape.go) gives the bucket size.

// Shape returns r's GCRA cell in nanoseconds: interval refills one token and
// window is the capacity times interval (saturated so a timestamp plus the
// window cannot overflow).
func (r Request) Shape() (interval, window int64) { return r.interval, r.window }

// DecisionFromDebts decides b from each bucket's debt: the time, in
// nanoseconds and never negative, until that bucket is full again (debts[i]
// belongs to b.At(i); 0 for a full or unknown bucket). charge says whether the
// decision is a Take (the quota after charging) or a Peek. It is the exact
// arithmetic of MemoryStore, so a store holding the debts elsewhere answers
// identically.
func DecisionFromDebts(b *Batch, debts *[MaxBatch]int64, charge bool) Decision {
	d := Decision{Allowed: true}
	for i := 0; i < b.n; i++ {
		judge(&d, &b.reqs[i], debts[i], charge)
	}
	return d
}

// Charge returns the GCRA time, in nanoseconds, that a Take or Peek of r
// charges: Cost refill intervals (one for a Cost of 0 or 1), saturated so a
// timestamp plus a charge cannot overflow.
func (r Request) Charge() int64 {
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
