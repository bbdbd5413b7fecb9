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

// Package redisslots makes capacity's in-flight counts fleet-wide: a slot
// is also a lease in Redis, so a backend's maxInFlight holds for every
// data-plane replica together (SPEC 6b, 9). It implements capacity.Shared.
//
// # Leases
//
// Each backend has one sorted set, "fq:{ns/policy}:capacity:<backend>" (the
// policy's hash tag, so Redis Cluster puts it in the slot of the policy's
// buckets), whose members are leases ("<replica>/<incarnation>:<seq>") and
// whose scores are their expiry in milliseconds by Redis's own clock, so
// replicas' clock skew does not matter. One script, atomic, drops the
// expired leases, counts the rest against maxInFlight and adds the new
// one. A release removes its lease. Every RenewInterval each replica
// re-asserts its live leases (RenewBatch per call) with a fresh expiry; a
// renewal re-adds a lease that expired while Redis was unreachable, since
// its request is still at the backend.
//
// # Expiry bound
//
// A replica that crashes renews nothing more: its leases expire at most
// TTL (default 3 x RenewInterval = 3 s) after its last renewal, and the
// next acquire on the backend drops them, so its slots come back within
// TTL of the crash. A live replica loses a lease only if TTL passes with
// no renewal reaching Redis (three missed renewals by default).
//
// # Failure
//
// The conventions of package redisstore's store: each call is bounded by
// the store's timeout; a failed call fails only itself, and with the store
// marked down (Store.Up false, after its run of consecutive failures) Redis
// is not called at all. Failing Closed, the acquire is Unavailable (503
// store_unavailable); failing Open, it is decided locally against
// maxInFlight divided by the live replicas (redisstore.Replicas), at least
// one. A failed release is left to expire.
package redisslots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
)

// Defaults for Options fields left zero.
const (
	// DefaultRenewInterval is how often live leases are renewed.
	DefaultRenewInterval = time.Second
	// DefaultRenewBatch bounds the leases renewed by one call.
	DefaultRenewBatch = 256
)

// acquireScript drops the expired leases, and adds ARGV[3] expiring in
// ARGV[2] ms if fewer than ARGV[1] remain. It returns {1|0, count}.
//
// KEYS[1] the backend's lease set.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[1]) then
  return {0, n}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return {1, n + 1}
`)

// renewScript sets the leases ARGV[2..] to expire ARGV[1] ms from now,
// adding those that expired, and returns how many it set.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return #ARGV - 1
`)

// Options configures Leases.
type Options struct {
	// Store returns the Redis store in force, or nil while the policy's
	// store is memory (then the local count alone decides): for a data
	// plane, redisstore.Switch.Redis.
	Store func() *redisstore.Store
	// Replica names this replica (a pod name); with a random incarnation
	// it makes lease names unique across the fleet and restarts.
	Replica string
	// FailureMode is the store's failureMode; empty means FailClosed.
	FailureMode redisstore.FailureMode
	// Replicas counts the live replicas for the fail-open share; nil
	// means 1.
	Replicas redisstore.Replicas
	// Timeout bounds each call; zero means redisstore.DefaultTimeout.
	Timeout time.Duration
	// RenewInterval is the heartbeat period; zero means
	// DefaultRenewInterval.
	RenewInterval time.Duration
	// TTL is how long a lease outlives its last renewal; zero means
	// 3 x RenewInterval. It must exceed RenewInterval.
	TTL time.Duration
	// RenewBatch bounds the leases renewed per call; zero means
	// DefaultRenewBatch.
	RenewBatch int
	// Clock drives the heartbeat; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives one line when calls start and stop failing.
	Logger logr.Logger
}

// Leases is a capacity.Shared on Redis. Close it to stop its heartbeat.
type Leases struct {
	o      Options
	prefix string // "<replica>/<incarnation>:"

	mu      sync.Mutex
	live    map[string]map[uint64]struct{} // backend -> leases held in Redis
	failing bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ capacity.Shared = (*Leases)(nil)

// New returns Leases and starts their heartbeat.
func New(o Options) (*Leases, error) {
	if o.Store == nil {
		return nil, errors.New("redisslots: Options.Store is required")
	}
	if o.Replica == "" {
		return nil, errors.New("redisslots: Options.Replica is required; name the replica (its pod name)")
	}
	if o.Timeout <= 0 {
		o.Timeout = redisstore.DefaultTimeout
	}
	if o.RenewInterval <= 0 {
		o.RenewInterval = DefaultRenewInterval
	}
	if o.TTL <= 0 {
		o.TTL = 3 * o.RenewInterval
	}
	if o.TTL <= o.RenewInterval {
		return nil, errors.New("redisslots: the lease TTL " + o.TTL.String() + " must exceed the renew interval " + o.RenewInterval.String() + " (3x is the default)")
	}
	if o.RenewBatch <= 0 {
		o.RenewBatch = DefaultRenewBatch
	}
	if o.Replicas == nil {
		o.Replicas = redisstore.StaticReplicas(1)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	var inc [6]byte
	_, _ = rand.Read(inc[:])
	l := &Leases{
		o:      o,
		prefix: o.Replica + "/" + hex.EncodeToString(inc[:]) + ":",
		live:   map[string]map[uint64]struct{}{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go l.heartbeat()
	return l, nil
}

// key returns backend's lease set in st.
func key(st *redisstore.Store, backend string) string {
	return "fq:" + st.HashTag() + ":capacity:" + backend
}

func (l *Leases) member(seq uint64) string { return l.prefix + strconv.FormatUint(seq, 10) }

// Acquire implements capacity.Shared.
func (l *Leases) Acquire(backend string, limit int, local int64, seq uint64) capacity.Result {
	st := l.o.Store()
	if st == nil {
		return capacity.Acquired // memory store: the local count decides
	}
	if !st.Up() {
		return l.fallback(limit, local)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	res, err := acquireScript.Run(ctx, st.Client(), []string{key(st, backend)},
		limit, l.o.TTL.Milliseconds(), l.member(seq)).Int64Slice()
	if err == nil && len(res) != 2 {
		err = errors.New("the slot script answered " + strconv.Itoa(len(res)) + " values, want 2")
	}
	l.outcome(err)
	if err != nil {
		return l.fallback(limit, local)
	}
	if res[0] != 1 {
		return capacity.Saturated
	}
	l.mu.Lock()
	set := l.live[backend]
	if set == nil {
		set = map[uint64]struct{}{}
		l.live[backend] = set
	}
	set[seq] = struct{}{}
	l.mu.Unlock()
	return capacity.Acquired
}

// fallback decides an acquire Redis could not: Unavailable failing
// closed, else this replica's share of limit.
func (l *Leases) fallback(limit int, local int64) capacity.Result {
	if l.o.FailureMode != redisstore.FailOpen {
		return capacity.Unavailable
	}
	share := max(int64(limit/max(l.o.Replicas.Live(), 1)), 1)
	if local > share {
		return capacity.Saturated
	}
	return capacity.Acquired
}

// Release implements capacity.Shared. A lease Redis did not grant (the
// fallback's) has nothing to remove; a failed removal expires.
func (l *Leases) Release(backend string, seq uint64) {
	l.mu.Lock()
	set := l.live[backend]
	_, ok := set[seq]
	if ok {
		delete(set, seq)
		if len(set) == 0 {
			delete(l.live, backend)
		}
	}
	l.mu.Unlock()
	st := l.o.Store()
	if !ok || st == nil || !st.Up() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	l.outcome(st.Client().ZRem(ctx, key(st, backend), l.member(seq)).Err())
}

// outcome logs when calls start and stop failing.
func (l *Leases) outcome(err error) {
	l.mu.Lock()
	was := l.failing
	l.failing = err != nil
	l.mu.Unlock()
	switch {
	case err != nil && !was:
		l.o.Logger.Info("capacity slot call to Redis failed; such acquires are decided by the failure mode and leases expire within the TTL",
			"failureMode", string(l.o.FailureMode), "ttl", l.o.TTL, "error", err.Error())
	case err == nil && was:
		l.o.Logger.Info("capacity slot calls to Redis succeed again")
	}
}

func (l *Leases) heartbeat() {
	defer close(l.done)
	t := l.o.Clock.NewTicker(l.o.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C():
			l.renew()
		}
	}
}

// renew re-asserts every live lease, RenewBatch per call.
func (l *Leases) renew() {
	st := l.o.Store()
	if st == nil || !st.Up() {
		return
	}
	type batch struct {
		backend string
		args    []any
	}
	ttl := l.o.TTL.Milliseconds()
	var batches []batch
	l.mu.Lock()
	for backend, set := range l.live {
		args := []any{ttl}
		for seq := range set {
			if len(args) > l.o.RenewBatch {
				batches = append(batches, batch{backend, args})
				args = []any{ttl}
			}
			args = append(args, l.member(seq))
		}
		batches = append(batches, batch{backend, args})
	}
	l.mu.Unlock()
	for _, b := range batches {
		select {
		case <-l.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
		err := renewScript.Run(ctx, st.Client(), []string{key(st, b.backend)}, b.args...).Err()
		cancel()
		l.outcome(err)
	}
}

// Close stops the heartbeat and removes this replica's live leases from
// Redis (best effort: what is not removed expires).
func (l *Leases) Close() {
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		l.mu.Lock()
		live := l.live
		l.live = map[string]map[uint64]struct{}{}
		l.mu.Unlock()
		st := l.o.Store()
		if st == nil || !st.Up() {
			return
		}
		for backend, set := range live {
			members := make([]any, 0, len(set))
			for seq := range set {
				members = append(members, l.member(seq))
			}
			ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
			_ = st.Client().ZRem(ctx, key(st, backend), members...).Err()
			cancel()
		}
	})
}
