package fairqueue

import (
	"errors"
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
