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

package fleet

import (
	"math"
	"sort"
)

// MaxMin divides capacity among claimants by weighted max-min fairness (water
// filling): every claimant whose demand is at most its weighted share of what
// is left gets its whole demand, and the rest split what remains in
// proportion to their weights. weights and demands have one entry per
// claimant; a weight below or equal to zero gets nothing, and a demand of
// +Inf means the claimant takes whatever it is given. The result has one
// allocation per claimant; the allocations sum to at most capacity, and to
// exactly capacity when some claimant has unbounded demand.
func MaxMin(capacity float64, weights, demands []float64) []float64 {
	n := len(weights)
	out := make([]float64, n)
	if capacity <= 0 || n == 0 {
		return out
	}
	// Visit claimants in increasing demand per unit of weight: once one is
	// not satisfied by the current level, none after it is.
	order := make([]int, 0, n)
	totalWeight := 0.0
	for i := 0; i < n; i++ {
		if weights[i] > 0 && demands[i] > 0 {
			order = append(order, i)
			totalWeight += weights[i]
		}
	}
	sort.Slice(order, func(a, b int) bool {
		return demands[order[a]]/weights[order[a]] < demands[order[b]]/weights[order[b]]
	})
	left := capacity
	for k, i := range order {
		level := left / totalWeight
		if demands[i] <= level*weights[i] {
			out[i] = demands[i]
			left -= demands[i]
			totalWeight -= weights[i]
			continue
		}
		// Every remaining claimant wants more than its share of what is left.
		for _, j := range order[k:] {
			out[j] = level * weights[j]
		}
		return out
	}
	return out
}

// Banded divides capacity among claimants in priority bands, band 0 the
// highest: strictly by band, and within a band by weighted max-min fairness
// (MaxMin). Band b takes what the bands above it leave, except that every
// band below it with a minShare m first keeps min(its demand, m·capacity)
// back from it: a band is starved only down to its minShare. bands, weights
// and demands have one entry per claimant; minShares one per band (a band
// beyond it has minShare 0, and a negative band index counts as 0). With
// every claimant in band 0 the result is exactly MaxMin's.
func Banded(capacity float64, minShares []float64, bands []int, weights, demands []float64) []float64 {
	n := len(weights)
	nb := 1
	for _, b := range bands {
		nb = max(nb, b+1)
	}
	if nb == 1 {
		return MaxMin(capacity, weights, demands)
	}
	members := make([][]int, nb)
	demand := make([]float64, nb)
	for i := range n {
		b := max(bands[i], 0)
		members[b] = append(members[b], i)
		if weights[i] > 0 {
			demand[b] += math.Max(demands[i], 0)
		}
	}
	// reserved[b] is what the bands from b down keep back from those above.
	reserved := make([]float64, nb+1)
	for b := nb - 1; b >= 0; b-- {
		share := 0.0
		if b < len(minShares) {
			share = math.Max(minShares[b], 0)
		}
		reserved[b] = reserved[b+1] + math.Min(demand[b], share*math.Max(capacity, 0))
	}
	out := make([]float64, n)
	left := capacity
	for b, idx := range members {
		if len(idx) == 0 {
			continue
		}
		w, d := make([]float64, len(idx)), make([]float64, len(idx))
		for k, i := range idx {
			w[k], d[k] = weights[i], demands[i]
		}
		avail := left - reserved[b+1]
		if avail <= capacity*1e-9 {
			avail = 0 // rounding left over by the bands above, not capacity
		}
		got := MaxMin(avail, w, d)
		for k, i := range idx {
			out[i] = got[k]
			left -= got[k]
		}
	}
	return out
}

// unbounded is the demand of a backlogged tenant: it takes all it is given.
var unbounded = math.Inf(1)
