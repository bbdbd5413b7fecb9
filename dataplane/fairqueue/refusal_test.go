package fairqueue

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestRefusalsAreToldSuccessiveRoomTimes: requests refused close together
// for one full queue are told when successive places free (SPEC 5), not all
// the same time, so clients obeying retry-after-ms come back one place at a
// time. A time cut to the budget promises no place.
func TestRefusalsAreToldSuccessiveRoomTimes(t *testing.T) {
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxQueueDepthPerTenant: 1, MaxWait: time.Second}, Weights{}, nil)
	defer q.Close()
	// The bucket refills every 200ms; the head is due at its next token.
	r := Request{Tenant: "a", RetryAfter: 200 * time.Millisecond, Interval: 200 * time.Millisecond, Attempt: never}
	head := startWait(t, context.Background(), q, r)
	// The head's place frees at 200ms, the next one 200ms later, and so
	// on. From the fifth on, the place frees at or after the 1s budget:
	// told the budget, which promises no place.
	const ms = time.Millisecond
	want := []time.Duration{200 * ms, 400 * ms, 600 * ms, 800 * ms, 1000 * ms, 1000 * ms}
	for i, w := range want {
		res, err := waitNow(t, context.Background(), q, r)
		if err != nil || res.Reason != ReasonTenantQueueFull || res.RetryAfter != w {
			t.Fatalf("refusal %d: %+v, %v; want tenant_queue_full told %v", i+1, res, err, w)
		}
	}
	// Once the promised places have passed, refusals are told from the
	// queue's state again: clients that never came back cost nobody.
	q.Close()
	recv(t, head)
	clk.Step(2 * time.Second)
	q2 := New(clk, Bounds{MaxQueueDepthPerTenant: 1, MaxWait: time.Second}, Weights{}, nil)
	defer q2.Close()
	head2 := startWait(t, context.Background(), q2, r)
	if res, _ := waitNow(t, context.Background(), q2, r); res.RetryAfter != 200*time.Millisecond {
		t.Fatalf("first refusal of a fresh queue told %v, want 200ms", res.RetryAfter)
	}
	q2.Close()
	recv(t, head2)
}

// TestPlaceThatCannotFitIsRefusedAtArrival: a request whose place (the
// limiter's Retry-After plus the grants ahead of it) cannot be granted
// within its budget is refused at once with wait_exceeds_budget, told when
// that place would be granted, rather than held until its budget runs out;
// the next such refusal is told the place after.
func TestPlaceThatCannotFitIsRefusedAtArrival(t *testing.T) {
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{MaxWait: 3500 * time.Millisecond}, Weights{}, nil)
	defer q.Close()
	r := Request{Tenant: "a", RetryAfter: time.Second, Interval: time.Second, Attempt: never}
	var queued []<-chan waitResult
	for range 3 { // expected at 1s, 2s and 3s: within 3.5s
		queued = append(queued, startWait(t, context.Background(), q, r))
	}
	if d, _ := q.Stats(); d != 3 {
		t.Fatalf("%d queued, want 3", d)
	}
	for i, want := range []time.Duration{4 * time.Second, 5 * time.Second} {
		res, err := waitNow(t, context.Background(), q, r)
		if err != nil || res.Reason != ReasonWaitExceedsBudget || res.Waited != 0 || res.Position != 4 || res.RetryAfter != want {
			t.Fatalf("request %d: %+v, %v; want wait_exceeds_budget at once at position 4, told %v", 4+i, res, err, want)
		}
	}
	q.Close()
	for _, ch := range queued {
		recv(t, ch)
	}
}

// TestRefusedAfterWaitingIsToldItsOwnPlace: a weight-1 tenant beside two
// weight-1000 tenants whose budget runs out is told when its own place
// would be granted (one grant in 2001 is its), not when the bucket has its
// next token, which the heavy tenants are due to take.
func TestRefusedAfterWaitingIsToldItsOwnPlace(t *testing.T) {
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{Default: 1, ByTenant: map[string]int{"big1": 1000, "big2": 1000}}, nil)
	defer q.Close()
	refuse := func() (bool, time.Duration, error) { return false, 10 * time.Millisecond, nil }
	small := startWait(t, context.Background(), q, Request{Tenant: "small", RetryAfter: 10 * time.Millisecond,
		Interval: 10 * time.Millisecond, Deadline: epoch.Add(100 * time.Millisecond), Attempt: refuse})
	var big []<-chan waitResult
	for _, tn := range []string{"big1", "big2"} {
		big = append(big, startWait(t, context.Background(), q, Request{Tenant: tn, RetryAfter: time.Second, Interval: 10 * time.Millisecond, Attempt: never}))
	}
	for range 100 {
		clk.Step(time.Millisecond)
		q.waitIdle(t)
	}
	res := recv(t, small).res
	// Refused at its last re-check (the next one at 100ms is not before
	// its deadline): 10ms to its Retry-After plus 2000 grants of 10ms.
	if res.Reason != ReasonWaitExceedsBudget || res.RetryAfter != 10*time.Millisecond+2000*10*time.Millisecond {
		t.Fatalf("small tenant: %+v, want wait_exceeds_budget told 20.01s", res)
	}
	q.Close()
	for _, ch := range big {
		recv(t, ch)
	}
}

// TestFirstRefusalsOfATenantAreToldSuccessivePlaces: a tenant with nothing
// queued whose requests cannot fit (a bucket of one a minute, a 5s budget)
// is told successive places too, not one shared time.
func TestFirstRefusalsOfATenantAreToldSuccessivePlaces(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	q := New(clk, Bounds{}, Weights{}, nil)
	defer q.Close()
	never := func() (bool, time.Duration, error) { return false, time.Hour, nil }
	r := Request{Tenant: "a", RetryAfter: time.Minute, Interval: time.Minute, Attempt: never}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
		res, err := waitNow(t, context.Background(), q, r)
		if err != nil || res.Reason != ReasonWaitExceedsBudget || res.RetryAfter != want {
			t.Fatalf("refusal %d: %+v, %v; want wait_exceeds_budget told %v", i+1, res, err, want)
		}
	}
	if d, n := q.Stats(); d != 0 || n != 0 {
		t.Errorf("Stats = %d, %d; want nothing queued and no active queue", d, n)
	}
}
