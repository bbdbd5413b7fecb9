package fairqueue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// TestWakeGrantsWaitersByWeightWithoutTheClock: waiters refused on a key
// with a long Retry-After are granted as soon as Wake says the key has room,
// on a fake clock that never moves, one grant per unit of room, by weight.
func TestWakeGrantsWaitersByWeightWithoutTheClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	w := Weights{Default: 1, ByTenant: map[string]int{"heavy-weight": 3}}
	q := New(clk, Bounds{MaxWait: time.Hour}, w, nil)
	defer q.Close()
	key := LimitKey{Kind: 200, Key: "backends"}
	var room atomic.Int64 // slots free; an attempt takes one
	attempt := func() (bool, time.Duration, error) {
		for {
			n := room.Load()
			if n <= 0 {
				return false, time.Minute, nil // the clock never gets there: only a Wake
			}
			if room.CompareAndSwap(n, n-1) {
				return true, 0, nil
			}
		}
	}
	type grant struct{ tenant string }
	grants := make(chan grant, 16)
	start := func(tenant string) {
		go func() {
			res, err := q.Wait(context.Background(), Request{Tenant: tenant, LimitKeys: []LimitKey{key},
				Interval: time.Second, Attempt: attempt})
			if err == nil && res.Admitted {
				grants <- grant{tenant}
			}
		}()
	}
	for range 4 {
		start("heavy-weight")
		start("light")
	}
	q.waitUntil(t, func() bool { return q.s.depth == 8 && q.s.inFlight == 0 })
	q.waitIdle(t)
	select {
	case g := <-grants:
		t.Fatalf("%s granted with no room", g.tenant)
	default:
	}
	// Four slots free one at a time: each Wake grants exactly one waiter.
	got := map[string]int{}
	for range 4 {
		room.Add(1)
		q.Wake(key)
		got[recv(t, grants).tenant]++
		q.waitIdle(t)
	}
	if got["heavy-weight"] != 3 || got["light"] != 1 {
		t.Errorf("grants by tenant = %v, want 3 to the weight-3 tenant and 1 to the other", got)
	}
	// A wake on another key, or with no room, grants nothing.
	q.Wake(LimitKey{Kind: 200, Key: "other"})
	q.Wake(key)
	q.waitIdle(t)
	select {
	case g := <-grants:
		t.Fatalf("%s granted with no room", g.tenant)
	default:
	}
	room.Add(4)
	q.Wake(key)
	for range 4 {
		recv(t, grants)
	}
}

// Wake on a key nobody waits for does nothing and does not allocate.
func TestWakeWithoutWaitersAllocatesNothing(t *testing.T) {
	q := New(testingclock.NewFakeClock(time.Unix(0, 0)), Bounds{}, Weights{}, nil)
	defer q.Close()
	key := LimitKey{Kind: 200, Key: "backends"}
	if n := testing.AllocsPerRun(100, func() { q.Wake(key) }); n != 0 {
		t.Errorf("Wake allocates %v times, want 0", n)
	}
}

// TestWakeDuringAttemptIsNotLost: a Wake that comes while the head's attempt
// runs, after the attempt found no room, makes the refused waiter try again
// at once, on a fake clock that never moves, instead of leaving the room
// unused until its Retry-After.
func TestWakeDuringAttemptIsNotLost(t *testing.T) {
	// A budget shorter than the attempt's Retry-After must not turn the
	// announced room into a wait_exceeds_budget refusal either.
	for _, maxWait := range []time.Duration{time.Hour, time.Second} {
		t.Run(maxWait.String(), func(t *testing.T) { wakeDuringAttempt(t, maxWait) })
	}
}

func wakeDuringAttempt(t *testing.T, maxWait time.Duration) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	q := New(clk, Bounds{MaxWait: maxWait}, Weights{}, nil)
	defer q.Close()
	key := LimitKey{Kind: 200, Key: "backends"}
	var room atomic.Bool
	looked, goOn := make(chan struct{}), make(chan struct{})
	var attempts atomic.Int64
	attempt := func() (bool, time.Duration, error) {
		if attempts.Add(1) == 1 {
			// The first attempt finds no room, then the room comes and is
			// announced before the attempt's refusal reaches the queue.
			ok := room.Load()
			close(looked)
			<-goOn
			return ok, time.Minute, nil
		}
		return room.Load(), time.Minute, nil
	}
	done := make(chan Result, 1)
	go func() {
		res, _ := q.Wait(context.Background(), Request{Tenant: "a", LimitKeys: []LimitKey{key}, Attempt: attempt})
		done <- res
	}()
	recv(t, looked)
	room.Store(true)
	q.Wake(key)
	close(goOn)
	res := recv(t, done)
	if !res.Admitted || attempts.Load() != 2 {
		t.Errorf("result %+v after %d attempts; want admitted by a second attempt at once", res, attempts.Load())
	}
}
