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
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// Mode says how the addresses are to be read.
type Mode string

const (
	// ModeStandalone is one Redis server (or a proxy in front of several) at
	// exactly one address.
	ModeStandalone Mode = "Standalone"
	// ModeCluster is a Redis Cluster; the addresses are seed nodes.
	ModeCluster Mode = "Cluster"
	// ModeSentinel is a primary found through Redis Sentinel; the addresses
	// are the sentinels and SentinelMasterName names the primary.
	ModeSentinel Mode = "Sentinel"
)

// FailureMode says what the store answers while Redis is unreachable.
type FailureMode string

const (
	// FailClosed refuses every request with limiter.ErrStoreUnavailable (a
	// 503 store_unavailable) until Redis answers again.
	FailClosed FailureMode = "Closed"
	// FailOpen answers from per-replica in-memory buckets, each limit divided
	// by the number of live replicas, until Redis answers again.
	FailOpen FailureMode = "Open"
)

// Defaults for Options fields left zero.
const (
	// DefaultTimeout bounds one store call: the default of
	// store.redis.timeout (see config.DefaultStoreTimeout for its choice).
	DefaultTimeout = config.DefaultStoreTimeout
	// DefaultProbeInterval is how often an unreachable Redis is pinged, so
	// the store returns to it within about this long of it answering.
	DefaultProbeInterval = 200 * time.Millisecond
	// DefaultProbeTimeout bounds one health probe, long enough for a fresh
	// connection's handshake (TLS and AUTH included) on a slow network.
	DefaultProbeTimeout = 500 * time.Millisecond
	// DefaultPoolSize is the connection pool size per Redis node.
	DefaultPoolSize = 64
)

// MaxWindow is the longest full-refill time (burst x period / requests) of a
// bucket the store can hold, about 52 days: the script's arithmetic is exact
// in nanoseconds up to 2^53 and this leaves a factor of two of headroom.
const MaxWindow = time.Duration(1 << 52)

// Error kinds reported to Observer.StoreError.
const (
	// ErrorTimeout is a call that ran out of its timeout.
	ErrorTimeout = "timeout"
	// ErrorConnection is a call that could not reach Redis.
	ErrorConnection = "connection"
	// ErrorReply is an error answered by Redis itself, e.g. a script error
	// or a refused AUTH.
	ErrorReply = "reply"
	// ErrorDown is a call answered without contacting Redis because it is
	// known to be unreachable.
	ErrorDown = "down"
)

// Operations reported to Observer.StoreLatency.
const (
	// OpTake is a check-and-charge of one batch.
	OpTake = "take"
	// OpPeek is a check without charging.
	OpPeek = "peek"
	// OpRefund gives tokens back.
	OpRefund = "refund"
	// OpAdjust settles token buckets: charges or refunds signed costs.
	OpAdjust = "adjust"
)

// Observer receives the store's measurements. Implementations must be cheap
// and safe for concurrent use; labels must come from the fixed sets above.
type Observer interface {
	// StoreLatency records the duration of one Redis round trip of op.
	StoreLatency(op string, d time.Duration)
	// StoreError counts one failed call of the given kind.
	StoreError(kind string)
	// StoreState records whether Redis is reachable and, when not, whether
	// the store answers from its in-memory fallback.
	StoreState(up, fallback bool)
}

// Replicas reports the number of live data-plane replicas sharing the store,
// so a fail-open fallback can give each its share of every limit.
type Replicas interface {
	// Live returns the number of live replicas, at least 1.
	Live() int
}

// StaticReplicas is a fixed replica count, for deployments outside
// Kubernetes (the --store-replicas flag).
type StaticReplicas int

// Live implements Replicas; it never returns less than 1.
func (n StaticReplicas) Live() int { return max(int(n), 1) }

// Options configures a Store.
type Options struct {
	// Addresses are host:port pairs: exactly one for ModeStandalone, seed
	// nodes for ModeCluster, sentinels for ModeSentinel.
	Addresses []string
	// Mode reads Addresses; empty means ModeStandalone.
	Mode Mode
	// SentinelMasterName names the primary; required with ModeSentinel.
	SentinelMasterName string
	// Username and Password authenticate (ACL user, or Password alone for
	// requirepass); both may be empty.
	Username, Password string
	// DB selects the logical database; Redis Cluster has only 0.
	DB int
	// TLS, when set, connects with TLS using this configuration.
	TLS *tls.Config
	// Timeout bounds each call; zero means DefaultTimeout.
	Timeout time.Duration
	// FailureMode is the behaviour while Redis is unreachable; empty means
	// FailClosed.
	FailureMode FailureMode
	// Namespace and Policy name the policy whose buckets the store holds.
	// Every key of one policy shares the hash tag {Namespace/Policy}, so
	// every script touches one Redis Cluster slot.
	Namespace, Policy string
	// Replicas counts the live replicas for the fail-open fallback; nil
	// means 1, every replica keeping the whole limit.
	Replicas Replicas
	// Observer, if set, receives latency, errors and state changes.
	Observer Observer
	// Logger receives one line per state transition.
	Logger logr.Logger
	// Clock drives the health probe; nil means the real clock.
	Clock clock.Clock
	// ProbeInterval is the health probe period while Redis is unreachable;
	// zero means DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe; zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// PoolSize is the connection pool size per node; zero means
	// DefaultPoolSize.
	PoolSize int
	// DownAfterFailures is how many consecutive failed calls mark the store
	// down; zero means DefaultDownAfterFailures.
	DownAfterFailures int
	// DownAfterSpan is how long such a run must last, from its first failure
	// to its latest, to mark the store down; zero means DefaultDownAfterSpan.
	DownAfterSpan time.Duration
	// CallerClock makes the store use the time passed to Take instead of
	// Redis's clock. Replicas' clocks then have to agree; it exists for
	// tests that step a fake clock and for a single replica.
	CallerClock bool
}

// Store is a limiter.Store keeping token buckets in Redis, shared by every
// data-plane replica of a policy. It is safe for concurrent use. Close it to
// stop its health probe and, if New built it, its Redis client.
type Store struct {
	client      atomic.Pointer[clientBox]
	newClient   func() redis.UniversalClient // nil when the caller owns the client
	scriptHash  any                          // the bucket script's SHA1, as a command argument
	shapes      shapeCache
	dimPrefix   [limiter.NumDimensions]string
	hashTag     string
	timeout     time.Duration
	failOpen    bool
	callerClock bool
	replicas    Replicas
	obs         Observer
	log         logr.Logger
	clock       clock.Clock
	probeEvery  time.Duration
	probeTO     time.Duration
	addrs       []string
	mode        Mode
	masterName  string
	probeKey    string
	fails       failureRun

	// onProbe, if set by a test, is told each probe's result.
	onProbe func(error)

	down      atomic.Bool
	downCause atomic.Pointer[downCause]
	// fallback decides calls while Redis cannot (FailOpen only). It lives
	// as long as the store and is charged with every admission Redis grants
	// this replica too, so its buckets hold what this replica has taken:
	// a call decided locally never admits beyond the replica's share on top
	// of what Redis admitted, and a store that flaps does not hand out a
	// fresh burst at each outage.
	fallback *limiter.MemoryStore

	mu     sync.Mutex // guards closed and wg.Add against Close
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

var _ limiter.Store = (*Store)(nil)

// Validate reports what is wrong with o's connection settings, if anything.
func (o *Options) Validate() error {
	var errs []error
	if len(o.Addresses) == 0 {
		errs = append(errs, errors.New("no Redis address: give host:port of the server, cluster seed nodes or sentinels"))
	}
	for _, a := range o.Addresses {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("redis address %q is not host:port, e.g. redis.cache.svc:6379", a))
		}
	}
	switch o.Mode {
	case "", ModeStandalone:
		if len(o.Addresses) > 1 {
			errs = append(errs, fmt.Errorf("mode Standalone takes exactly one address, got %d; use mode Cluster for cluster seed nodes or Sentinel for sentinels", len(o.Addresses)))
		}
		if o.SentinelMasterName != "" {
			errs = append(errs, errors.New("sentinelMasterName is set but mode is not Sentinel"))
		}
	case ModeCluster:
		if o.DB != 0 {
			errs = append(errs, fmt.Errorf("db %d: Redis Cluster has only database 0", o.DB))
		}
		if o.SentinelMasterName != "" {
			errs = append(errs, errors.New("sentinelMasterName is set but mode is not Sentinel"))
		}
	case ModeSentinel:
		if o.SentinelMasterName == "" {
			errs = append(errs, errors.New("mode Sentinel needs sentinelMasterName, the primary's name in the sentinels' configuration"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode %q: use Standalone, Cluster or Sentinel", o.Mode))
	}
	switch o.FailureMode {
	case "", FailClosed, FailOpen:
	default:
		errs = append(errs, fmt.Errorf("failureMode %q: use Closed or Open", o.FailureMode))
	}
	if o.DB < 0 {
		errs = append(errs, fmt.Errorf("db %d: must be 0 or more", o.DB))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s: must be positive", o.Timeout))
	}
	if o.Policy == "" {
		errs = append(errs, errors.New("no policy name: it scopes the store's keys"))
	}
	return errors.Join(errs...)
}

// New connects a Store to Redis as o says. Connections are made on first
// use, so New succeeds while Redis is down.
func New(o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	pool := o.PoolSize
	if pool <= 0 {
		pool = DefaultPoolSize
	}
	uo := &redis.UniversalOptions{
		Addrs:         o.Addresses,
		MasterName:    o.SentinelMasterName,
		IsClusterMode: o.Mode == ModeCluster,
		Username:      o.Username,
		Password:      o.Password,
		DB:            o.DB,
		TLSConfig:     o.TLS,
		ClientName:    "fairqueue-dataplane",
		// RESP2 and no CLIENT SETINFO or maintenance handshake: fewer round
		// trips per new connection, and servers back to 6.2 work.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		// A retry would exceed the timeout; the probe handles recovery.
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           max(timeout, DefaultProbeTimeout),
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              pool,
	}
	s := NewWithClient(redis.NewUniversalClient(uo), o)
	s.newClient = func() redis.UniversalClient { return redis.NewUniversalClient(uo) }
	return s, nil
}

// NewWithClient returns a Store using an existing client, which the caller
// keeps and closes. Only the key, timeout, failure and probe settings of o
// are used, and Addresses, which gate the health probe: it pings through the
// client only once one address accepts a TCP connection, so an outage does
// not spend the client's dial budget (go-redis stops dialing for a second
// after PoolSize failed dials in a row).
func NewWithClient(c redis.UniversalClient, o Options) *Store {
	s := &Store{
		scriptHash:  redis.NewScript(bucketScript).Hash(),
		hashTag:     "{" + o.Namespace + "/" + o.Policy + "}",
		timeout:     o.Timeout,
		failOpen:    o.FailureMode == FailOpen,
		callerClock: o.CallerClock,
		replicas:    o.Replicas,
		obs:         o.Observer,
		log:         o.Logger,
		clock:       o.Clock,
		probeEvery:  o.ProbeInterval,
		probeTO:     o.ProbeTimeout,
		addrs:       o.Addresses,
		mode:        o.Mode,
		masterName:  o.SentinelMasterName,
		probeKey:    KeyPrefix(o.Namespace, o.Policy) + "probe",
		fails:       failureRun{count: o.DownAfterFailures, span: o.DownAfterSpan},
		done:        make(chan struct{}),
	}
	if s.mode == "" {
		s.mode = ModeStandalone
	}
	if s.fails.count <= 0 {
		s.fails.count = DefaultDownAfterFailures
	}
	if s.fails.span <= 0 {
		s.fails.span = DefaultDownAfterSpan
	}
	if s.failOpen {
		s.fallback = limiter.NewMemoryStore(0)
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.replicas == nil {
		s.replicas = StaticReplicas(1)
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.probeEvery <= 0 {
		s.probeEvery = DefaultProbeInterval
	}
	if s.probeTO <= 0 {
		s.probeTO = DefaultProbeTimeout
	}
	for d := range limiter.NumDimensions {
		s.dimPrefix[d] = KeyPrefix(o.Namespace, o.Policy) + limiter.Dimension(d).String() + ":"
	}
	s.client.Store(&clientBox{c})
	s.obs.StoreState(true, false)
	return s
}

// clientBox holds the current client so a probe can replace it.
type clientBox struct{ redis.UniversalClient }

// KeyPrefix returns the prefix of every key of the policy: "fq:{ns/name}:".
// The braces are a Redis Cluster hash tag, so all of the policy's buckets
// hash to one slot; a bucket's key is the prefix, its dimension, ':' and
// its (hashed) key.
func KeyPrefix(namespace, policy string) string {
	return "fq:{" + namespace + "/" + policy + "}:"
}

// Key returns the Redis key of one bucket.
func (s *Store) Key(d limiter.Dimension, key string) string { return s.dimPrefix[d] + key }

// HashTag returns the policy's hash tag, "{ns/name}": a key containing it
// lands in the same Redis Cluster slot as the buckets, so another script may
// touch both atomically.
func (s *Store) HashTag() string { return s.hashTag }

// Client returns the Redis client, for other shared state of the policy.
// A Store built by New may replace its client after an outage (see probe),
// so call Client for each use rather than keeping the result.
func (s *Store) Client() redis.UniversalClient { return s.client.Load().UniversalClient }

// Up reports whether the store uses Redis: it has not been marked down, or a
// probe has found Redis applying charges again since.
func (s *Store) Up() bool { return !s.down.Load() }

// Take implements limiter.Store: it checks and charges every bucket of b in
// one script, all or none.
func (s *Store) Take(now time.Time, b limiter.Batch) (limiter.Decision, error) {
	return s.do(now, &b, OpTake)
}

// Peek implements limiter.Store: it checks every bucket of b without
// charging.
func (s *Store) Peek(now time.Time, b limiter.Batch) (limiter.Decision, error) {
	return s.do(now, &b, OpPeek)
}

// Refund gives one token back to every bucket of b that exists, never above
// its capacity; an absent (full) bucket is left alone.
func (s *Store) Refund(now time.Time, b limiter.Batch) error {
	_, err := s.do(now, &b, OpRefund)
	return err
}

// Adjust implements limiter.Store: it settles every bucket of b by its
// signed Cost in one script, atomically across the batch. A positive Cost is
// charged unconditionally (creating an absent bucket, leaving at most
// limiter.MaxAdjustDebt capacities of debt, and never more than MaxDebt); a
// negative one is given back to a bucket that exists, never above full.
func (s *Store) Adjust(now time.Time, b limiter.Batch) error {
	_, err := s.do(now, &b, OpAdjust)
	return err
}

// opCode returns the script's operation argument for op, as an interface
// holding a constant, which costs no allocation per call.
func opCode(op string) any {
	switch op {
	case OpTake:
		return "t"
	case OpPeek:
		return "p"
	case OpAdjust:
		return "a"
	}
	return "r"
}

// amountOf returns the script's amount for request r of op, in nanoseconds
// (see bucketScript): the charge of its cost for a take or peek, its signed
// cost in refill intervals for an adjust, saturated so that it cannot
// overflow.
func amountOf(op string, r *limiter.Request) int64 {
	if op != OpAdjust {
		return r.Charge()
	}
	iv, _ := r.Shape()
	switch c := r.Cost; {
	case c > maxAmount/iv:
		return maxAmount
	case c < -(maxAmount / iv):
		return -maxAmount
	default:
		return c * iv
	}
}

// maxAmount bounds an adjust's amount; anything beyond MaxDebt is cut in the
// script anyway.
const maxAmount = math.MaxInt64 / 4

// do runs op for b in Redis, or answers for an unreachable Redis.
func (s *Store) do(now time.Time, b *limiter.Batch, op string) (limiter.Decision, error) {
	n := b.Len()
	if n == 0 {
		return limiter.Decision{Allowed: true}, nil
	}
	if s.down.Load() {
		s.obs.StoreError(ErrorDown)
		return s.unavailable(now, b, op, errors.New("redis is unreachable, waiting for it to answer a probe"))
	}
	a := callArgsPool.Get().(*callArgs)
	defer callArgsPool.Put(a)
	args := a.cmd[3+n:]
	args[0] = opCode(op)
	if s.callerClock {
		args[1], args[2] = now.Unix(), int64(now.Nanosecond())
	} else {
		args[1], args[2] = "", ""
	}
	nargs := 3 + 3*n
	for i := range n {
		r := b.At(i)
		iv, w := r.Shape()
		if w > int64(MaxWindow) {
			return limiter.Decision{}, fmt.Errorf("%w: the %s limit takes %s to refill completely, longer than the Redis store's %s; lower burst or raise requests",
				limiter.ErrStoreUnavailable, r.Dimension, time.Duration(w), MaxWindow)
		}
		k := &a.keys[i]
		k.b = append(append(k.b[:0], s.dimPrefix[r.Dimension]...), r.Key...)
		a.cmd[3+i] = k
		copy(args[3+3*i:6+3*i], s.shapeArgs(r.Dimension, iv, w)[:])
		if op == OpAdjust || (op != OpRefund && r.Cost > 1) {
			nargs = 3 + 4*n // a costed call: every bucket gets an amount
		}
	}
	if nargs > 3+3*n {
		for i := range n {
			r := b.At(i)
			m := &a.amounts[i]
			m.b = strconv.AppendInt(m.b[:0], amountOf(op, &r), 10)
			args[3+3*n+i] = m
		}
	}
	if a.ctx == nil {
		a.ctx = newCallContext(realAfterFunc)
	}
	start := time.Now()
	a.ctx.arm(start, s.timeout)
	res, err := s.runScript(a.ctx, a, n, nargs)
	s.obs.StoreLatency(op, time.Since(start))
	if !a.ctx.disarm() {
		a.ctx = nil // it expired, for good
	}
	if err == nil && len(res) != n+1 {
		err = badReplyError(fmt.Sprintf("bucket script answered %d values for %d buckets", len(res), n))
	}
	// Any failure, an error reply included (out of memory, read-only, a
	// missing script EVAL could not replace, a wrong mode), means the
	// charge was not applied: this call is answered without Redis, and a
	// long enough run of them marks the store down.
	s.CallOutcome(err)
	if err != nil {
		return s.unavailable(now, b, op, err)
	}
	var debts [limiter.MaxBatch]int64
	copy(debts[:], res[1:])
	d := limiter.DecisionFromDebts(b, &debts, op == OpTake)
	if s.failOpen {
		s.shadow(now, b, op, d.Allowed)
	}
	return d, nil
}

// CallOutcome records the outcome of one call to Redis: the store's own,
// or one another user of the policy's store made through Client (capacity's
// slot leases), so that a run of failed calls marks the store down whoever
// made them, and callers stop waiting for a Redis that does not answer.
func (s *Store) CallOutcome(err error) {
	if err == nil {
		s.fails.succeeded()
		return
	}
	s.obs.StoreError(classify(err))
	if down, n, lasted := s.fails.failed(s.clock.Now(), err); down {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout) // explain may ask the server its mode
		s.markDown(fmt.Errorf("%d calls failed in a row over %s, the latest: %w", n, lasted.Round(time.Millisecond), s.explain(ctx, err)))
		cancel()
	}
}

// shadow charges the fallback's buckets with what Redis just applied for
// this replica, so they hold this replica's recent use of its share when a
// call has to be decided without Redis (see Store.fallback). An admission
// is charged unconditionally, as Redis charged it.
func (s *Store) shadow(now time.Time, b *limiter.Batch, op string, allowed bool) {
	n := s.replicas.Live()
	switch op {
	case OpTake:
		if !allowed {
			return
		}
		var c limiter.Batch
		for i := range b.Len() {
			r := b.At(i)
			c.AddCost(r.Dimension, r.Key, ShareLimit(r.Limit, n), max(r.Cost, 1))
		}
		_ = s.fallback.Adjust(now, c)
	case OpRefund:
		_ = s.fallback.Refund(now, Share(b, n))
	case OpAdjust:
		_ = s.fallback.Adjust(now, Share(b, n))
	}
}

// classify names the kind of a failed call.
func classify(err error) string {
	var re redis.Error
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrorTimeout
	case errors.As(err, &re) && !redis.IsLoadingError(err) && !redis.IsReadOnlyError(err) &&
		!redis.IsClusterDownError(err) && !redis.IsTryAgainError(err):
		return ErrorReply
	}
	return ErrorConnection
}

// unavailable answers op while Redis cannot: an ErrStoreUnavailable when
// failing closed, the in-memory fallback's answer when failing open.
func (s *Store) unavailable(now time.Time, b *limiter.Batch, op string, cause error) (limiter.Decision, error) {
	if !s.failOpen {
		return limiter.Decision{}, fmt.Errorf("%w: redis: %w", limiter.ErrStoreUnavailable, cause)
	}
	fb := s.fallback
	share := Share(b, s.replicas.Live())
	switch op {
	case OpTake:
		return fb.Take(now, share)
	case OpPeek:
		return fb.Peek(now, share)
	case OpAdjust:
		return limiter.Decision{}, fb.Adjust(now, share)
	}
	return limiter.Decision{}, fb.Refund(now, share)
}

// Share returns b with every limit divided among n replicas: the same
// requests per n times the period, and a burst of capacity/n (at least 1),
// so n replicas together admit about what one shared bucket would. Each
// request keeps its cost.
func Share(b *limiter.Batch, n int) limiter.Batch {
	if n <= 1 {
		return *b
	}
	var out limiter.Batch
	for i := range b.Len() {
		r := b.At(i)
		out.AddCost(r.Dimension, r.Key, ShareLimit(r.Limit, n), r.Cost)
	}
	return out
}

// ShareLimit returns one replica's share of l among n replicas.
func ShareLimit(l limiter.Limit, n int) limiter.Limit {
	if n <= 1 {
		return l
	}
	period := l.Period * time.Duration(n)
	if period/time.Duration(n) != l.Period {
		period = time.Duration(1<<63 - 1)
	}
	return limiter.Limit{Requests: l.Requests, Period: period, Burst: ShareCount(l.Capacity(), n)}
}

// ShareCount returns one replica's share of a count among n replicas: an
// n-th, at least 1, so that a replica alone can still admit.
func ShareCount(total int64, n int) int64 { return max(total/int64(max(n, 1)), 1) }

// markDown records that Redis does not apply charges (see failureRun for
// when): it logs and reports the transition once and starts the health
// probe. The fallback keeps its buckets: they already hold what this
// replica took.
func (s *Store) markDown(cause error) {
	if !s.down.CompareAndSwap(false, true) {
		return
	}
	s.downCause.Store(&downCause{err: cause, since: s.clock.Now()})
	s.log.Error(cause, "Redis rate-limit store down; "+s.behaviour(),
		"mode", s.mode, "addresses", s.addrs, "failureMode", s.FailureMode(),
		"liveReplicas", s.replicas.Live(), "probeInterval", s.probeEvery.String())
	s.obs.StoreState(false, s.failOpen)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go s.probe()
}

func (s *Store) behaviour() string {
	if s.failOpen {
		return "answering from in-memory buckets holding each replica's share of every limit until it answers again"
	}
	return "refusing requests with 503 store_unavailable until it answers again"
}

// FailureMode returns what the store answers while Redis is unreachable.
func (s *Store) FailureMode() FailureMode {
	if s.failOpen {
		return FailOpen
	}
	return FailClosed
}

// probe checks Redis every probe interval until it would apply a charge
// again (see check; a PING is not enough: an out-of-memory server or a
// server of the wrong mode answers it), then returns the store to it. At
// most one probe runs per outage.
func (s *Store) probe() {
	defer s.wg.Done()
	for {
		t := s.clock.NewTimer(s.probeEvery)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.probeTO)
		err := s.reachable(ctx)
		if err == nil {
			err = s.check(ctx, s.Client())
			if err != nil {
				followCluster(ctx, s.Client())
			}
			if err != nil && s.newClient != nil && classify(err) != ErrorReply {
				err = s.renewClient(ctx)
			}
		}
		cancel()
		if err == nil {
			s.fails.succeeded()
			s.down.Store(false)
			s.log.Info("Redis rate-limit store applies charges again; using it", "mode", s.mode, "addresses", s.addrs)
			s.obs.StoreState(true, false)
			s.probed(nil)
			return
		}
		s.log.V(1).Info("Redis rate-limit store still unreachable", "error", err.Error())
		s.probed(err)
	}
}

// renewClient replaces the client with a fresh one if that one answers. It
// is the way back when Redis accepts connections but the old client will
// not dial: go-redis counts failed dials over the client's life and, once
// they reach its pool size, refuses to dial for a second at a time. No
// request uses the client while the store is down, so the old one can be
// closed at once.
func (s *Store) renewClient(ctx context.Context) error {
	c := s.newClient()
	if err := s.check(ctx, c); err != nil {
		_ = c.Close()
		return err
	}
	old := s.client.Swap(&clientBox{c})
	_ = old.Close()
	s.log.V(1).Info("Replaced the Redis client after an outage")
	return nil
}

// reachable reports whether any address accepts a TCP connection; it is
// true when no address is known.
func (s *Store) reachable(ctx context.Context) error {
	var err error
	var d net.Dialer
	for _, a := range s.addrs {
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", a); err == nil {
			_ = c.Close()
			return nil
		}
	}
	return err
}

// probed tells a test's hook the result of one probe.
func (s *Store) probed(err error) {
	if s.onProbe != nil {
		s.onProbe(err)
	}
}

// Close stops the health probe and closes the Redis client if New built it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	if s.newClient != nil {
		return s.Client().Close()
	}
	return nil
}

// badReplyError is a reply of the wrong shape; it counts as a redis.Error.
type badReplyError string

func (e badReplyError) Error() string { return string(e) }

// RedisError marks badReplyError as a redis.Error.
func (badReplyError) RedisError() {}

type nopObserver struct{}

func (nopObserver) StoreLatency(string, time.Duration) {}
func (nopObserver) StoreError(string)                  {}
func (nopObserver) StoreState(bool, bool)              {}

// clientLogger sends go-redis's own messages (failed dials during an
// outage, for example) to a logr.Logger at verbosity 1 instead of stderr.
type clientLogger struct{ log logr.Logger }

func (l clientLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, v...))
}

// SetClientLogger routes the go-redis client library's messages, which are
// process-wide, to log at verbosity 1. The store's own state transitions
// are logged through Options.Logger regardless.
func SetClientLogger(log logr.Logger) { redis.SetLogger(clientLogger{log: log}) }
