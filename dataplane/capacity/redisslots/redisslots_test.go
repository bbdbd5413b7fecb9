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

package redisslots

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/redistest"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) {
	redisstore.SetClientLogger(logr.Discard()) // failed dials during outages are expected here
	os.Exit(redistest.Run(m))
}

// fleet is a Redis server and the policy's store on it.
type fleet struct {
	t        *testing.T
	replicas int
	srv      *redistest.Server
	client   *redis.Client
	store    *redisstore.Store
}

func newFleet(t *testing.T) *fleet { return newFleetFailing(t, redisstore.FailClosed) }

// newFleetFailing is newFleet with a store of the given failureMode, whose
// calls time out after 200 ms and whose probe runs every 50 ms.
func newFleetFailing(t *testing.T, mode redisstore.FailureMode) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	// As redisstore.New's client: a call ends at its context's deadline.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st := redisstore.NewWithClient(c, redisstore.Options{
		Addresses: []string{srv.Addr()}, Namespace: "ns", Policy: fmt.Sprintf("p%d", time.Now().UnixNano()),
		Timeout: 200 * time.Millisecond, FailureMode: mode, ProbeInterval: 50 * time.Millisecond,
	})
	t.Cleanup(func() { _ = st.Close() })
	// A fleet that has used this Redis before: no warm-up (genLua) but
	// after it loses its data.
	if err := c.Set(context.Background(), genKey(st), "established|0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, srv: srv, client: c, store: st}
}

// replica is one data plane's tracker and leases on the fleet's store.
type replica struct {
	tr     *capacity.Tracker
	leases *Leases
	clk    *clocktesting.FakeClock
	rooms  chan string // what Leases.OnRoom was told, from other replicas
}

func (f *fleet) replica(name string, maxInFlight int, o Options) *replica {
	f.t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	rooms := make(chan string, 64)
	o.Store = func() *redisstore.Store { return f.store }
	o.Replica, o.Clock = name, clk
	o.OnRoom = func(b string) {
		select {
		case rooms <- b:
		default:
		}
	}
	l, err := New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(l.Close)
	tr := capacity.New(capacity.Options{Shared: l})
	f.t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "vllm-a", MaxInFlight: int32(maxInFlight)}}, 0); err != nil {
		f.t.Fatal(err)
	}
	r := &replica{tr: tr, leases: l, clk: clk, rooms: rooms}
	f.waitSubscribers(int64(f.replicas + 1))
	f.replicas++
	return r
}

func (r *replica) acquire(s *capacity.Slot) capacity.Result { return r.tr.Acquire(s, "vllm-a") }

// crash stops the heartbeat and forgets the leases without removing them,
// as a killed process does.
func (r *replica) crash() {
	close(r.leases.stop)
	<-r.leases.done
	r.leases.once.Do(func() {})
}

// renewNow steps the heartbeat once and waits until it has renewed.
func (r *replica) renewNow(t *testing.T, f *fleet) {
	t.Helper()
	before := r.leases.renewals.Load()
	testutil.Eventually(t, "the heartbeat's ticker", r.clk.HasWaiters)
	r.clk.Step(r.leases.o.RenewInterval)
	testutil.Eventually(t, "a renewal", func() bool { return r.leases.renewals.Load() > before })
}

// waitSubscribers waits until n replicas listen on the room channel.
func (f *fleet) waitSubscribers(n int64) {
	f.t.Helper()
	testutil.Eventually(f.t, fmt.Sprintf("%d subscribers", n), func() bool {
		m, err := f.client.PubSubNumSub(context.Background(), roomChannel(f.store)).Result()
		return err == nil && m[roomChannel(f.store)] >= n
	})
}

// room waits for r to be told of room on vllm-a by another replica.
func (r *replica) room(t *testing.T, what string) {
	t.Helper()
	select {
	case b := <-r.rooms:
		if b != "vllm-a" {
			t.Fatalf("%s: room on %q", what, b)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no room reported within 10s", what)
	}
}

func (f *fleet) leases(t *testing.T) int64 {
	n, err := f.client.ZCard(context.Background(), key(f.store, "vllm-a")).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMaxInFlightHoldsAcrossTheFleet(t *testing.T) {
	f := newFleet(t)
	a, b := f.replica("a", 3, Options{}), f.replica("b", 3, Options{})
	var a1, a2, b1, b2 capacity.Slot
	for _, step := range []struct {
		r    *replica
		s    *capacity.Slot
		want capacity.Result
	}{
		{a, &a1, capacity.Acquired},
		{a, &a2, capacity.Acquired},
		{b, &b1, capacity.Acquired},
		{b, &b2, capacity.Saturated}, // 3 in flight across the fleet
		{a, &b2, capacity.Saturated},
	} {
		if got := step.r.acquire(step.s); got != step.want {
			t.Fatalf("got %v, want %v", got, step.want)
		}
	}
	a1.Release()
	a1.Release() // one lease removed, once
	if n := f.leases(t); n != 2 {
		t.Fatalf("%d leases after a release, want 2", n)
	}
	if got := b.acquire(&b2); got != capacity.Acquired {
		t.Fatalf("after a release on another replica: %v", got)
	}
	for _, s := range []*capacity.Slot{&a2, &b1, &b2} {
		s.Release()
	}
	if n := f.leases(t); n != 0 {
		t.Fatalf("%d leases after every release", n)
	}
}

// TestACrashedReplicasSlotsComeBackWithinTheTTL checks the bound the
// package doc and docs/capacity.md state, on Redis's own clock (so a slow
// test machine cannot fail it): a crashed replica's leases expire at most
// TTL after their last renewal (here, their acquire), never before it, and
// the first acquire after that takes the slot.
func TestACrashedReplicasSlotsComeBackWithinTheTTL(t *testing.T) {
	f := newFleet(t)
	f.liveElsewhere()
	const ttl = 600 * time.Millisecond
	o := Options{RenewInterval: 200 * time.Millisecond, TTL: ttl}
	a, b := f.replica("a", 2, o), f.replica("b", 2, o)
	var a1, a2, b1 capacity.Slot
	before := f.redisNow(t).Truncate(time.Millisecond) // lease expiries are in whole ms
	if a.acquire(&a1) != capacity.Acquired || a.acquire(&a2) != capacity.Acquired {
		t.Fatal("the crashing replica's acquires were refused")
	}
	a.crash()
	crashed := f.redisNow(t)
	zs, err := f.client.ZRangeWithScores(context.Background(), key(f.store, "vllm-a"), 0, -1).Result()
	if err != nil || len(zs) != 2 {
		t.Fatalf("leases %v, %v; want the crashed replica's 2", zs, err)
	}
	for _, z := range zs {
		if exp := time.UnixMilli(int64(z.Score)); exp.Before(before.Add(ttl)) || exp.After(crashed.Add(ttl)) {
			t.Fatalf("lease %v expires at %v, want within [%v, %v]: TTL %v after its acquire", z.Member, exp, before.Add(ttl), crashed.Add(ttl), ttl)
		}
	}
	deadline := time.Now().Add(ttl + 5*time.Second)
	for {
		now := f.redisNow(t) // read before the acquire
		got := b.acquire(&b1)
		after := f.redisNow(t)
		switch {
		case got == capacity.Acquired && after.Before(before.Add(ttl)):
			t.Fatalf("a slot came back at %v, before the TTL %v after the crashed replica's acquire (%v): a live replica could lose its slots", after, ttl, before)
		case got == capacity.Acquired:
			b1.Release()
			return
		case now.After(crashed.Add(ttl)):
			t.Fatalf("still %v at %v, past the TTL %v after the crash (%v)", got, now, ttl, crashed)
		case time.Now().After(deadline):
			t.Fatal("the crashed replica's slots never came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisNow is Redis's clock, which lease expiries are on.
func (f *fleet) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := f.client.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// fast renews every 100 ms with a 300 ms TTL, so that expiry shows in a
// test's time.
var fast = Options{RenewInterval: 100 * time.Millisecond, TTL: 300 * time.Millisecond}

// pair starts replicas a and b of one slot each with o.
func (f *fleet) pair(o Options) (a, b *replica) { return f.replica("a", 1, o), f.replica("b", 1, o) }

func TestALiveReplicasLeasesAreRenewedPastTheTTL(t *testing.T) {
	f := newFleet(t)
	ttl := fast.TTL
	a, b := f.pair(fast)
	var a1, b1 capacity.Slot
	if a.acquire(&a1) != capacity.Acquired {
		t.Fatal("first acquire refused")
	}
	start := time.Now()
	for time.Since(start) < 3*ttl {
		time.Sleep(50 * time.Millisecond)
		a.renewNow(t, f)
		if got := b.acquire(&b1); got != capacity.Saturated {
			t.Fatalf("%v after the acquire, with renewals: %v, want saturated", time.Since(start), got)
		}
	}
	a1.Release()
	if got := b.acquire(&b1); got != capacity.Acquired {
		t.Fatalf("after the release: %v", got)
	}
	b1.Release()
}

func TestARenewalRestoresALeaseThatExpiredWhileItsRequestRuns(t *testing.T) {
	f := newFleet(t)
	a := f.replica("a", 2, fast)
	var a1 capacity.Slot
	a.acquire(&a1)
	if err := f.client.Del(context.Background(), key(f.store, "vllm-a")).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the heartbeat's ticker", a.clk.HasWaiters)
	a.clk.Step(100 * time.Millisecond)
	testutil.Eventually(t, "the lease to be re-added", func() bool { return f.leases(t) == 1 })
	a1.Release()
	if n := f.leases(t); n != 0 {
		t.Fatalf("%d leases after the release", n)
	}
}

func TestRedisDownFailsClosedOrDecidesOnTheLocalShare(t *testing.T) {
	tests := []struct {
		mode     redisstore.FailureMode
		replicas int
		want     []capacity.Result
	}{
		{redisstore.FailClosed, 2, []capacity.Result{capacity.Unavailable}},
		// maxInFlight 4 over 2 live replicas: 2 each.
		{redisstore.FailOpen, 2, []capacity.Result{capacity.Acquired, capacity.Acquired, capacity.Saturated}},
		{redisstore.FailOpen, 8, []capacity.Result{capacity.Acquired, capacity.Saturated}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.replicas), func(t *testing.T) {
			f := newFleetFailing(t, tc.mode)
			a := f.replica("a", 4, Options{Replicas: redisstore.StaticReplicas(tc.replicas)})
			if err := f.srv.Kill(); err != nil {
				t.Fatal(err)
			}
			slots := make([]capacity.Slot, len(tc.want))
			for i, want := range tc.want {
				if got := a.acquire(&slots[i]); got != want {
					t.Fatalf("acquire %d with Redis down: %v, want %v", i, got, want)
				}
			}
			for i := range slots {
				slots[i].Release() // no lease in Redis: nothing to remove
			}
		})
	}
}

func TestOnTheMemoryStoreTheLocalCountDecides(t *testing.T) {
	l, err := New(Options{Store: func() *redisstore.Store { return nil }, Replica: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Acquire("vllm-a", 1, 1, 1); got != capacity.Acquired {
		t.Fatalf("memory store: %v", got)
	}
	l.Release("vllm-a", 1)
}

func TestNewRefusesATTLNotLongerThanTheRenewal(t *testing.T) {
	_, err := New(Options{Store: func() *redisstore.Store { return nil }, Replica: "a", RenewInterval: time.Second, TTL: time.Second})
	if err == nil {
		t.Fatal("TTL equal to the renew interval accepted")
	}
	if _, err := New(Options{Store: func() *redisstore.Store { return nil }}); err == nil {
		t.Fatal("no replica name accepted")
	}
}

func TestAStoreMarkedDownIsNotCalled(t *testing.T) {
	f := newFleetFailing(t, redisstore.FailOpen)
	a := f.replica("a", 4, Options{Replicas: redisstore.StaticReplicas(4)})
	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Check(context.Background()); err == nil || f.store.Up() {
		t.Fatal("the store was not marked down with Redis killed")
	}
	var s1, s2 capacity.Slot
	if got := a.acquire(&s1); got != capacity.Acquired {
		t.Fatalf("first on a share of 1: %v", got)
	}
	if got := a.acquire(&s2); got != capacity.Saturated {
		t.Fatalf("second on a share of 1: %v", got)
	}
	s1.Release()
}

// One fleet-wide slot: a script round trip to take it, one ZREM to give
// it back, against a redis-server on loopback.
func BenchmarkFleetAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	st := redisstore.NewWithClient(c, redisstore.Options{Namespace: "ns", Policy: "bench"})
	defer func() { _ = st.Close() }()
	if err := c.Set(context.Background(), genKey(st), "established|0", 0).Err(); err != nil {
		b.Fatal(err) // a fleet that used this Redis before: no warm-up
	}
	l, err := New(Options{Store: func() *redisstore.Store { return st }, Replica: "a"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	tr := capacity.New(capacity.Options{Shared: l})
	defer tr.Close()
	if err := tr.Apply([]capacity.Backend{{Name: "vllm-a", MaxInFlight: 1 << 20}}, 0); err != nil {
		b.Fatal(err)
	}
	var s capacity.Slot
	b.ReportAllocs()
	for b.Loop() {
		if tr.Acquire(&s, "vllm-a") != capacity.Acquired {
			b.Fatal("refused")
		}
		s.Release()
	}
}

func TestAReleaseWakesTheOtherReplicasWaitersOnlyWhileContended(t *testing.T) {
	f := newFleet(t)
	a, b := f.pair(Options{})
	var a1, b1 capacity.Slot
	a.acquire(&a1)
	a1.Release() // nobody refused: no message
	a.acquire(&a1)
	if b.acquire(&b1) != capacity.Saturated {
		t.Fatal("b not refused")
	}
	a1.Release()
	b.room(t, "a release after b was refused")
	select {
	case got := <-b.rooms:
		t.Fatalf("a second room message %q: the uncontended release published", got)
	default:
	}
	select {
	case got := <-a.rooms:
		t.Fatalf("a heard its own release: %q", got)
	default:
	}
	if b.acquire(&b1) != capacity.Acquired {
		t.Fatal("b refused after the room")
	}
	b1.Release()
}

func TestACrashedReplicasExpiredSlotsWakeTheWaiters(t *testing.T) {
	f := newFleet(t)
	f.liveElsewhere()
	a, b := f.pair(fast)
	var a1, b1 capacity.Slot
	a.acquire(&a1)
	a.crash()
	if b.acquire(&b1) != capacity.Saturated {
		t.Fatal("b not refused")
	}
	time.Sleep(fast.TTL + 50*time.Millisecond) // Redis's clock: the lease expires
	testutil.Eventually(t, "b's heartbeat ticker", b.clk.HasWaiters)
	b.clk.Step(fast.RenewInterval) // b's heartbeat sweeps the expired lease
	b.room(t, "the crashed replica's lease expiring")
	if b.acquire(&b1) != capacity.Acquired {
		t.Fatal("b refused after the expiry")
	}
	b1.Release()
}

// TestAFrozenRedisFollowsTheStoresFailureMode freezes redis-server
// (SIGSTOP): each slot call times out and fails only itself, as the store's
// failureMode says (Closed: Unavailable, the server's 503
// store_unavailable; Open: this replica's share of maxInFlight), and a run
// of them marks the store down by themselves, with no rate-limit call. Once
// Redis answers again the fleet's count is exactly the slots held, those
// taken during the outage included.
func TestAFrozenRedisFollowsTheStoresFailureMode(t *testing.T) {
	if testing.Short() {
		t.Skip("freezes redis-server for a few seconds")
	}
	for _, tc := range []struct {
		mode redisstore.FailureMode
		// during is what acquires decide while Redis is frozen, with one
		// slot of maxInFlight 4 already held and 2 live replicas.
		during []capacity.Result
	}{
		{redisstore.FailClosed, []capacity.Result{capacity.Unavailable}},
		{redisstore.FailOpen, []capacity.Result{capacity.Acquired, capacity.Saturated}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			f := newFleetFailing(t, tc.mode)
			a := f.replica("a", 4, Options{Replicas: redisstore.StaticReplicas(2), RenewInterval: fast.RenewInterval, TTL: fast.TTL})
			var held capacity.Slot
			if a.acquire(&held) != capacity.Acquired {
				t.Fatal("the first acquire was refused")
			}
			if err := f.srv.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					if err := f.srv.Resume(); err != nil {
						t.Error(err)
					}
				}
			}
			defer resume()
			// Slot calls alone mark the store down.
			testutil.EventuallyWithin(t, 10*time.Second, "failed slot calls mark the store down", func() bool {
				var s capacity.Slot
				if got := a.acquire(&s); got != tc.during[0] {
					t.Fatalf("acquire with Redis frozen: %v, want %v", got, tc.during[0])
				}
				s.Release()
				return !f.store.Up()
			})
			slots := make([]capacity.Slot, len(tc.during))
			for i, want := range tc.during {
				if got := a.acquire(&slots[i]); got != want {
					t.Fatalf("acquire %d with the store down: %v, want %v", i, got, want)
				}
			}
			resume()
			testutil.EventuallyWithin(t, 10*time.Second, "the store back on Redis", f.store.Up)
			want := int64(1)
			for i := range slots {
				if slots[i].Backend() != "" {
					want++
				}
			}
			// The first renewal re-adds the held leases (expired on Redis's
			// clock while it was frozen) and removes those of the acquires
			// that failed, which the woken server ran late.
			a.renewNow(t, f)
			if n := f.leases(t); n != want {
				t.Fatalf("%d leases in Redis after the outage, want the %d slots held", n, want)
			}
			held.Release()
			for i := range slots {
				slots[i].Release()
			}
			if n := f.leases(t); n != 0 {
				t.Fatalf("%d leases after every release, want 0", n)
			}
		})
	}
}

// TestFailingOpenTheOutagesSlotsJoinTheFleetCountOnce kills redis-server
// and starts it again, empty: the slots two replicas took on their local
// shares during the outage are leases in the fleet's count once Redis
// answers, each once, so the fleet admits no more than maxInFlight in all.
func TestFailingOpenTheOutagesSlotsJoinTheFleetCountOnce(t *testing.T) {
	f := newFleetFailing(t, redisstore.FailOpen)
	o := Options{Replicas: redisstore.StaticReplicas(2), RenewInterval: fast.RenewInterval, TTL: fast.TTL}
	a, b := f.replica("a", 4, o), f.replica("b", 4, o)
	var a1, a2, a3, b1, b2 capacity.Slot
	if a.acquire(&a1) != capacity.Acquired {
		t.Fatal("the first acquire was refused")
	}
	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		r    *replica
		s    *capacity.Slot
		want capacity.Result
	}{
		{a, &a2, capacity.Acquired},  // a's share of 4 over 2 replicas is 2
		{a, &a3, capacity.Saturated}, // a holds 2
		{b, &b1, capacity.Acquired},
	} {
		if got := step.r.acquire(step.s); got != step.want {
			t.Fatalf("with Redis down: %v, want %v", got, step.want)
		}
	}
	if err := f.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the store on Redis", func() bool {
		return f.store.Up() && f.client.Ping(context.Background()).Err() == nil
	})
	a.renewNow(t, f)
	b.renewNow(t, f)
	if n := f.leases(t); n != 3 {
		t.Fatalf("%d leases after Redis returned, want the 3 slots held", n)
	}
	// Redis lost the leases: for one TTL the fleet's count is not trusted
	// (see TestARedisThatLostItsLeasesRefusesForOneTTL).
	f.liveElsewhere()
	time.Sleep(fast.TTL)
	a.renewNow(t, f) // on the fake clock, renewed only when stepped
	b.renewNow(t, f)
	if got := b.acquire(&b2); got != capacity.Acquired {
		t.Fatalf("the 4th slot of the fleet: %v", got)
	}
	if got := a.acquire(&a3); got != capacity.Saturated {
		t.Fatalf("a 5th slot of maxInFlight 4: %v, want saturated", got)
	}
	for _, s := range []*capacity.Slot{&a1, &a2, &b1, &b2} {
		s.Release()
	}
	if n := f.leases(t); n != 0 {
		t.Fatalf("%d leases after every release, want 0", n)
	}
}
