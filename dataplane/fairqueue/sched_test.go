package fairqueue

import (
	"errors"
	"math"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// enq enqueues for tenant on the given keys with no deadline beyond MaxWait.
func enq(t *testing.T, s *sched, now int64, tenant string, ra int64, keys ...string) *waiter {
	t.Helper()
	w, reason, _, _ := s.enqueue(now, arrival{tenant: tenant, dim: "user", keys: lk(keys...), deadline: noDeadline, retryAfter: time.Duration(ra), cost: 1})
	if w == nil {
		t.Fatalf("enqueue %s at %d: refused with %s", tenant, now, reason)
	}
	return w
}

func TestEnqueueBounds(t *testing.T) {
	type earlier struct {
		tenant string
		ra     int64
	}
	cases := []struct {
		name     string
		bounds   Bounds
		weights  Weights
		before   []earlier
		tenant   string
		ra       int64
		deadline int64
		want     Reason
		wantPos  int
	}{
		{
			name:    "fits",
			bounds:  Bounds{MaxQueueDepthPerTenant: 2},
			before:  []earlier{{"a", 0}},
			tenant:  "a",
			want:    "",
			wantPos: 2,
		},
		{
			name:    "tenant queue full at the per-tenant bound",
			bounds:  Bounds{MaxQueueDepthPerTenant: 2},
			before:  []earlier{{"a", 0}, {"a", 0}, {"b", 0}},
			tenant:  "a",
			want:    ReasonTenantQueueFull,
			wantPos: 6, // third of a, two equal tenants: ceil(3*2/1)
		},
		{
			name:    "queue full at the total bound",
			bounds:  Bounds{MaxTotalQueued: 3},
			before:  []earlier{{"a", 0}, {"b", 0}, {"b", 0}},
			tenant:  "a",
			want:    ReasonQueueFull,
			wantPos: 4,
		},
		{
			name:    "tenant table full of active tenants: a new tenant shares an overflow queue",
			bounds:  Bounds{MaxTenants: 2},
			before:  []earlier{{"a", 0}, {"b", 0}},
			tenant:  "c",
			want:    "",
			wantPos: 3,
		},
		{
			name:    "tenant table full and both overflow queues of the hand full",
			bounds:  Bounds{MaxTenants: 2, MaxQueueDepthPerTenant: 1},
			before:  []earlier{{"a", 0}, {"b", 0}, {"c", 0}, {"c", 0}},
			tenant:  "c",
			want:    ReasonTenantTableFull,
			wantPos: 8, // second in an overflow queue, 4 queues active
		},
		{
			name:    "tenant table full does not stop a tracked tenant",
			bounds:  Bounds{MaxTenants: 2},
			before:  []earlier{{"a", 0}, {"b", 0}},
			tenant:  "b",
			want:    "",
			wantPos: 4,
		},
		{
			name:    "heavier tenant gets an earlier position",
			weights: Weights{Default: 1, ByTenant: map[string]int{"h": 3}},
			before:  []earlier{{"a", 0}, {"h", 0}},
			tenant:  "h",
			want:    "",
			wantPos: 3, // ceil(2*4/3)
		},
		{
			name:    "retry-after beyond maxWait",
			bounds:  Bounds{MaxWait: 100 * time.Millisecond},
			tenant:  "a",
			ra:      100 * ms,
			want:    ReasonWaitExceedsBudget,
			wantPos: 1,
		},
		{
			name:     "retry-after beyond the request's own deadline",
			tenant:   "a",
			ra:       50 * ms,
			deadline: 50 * ms,
			want:     ReasonWaitExceedsBudget,
			wantPos:  1,
		},
		{
			name:     "retry-after just inside the deadline",
			tenant:   "a",
			ra:       49 * ms,
			deadline: 50 * ms,
			want:     "",
			wantPos:  1,
		},
		{
			name:    "budget is checked before the bounds",
			bounds:  Bounds{MaxQueueDepthPerTenant: 1, MaxWait: time.Second},
			before:  []earlier{{"a", 0}},
			tenant:  "a",
			ra:      2000 * ms,
			want:    ReasonWaitExceedsBudget,
			wantPos: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(tc.bounds, tc.weights)
			for _, a := range tc.before {
				enq(t, s, 0, a.tenant, a.ra, "k")
			}
			dl := tc.deadline
			if dl == 0 {
				dl = noDeadline
			}
			depth, tenants := s.depth, len(s.tenants)
			w, reason, pos, _ := s.enqueue(0, arrival{tenant: tc.tenant, dim: "user", keys: lk("k"), deadline: dl, retryAfter: time.Duration(tc.ra), cost: 1})
			if reason != tc.want {
				t.Fatalf("reason = %q, want %q", reason, tc.want)
			}
			if pos != tc.wantPos {
				t.Errorf("position = %d, want %d", pos, tc.wantPos)
			}
			if tc.want != "" {
				if w != nil {
					t.Fatalf("refused enqueue returned a waiter")
				}
				if s.depth != depth || len(s.tenants) != tenants {
					t.Errorf("refused enqueue changed the queue: depth %d->%d tenants %d->%d", depth, s.depth, tenants, len(s.tenants))
				}
			} else if w == nil || w.position != tc.wantPos {
				t.Fatalf("admitted enqueue: waiter %v", w)
			}
		})
	}
}

func TestRequeueAndBudget(t *testing.T) {
	cases := []struct {
		name       string
		deadline   int64 // of the first waiter; relative to enqueue at 0
		retryAfter int64 // returned by the failed attempt at 10ms
		want       outcome
		wantReason Reason
	}{
		{name: "re-queued within budget keeps its place", deadline: 100 * ms, retryAfter: 20 * ms, want: outcomeRequeued},
		{name: "retry ending exactly at the deadline is refused", deadline: 30 * ms, retryAfter: 20 * ms, want: outcomeRefused, wantReason: ReasonWaitExceedsBudget},
		{name: "retry beyond the deadline is refused", deadline: 25 * ms, retryAfter: 20 * ms, want: outcomeRefused, wantReason: ReasonWaitExceedsBudget},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{}, Weights{})
			first, _, _, _ := s.enqueue(0, arrival{tenant: "a", dim: "user", keys: lk("k"), deadline: tc.deadline, retryAfter: time.Duration(10 * ms), cost: 1})
			second := enq(t, s, 0, "a", 0, "k")
			if w := s.next(5 * ms); w != nil {
				t.Fatalf("granted before the Retry-After passed")
			}
			if w := s.next(10 * ms); w != first {
				t.Fatalf("granted %p, want the first waiter %p", w, first)
			}
			got := s.complete(10*ms, first, false, tc.retryAfter, nil)
			if got != tc.want {
				t.Fatalf("outcome = %d, want %d", got, tc.want)
			}
			if tc.want == outcomeRefused {
				if first.reason != tc.wantReason {
					t.Errorf("reason = %q, want %q", first.reason, tc.wantReason)
				}
				if w := s.next(10 * ms); w != second {
					t.Errorf("after the refusal the second waiter should be granted")
				}
				return
			}
			// The second waiter is ready but must not overtake the first.
			if w := s.next(15 * ms); w != nil {
				t.Fatalf("second waiter overtook the re-queued head")
			}
			retryAt := 10*ms + tc.retryAfter
			if w := s.next(retryAt); w != first {
				t.Fatalf("re-queued head not granted at its new ready time")
			}
			if s.complete(retryAt, first, true, 0, nil) != outcomeAdmitted {
				t.Fatalf("admission not recorded")
			}
			if w := s.next(retryAt); w != second {
				t.Fatalf("second waiter not granted after the head was admitted")
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	s := newSched(Bounds{MaxWait: time.Hour}, Weights{})
	var expired []*waiter
	s.onDone = func(w *waiter) { expired = append(expired, w) }
	// w1 waits behind a head whose attempt is still running when its deadline
	// (100ms) comes.
	head := enq(t, s, 0, "a", 0, "k")
	w1, _, _, _ := s.enqueue(0, arrival{tenant: "a", dim: "user", keys: lk("k"), deadline: 100 * ms, cost: 1})
	if s.next(0) != head {
		t.Fatalf("head not granted")
	}
	w2, _, _, _ := s.enqueue(0, arrival{tenant: "b", dim: "user", keys: lk("k2"), deadline: 50 * ms, retryAfter: time.Duration(60 * ms), cost: 1})
	if w2 != nil {
		t.Fatalf("waiter whose Retry-After exceeds its deadline was queued")
	}
	w3, _, _, _ := s.enqueue(0, arrival{tenant: "b", dim: "user", keys: lk("k2"), deadline: 50 * ms, retryAfter: time.Duration(10 * ms), cost: 1})
	if wake, _ := s.nextWake(); wake != 10*ms {
		t.Fatalf("next wake = %d, want the earliest ready time 10ms", wake)
	}
	if w := s.next(10 * ms); w != w3 {
		t.Fatalf("w3 not granted at its ready time")
	}
	s.complete(10*ms, w3, false, 30*ms, nil) // ready again at 40ms, deadline 50ms
	if w := s.next(49 * ms); w != w3 {
		t.Fatalf("w3 not granted before its deadline")
	}
	s.complete(49*ms, w3, false, 1*ms, nil) // ready at 50ms == deadline: refused
	if w3.state != stateDone || w3.reason != ReasonWaitExceedsBudget {
		t.Fatalf("w3: state %d reason %q, want done with wait_exceeds_budget", w3.state, w3.reason)
	}
	if w := s.next(99 * ms); w != nil || len(expired) != 0 {
		t.Fatalf("w1 granted or expired before its ready time / deadline")
	}
	if w := s.next(100 * ms); w != nil {
		t.Fatalf("w1 granted exactly at its deadline")
	}
	if len(expired) != 1 || expired[0] != w1 || w1.reason != ReasonDeadlineExceeded {
		t.Fatalf("w1 not expired with deadline_exceeded at its deadline: %v", expired)
	}
	s.complete(100*ms, head, true, 0, nil)
	if s.depth != 0 || s.active != 0 || s.hasWaiters(LimitKey{Key: "k"}) {
		t.Errorf("queue not empty after expiry: depth %d active queues %d", s.depth, s.active)
	}
}

func TestCancel(t *testing.T) {
	cases := []struct {
		name    string
		granted bool
	}{
		{name: "queued waiter"},
		{name: "granted waiter frees its attempt slot", granted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{MaxInFlight: 1}, Weights{})
			a := enq(t, s, 0, "a", 0, "k")
			b := enq(t, s, 0, "b", 0, "other")
			if tc.granted {
				if s.next(0) != a {
					t.Fatalf("a not granted")
				}
				if s.next(0) != nil {
					t.Fatalf("MaxInFlight 1 exceeded")
				}
			}
			s.cancel(0, a)
			if a.state != stateDone || a.admitted || a.reason != "" {
				t.Errorf("cancelled waiter: state %d admitted %v reason %q", a.state, a.admitted, a.reason)
			}
			if s.hasWaiters(LimitKey{Key: "k"}) || s.inFlight != 0 || s.depth != 1 {
				t.Errorf("after cancel: hasWaiters %v inFlight %d depth %d", s.hasWaiters(LimitKey{Key: "k"}), s.inFlight, s.depth)
			}
			if s.next(0) != b {
				t.Errorf("the other tenant was not granted after the cancellation")
			}
		})
	}
}

func TestConcurrencyLimits(t *testing.T) {
	cases := []struct {
		name        string
		maxInFlight int
		keys        func(i int) string
		wantGrants  int
	}{
		{name: "distinct keys run up to maxInFlight", maxInFlight: 3, keys: tenantName, wantGrants: 3},
		{name: "a shared key runs one attempt at a time", maxInFlight: 3, keys: func(int) string { return "shared" }, wantGrants: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{MaxInFlight: tc.maxInFlight}, Weights{})
			for i := range 5 {
				enq(t, s, 0, tenantName(i), 0, tc.keys(i))
			}
			var granted []*waiter
			for w := s.next(0); w != nil; w = s.next(0) {
				granted = append(granted, w)
			}
			if len(granted) != tc.wantGrants {
				t.Fatalf("granted %d attempts at once, want %d", len(granted), tc.wantGrants)
			}
			s.complete(0, granted[0], true, 0, nil)
			if w := s.next(0); w == nil {
				t.Errorf("no grant after an attempt finished")
			}
		})
	}
}

func TestAttemptError(t *testing.T) {
	s := newSched(Bounds{}, Weights{})
	w := enq(t, s, 0, "a", 0, "k")
	s.next(0)
	errStore := errors.New("store unavailable")
	if got := s.complete(0, w, false, 0, errStore); got != outcomeError || !errors.Is(w.err, errStore) {
		t.Fatalf("outcome %d err %v, want error outcome carrying the store error", got, w.err)
	}
	if s.depth != 0 || s.inFlight != 0 || s.hasWaiters(LimitKey{Key: "k"}) {
		t.Errorf("waiter not removed after an attempt error")
	}
}

func TestReweightKeepsOrder(t *testing.T) {
	s := newSched(Bounds{MaxWait: time.Hour}, Weights{Default: 1})
	var order []*waiter
	for range 3 {
		order = append(order, enq(t, s, 0, "a", 0, "k"))
		enq(t, s, 0, "b", 0, "k")
	}
	s.setWeights(Weights{Default: 1, ByTenant: map[string]int{"a": 100}})
	// With a weight of 100, a's three waiters go first and in FIFO order.
	for i, want := range order {
		w := s.next(0)
		if w != want {
			t.Fatalf("grant %d: got tenant %s, want a's waiter %d in order", i, w.tenant, i)
		}
		s.complete(0, w, true, 0, nil)
	}
	if s.depth != 3 || s.active != 1 {
		t.Errorf("b's waiters lost by reweighting: depth %d", s.depth)
	}
}

func TestTightenedBoundsNeverEvict(t *testing.T) {
	s := newSched(Bounds{}, Weights{})
	for range 4 {
		enq(t, s, 0, "a", 0, "k")
	}
	s.setBounds(Bounds{MaxQueueDepthPerTenant: 2, MaxTotalQueued: 2})
	if s.depth != 4 {
		t.Fatalf("tightened bounds evicted waiters: depth %d", s.depth)
	}
	if _, reason, pos, _ := s.enqueue(0, arrival{tenant: "a", dim: "user", deadline: noDeadline, cost: 1}); reason != ReasonTenantQueueFull || pos != 5 {
		t.Errorf("new arrival: reason %q pos %d, want tenant_queue_full at 5", reason, pos)
	}
	if _, reason, _, _ := s.enqueue(0, arrival{tenant: "b", dim: "user", deadline: noDeadline, cost: 1}); reason != ReasonQueueFull {
		t.Errorf("new tenant: reason %q, want queue_full", reason)
	}
}

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

func TestWeightClamp(t *testing.T) {
	w := Weights{Default: 0, ByTenant: map[string]int{"neg": -3, "huge": 1 << 30, "three": 3}}
	cases := map[string]int{"other": 1, "neg": 1, "huge": MaxWeight, "three": 3}
	for tenant, want := range cases {
		if got := w.Of(tenant); got != want {
			t.Errorf("Of(%q) = %d, want %d", tenant, got, want)
		}
	}
}
