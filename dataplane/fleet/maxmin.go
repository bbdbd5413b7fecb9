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

// unbounded is the demand of a backlogged tenant: it takes all it is given.
var unbounded = math.Inf(1)
