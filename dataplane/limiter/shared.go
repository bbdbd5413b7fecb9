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
