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
// # Waking waiters across the fleet
//
// A refused acquire marks the backend contended in Redis for two TTLs.
// While it is, a release publishes the backend's name on the policy's room
// channel, and so does a heartbeat that finds expired leases on a backend
// this replica was refused on (a crashed replica's slots). Every replica's
// heartbeat goroutine subscribes to the channel and tells the Tracker that
// uses the Leases (capacity.FleetRoom, set by capacity.New) and
// Options.OnRoom, so a waiter on one replica wakes for a slot freed on
// another as for a local release. A replica does not hear its own
// releases, which its Tracker already reported.
//
// # The fleet's count
//
// The acquire, release and renewal scripts return the backend's lease
// count, which they read anyway, and the Leases tell it to the Tracker
// (capacity.FleetCounts): a waiter here wakes for a release anywhere, so
// the time between releases it is told is the fleet's. No call is added;
// a backend this replica holds or was refused on is recounted at least
// every renewal period. When Redis fails, is marked down or is not the
// store in force, the Tracker is told no count is known, and this
// replica's own count, which then decides, stands.
//
// # Expiry bound
//
// A replica that crashes renews nothing more: its leases expire at most
// TTL (default 3 x RenewInterval = 3 s) after its last renewal, and the
// next acquire on the backend drops them, so its slots come back within
// TTL of the crash. A live replica loses a lease only if TTL passes with
// no renewal reaching Redis (three missed renewals by default).
//
// # Warm-up
//
// A lease set can lack the leases of requests still running: Redis lost its
// data (restarted empty, failed over to a replica behind), or no replica
// reached it for longer than a lease lives unrenewed (frozen or
// unreachable for the whole fleet), so the leases expired by Redis's clock.
// Until every holder's next renewal puts them back, the set would admit
// past maxInFlight. So the policy keeps a lease generation that never
// expires and a beat every heartbeat sets to Redis's time; a missing
// generation, or a beat older than the TTL less one renewal period, starts
// a warm-up of one TTL from the first contact, in which acquires are
// refused (Saturated), each refusal telling the Tracker the time left of
// it (capacity.FleetCounts), which is what waiters and refused clients are
// told at least, and when the Tracker wakes its waiters, since no release
// announces the end. Within it every live replica renews, or its leases
// would have expired anyway. A Redis never used for leases warms up too,
// at the first heartbeat after it appears, most likely before the first
// request.
//
// # Failure
//
// The conventions of package redisstore's store, whose failureMode the
// leases follow: each call is bounded by the store's timeout and reports
// its outcome to the store (Store.CallOutcome), so a run of failed slot
// calls marks the store down as failed bucket calls do; a failed call fails
// only itself, and with the store marked down (Store.Up false) Redis is not
// called at all. Failing Closed, the acquire is Unavailable (503
// store_unavailable); failing Open, it is decided locally against
// maxInFlight divided by the live replicas as the limiter's fallback
// divides its limits (redisstore.ShareCount), at least one. The lease of a
// failed release, or of a failed acquire (a frozen Redis runs the queued
// script when it wakes), is removed by the first renewal that reaches Redis
// again; until then, or if that fails too, it expires within the TTL.
//
// A slot decided locally is still a lease this replica holds: the first
// renewal after Redis answers again adds it to the backend's set under its
// own name, so the fleet's count includes the requests admitted during the
// outage (once each: a lease is a set member) until they end.
package redisslots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// genLua reads the lease generation, KEYS[3]: "<id>|<until>", where until
// is the end, in Redis's milliseconds, of a warm-up in which acquires are
// refused, because the lease sets may lack the leases of requests still
// running: a leased request holds its slot until its holder renews again.
// A warm-up of one TTL, ARGV[2] ms, starts
//
//   - when the generation is missing: the key never expires, so Redis lost
//     its data (restarted empty, failed over to a replica behind, evicted
//     it) or was never used for leases;
//   - when the beat, KEYS[4], which every replica's heartbeat sets to
//     Redis's time each renewal period, is older than ARGV[5] ms (the TTL
//     less one renewal period): no replica reached Redis for so long that
//     leases of live requests may have expired (Redis frozen or
//     unreachable for everyone).
//
// Within it every live replica renews its leases, putting back those that
// expired, or they would have expired anyway. ARGV[4] is the new
// generation's id. It sets now, ttl and warm.
const genLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local g = redis.call('GET', KEYS[3])
local upto = 0
if g then upto = tonumber(string.match(g, '|(%d+)$')) or 0 end
local beat = tonumber(redis.call('GET', KEYS[4]) or '')
if not g or (beat and now - beat > tonumber(ARGV[5]) and now >= upto) then
  upto = now + ttl
  g = ARGV[4] .. '|' .. upto
  redis.call('SET', KEYS[3], g)
end
local warm = now < upto
`

// acquireScript drops the expired leases, and adds ARGV[3] expiring in
// ARGV[2] ms if fewer than ARGV[1] remain and the lease generation is not
// warming up (genLua). A refusal marks the backend contended for 2 x
// ARGV[2] ms. A lease taken sets the beat if there is none yet, so that no
// lease is ever in Redis without a beat to go stale (a replica's heartbeat
// first beats up to a renewal period after its store appears). It returns
// {1|0, count, warm}: the leases held after it, and the milliseconds left
// of a warm-up that refused it (0 when none did).
//
// KEYS[1] the backend's lease set; KEYS[2] its contended mark; KEYS[3] and
// KEYS[4] the policy's lease generation and beat.
var acquireScript = redis.NewScript(genLua + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if warm or n >= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', 2 * ttl)
  if warm then return {0, n, upto - now} end
  return {0, n, 0}
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
if not beat then
  redis.call('SET', KEYS[4], now)
end
return {1, n + 1, 0}
`)

// genScript is genLua, run by the heartbeat every renewal period: a Redis
// that lost the leases, or that no replica reached for too long, starts its
// warm-up at the first contact of any replica, and a new fleet's before its
// first request, most likely. It then sets the beat. KEYS[3], KEYS[4],
// ARGV[2], ARGV[4] and ARGV[5] are used; KEYS[1] is a key never written.
//
// A full Redis (maxmemory, noeviction) refuses a script's first write that
// may grow memory, but not the writes after one, and the slot scripts start
// with a deletion (ZREMRANGEBYSCORE), so leases are taken and renewed while
// Redis is full. The beat, a fixed-size overwrite, follows a deletion too:
// otherwise a full Redis would go stale and start a warm-up while every
// lease is being renewed.
var genScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
` + genLua + `
redis.call('SET', KEYS[4], now)
return 1
`)

// releaseScript removes lease ARGV[1] and, while the backend is contended
// (a replica was refused within two TTLs), publishes ARGV[3] on channel
// ARGV[2] so that every replica's waiters hear of the room. It returns the
// leases left.
//
// KEYS[1] the backend's lease set; KEYS[2] its contended mark.
var releaseScript = redis.NewScript(`
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return redis.call('ZCARD', KEYS[1])
`)

// renewScript drops the expired leases, sets the leases ARGV[4..] to
// expire ARGV[1] ms from now (adding those that expired), and, when it
// dropped some while the backend is contended, publishes ARGV[3] on channel
// ARGV[2]: a crashed replica's slots wake the fleet's waiters when they
// expire. It returns {1 while the backend is contended else 0, the leases
// held}.
//
// KEYS[1] the backend's lease set; KEYS[2] its contended mark.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local expired = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
if #ARGV >= 4 then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
local contended = redis.call('EXISTS', KEYS[2])
if expired > 0 and contended == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return {contended, redis.call('ZCARD', KEYS[1])}
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
	// OnRoom, if set, is told when another replica releases a slot on a
	// backend that refused a request within two TTLs: waiters on every
	// replica then hear of the room. It is called from the heartbeat
	// goroutine and must not block. A capacity.Tracker given these Leases
	// as its Shared is told as well (NotifyRoom), so a data plane, which
	// builds its Tracker after its Leases, need not set it.
	OnRoom func(backend string)
}

// Leases is a capacity.Shared on Redis. Close it to stop its heartbeat.
type Leases struct {
	o      Options
	prefix string // "<replica>/<incarnation>:"

	mu      sync.Mutex
	live    map[string]map[uint64]struct{} // backend -> leases held, renewed into Redis
	refused map[string]struct{}            // backends Redis refused lately: swept while contended
	// stray are leases not held that Redis may still have: their release
	// failed, or their acquire failed but a frozen server runs the queued
	// script when it wakes. The next renewal removes them, so they do not
	// hold slots for a TTL. At most maxStray; beyond that they expire.
	stray   map[string][]uint64
	nstray  int
	failing bool

	// told are the backends whose fleet count counts was told (NotifyCounts)
	// since it was last told none was known; guarded by mu. anyTold: told
	// is not empty, read without mu where the memory store decides.
	told    map[string]struct{}
	anyTold atomic.Bool

	renewals atomic.Uint64                                      // renewals the heartbeat has run, for tests
	room     atomic.Pointer[func(string)]                       // as NotifyRoom set it; Options.OnRoom is told too
	counts   atomic.Pointer[func(string, int64, time.Duration)] // as NotifyCounts set it
	kick     chan struct{}                                      // NotifyRoom: subscribe now, not at the next tick
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

var (
	_ capacity.Shared      = (*Leases)(nil)
	_ capacity.FleetRoom   = (*Leases)(nil)
	_ capacity.FleetCounts = (*Leases)(nil)
)

// NotifyCounts implements capacity.FleetCounts: f is told the lease set's
// size that each acquire, release and renewal reads anyway (no call of its
// own), -1 when Redis did not answer or is not used, and the time left of
// a warm-up that refused an acquire.
func (l *Leases) NotifyCounts(f func(backend string, inFlight int64, warm time.Duration)) {
	if f == nil {
		l.counts.Store(nil)
	} else {
		l.counts.Store(&f)
	}
}

// tell tells NotifyCounts' function what Redis said of backend.
func (l *Leases) tell(backend string, inFlight int64, warm time.Duration) {
	f := l.counts.Load()
	if f == nil {
		return
	}
	if inFlight >= 0 {
		l.mu.Lock()
		l.told[backend] = struct{}{}
		l.anyTold.Store(true)
		l.mu.Unlock()
	}
	(*f)(backend, inFlight, warm)
}

// forget tells NotifyCounts' function that no fleet count is known, of
// every backend it was told one of: Redis failed, is marked down, or is
// not the store in force. The local count then stands, as it decides.
func (l *Leases) forget() {
	if !l.anyTold.Load() {
		return
	}
	l.mu.Lock()
	told := l.told
	l.told = map[string]struct{}{}
	l.anyTold.Store(false)
	l.mu.Unlock()
	for backend := range told {
		l.tell(backend, -1, 0)
	}
}

// NotifyRoom implements capacity.FleetRoom: f is told of room as
// Options.OnRoom is (replacing the f of an earlier call), and the heartbeat
// subscribes to the room channel at once.
func (l *Leases) NotifyRoom(f func(backend string)) {
	if f == nil {
		l.room.Store(nil)
	} else {
		l.room.Store(&f)
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

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
		o:       o,
		prefix:  o.Replica + "/" + hex.EncodeToString(inc[:]) + ":",
		live:    map[string]map[uint64]struct{}{},
		refused: map[string]struct{}{},
		stray:   map[string][]uint64{},
		told:    map[string]struct{}{},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go l.heartbeat()
	return l, nil
}

// key returns backend's lease set in st.
func key(st *redisstore.Store, backend string) string {
	return "fq:" + st.HashTag() + ":capacity:" + backend
}

// genKey is the policy's lease generation (genLua).
func genKey(st *redisstore.Store) string { return "fq:" + st.HashTag() + ":capacity-gen" }

// beatKey is the policy's lease beat (genLua).
func beatKey(st *redisstore.Store) string { return "fq:" + st.HashTag() + ":capacity-beat" }

// contendedKey marks backend as having refused a request lately.
func contendedKey(st *redisstore.Store, backend string) string {
	return "fq:" + st.HashTag() + ":capacity-contended:" + backend
}

// roomChannel is the policy's channel of releases on contended backends;
// a message is the backend's name, a NUL and the releasing replica's
// lease prefix.
func roomChannel(st *redisstore.Store) string { return "fq:" + st.HashTag() + ":capacity-room" }

func (l *Leases) member(seq uint64) string { return l.prefix + strconv.FormatUint(seq, 10) }

// Acquire implements capacity.Shared.
func (l *Leases) Acquire(backend string, limit int, local int64, seq uint64) capacity.Result {
	st := l.o.Store()
	if st == nil {
		l.forget()
		return capacity.Acquired // memory store: the local count decides
	}
	if !st.Up() {
		l.forget()
		return l.fallback(st, backend, limit, local, seq)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	// The lease's member also names a generation this acquire starts.
	member := l.member(seq)
	res, err := acquireScript.Run(ctx, st.Client(), []string{key(st, backend), contendedKey(st, backend), genKey(st), beatKey(st)},
		limit, l.o.TTL.Milliseconds(), member, member, l.staleBeat()).Int64Slice()
	if err == nil && len(res) != 3 {
		err = errors.New("the slot script answered " + strconv.Itoa(len(res)) + " values, want 3")
	}
	l.outcome(st, err)
	if err != nil {
		r := l.fallback(st, backend, limit, local, seq)
		if r != capacity.Acquired {
			l.strayed(backend, seq)
		}
		return r
	}
	if res[0] != 1 {
		l.mu.Lock()
		l.refused[backend] = struct{}{}
		l.mu.Unlock()
		if res[2] > 0 {
			// Warming up: the set lacks leases not yet renewed, so its
			// size says nothing yet.
			l.tell(backend, -1, time.Duration(res[2])*time.Millisecond)
		} else {
			l.tell(backend, res[1], 0)
		}
		return capacity.Saturated
	}
	l.hold(backend, seq)
	l.tell(backend, res[1], 0)
	return capacity.Acquired
}

// staleBeat is the age of the beat past which leases of live requests may
// have expired (genLua), in milliseconds.
func (l *Leases) staleBeat() int64 { return (l.o.TTL - l.o.RenewInterval).Milliseconds() }

// touchGeneration runs genScript: a Redis that lost the leases, or that no
// replica reached for too long, starts its warm-up now; the beat is set.
func (l *Leases) touchGeneration(st *redisstore.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	none := "fq:" + st.HashTag() + ":capacity-none"
	err := genScript.Run(ctx, st.Client(), []string{none, none, genKey(st), beatKey(st)}, "", l.o.TTL.Milliseconds(), "", l.prefix+"gen", l.staleBeat()).Err()
	l.outcome(st, err)
}

// maxStray bounds the stray leases remembered for removal.
const maxStray = 4096

// strayed remembers lease seq of backend, not held, whose acquire or
// release failed, for the next renewal to remove.
func (l *Leases) strayed(backend string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nstray < maxStray {
		l.stray[backend] = append(l.stray[backend], seq)
		l.nstray++
	}
}

// hold records lease seq of backend as live, to be renewed until released.
func (l *Leases) hold(backend string, seq uint64) {
	l.mu.Lock()
	set := l.live[backend]
	if set == nil {
		set = map[uint64]struct{}{}
		l.live[backend] = set
	}
	set[seq] = struct{}{}
	l.mu.Unlock()
}

// fallback decides an acquire Redis could not, as st's failure mode says:
// Unavailable failing closed, else by this replica's share of limit. A
// slot granted so is held as a lease, which the renewals put in Redis once
// it answers again.
func (l *Leases) fallback(st *redisstore.Store, backend string, limit int, local int64, seq uint64) capacity.Result {
	if st.FailureMode() != redisstore.FailOpen {
		return capacity.Unavailable
	}
	if local > redisstore.ShareCount(int64(limit), l.o.Replicas.Live()) {
		return capacity.Saturated
	}
	l.hold(backend, seq)
	return capacity.Acquired
}

// Release implements capacity.Shared. A lease Redis never held (the
// fallback's, not renewed yet) is removed harmlessly; one that could not be
// removed (Redis down, the call failed) is removed by the next renewal
// that reaches Redis, or expires.
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
	if !ok || st == nil {
		return
	}
	if !st.Up() {
		l.strayed(backend, seq)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	n, err := releaseScript.Run(ctx, st.Client(), []string{key(st, backend), contendedKey(st, backend)},
		l.member(seq), roomChannel(st), backend+"\x00"+l.prefix).Int64()
	l.outcome(st, err)
	if err != nil {
		l.strayed(backend, seq)
		return
	}
	l.tell(backend, n, 0)
}

// outcome reports a call's outcome to the store and logs when calls start
// and stop failing.
func (l *Leases) outcome(st *redisstore.Store, err error) {
	st.CallOutcome(err)
	l.mu.Lock()
	was := l.failing
	l.failing = err != nil
	l.mu.Unlock()
	if err != nil {
		l.forget()
	}
	switch {
	case err != nil && !was:
		l.o.Logger.Info("capacity slot call to Redis failed; such acquires are decided by the failure mode and leases expire within the TTL",
			"failureMode", string(st.FailureMode()), "ttl", l.o.TTL, "error", err.Error())
	case err == nil && was:
		l.o.Logger.Info("capacity slot calls to Redis succeed again")
	}
}

func (l *Leases) heartbeat() {
	defer close(l.done)
	t := l.o.Clock.NewTicker(l.o.RenewInterval)
	defer t.Stop()
	var sub subscription
	defer sub.close()
	if st := l.o.Store(); st != nil && st.Up() {
		l.touchGeneration(st)
	}
	sub.follow(l.o.Store(), l.wantRoom())
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
			sub.follow(l.o.Store(), l.wantRoom())
		case <-t.C():
			l.renew()
			l.renewals.Add(1)
			sub.follow(l.o.Store(), l.wantRoom())
		case m, ok := <-sub.ch:
			if !ok {
				sub.close() // resubscribed at the next tick
				continue
			}
			backend, from, _ := strings.Cut(m.Payload, "\x00")
			if from == l.prefix {
				continue
			}
			if f := l.room.Load(); f != nil {
				(*f)(backend)
			}
			if l.o.OnRoom != nil {
				l.o.OnRoom(backend)
			}
		}
	}
}

// wantRoom reports whether someone is to be told of room, so the heartbeat
// subscribes to the room channel.
func (l *Leases) wantRoom() bool { return l.o.OnRoom != nil || l.room.Load() != nil }

// subscription is the heartbeat's subscription to the room channel of the
// store in force, if any.
type subscription struct {
	client redis.UniversalClient
	ps     *redis.PubSub
	ch     <-chan *redis.Message // nil while not subscribed: never ready
}

// follow subscribes to st's room channel, unless already subscribed
// through st's current client, or unsubscribes when st is nil or want is
// false. go-redis reconnects a subscription by itself; a client the store
// replaced after an outage is followed here.
func (s *subscription) follow(st *redisstore.Store, want bool) {
	if !want || st == nil {
		s.close()
		return
	}
	c := st.Client()
	if s.ps != nil && s.client == c {
		return
	}
	s.close()
	s.client = c
	s.ps = c.Subscribe(context.Background(), roomChannel(st))
	s.ch = s.ps.Channel(redis.WithChannelSize(64))
}

func (s *subscription) close() {
	if s.ps != nil {
		_ = s.ps.Close()
	}
	*s = subscription{}
}

// renew re-asserts every live lease, RenewBatch per call, and sweeps the
// expired leases of the backends this replica was refused on, so that
// their expiry wakes its waiters.
func (l *Leases) renew() {
	st := l.o.Store()
	if st == nil || !st.Up() {
		return
	}
	l.touchGeneration(st)
	type batch struct {
		backend string
		args    []any
	}
	ttl := l.o.TTL.Milliseconds()
	head := func(backend string) []any {
		return []any{ttl, roomChannel(st), backend + "\x00"} // from no one: every replica hears it
	}
	var batches []batch
	l.mu.Lock()
	stray := l.stray
	if l.nstray > 0 {
		l.stray, l.nstray = map[string][]uint64{}, 0
	}
	for backend, set := range l.live {
		args := head(backend)
		for seq := range set {
			if len(args) >= 3+l.o.RenewBatch {
				batches = append(batches, batch{backend, args})
				args = head(backend)
			}
			args = append(args, l.member(seq))
		}
		batches = append(batches, batch{backend, args})
	}
	for backend := range l.refused {
		if l.live[backend] == nil {
			batches = append(batches, batch{backend, head(backend)})
		}
	}
	l.mu.Unlock()
	for backend, seqs := range stray {
		members := make([]any, len(seqs))
		for i, seq := range seqs {
			members[i] = l.member(seq)
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
		err := st.Client().ZRem(ctx, key(st, backend), members...).Err()
		cancel()
		l.outcome(st, err)
		if err != nil {
			for _, seq := range seqs {
				l.strayed(backend, seq) // the next renewal tries again
			}
		}
	}
	for _, b := range batches {
		select {
		case <-l.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
		res, err := renewScript.Run(ctx, st.Client(), []string{key(st, b.backend), contendedKey(st, b.backend)}, b.args...).Int64Slice()
		cancel()
		if err == nil && len(res) != 2 {
			err = errors.New("the renewal script answered " + strconv.Itoa(len(res)) + " values, want 2")
		}
		l.outcome(st, err)
		if err != nil {
			continue
		}
		if res[0] == 0 {
			l.mu.Lock()
			delete(l.refused, b.backend)
			l.mu.Unlock()
		}
		l.tell(b.backend, res[1], 0)
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
			_ = st.Client().Publish(ctx, roomChannel(st), backend+"\x00"+l.prefix).Err()
			cancel()
		}
	})
}
