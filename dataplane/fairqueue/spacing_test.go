package fairqueue

import (
	"math"
	"testing"
	"time"
)

func TestGrantSpacing(t *testing.T) {
	type grant struct {
		at         time.Duration
		cost       uint64
		backlogged bool
	}
	// evenly returns n grants of the given costs in turn, dt apart, or with
	// perUnit set, each one cost*dt after the previous.
	evenly := func(n int, dt time.Duration, perUnit bool, costs ...uint64) []grant {
		var gs []grant
		var at time.Duration
		for i := range n {
			c := costs[i%len(costs)]
			if perUnit {
				at += time.Duration(c) * dt
			} else {
				at += dt
			}
			gs = append(gs, grant{at: at, cost: c, backlogged: true})
		}
		return gs
	}
	const ms = float64(time.Millisecond)
	cases := []struct {
		name   string
		grants []grant
		// ok, alpha, beta, meanCost: the model, if any was measured.
		ok                    bool
		alpha, beta, meanCost float64
		// wantOr is or(interval); 0 skips the check once measured.
		interval time.Duration
		wantOr   float64
		// wantUntilNext is untilNext(untilNextAt, untilNextSp); a zero
		// untilNextSp skips the check.
		untilNextAt, untilNextSp time.Duration
		wantUntilNext            time.Duration
	}{
		{
			name:     "nothing measured: the interval stands in",
			interval: 4 * time.Millisecond, wantOr: 4 * ms,
			untilNextAt: 10 * time.Millisecond, untilNextSp: 3 * time.Millisecond, wantUntilNext: 3 * time.Millisecond,
		},
		{
			name:     "nothing measured, no interval",
			interval: -time.Second, wantOr: 0,
		},
		{
			name:   "one grant is no spacing",
			grants: []grant{{at: 5 * time.Millisecond, cost: 1, backlogged: true}},
			wantOr: 0, untilNextAt: 6 * time.Millisecond, untilNextSp: 2 * time.Millisecond, wantUntilNext: time.Millisecond,
		},
		{
			name:   "a grant after an empty queue is no spacing",
			grants: []grant{{at: 0, cost: 1}, {at: time.Second, cost: 1, backlogged: true}},
			wantOr: 0, untilNextAt: time.Second, untilNextSp: time.Millisecond, wantUntilNext: time.Millisecond,
		},
		{
			name:   "unit grants: alpha is the spacing",
			grants: evenly(3, 10*time.Millisecond, false, 1),
			ok:     true, alpha: 10 * ms, beta: 0, meanCost: 1, wantOr: 10 * ms,
			untilNextAt: 35 * time.Millisecond, untilNextSp: 10 * time.Millisecond, wantUntilNext: 5 * time.Millisecond,
		},
		{
			name: "the spacing moves an eighth of the way to a new sample",
			grants: []grant{
				{at: 0, cost: 1, backlogged: true},
				{at: 10 * time.Millisecond, cost: 1, backlogged: true},
				{at: 28 * time.Millisecond, cost: 1, backlogged: true},
			},
			ok: true, alpha: 11 * ms, meanCost: 1, wantOr: 11 * ms,
		},
		{
			name:   "a limit counting requests: even spacing whatever the cost",
			grants: evenly(400, 10*time.Millisecond, false, 1, 3, 9),
			ok:     true, alpha: 10 * ms, beta: 0, meanCost: 13.0 / 3,
			wantOr: 10 * ms,
		},
		{
			name:   "a limit charged by cost: spacing grows with cost",
			grants: evenly(400, time.Millisecond, true, 1, 3, 9),
			ok:     true, alpha: 0, beta: ms, meanCost: 13.0 / 3,
		},
		{
			name:   "equal costs above 1: the spacing, at that cost",
			grants: evenly(400, 10*time.Millisecond, false, 5),
			ok:     true, alpha: 10 * ms, beta: 0, meanCost: 5, wantOr: 10 * ms,
		},
	}
	near := func(got, want float64) bool {
		return math.Abs(got-want) <= 0.02*math.Abs(want)+1e-9
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var g grantSpacing
			for _, gr := range tc.grants {
				g.admitted(int64(gr.at), gr.cost, gr.backlogged)
			}
			alpha, beta, meanCost, ok := g.model()
			if ok != tc.ok {
				t.Fatalf("model ok = %v, want %v", ok, tc.ok)
			}
			if ok && (!near(alpha, tc.alpha) || !near(beta, tc.beta) || !near(meanCost, tc.meanCost)) {
				t.Errorf("model = alpha %.0f beta %.0f mean cost %.3f, want %.0f %.0f %.3f", alpha, beta, meanCost, tc.alpha, tc.beta, tc.meanCost)
			}
			if tc.wantOr != 0 || !ok {
				if got := g.or(tc.interval); !near(got, tc.wantOr) {
					t.Errorf("or(%v) = %.0f, want %.0f", tc.interval, got, tc.wantOr)
				}
			}
			if tc.untilNextSp != 0 {
				if got := g.untilNext(int64(tc.untilNextAt), int64(tc.untilNextSp)); got != int64(tc.wantUntilNext) {
					t.Errorf("untilNext(%v, %v) = %v, want %v", tc.untilNextAt, tc.untilNextSp, time.Duration(got), tc.wantUntilNext)
				}
			}
		})
	}
}

// TestGrantSpacingForgetsAnEmptyQueue checks that the wait for the first
// grant after the queue ran empty does not count as a spacing.
func TestGrantSpacingForgetsAnEmptyQueue(t *testing.T) {
	var g grantSpacing
	g.admitted(0, 1, true)
	g.admitted(int64(10*time.Millisecond), 1, true)
	g.emptied()
	g.admitted(int64(time.Hour), 1, true)
	if got := g.or(0); got != float64(10*time.Millisecond) {
		t.Fatalf("spacing after an empty queue = %v, want 10ms", time.Duration(got))
	}
}
