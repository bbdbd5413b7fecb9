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

package redisstore

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func userBatch(key string, l limiter.Limit) limiter.Batch {
	return batchOf(bucket{limiter.DimensionUser, key, l})
}

// newMiniStore returns a miniredis server at t0 and a store of policy ns/p
// on it, both closed when the test ends.
func newMiniStore(t *testing.T) (*miniredis.Miniredis, *Store) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	s := NewWithClient(c, Options{Namespace: "ns", Policy: "p"})
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	m.SetTime(t0)
	return m, s
}

func TestIdleKeysExpireWhenTheirBucketIsFull(t *testing.T) {
	m, s := newMiniStore(t)
	key := s.Key(limiter.DimensionUser, "u")

	if _, err := s.Take(t0, userBatch("u", lim(2, time.Second, 0))); err != nil {
		t.Fatal(err)
	}
	if ttl := m.TTL(key); ttl != 500*time.Millisecond {
		t.Fatalf("after one take of 2/s the key expires in %s, want 500ms (when the bucket is full again)", ttl)
	}
	if _, err := s.Take(t0, userBatch("u", lim(2, time.Second, 0))); err != nil {
		t.Fatal(err)
	}
	if ttl := m.TTL(key); ttl != time.Second {
		t.Fatalf("after two takes the key expires in %s, want 1s", ttl)
	}
	m.FastForward(time.Second)
	if m.Exists(key) {
		t.Fatal("the key of a full bucket is still stored")
	}
	if err := s.Refund(t0, userBatch("u", lim(2, time.Second, 0))); err != nil {
		t.Fatal(err)
	}
	if m.Exists(key) {
		t.Fatal("refunding an absent bucket created it")
	}
}

func TestRealRedisKeysExpire(t *testing.T) {
	srv := startRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer func() { _ = c.Close() }()
	s := NewWithClient(c, Options{Namespace: "ns", Policy: policyName(t)})
	defer func() { _ = s.Close() }()
	if _, err := s.Take(time.Now(), userBatch("u", lim(1, 10*time.Second, 0))); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(context.Background(), s.Key(limiter.DimensionUser, "u")).Result()
	if err != nil || ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Fatalf("PTTL = %s, %v; want just under 10s, the bucket's refill time", ttl, err)
	}
}

// TestRedisClockIgnoresReplicaSkew runs two replicas whose clocks are an
// hour apart on one shared bucket: with Redis's TIME, the skewed replica
// gets no refill it has not waited for.
func TestRedisClockIgnoresReplicaSkew(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = c.Close() }()
	a := NewWithClient(c, Options{Namespace: "ns", Policy: "p"})
	b := NewWithClient(c, Options{Namespace: "ns", Policy: "p"})
	defer func() { _ = a.Close(); _ = b.Close() }()
	l := lim(2, time.Hour, 0)
	for i, take := range []struct {
		s    *Store
		now  time.Time
		want bool
	}{{a, t0, true}, {b, t0.Add(time.Hour), true}, {b, t0.Add(2 * time.Hour), false}, {a, t0, false}} {
		d, err := take.s.Take(take.now, userBatch("shared", l))
		if err != nil || d.Allowed != take.want {
			t.Fatalf("take %d: %+v, %v; want allowed %v", i, d, err, take.want)
		}
	}
}

// TestOnePolicyOneClusterSlot asks a real Redis Cluster node which slot each
// key of a policy hashes to, then runs a four-bucket batch through a cluster
// client: Redis Cluster refuses a script whose keys span slots.
func TestOnePolicyOneClusterSlot(t *testing.T) {
	srv := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer func() { _ = admin.Close() }()

	s := NewWithClient(admin, Options{Namespace: "team-a", Policy: "llm"})
	defer func() { _ = s.Close() }()
	keys := []string{"", "10.0.0.1", strings.Repeat("ab", 32), "meta-llama/Llama-3.1-8B-Instruct", "model{with}braces", "}{"}
	var slot int64 = -1
	for d := range limiter.NumDimensions {
		for _, k := range keys {
			got, err := admin.ClusterKeySlot(ctx, s.Key(limiter.Dimension(d), k)).Result()
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT: %v", err)
			}
			if slot >= 0 && got != slot {
				t.Fatalf("key %q is in slot %d, the policy's other keys in %d", s.Key(limiter.Dimension(d), k), got, slot)
			}
			slot = got
		}
	}

	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the one-node cluster to report cluster_state:ok", func() bool {
		info, err := admin.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.addr}})
	defer func() { _ = cc.Close() }()
	cs := NewWithClient(cc, Options{Namespace: "team-a", Policy: "llm"})
	defer func() { _ = cs.Close() }()
	b := batchOf(bucket{limiter.DimensionAPIKey, "k", lim(5, time.Second, 0)}, bucket{limiter.DimensionUser, "u", lim(5, time.Second, 0)},
		bucket{limiter.DimensionTeam, "t", lim(5, time.Second, 0)}, bucket{limiter.DimensionModel, "m{x}", lim(5, time.Second, 0)})
	if d, err := cs.Take(time.Now(), b); err != nil || !d.Allowed {
		t.Fatalf("a four-bucket take on Redis Cluster: %+v, %v", d, err)
	}
	tokens := costBatch(300, bucket{limiter.DimensionAPIKeyTokens, "k", lim(1000, time.Minute, 0)}, bucket{limiter.DimensionUserTokens, "u", lim(1000, time.Minute, 0)},
		bucket{limiter.DimensionTeamTokens, "t", lim(1000, time.Minute, 0)}, bucket{limiter.DimensionModelTokens, "m{x}", lim(1000, time.Minute, 0)})
	if d, err := cs.Take(time.Now(), tokens); err != nil || !d.Allowed || d.Tightest.Remaining != 700 {
		t.Fatalf("a four-bucket token take on Redis Cluster: %+v, %v", d, err)
	}
	if err := cs.Adjust(time.Now(), tokens); err != nil {
		t.Fatalf("a four-bucket adjust on Redis Cluster: %v", err)
	}
	// The same four keys without the shared tag are refused: the layout,
	// not luck, keeps the batch in one slot.
	err := cc.Eval(ctx, "return 1", []string{"fq:api_key:k", "fq:user:u", "fq:team:t", "fq:model:m"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("untagged keys: %v, want a CROSSSLOT refusal", err)
	}
}

// probeHarness is a Store on miniredis whose probe runs on a fake clock.
type probeHarness struct {
	m   *miniredis.Miniredis
	s   *Store
	fc  *clocktesting.FakeClock
	obs *testObserver
	// probes receives each probe's result.
	probes       chan error
	lastProbeErr error
}

func newProbeHarness(t *testing.T, mode FailureMode, replicas int) *probeHarness {
	t.Helper()
	h := &probeHarness{m: miniredis.RunT(t), fc: clocktesting.NewFakeClock(t0), obs: newTestObserver(), probes: make(chan error, 1)}
	var err error
	h.s, err = New(Options{Addresses: []string{h.m.Addr()}, Namespace: "ns", Policy: "p", FailureMode: mode, Replicas: StaticReplicas(replicas),
		Clock: h.fc, Observer: h.obs, PoolSize: 8, Timeout: 500 * time.Millisecond}) // generous: a loaded CI machine is not an outage
	if err != nil {
		t.Fatal(err)
	}
	h.s.onProbe = func(err error) { h.probes <- err }
	t.Cleanup(func() { _ = h.s.Close() })
	select {
	case <-h.obs.states: // the initial "up"
	case <-time.After(30 * time.Second):
		// The observer drops a state its full buffer cannot take.
		t.Fatal("the store did not report its initial state within 30s")
	}
	return h
}

// markDown makes one more failing call after a probe interval of failures,
// which marks the store down (the outage's earlier calls made the run long
// enough in count).
func (h *probeHarness) markDown(t *testing.T) {
	t.Helper()
	h.fc.Step(DefaultDownAfterSpan)
	_, _ = h.s.Peek(t0, userBatch("probe-the-outage", lim(1, time.Second, 0)))
	if h.s.Up() {
		t.Fatal("a run of failed calls over the probe interval did not mark the store down")
	}
}

// recover restarts Redis and steps the probe's clock until the store
// reports up, returning how many probe periods that took.
func (h *probeHarness) recover(t *testing.T) int {
	t.Helper()
	if err := h.m.Restart(); err != nil {
		t.Fatalf("restarting miniredis: %v", err)
	}
	deadline := time.After(5 * time.Second)
	for steps := 1; ; steps++ {
		for !h.fc.HasWaiters() { // the probe's timer
			select {
			case <-deadline:
				t.Fatal("no health probe is waiting for its timer")
			case <-time.After(time.Millisecond):
			}
		}
		h.fc.Step(DefaultProbeInterval)
		select {
		case err := <-h.probes:
			if err != nil {
				h.lastProbeErr = err
			}
			if err == nil {
				if !h.s.Up() {
					t.Fatal("a successful probe left the store down")
				}
				return steps
			}
		case <-deadline:
			t.Fatalf("probe %d did not finish within 5s", steps)
		}
	}
}

func TestFailClosedAnswersUnavailableAtOnceAndRecovers(t *testing.T) {
	h := newProbeHarness(t, FailClosed, 1)
	l := lim(1, time.Minute, 0)
	if d, err := h.s.Take(t0, userBatch("u", l)); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	h.m.Close()
	for i := range 3 {
		start := time.Now()
		_, err := h.s.Take(t0, userBatch("u", l))
		if !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("take %d with Redis down: %v, want ErrStoreUnavailable", i, err)
		}
		if el := time.Since(start); el > DefaultTimeout+250*time.Millisecond {
			t.Fatalf("take %d took %s to fail; the timeout is %s", i, el, DefaultTimeout)
		}
		if !h.s.Up() {
			t.Fatalf("take %d: failures within an instant marked the store down", i)
		}
	}
	h.markDown(t)
	for range 2 {
		if _, err := h.s.Take(t0, userBatch("u", l)); !errors.Is(err, limiter.ErrStoreUnavailable) {
			t.Fatalf("take with the store down: %v, want ErrStoreUnavailable", err)
		}
	}
	if n := h.obs.errorCount(ErrorDown); n != 2 {
		t.Fatalf("%d takes answered without contacting Redis, want 2 (those after it was marked down)", n)
	}
	if steps := h.recover(t); steps > 2 {
		t.Fatalf("recovery took %d probe periods, want at most 2 (%s)", steps, 2*DefaultProbeInterval)
	}
	// The bucket charged before the outage is still charged in Redis.
	if d, err := h.s.Take(t0, userBatch("u", l)); err != nil || d.Allowed {
		t.Fatalf("take after recovery: %+v, %v; want refused by the bucket kept in Redis", d, err)
	}
}

func TestFailClosedTimesOutOnAHangingRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 16)
	go func() { // accept and never answer
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	defer func() {
		_ = ln.Close()
		for c := range held {
			_ = c.Close()
		}
	}()
	s, err := New(Options{Addresses: []string{ln.Addr().String()}, Namespace: "ns", Policy: "p", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	start := time.Now()
	_, err = s.Take(t0, userBatch("u", lim(1, time.Second, 0)))
	if el := time.Since(start); el > 300*time.Millisecond {
		t.Fatalf("a hanging Redis held the request %s; the timeout is 50ms", el)
	}
	if !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
}

func TestFailOpenDividesEveryLimitAmongLiveReplicas(t *testing.T) {
	h := newProbeHarness(t, FailOpen, 3)
	l := lim(90, time.Second, 0)
	h.m.Close()
	allowed := 0
	var last limiter.Decision
	for range 100 {
		d, err := h.s.Take(t0, userBatch("u", l))
		if err != nil {
			t.Fatalf("fail-open take: %v", err)
		}
		if d.Allowed {
			allowed++
		}
		last = d
	}
	if allowed != 30 {
		t.Fatalf("a third of the 90/s burst is 30, admitted %d", allowed)
	}
	if want := 33333333 * time.Nanosecond; last.RetryAfter != want || last.LimitType != limiter.DimensionUser {
		t.Fatalf("refusal %+v, want user after %s (30/s per replica)", last, want)
	}
	h.markDown(t)
	if steps := h.recover(t); steps > 2 {
		t.Fatalf("recovery took %d probe periods", steps)
	}
	// Back on Redis, whose bucket was untouched by the outage.
	d, err := h.s.Take(t0, userBatch("u", l))
	if err != nil || !d.Allowed || d.Tightest.Remaining != 89 {
		t.Fatalf("take after recovery: %+v, %v; want Redis's full bucket", d, err)
	}
}

func TestTenOutagesLeakNothing(t *testing.T) {
	for _, mode := range []FailureMode{FailClosed, FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			h := newProbeHarness(t, mode, 2)
			l := lim(1000, time.Second, 0)
			var goroutines int
			for i := range 10 {
				h.m.Close()
				for range 5 {
					_, err := h.s.Take(t0, userBatch("u", l))
					if (mode == FailClosed) != errors.Is(err, limiter.ErrStoreUnavailable) {
						t.Fatalf("outage %d: take error %v in mode %s", i, err, mode)
					}
				}
				h.markDown(t)
				if steps := h.recover(t); steps > 2 {
					t.Fatalf("outage %d: recovery took %d probe periods (last error %v); pool %+v", i, steps, h.lastProbeErr, h.s.Client().(*redis.Client).PoolStats())
				}
				if _, err := h.s.Take(t0, userBatch("u", l)); err != nil {
					t.Fatalf("after outage %d: %v", i, err)
				}
				if i == 0 {
					goroutines = runtime.NumGoroutine()
				}
			}
			// A closed client's dial-retry goroutine exits at its next
			// attempt, within a second.
			for settle := time.Now(); runtime.NumGoroutine() > goroutines+2; time.Sleep(50 * time.Millisecond) {
				if time.Since(settle) > 3*time.Second {
					t.Fatalf("%d goroutines 3s after 10 outages, %d after the first", runtime.NumGoroutine(), goroutines)
				}
			}
			if st := h.s.Client().(*redis.Client).PoolStats(); st.TotalConns > 8 {
				t.Fatalf("the pool holds %d connections after 10 outages, more than its size 8", st.TotalConns)
			}
			if n := h.m.CurrentConnectionCount(); n > 2 {
				t.Fatalf("Redis sees %d connections from one idle store after 10 outages", n)
			}
		})
	}
}
