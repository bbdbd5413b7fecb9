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
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

// TestOneFailedCallFailsOnlyItself: a call that cannot reach Redis is
// answered alone (Closed: unavailable; Open: by the local share), the store
// stays on Redis, and the next call is decided by Redis again with no probe
// in between. Only consecutive failures over the probe interval mark it
// down.
func TestOneFailedCallFailsOnlyItself(t *testing.T) {
	for _, mode := range []FailureMode{FailClosed, FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			h := newProbeHarness(t, mode, 1)
			l := lim(1, time.Minute, 0)
			if d, err := h.s.Take(t0, userBatch("u", l)); err != nil || !d.Allowed {
				t.Fatalf("first take: %+v, %v", d, err)
			}
			h.m.Close()
			d, err := h.s.Take(t0, userBatch("v", l))
			switch {
			case mode == FailClosed && !errors.Is(err, limiter.ErrStoreUnavailable):
				t.Fatalf("the failed call: %+v, %v; want ErrStoreUnavailable", d, err)
			case mode == FailOpen && (err != nil || !d.Allowed):
				t.Fatalf("the failed call: %+v, %v; want it decided locally", d, err)
			}
			if !h.s.Up() || h.s.Health() != nil {
				t.Fatalf("one failed call marked the store down: %v", h.s.Health())
			}
			if err := h.m.Restart(); err != nil {
				t.Fatal(err)
			}
			// Redis's bucket of u, charged before, refuses: the call went to Redis.
			if d, err := h.s.Take(t0, userBatch("u", l)); err != nil || d.Allowed {
				t.Fatalf("the call after: %+v, %v; want Redis's refusal", d, err)
			}
			if n := h.obs.errorCount(ErrorDown); n != 0 {
				t.Fatalf("%d calls answered as down", n)
			}

			// Failures in one instant (a stall) do not mark it down; a run
			// over the probe interval does.
			h.m.Close()
			for range 5 {
				_, _ = h.s.Peek(t0, userBatch("u", l))
			}
			if !h.s.Up() {
				t.Fatal("five failures in one instant marked the store down")
			}
			h.fc.Step(DefaultDownAfterSpan - time.Millisecond)
			_, _ = h.s.Peek(t0, userBatch("u", l))
			if !h.s.Up() {
				t.Fatal("a run of failures shorter than the probe interval marked the store down")
			}
			h.fc.Step(time.Millisecond)
			_, _ = h.s.Peek(t0, userBatch("u", l))
			if h.s.Up() {
				t.Fatal("seven failures over the probe interval did not mark the store down")
			}
			if err := h.s.Health(); err == nil || !strings.Contains(err.Error(), "7 calls failed in a row over 200ms") {
				t.Fatalf("Health = %v; want the run of failures named", err)
			}
			select {
			case up := <-h.obs.states:
				if up {
					t.Fatal("the observer was told up, want down")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the observer was not told the store is down")
			}
			h.recover(t)
			if h.s.Health() != nil {
				t.Fatalf("Health after recovery: %v", h.s.Health())
			}
		})
	}
}

// TestRealRedisFrozenForOneCallFailsOnlyThatCall freezes a real
// redis-server (SIGSTOP) for one call: that call times out and fails alone,
// and the next, after the server thaws, is answered by Redis.
func TestRealRedisFrozenForOneCallFailsOnlyThatCall(t *testing.T) {
	srv := startRedis(t)
	s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: policyName(t), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l := lim(1, time.Minute, 0)
	if d, err := s.Take(time.Now(), userBatch("u", l)); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v, %v", d, err)
	}
	if err := srv.srv.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(time.Now(), userBatch("v", l))
	if rerr := srv.srv.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, limiter.ErrStoreUnavailable) || classify(err) != ErrorTimeout {
		t.Fatalf("the call to a frozen Redis: %v; want a timeout, unavailable", err)
	}
	if !s.Up() {
		t.Fatal("one timed-out call marked the store down")
	}
	// The timed-out connection is dropped; the next call dials afresh.
	if d, err := s.Take(time.Now(), userBatch("u", l)); err != nil || d.Allowed {
		t.Fatalf("the call after: %+v, %v; want Redis's refusal of u's spent bucket", d, err)
	}
}

// fillRedis writes about 3 MiB to a server started with
// --maxmemory-policy noeviction and then lowers its maxmemory to 2mb, so it
// is well over the limit and refuses every write as out of memory.
func fillRedis(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	junk := strings.Repeat("x", 64<<10)
	for i := range 48 {
		if err := c.Set(ctx, fmt.Sprintf("junk:%d", i), junk, 0).Err(); err != nil {
			t.Fatalf("filling Redis: %v", err)
		}
	}
	if err := c.ConfigSet(ctx, "maxmemory", "2mb").Err(); err != nil {
		t.Fatalf("lowering maxmemory: %v", err)
	}
	if err := c.Set(ctx, "one-more", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM ") {
		t.Fatalf("a write to the full Redis: %v, want OOM", err)
	}
}

// TestRealRedisOutOfMemoryAdmitsOnOnePathOnly: a real redis-server out of
// memory (noeviction) refuses the charge of every admission. Each refused
// charge is a failure decided by the local share, which already holds what
// Redis admitted to this replica, so the two paths together admit no more
// than the limit; a run of them marks the store down, and the probe does
// not bring it back while Redis still refuses writes (a PING would).
func TestRealRedisOutOfMemoryAdmitsOnOnePathOnly(t *testing.T) {
	srv := startRedis(t, "--maxmemory-policy", "noeviction")
	obs := newTestObserver()
	s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: policyName(t), FailureMode: FailOpen,
		CallerClock: true, Timeout: time.Second, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l := lim(10, time.Second, 0) // 10/s, burst 10
	now := time.Now()
	admitted := 0
	take := func(at time.Time, n int) {
		for range n {
			d, err := s.Take(at, userBatch("u", l))
			if err != nil {
				t.Fatalf("fail-open take: %v", err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	take(now, 10)
	if admitted != 10 {
		t.Fatalf("Redis admitted %d of the burst of 10", admitted)
	}
	fillRedis(t, srv.addr)
	// 100ms later one token has refilled in the bucket Redis holds; Redis
	// would grant it but cannot write the charge.
	take(now.Add(100*time.Millisecond), 20)
	if admitted != 11 {
		t.Fatalf("admitted %d in 100ms against a limit of 10/s with burst 10 (11); Redis and the local share both granted", admitted)
	}
	if n := obs.errorCount(ErrorReply) + obs.errorCount(ErrorDown); n != 20 {
		t.Fatalf("%d of the 20 calls on the full Redis failed, want all: Redis grants the token but cannot charge it", n)
	}
	// A check on the full server fails where a PING succeeds.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = s.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "OOM ") || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("Check on a full Redis = %v; want the OOM reply and a hint", err)
	}
	if s.Up() || s.Health() == nil {
		t.Fatal("a Redis that refuses every charge is not reported down")
	}
}

// TestSwitchReportsAStoreThatRefusesEveryCall puts in force, through the
// Switch as a data plane does at start and reload, stores whose every call
// fails although Redis answers PING: Cluster mode at a plain Redis,
// Standalone at a Sentinel or at a read-only replica, Sentinel mode with a
// wrong master name. Each is reported down at once, with a hint naming the
// misconfiguration.
func TestSwitchReportsAStoreThatRefusesEveryCall(t *testing.T) {
	plain := startRedis(t)
	sentinel := redistest.StartSentinel(t, "primary", plain.addr)
	host, port, err := net.SplitHostPort(plain.addr)
	if err != nil {
		t.Fatal(err)
	}
	replica := startRedis(t, "--replicaof", host, port)
	for _, tc := range []struct {
		name   string
		mode   config.RedisMode
		addr   string
		master string
		hint   string
	}{
		{name: "ClusterAtPlainRedis", mode: config.RedisCluster, addr: plain.addr, hint: "use mode Standalone"},
		{name: "StandaloneAtSentinel", mode: config.RedisStandalone, addr: sentinel.Addr(), hint: "the address is a Redis sentinel; use mode Sentinel"},
		{name: "SentinelWrongMaster", mode: config.RedisSentinel, addr: sentinel.Addr(), master: "nosuch", hint: `check sentinelMasterName`},
		{name: "StandaloneAtReadOnlyReplica", mode: config.RedisStandalone, addr: replica.addr, hint: "the address is a read-only replica"},
		{name: "SentinelRightMaster", mode: config.RedisSentinel, addr: sentinel.Addr(), master: "primary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := newTestObserver()
			sw := NewSwitch(SwitchOptions{Observer: obs})
			defer func() { _ = sw.Close() }()
			cfg := storeConfig(tc.addr, nil)
			cfg.Store.Redis.Mode, cfg.Store.Redis.SentinelMasterName = tc.mode, tc.master
			cfg.Store.Redis.FailureMode = config.FailClosed
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := sw.Prepare(ctx, cfg)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			p.Commit()
			health := sw.Health()
			if tc.hint == "" {
				if health != nil || !sw.Redis().Up() {
					t.Fatalf("a working store reported %v", health)
				}
				if d, err := sw.Take(time.Now(), userBatch("u", lim(1, time.Minute, 0))); err != nil || !d.Allowed {
					t.Fatalf("take: %+v, %v", d, err)
				}
				return
			}
			if sw.Redis().Up() || health == nil || !strings.Contains(health.Error(), tc.hint) {
				t.Fatalf("Health = %v; want down, with %q", health, tc.hint)
			}
			last := true
			for len(obs.states) > 0 {
				last = <-obs.states
			}
			if last {
				t.Fatal("the observer (rate_limit_store_up) was not told the store is down")
			}
			if _, err := sw.Take(time.Now(), userBatch("u", lim(1, time.Minute, 0))); !errors.Is(err, limiter.ErrStoreUnavailable) {
				t.Fatalf("take: %v, want ErrStoreUnavailable", err)
			}
		})
	}
}

// TestFailOpenKeepsItsBucketsAcrossFlaps: a store that flaps down and up
// does not hand out a fresh local burst at each outage. The local share
// holds what Redis admitted to this replica, and keeps its state across
// outages, refilling at the share's rate.
func TestFailOpenKeepsItsBucketsAcrossFlaps(t *testing.T) {
	h := newProbeHarness(t, FailOpen, 1)
	l := lim(10, time.Second, 0) // 10/s, burst 10
	for i := range 10 {
		if d, err := h.s.Take(t0, userBatch("u", l)); err != nil || !d.Allowed {
			t.Fatalf("take %d on Redis: %+v, %v", i, d, err)
		}
	}
	admitted := 0
	takeLocally := func(at time.Time) {
		for range 20 {
			d, err := h.s.Take(at, userBatch("u", l))
			if err != nil {
				t.Fatalf("fail-open take: %v", err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	for flap := range 3 {
		h.m.Close()
		takeLocally(t0) // failing calls, then down
		h.markDown(t)
		takeLocally(t0)
		if admitted != 0 {
			t.Fatalf("flap %d: %d admitted locally at the instant Redis had admitted the whole burst", flap, admitted)
		}
		h.recover(t)
	}
	h.m.Close()
	takeLocally(t0.Add(500 * time.Millisecond))
	if admitted != 5 {
		t.Fatalf("%d admitted locally 500ms later, want the 5 refilled at 10/s", admitted)
	}
}

// TestStandaloneAtANonOwningClusterNodeIsReportedDown points mode
// Standalone at the node of a real two-node Redis Cluster that does not own
// the policy's slot: every call is answered MOVED, and the store is down
// from the start with a hint to use mode Cluster.
func TestStandaloneAtANonOwningClusterNodeIsReportedDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nodes [2]*redisServer
	var admins [2]*redis.Client
	for i := range nodes {
		nodes[i] = startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		admins[i] = redis.NewClient(&redis.Options{Addr: nodes[i].addr})
		defer func() { _ = admins[i].Close() }()
	}
	for i, r := range [][2]string{{"0", "8191"}, {"8192", "16383"}} {
		if err := admins[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	host, port, _ := net.SplitHostPort(nodes[1].addr)
	if err := admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatalf("CLUSTER MEET: %v", err)
	}
	for i := range admins {
		for {
			info, err := admins[i].ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:2") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the two-node cluster did not reach cluster_state:ok: %q, %v", info, err)
			}
			time.Sleep(20 * time.Millisecond) // polling external processes
		}
	}
	slot, err := admins[0].ClusterKeySlot(ctx, KeyPrefix("team-a", "llm")+"probe").Result()
	if err != nil {
		t.Fatal(err)
	}
	other := nodes[0].addr // the node that does not own the slot
	if slot < 8192 {
		other = nodes[1].addr
	}
	sw := NewSwitch(SwitchOptions{})
	defer func() { _ = sw.Close() }()
	p, err := sw.Prepare(ctx, storeConfig(other, nil))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	p.Commit()
	if h := sw.Health(); h == nil || !strings.Contains(h.Error(), "MOVED") || !strings.Contains(h.Error(), "use mode Cluster") {
		t.Fatalf("Health = %v; want down on MOVED, with a hint to use mode Cluster", h)
	}
}
