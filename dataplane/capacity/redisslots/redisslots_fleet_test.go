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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// trackerOnly is a replica as a data plane builds it: Leases without
// Options.OnRoom, and a Tracker whose OnRoom wakes its fair queue.
func (f *fleet) trackerOnly(name string) (*capacity.Tracker, chan string) {
	f.t.Helper()
	l, err := New(Options{Store: func() *redisstore.Store { return f.store }, Replica: name, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(l.Close)
	rooms := make(chan string, 64)
	tr := capacity.New(capacity.Options{Shared: l, OnRoom: func(b string) {
		select {
		case rooms <- b:
		default:
		}
	}})
	f.t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "vllm-a", MaxInFlight: 1}}, 0); err != nil {
		f.t.Fatal(err)
	}
	f.waitSubscribers(int64(f.replicas + 1))
	f.replicas++
	return tr, rooms
}

// TestATrackerHearsAnotherReplicasRelease: a Tracker whose Shared is Leases
// wakes its waiters (its OnRoom) when a slot frees on another replica, with
// nothing set in Leases' Options, as cmd/dataplane builds them. Before,
// only Options.OnRoom was told, which the data plane could not set (its
// Tracker is built after its Leases), so a waiter on a replica without the
// flood heard only of its own releases and retried on a timer.
func TestATrackerHearsAnotherReplicasRelease(t *testing.T) {
	f := newFleet(t)
	a, _ := f.trackerOnly("a")
	b, bRooms := f.trackerOnly("b")
	var a1, b1 capacity.Slot
	if r := a.Acquire(&a1, "vllm-a"); r != capacity.Acquired {
		t.Fatalf("a: %v", r)
	}
	if r := b.Acquire(&b1, "vllm-a"); r != capacity.Saturated {
		t.Fatalf("b with a holding the fleet's one slot: %v, want saturated", r)
	}
	a1.Release()
	select {
	case got := <-bRooms:
		if got != "vllm-a" {
			t.Fatalf("room on %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's Tracker was not told of the slot a released within 10 s")
	}
	if r := b.Acquire(&b1, "vllm-a"); r != capacity.Acquired {
		t.Fatalf("b after the room: %v", r)
	}
	b1.Release()
}

// TestARedisThatLostItsLeasesRefusesForOneTTL restarts redis-server empty
// while replica a holds the fleet's only slot. Before a's next renewal puts
// its lease back, the empty set would let b take a second slot: the backend
// would hold two at a maxInFlight of one. The lease generation, a key that
// never expires, is gone with the data, so the first contact after the
// restart starts a warm-up of one TTL, in which every live replica renews
// its leases (or they would have expired anyway), and acquires are refused;
// then the count is the fleet's again.
func TestARedisThatLostItsLeasesRefusesForOneTTL(t *testing.T) {
	f := newFleetFailing(t, redisstore.FailClosed)
	f.liveElsewhere()
	o := Options{RenewInterval: fast.RenewInterval, TTL: fast.TTL}
	a, b := f.replica("a", 1, o), f.replica("b", 1, o)
	var a1, b1 capacity.Slot
	if r := a.acquire(&a1); r != capacity.Acquired {
		t.Fatalf("a: %v", r)
	}
	if r := b.acquire(&b1); r != capacity.Saturated {
		t.Fatalf("b while a holds the slot: %v", r)
	}
	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the store on Redis", func() bool {
		return f.store.Up() && f.client.Ping(context.Background()).Err() == nil
	})
	restarted := time.Now()
	refusedUntilRenewed(t, f, a, b, "on a Redis that lost a's lease")
	if r := b.acquire(&b1); r != capacity.Saturated {
		t.Fatalf("b with a's lease back: %v, want saturated", r)
	}
	a1.Release()
	time.Sleep(fast.TTL - time.Since(restarted)) // Redis's clock: the warm-up ends
	testutil.Eventually(t, "b admitted once the warm-up is over", func() bool {
		if b.acquire(&b1) == capacity.Acquired {
			b1.Release()
			return true
		}
		return false
	})
}

// beatNow sets the beat to Redis's time, as a heartbeat's genScript does.
var beatNow = redis.NewScript(`
local t = redis.call('TIME')
redis.call('SET', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return 1
`)

// liveElsewhere keeps the beat fresh every 20 ms until the test ends, as
// the live replicas of a fleet do: the tests' heartbeats run on fake
// clocks, and without it Redis would see no replica for longer than a lease
// lives unrenewed and warm up (genLua).
func (f *fleet) liveElsewhere() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = beatNow.Run(ctx, f.client, []string{beatKey(f.store)}).Err()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	f.t.Cleanup(func() { cancel(); <-done })
}

// TestNoReplicaReachingRedisForALeaseLifeRefusesForOneTTL: when no
// replica's heartbeat reached Redis for longer than a lease lives
// unrenewed (Redis frozen, full or unreachable for the whole fleet), the
// leases of requests still running have expired, and until their holders
// renew, the empty set would admit past maxInFlight. The stale beat starts
// a warm-up of one TTL instead. Here the heartbeats run on fake clocks not
// stepped, which Redis cannot tell from an outage.
func TestNoReplicaReachingRedisForALeaseLifeRefusesForOneTTL(t *testing.T) {
	f := newFleetFailing(t, redisstore.FailClosed)
	o := Options{RenewInterval: fast.RenewInterval, TTL: fast.TTL}
	a, b := f.replica("a", 1, o), f.replica("b", 1, o)
	var a1 capacity.Slot
	if r := a.acquire(&a1); r != capacity.Acquired {
		t.Fatalf("a: %v", r)
	}
	defer a1.Release()
	time.Sleep(fast.TTL + 50*time.Millisecond) // Redis's clock: a's lease expires unrenewed
	refusedUntilRenewed(t, f, a, b, "after no replica reached Redis for a lease's life")
}

// refusedUntilRenewed checks that b is refused while a's one lease is
// missing from Redis, and that a's renewal puts it back.
func refusedUntilRenewed(t *testing.T, f *fleet, a, b *replica, what string) {
	t.Helper()
	var b1 capacity.Slot
	if r := b.acquire(&b1); r != capacity.Saturated {
		b1.Release()
		t.Fatalf("b %s, before a renewed: %v, want saturated", what, r)
	}
	a.renewNow(t, f) // a's lease is back
	if n := f.leases(t); n != 1 {
		t.Fatalf("%d leases after a's renewal, want 1", n)
	}
}

// TestALeaseIsNeverInRedisWithoutABeat: a data plane's heartbeat first
// beats up to a renewal period after its store appears; a lease taken
// before that sets the beat, so a Redis frozen right after the fleet
// started still goes stale, and warms up when it wakes (measured from
// outside: without it, the backend held 4 requests at a maxInFlight of 3
// after such a freeze).
func TestALeaseIsNeverInRedisWithoutABeat(t *testing.T) {
	f := newFleet(t)
	a := f.replica("a", 1, fast)
	if err := f.client.Del(context.Background(), beatKey(f.store)).Err(); err != nil {
		t.Fatal(err)
	}
	var a1 capacity.Slot
	if r := a.acquire(&a1); r != capacity.Acquired {
		t.Fatalf("a: %v", r)
	}
	defer a1.Release()
	if n, err := f.client.Exists(context.Background(), beatKey(f.store)).Result(); err != nil || n != 1 {
		t.Fatalf("no beat beside the lease: %d, %v", n, err)
	}
}

// timedReplica is a replica whose Tracker runs on a fake clock of its own,
// so that the time its slots are held, and so the spacing of releases it
// tells, is the test's to set; its Tracker's OnRoom (waking its fair queue
// in a data plane) reports on trackerRooms.
type timedReplica struct {
	*replica
	trClk        *clocktesting.FakeClock
	trackerRooms chan string
}

func (f *fleet) timedReplica(name string, maxInFlight int, o Options) *timedReplica {
	f.t.Helper()
	o.Store = func() *redisstore.Store { return f.store }
	o.Replica, o.Clock = name, clocktesting.NewFakeClock(time.Now())
	l, err := New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(l.Close)
	r := &timedReplica{trClk: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), trackerRooms: make(chan string, 64)}
	tr := capacity.New(capacity.Options{Shared: l, Clock: r.trClk, OnRoom: func(b string) {
		select {
		case r.trackerRooms <- b:
		default:
		}
	}})
	f.t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "vllm-a", MaxInFlight: int32(maxInFlight)}}, 0); err != nil {
		f.t.Fatal(err)
	}
	r.replica = &replica{tr: tr, leases: l, clk: o.Clock.(*clocktesting.FakeClock)}
	f.waitSubscribers(int64(f.replicas + 1))
	f.replicas++
	return r
}

// spacing is the time r tells a request waiting for, or refused, a slot
// on vllm-a, until the next release.
func (r *timedReplica) spacing() time.Duration {
	next, _ := r.tr.NextRelease([]string{"vllm-a"})
	return next
}

// TestTheSpacingIsTheFleetsOnOneRedis: two replicas share a backend of
// maxInFlight 8 on one redis-server, a holding 1 slot and b 3. A slot freed
// on either wakes waiters on both (the room channel), so with slots held 1
// s the fleet frees one every 1 s / 4 = 250 ms, and that is what each
// replica tells. Before, a divided by its own count and told 1 s, four
// times the truth (and b, 3 of 4, 333 ms): the replica with the fewest
// requests, which routing sends the fewest of, was the most wrong. A
// renewal brings a's count up to date with b's new slot (no call of its
// own); with Redis gone the local count stands, as it decides then.
func TestTheSpacingIsTheFleetsOnOneRedis(t *testing.T) {
	f := newFleet(t)
	f.liveElsewhere()
	a, b := f.timedReplica("a", 8, Options{}), f.timedReplica("b", 8, Options{})
	var a1, b1, b2, b3 capacity.Slot
	for _, s := range []*capacity.Slot{&b1, &b2, &b3} {
		if r := b.acquire(s); r != capacity.Acquired {
			t.Fatalf("b: %v", r)
		}
	}
	if r := a.acquire(&a1); r != capacity.Acquired { // the fleet's 4th of 8: timed
		t.Fatalf("a: %v", r)
	}
	defer func() { a1.Release(); b1.Release(); b2.Release(); b3.Release() }()
	a.trClk.Step(time.Second)
	a1.Release() // held 1 s by a's clock
	if r := a.acquire(&a1); r != capacity.Acquired {
		t.Fatalf("a again: %v", r)
	}
	if got, want := a.spacing(), 250*time.Millisecond; got != want {
		t.Errorf("a, holding 1 of the fleet's 4 slots of 1 s: spacing %v, want %v (1 s over 4)", got, want)
	}

	var b4 capacity.Slot
	if r := b.acquire(&b4); r != capacity.Acquired { // 5 of 8
		t.Fatalf("b's 4th: %v", r)
	}
	b.trClk.Step(time.Second)
	b4.Release() // held 1 s by b's clock; 4 left
	if got, want := b.spacing(), 250*time.Millisecond; got != want {
		t.Errorf("b, holding 3 of the fleet's 4 slots of 1 s: spacing %v, want %v (1 s over 4)", got, want)
	}
	if r := b.acquire(&b4); r != capacity.Acquired {
		t.Fatalf("b's 4th again: %v", r)
	}
	defer b4.Release()
	a.renewNow(t, f)
	if got, want := a.spacing(), 200*time.Millisecond; got != want {
		t.Errorf("a after its renewal read the fleet's 5 slots: spacing %v, want %v (1 s over 5)", got, want)
	}

	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	var a2 capacity.Slot
	if r := a.acquire(&a2); r != capacity.Unavailable {
		a2.Release()
		t.Fatalf("a with Redis gone, failing closed: %v, want unavailable", r)
	}
	if got, want := a.spacing(), time.Second; got != want {
		t.Errorf("a with Redis gone: spacing %v, want %v (1 s over its own 1 slot)", got, want)
	}
}

// TestARefusalInTheWarmUpIsToldTheWarmUpsEnd: Redis restarts empty, so the
// lease generation is gone and the first acquire starts a warm-up of one
// TTL (300 ms here) in which every acquire is refused. The refused replica
// tells its waiters and refusals the time left of it, not the 50 ms prior
// (a client told 50 ms retries into the warm-up and spends its retries),
// and wakes its waiters when the warm-up ends, which no release announces
// (without, they waited for their Retry-After bound); a slot is then free.
func TestARefusalInTheWarmUpIsToldTheWarmUpsEnd(t *testing.T) {
	f := newFleetFailing(t, redisstore.FailClosed)
	f.liveElsewhere()
	o := Options{RenewInterval: fast.RenewInterval, TTL: fast.TTL}
	b := f.timedReplica("b", 2, o)
	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the store on Redis", func() bool {
		return f.store.Up() && f.client.Ping(context.Background()).Err() == nil
	})
	var b1 capacity.Slot
	if r := b.acquire(&b1); r != capacity.Saturated {
		b1.Release()
		t.Fatalf("b on a Redis that lost its leases: %v, want saturated (warming up)", r)
	}
	refused := time.Now()
	// Told the warm-up's end (300 ms from its start, by Redis's clock in
	// whole milliseconds); the prior would be 50 ms.
	told := b.spacing()
	if told < fast.TTL-50*time.Millisecond || told > fast.TTL {
		t.Errorf("refused at the start of a %v warm-up: spacing %v, want %v less the milliseconds since it started", fast.TTL, told, fast.TTL)
	}
	select {
	case <-b.trackerRooms:
		t.Fatal("waiters woken before the warm-up's end")
	default:
	}
	time.Sleep(told - time.Since(refused) + 20*time.Millisecond) // Redis's clock: the warm-up ends
	b.trClk.Step(told)                                           // b's clock: the same
	select {
	case got := <-b.trackerRooms:
		if got != "vllm-a" {
			t.Fatalf("room on %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's waiters were not woken at the warm-up's end within 10 s")
	}
	if r := b.acquire(&b1); r != capacity.Acquired {
		t.Fatalf("b after the warm-up: %v, want acquired", r)
	}
	b1.Release()
}
