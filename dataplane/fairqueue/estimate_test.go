package fairqueue

import (
	"math"
	"testing"
)

func TestPositionOf(t *testing.T) {
	mixed := 20.0 / 11 // mean grant cost of sizes 10 and 1 at equal weights
	cases := []struct {
		name                   string
		k                      int
		upTo, c                uint64
		w, sumW                int
		meanCost               float64
		want                   int
		wantGrants, wantCostAh float64
	}{
		{name: "alone", k: 1, upTo: 1, c: 1, w: 1, sumW: 1, meanCost: 1, want: 1},
		{name: "first of three equal", k: 1, upTo: 1, c: 1, w: 1, sumW: 3, meanCost: 1, want: 3, wantGrants: 2, wantCostAh: 2},
		{name: "second at weight 2 of 3", k: 2, upTo: 2, c: 1, w: 2, sumW: 3, meanCost: 1, want: 3, wantGrants: 2, wantCostAh: 2},
		{name: "first at weight 5 of 8", k: 1, upTo: 1, c: 1, w: 5, sumW: 8, meanCost: 1, want: 2, wantGrants: 0.6, wantCostAh: 0.6},
		{name: "fourth at weight 5 of 8", k: 4, upTo: 4, c: 1, w: 5, sumW: 8, meanCost: 1, want: 7, wantGrants: 5.4, wantCostAh: 5.4},
		// Sizes 10 and 1 at equal weights: ten grants of 1 go before a
		// request of 10, and a tenth of one grant of 10 before each of 1.
		{name: "size 10 vs size 1", k: 1, upTo: 10, c: 10, w: 1, sumW: 2, meanCost: mixed, want: 11, wantGrants: 10, wantCostAh: 10},
		{name: "size 1 vs size 10", k: 1, upTo: 1, c: 1, w: 1, sumW: 2, meanCost: mixed, want: 2, wantGrants: 0.1, wantCostAh: 1},
		{name: "fifth of size 1 vs size 10", k: 5, upTo: 5, c: 1, w: 1, sumW: 2, meanCost: mixed, want: 6, wantGrants: 4.5, wantCostAh: 9},
		// A mean inconsistent with the tenant's own sizes falls back to
		// the overall mean.
		{name: "inconsistent mean", k: 1, upTo: 1, c: 1, w: 1, sumW: 2, meanCost: 5, want: 2, wantGrants: 0.2, wantCostAh: 1},
		{name: "huge cost saturates", k: 32, upTo: 32 * MaxCost, c: MaxCost, w: 1, sumW: 1 << 30, meanCost: 1, want: math.MaxInt32, wantGrants: 31 + 32*MaxCost*float64(1<<30-1), wantCostAh: 31*MaxCost + 32*MaxCost*float64(1<<30-1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, grants, cost := positionOf(tc.k, tc.upTo, tc.c, tc.w, tc.sumW, tc.meanCost)
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, b) }
			if got != tc.want || !near(grants, tc.wantGrants) || !near(cost, tc.wantCostAh) {
				t.Errorf("positionOf = %d, %v grants, %v cost ahead; want %d, %v, %v", got, grants, cost, tc.want, tc.wantGrants, tc.wantCostAh)
			}
			if tc.upTo == uint64(tc.k) && tc.meanCost == 1 {
				if got, grants := unitPositionOf(tc.k, tc.w, tc.sumW); got != tc.want || !near(grants, tc.wantGrants) {
					t.Errorf("unitPositionOf = %d, %v grants; want %d, %v", got, grants, tc.want, tc.wantGrants)
				}
			}
		})
	}
}

// TestPlaceIn counts a waiter's place from either end of its tenant queue
// and takes one far from both to be last.
func TestPlaceIn(t *testing.T) {
	s := newSched(Bounds{MaxQueueDepthPerTenant: 1000}, Weights{})
	var ws []*waiter
	for i := range 300 {
		w, reason, _, _ := s.enqueue(0, arrival{tenant: "a", dim: "user", deadline: noDeadline, cost: int64(1 + i%3)})
		if w == nil {
			t.Fatalf("waiter %d refused: %s", i, reason)
		}
		ws = append(ws, w)
	}
	tn := s.tenants["a"]
	var upTo uint64
	for i, w := range ws {
		upTo += w.cost
		k, u := placeIn(tn, w)
		switch {
		case i < maxPlaceWalk || i >= len(ws)-maxPlaceWalk:
			if k != i+1 || u != upTo {
				t.Fatalf("waiter %d: place %d with cost %d up to it, want %d and %d", i, k, u, i+1, upTo)
			}
		case k != len(ws) || u != tn.queuedCost:
			t.Fatalf("waiter %d, far from both ends: place %d with cost %d, want the last place", i, k, u)
		}
	}
}
