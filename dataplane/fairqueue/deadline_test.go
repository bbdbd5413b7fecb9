package fairqueue

import (
	"testing"
	"time"
)

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
