package fairqueue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// slotSpacing is the time between backend slots coming free in the tests of
// Request.FirstGrant: a wait announced by Wake, with RetryAfter 0.
const slotSpacing = 100 * time.Millisecond

// TestFirstGrantEstimate: a request waiting for room that a Wake announces
// (RetryAfter 0) is estimated from the expected time to the first grant plus
// the grants ahead of it: about k x spacing / share for its tenant's k-th
// waiter, not the ~1 ms of the grants behind the first alone. A Retry-After
// larger than FirstGrant counts instead of it.
func TestFirstGrantEstimate(t *testing.T) {
	cases := []struct {
		name        string
		weights     map[string]int
		othersQueue int // requests of tenant "other" queued first
		k           int // the request is tenant "a"'s k-th waiter
		retryAfter  time.Duration
		want        time.Duration
	}{
		{name: "alone, first", k: 1, want: slotSpacing},
		{name: "alone, fourth", k: 4, want: 4 * slotSpacing},
		{name: "equal share of two, first", othersQueue: 10, k: 1, want: 2 * slotSpacing},
		{name: "equal share of two, third", othersQueue: 10, k: 3, want: 6 * slotSpacing},
		{name: "weight 3 of 4, third", weights: map[string]int{"a": 3}, othersQueue: 10, k: 3, want: 4 * slotSpacing},
		{name: "weight 1 of 4, first", weights: map[string]int{"other": 3}, othersQueue: 10, k: 1, want: 4 * slotSpacing},
		{name: "a longer Retry-After counts instead", k: 1, retryAfter: 5 * slotSpacing, want: 5 * slotSpacing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(Bounds{MaxWait: time.Hour}, Weights{Default: 1, ByTenant: tc.weights})
			arr := func(tenant string) *arrival {
				return &arrival{tenant: tenant, dim: "user", deadline: noDeadline, retryAfter: tc.retryAfter,
					firstGrant: slotSpacing, interval: slotSpacing}
			}
			for range tc.othersQueue {
				if w, reason, _, _ := s.enqueue(0, arr("other")); w == nil {
					t.Fatalf("other tenant's request refused: %s", reason)
				}
			}
			var est int64
			for i := range tc.k {
				w, reason, _, e := s.enqueue(0, arr("a"))
				if w == nil {
					t.Fatalf("request %d refused: %s", i+1, reason)
				}
				if w.readyAt != max(int64(tc.retryAfter), 0) {
					t.Fatalf("request %d ready at %v, want %v: FirstGrant must not delay the first attempt", i+1, time.Duration(w.readyAt), tc.retryAfter)
				}
				est = e
			}
			if d := time.Duration(est) - tc.want; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("estimate of the %d-th waiter = %v, want %v", tc.k, time.Duration(est), tc.want)
			}
		})
	}
}

// TestFirstGrantBudgetCheck: a request whose expected grant (the time to
// the first slot plus the slots ahead of it) cannot fit its budget is refused
// at arrival with wait_exceeds_budget, told when its place would be granted,
// although its RetryAfter is 0; the ones that fit are queued.
func TestFirstGrantBudgetCheck(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxWait: 350 * time.Millisecond}, Weights{}, nil)
	defer q.Close()
	// No slot frees: the head's attempt is refused and it waits for the
	// next, on a clock that does not move.
	// The attempt's own Retry-After is shorter than the time to the first
	// grant: refusals are still told at least the latter.
	full := func() (bool, time.Duration, error) { return false, time.Millisecond, nil }
	r := Request{Tenant: "a", Dimension: "user", LimitType: "capacity", LimitKeys: []LimitKey{{Kind: 200, Key: "backends"}},
		FirstGrant: slotSpacing, Interval: slotSpacing, Attempt: full}
	var queued []<-chan waitResult
	for range 3 { // expected at 100, 200 and 300 ms: within 350 ms
		queued = append(queued, startWait(t, context.Background(), q, r))
	}
	for i, want := range []time.Duration{400 * time.Millisecond, 500 * time.Millisecond} {
		res, err := waitNow(t, context.Background(), q, r)
		if err != nil || res.Reason != ReasonWaitExceedsBudget || res.Position != 4 || res.RetryAfter != want {
			t.Fatalf("request %d: %+v, %v; want wait_exceeds_budget at arrival at position 4, told %v", 4+i, res, err, want)
		}
	}
	q.Close()
	for _, ch := range queued {
		recv(t, ch)
	}
}

// TestFirstGrantWakeGrantsAtOnce: FirstGrant only estimates; a Wake grants
// the waiter at once, on a fake clock that never moves, and its result
// carries the estimate made at enqueue.
func TestFirstGrantWakeGrantsAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxWait: time.Minute}, Weights{}, nil)
	defer q.Close()
	key := LimitKey{Kind: 200, Key: "backends"}
	var room atomic.Bool
	attempt := func() (bool, time.Duration, error) {
		if room.CompareAndSwap(true, false) {
			return true, 0, nil
		}
		return false, slotSpacing, nil
	}
	r := Request{Tenant: "a", LimitKeys: []LimitKey{key}, FirstGrant: 10 * time.Second, Interval: slotSpacing, Attempt: attempt}
	ch := startWait(t, context.Background(), q, r)
	q.waitIdle(t)
	room.Store(true)
	q.Wake(key)
	got := recv(t, ch)
	if got.err != nil || !got.res.Admitted || got.res.Waited != 0 || got.res.Estimate != 10*time.Second {
		t.Fatalf("result %+v, %v; want admitted at once by the Wake, estimated at 10s", got.res, got.err)
	}
}

// TestFirstGrantRefusalsAreNeverBelowIt: every refusal of a request waiting
// for a Wake is told at least the time to the first grant, never ~1 ms: a
// bound refusal, and a waiter whose budget runs out while it waits.
func TestFirstGrantRefusalsAreNeverBelowIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxQueueDepthPerTenant: 1, MaxWait: time.Second}, Weights{}, nil)
	defer q.Close()
	key := LimitKey{Kind: 200, Key: "backends"}
	// The attempt's own Retry-After is shorter than the time to the first
	// grant: refusals are still told at least the latter.
	full := func() (bool, time.Duration, error) { return false, time.Millisecond, nil }
	r := Request{Tenant: "a", LimitKeys: []LimitKey{key}, FirstGrant: slotSpacing, Interval: slotSpacing, Attempt: full}
	head := startWait(t, context.Background(), q, r)
	res, err := waitNow(t, context.Background(), q, r)
	if err != nil || res.Reason != ReasonTenantQueueFull || res.RetryAfter < slotSpacing {
		t.Fatalf("bound refusal %+v, %v; want tenant_queue_full told at least %v", res, err, slotSpacing)
	}
	// The head's deadline passes: it is told when its place would come,
	// the next slot, not 1 ms.
	q.waitIdle(t)
	clk.Step(time.Second)
	got := recv(t, head)
	if got.res.Reason != ReasonDeadlineExceeded && got.res.Reason != ReasonWaitExceedsBudget {
		t.Fatalf("head result %+v, %v; want refused when its budget ran out", got.res, got.err)
	}
	if got.res.RetryAfter < slotSpacing {
		t.Errorf("head refused after waiting told %v, want at least the %v to the next slot", got.res.RetryAfter, slotSpacing)
	}
}

// refusalCounter counts the refusals told an Observer by limit type.
type refusalCounter struct {
	NopObserver
	refused atomic.Int64
	last    atomic.Value // Reason
}

func (o *refusalCounter) Refused(_, limitType, _ string, reason Reason) {
	if limitType == "capacity" {
		o.refused.Add(1)
		o.last.Store(reason)
	}
}

// TestRefuseToldSuccessiveTimes: requests refused at once (no tenant, or
// fair queuing off) are reported to the Observer and told successive room
// times, one spacing apart, cut to their budget; once the promised times
// have passed, the next is told one spacing from now again.
func TestRefuseToldSuccessiveTimes(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	obs := &refusalCounter{}
	q := New(clk, Bounds{MaxWait: 350 * time.Millisecond}, Weights{}, obs)
	defer q.Close()
	q.Disable() // refusals outside the queue happen with fair queuing off too
	r := Request{Dimension: "user", LimitType: "capacity", FirstGrant: slotSpacing}
	const ms = time.Millisecond
	for i, want := range []time.Duration{100 * ms, 200 * ms, 300 * ms, 350 * ms, 350 * ms} {
		if got := q.Refuse(r, ReasonDisabled); got != want {
			t.Fatalf("refusal %d told %v, want %v", i+1, got, want)
		}
	}
	if n := obs.refused.Load(); n != 5 || obs.last.Load() != ReasonDisabled {
		t.Errorf("observer told %d capacity refusals (last %v), want 5 disabled", n, obs.last.Load())
	}
	// A client deadline shorter than the time to room is told the time to
	// room, never less, and promises nothing.
	short := r
	short.Deadline = clk.Now().Add(10 * ms)
	if got := q.Refuse(short, ReasonDisabled); got != slotSpacing {
		t.Errorf("refusal with a 10ms budget told %v, want the %v to the next slot", got, slotSpacing)
	}
	// Once the promised times have passed, refusals count from now again.
	clk.Step(time.Second)
	for i, want := range []time.Duration{100 * ms, 200 * ms} {
		if got := q.Refuse(r, ReasonDisabled); got != want {
			t.Errorf("refusal %d after the promises passed told %v, want %v", i+1, got, want)
		}
	}
}

// TestRefuseWithAFirstRoomLaterThanTheSpacing: when the limit has no room
// for a while and then frees one every Interval (backend slots behind a
// shared store warming up: none frees before its end, then they free at
// the release spacing), refusals close together are told the first room,
// then one Interval apart; not the first room again for each, which would
// send the k-th client away k times as long as needed.
func TestRefuseWithAFirstRoomLaterThanTheSpacing(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxWait: time.Minute}, Weights{}, &refusalCounter{})
	defer q.Close()
	q.Disable()
	const ms = time.Millisecond
	r := Request{Dimension: "user", LimitType: "capacity", FirstGrant: 3000 * ms, Interval: 50 * ms}
	for i, want := range []time.Duration{3000 * ms, 3050 * ms, 3100 * ms} {
		if got := q.Refuse(r, ReasonDisabled); got != want {
			t.Fatalf("refusal %d told %v, want %v", i+1, got, want)
		}
	}
	// A second later the first room is 2 s away and the promises stand.
	clk.Step(time.Second)
	r.FirstGrant = 2000 * ms
	if got := q.Refuse(r, ReasonDisabled); got != 2150*ms {
		t.Errorf("refusal 4, a second later, told %v, want 2.15s", got)
	}
}
