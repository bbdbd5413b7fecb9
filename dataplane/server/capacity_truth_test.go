package server

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// The tests in this file run the outside scenario of a capacity backend of
// one slot in front of an upstream that takes heldFor per request, on the
// harness's fake clock: what requests waiting for the slot, or refused it,
// are told, against what happens.
const heldFor = time.Second

// capAnswer is what a client of a capacity test saw.
type capAnswer struct {
	user     string
	code     int
	body     string
	queued   bool
	position int
	waited   time.Duration
	estimate time.Duration
	retry    time.Duration
}

// sendCap sends a request of user (none for "") and reports its answer.
func sendCap(t *testing.T, hs *harness, user string, out chan<- capAnswer) {
	var h map[string]string
	if user != "" {
		h = map[string]string{"X-User": user}
	}
	resp := hs.do(capBody, h)
	a := capAnswer{user: user, code: resp.StatusCode, body: readAll(t, resp)}
	if resp.Header.Get(headerQueueEstimatedWait) != "" {
		a.queued = true
		a.waited, a.estimate = headerMs(t, resp, headerQueueWaitMS), headerMs(t, resp, headerQueueEstimatedWait)
		a.position, _ = strconv.Atoi(resp.Header.Get(headerQueuePosition))
	}
	if resp.Header.Get(headerRetryAfterMS) != "" {
		a.retry = headerMs(t, resp, headerRetryAfterMS)
	}
	out <- a
}

// slotRun drives a harness whose one slot is held by holdingUpstream.
type slotRun struct {
	t                *testing.T
	hs               *harness
	arrived, release chan struct{}
	answers          chan capAnswer
}

func newSlotRun(t *testing.T, hs *harness, arrived, release chan struct{}) *slotRun {
	return &slotRun{t: t, hs: hs, arrived: arrived, release: release, answers: make(chan capAnswer, 8)}
}

// hold sends a request of user that takes the free slot.
func (r *slotRun) hold(user string) {
	go sendCap(r.t, r.hs, user, r.answers)
	recvWithin(r.t, "a request at the backend", r.arrived)
}

// wait sends n requests of users, in turn, that wait for the slot.
func (r *slotRun) wait(users ...string) {
	fq, _ := r.hs.srv.admit.Queues()
	for i, u := range users {
		go sendCap(r.t, r.hs, u, r.answers)
		testutil.Eventually(r.t, "a request waiting for the slot", func() bool { d, _ := fq.Stats(); return d == i+1 })
	}
}

// free lets d pass on the clock, then the backend answers the request
// holding the slot; next says a waiter then takes it.
func (r *slotRun) free(d time.Duration, next bool) {
	fq, _ := r.hs.srv.admit.Queues()
	testutil.Eventually(r.t, "the queue settles", fq.Settled)
	r.hs.clk.Step(d)
	testutil.Eventually(r.t, "the queue settles", fq.Settled)
	r.release <- struct{}{}
	if next {
		recvWithin(r.t, "the next waiter at the backend", r.arrived)
	}
}

// collect returns n answers, the waiters' in the order they were served.
func (r *slotRun) collect(n int) (holders, waiters []capAnswer) {
	for range n {
		a := recvWithin(r.t, "an answer", r.answers)
		if a.code != http.StatusOK {
			r.t.Fatalf("%s: %d %s, want 200", a.user, a.code, a.body)
		}
		if a.queued {
			waiters = append(waiters, a)
		} else {
			holders = append(holders, a)
		}
	}
	slices.SortFunc(waiters, func(a, b capAnswer) int { return int(a.waited - b.waited) })
	return holders, waiters
}

// TestCapacityEstimatesAreTheWaitsOnceASlotWasTimed: the outside scenario,
// once the backend has released one slot (held heldFor): four requests of
// two users wait behind a fifth holding the slot, and each is told an
// estimated wait within a factor of 2 of the wait it had (one, two, three
// and four heldFor). Before, a spacing of 50ms between releases was assumed
// until two had been measured, and they were told 50, 100, 200 and 200ms.
func TestCapacityEstimatesAreTheWaitsOnceASlotWasTimed(t *testing.T) {
	hs, arrived, release := capacityWaitHarness(t)
	r := newSlotRun(t, hs, arrived, release)
	r.hold("alice")
	r.free(heldFor, false)
	if _, w := r.collect(1); len(w) != 0 {
		t.Fatalf("the first request waited: %+v", w)
	}

	r.hold("alice")
	users := []string{"bob", "alice", "bob", "alice"}
	r.wait(users...)
	for range users {
		r.free(heldFor, true)
	}
	r.free(heldFor, false)
	_, waiters := r.collect(len(users) + 1)
	if len(waiters) != len(users) {
		t.Fatalf("%d requests waited, want %d", len(waiters), len(users))
	}
	for k, a := range waiters {
		if want := time.Duration(k+1) * heldFor; a.waited != want {
			t.Errorf("waiter %d (%s) waited %v, want %v", k+1, a.user, a.waited, want)
		}
		if a.estimate < a.waited/2 || a.estimate > 2*a.waited {
			t.Errorf("waiter %d (%s, position %d) waited %v and was told %v: want within a factor of 2", k+1, a.user, a.position, a.waited, a.estimate)
		}
	}
}

// TestCapacityColdStartEstimatesFollowTheSlotHeld: before any slot has been
// released, what is known is that the one slot has been held for age
// without coming free. A request arriving then is told an estimate no
// shorter than that evidence allows: the k-th served at least k times the
// age (releases at least age apart, since the slot held that long has not
// come free). Before, they were told 50, 100 and 200ms whatever the slot's
// age. It is a bound from below, not the wait: nothing says when the slot
// will free.
func TestCapacityColdStartEstimatesFollowTheSlotHeld(t *testing.T) {
	const age = 300 * time.Millisecond
	hs, arrived, release := capacityWaitHarness(t)
	r := newSlotRun(t, hs, arrived, release)
	r.hold("alice")
	hs.clk.Step(age)
	users := []string{"bob", "alice", "bob"}
	r.wait(users...)
	r.free(heldFor-age, true)
	for range users[1:] {
		r.free(heldFor, true)
	}
	r.free(heldFor, false)
	_, waiters := r.collect(len(users) + 1)
	for k, a := range waiters {
		t.Logf("waiter %d (%s, position %d): told %v, waited %v", k+1, a.user, a.position, a.estimate, a.waited)
		if least := time.Duration(k+1) * age; a.estimate < least {
			t.Errorf("waiter %d (%s) was told %v with the slot held %v: want at least %v", k+1, a.user, a.estimate, age, least)
		}
	}
}

// TestCapacityRefusalRetryAfterFollowsTheSlot: requests refused a slot at
// once (fair queuing off) are told successive times a slot is expected to
// free, from what the slot says: before any release, no less than the
// slot's age (it has not freed in that time); once a release was timed,
// the time a slot is held, which is never less than the time until the
// slot held now frees, so a client obeying it comes back to a free slot.
func TestCapacityRefusalRetryAfterFollowsTheSlot(t *testing.T) {
	tests := []struct {
		name string
		warm bool // one request held heldFor first
		age  time.Duration
		want []time.Duration
	}{
		{name: "cold start", age: 300 * time.Millisecond, want: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond}},
		{name: "a slot was timed", warm: true, age: 200 * time.Millisecond, want: []time.Duration{heldFor, 2 * heldFor, 3 * heldFor}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{}, 1)
			arrived := make(chan struct{}, 1)
			hs := newHarness(t, holdingUpstream(arrived, release), withCapacity(1, func(c *config.Config) { c.Identity.TrustHeaders = true }))
			r := newSlotRun(t, hs, arrived, release)
			if tc.warm {
				r.hold("alice")
				hs.clk.Step(heldFor)
				release <- struct{}{}
				r.collect(1)
			}
			r.hold("alice")
			hs.clk.Step(tc.age)
			for i, want := range tc.want {
				sendCap(t, hs, "bob", r.answers)
				a := recvWithin(t, "a refusal", r.answers)
				if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"limit_type":"capacity"`) || a.retry != want {
					t.Errorf("refusal %d: %d %s retry-after-ms %v; want 429 limit_type capacity told %v", i+1, a.code, a.body, a.retry, want)
				}
			}
			if !tc.warm {
				release <- struct{}{}
				r.collect(1)
				return
			}
			// The first refused client comes back when told: the slot
			// freed before.
			hs.clk.Step(heldFor - tc.age)
			release <- struct{}{}
			r.collect(1)
			hs.clk.Step(tc.age)
			r.hold("bob")
			release <- struct{}{}
			r.collect(1)
		})
	}
}

// TestCapacityAHungSlotRefusesAtArrival: a backend whose one slot has been
// held for ten times its timed duration without freeing is not expected to
// free it within a request's 5s budget: a request arriving then is refused
// at once (wait_exceeds_budget), told to come back no sooner than the slot
// has already been held, rather than held for its whole budget. Before, it
// was estimated at 50ms, waited 5s and was refused then.
func TestCapacityAHungSlotRefusesAtArrival(t *testing.T) {
	release := make(chan struct{}, 1)
	arrived := make(chan struct{}, 1)
	hs := newHarness(t, holdingUpstream(arrived, release), withCapacity(1, func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(5 * time.Second)
	}))
	r := newSlotRun(t, hs, arrived, release)
	r.hold("alice")
	hs.clk.Step(heldFor)
	release <- struct{}{}
	r.collect(1)

	r.hold("alice")
	hung := 10 * heldFor
	hs.clk.Step(hung)
	sendCap(t, hs, "bob", r.answers)
	a := recvWithin(t, "bob's answer", r.answers)
	if a.code != http.StatusTooManyRequests || !strings.Contains(a.body, `"reason":"wait_exceeds_budget"`) || a.retry < hung {
		t.Errorf("with the slot held %v: %d %s retry-after-ms %v; want 429 wait_exceeds_budget told at least %v", hung, a.code, a.body, a.retry, hung)
	}
	release <- struct{}{}
	r.collect(1)
}
