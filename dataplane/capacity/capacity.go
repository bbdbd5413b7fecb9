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

package capacity

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// LimitType is the limit_type (SPEC 6b) of a request refused, or queued,
// because every candidate backend was saturated: admission's decisions and
// the queue metrics' label both name it so.
const LimitType = "capacity"

// Result is the outcome of an Acquire.
type Result uint8

const (
	// Acquired means the slot is held; release it when the response ends.
	Acquired Result = iota
	// Untracked means the backend has no capacity entry, so nothing bounds it;
	// dispatch, there is nothing to release (Release is a no-op).
	Untracked
	// Saturated means the backend is at maxInFlight (locally or fleet-wide), or
	// a fresh saturation signal is over its max.
	Saturated
	// Unavailable means the fleet-wide count could not be read and the store
	// fails closed; the server answers 503 store_unavailable.
	Unavailable
)

// OK reports whether the request may be dispatched to the backend.
func (r Result) OK() bool { return r <= Untracked }

// String names the result, for logs and tests.
func (r Result) String() string {
	switch r {
	case Acquired:
		return "acquired"
	case Untracked:
		return "untracked"
	case Saturated:
		return "saturated"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("Result(%d)", r)
}

// Backend is one backend's capacity, as the rendered config holds it:
// MaxInFlight and, optionally, the Saturation its poller reads, with
// every default resolved and the metrics URL absolute.
type Backend = config.BackendCapacity

// Shared keeps in-flight counts for the whole fleet (see package
// redisslots). Implementations must be safe for concurrent use.
type Shared interface {
	// Acquire takes lease seq on backend when fewer than limit are held
	// across the fleet. local is this replica's count, this request
	// included, for a fallback that decides alone. It returns Acquired,
	// Saturated or Unavailable.
	Acquire(backend string, limit int, local int64, seq uint64) Result
	// Release gives lease seq of backend back.
	Release(backend string, seq uint64)
}

// FleetRoom is implemented by a Shared that hears of room made on another
// replica: a slot it released, or a dead replica's lease that expired. New
// registers the Tracker with it, so that a waiter here wakes for such room
// as for a local release; without it, a waiter would hear only of its own
// replica's releases and retry on a timer, while the flood's replica
// takes every slot its own releases free.
type FleetRoom interface {
	// NotifyRoom sets the function told of room on a backend. It is called
	// from the Shared's own goroutine and must not block.
	NotifyRoom(f func(backend string))
}

// Poll error kinds reported to Observer.PollError.
const (
	ErrorTimeout    = "timeout"    // no complete answer within the timeout
	ErrorConnection = "connection" // the endpoint could not be reached
	ErrorStatus     = "status"     // an answer other than 200
	ErrorTooLarge   = "too_large"  // a body over the read limit
	ErrorParse      = "parse"      // not the Prometheus text format
	ErrorMissing    = "missing"    // a signal's metric absent, or not a gauge
)

// Observer receives what the pollers measure. In-flight counts and
// saturation are read when scraped, from Tracker.Stats. Implementations must
// be cheap and safe for concurrent use.
type Observer interface {
	// SignalValue records a signal's latest reading.
	SignalValue(backend, metric string, v float64)
	// PollError counts one failed poll of kind (Error*).
	PollError(backend, kind string)
	// Stale records that a backend's signals went stale, or fresh again.
	Stale(backend string, stale bool)
}

// NopObserver discards everything.
type NopObserver struct{}

// SignalValue implements Observer.
func (NopObserver) SignalValue(string, string, float64) {}

// PollError implements Observer.
func (NopObserver) PollError(string, string) {}

// Stale implements Observer.
func (NopObserver) Stale(string, bool) {}

// DefaultMaxBodyBytes bounds the metrics body read per poll. vLLM's
// /metrics, histograms included, is a few hundred kilobytes.
const DefaultMaxBodyBytes = 4 << 20

// Options configures a Tracker.
type Options struct {
	// OnRoom, if set, is told a backend has room again (see the package
	// doc). It must not block.
	OnRoom func(backend string)
	// Shared, if set, makes counts fleet-wide.
	Shared Shared
	// Observer receives poll measurements; nil discards them.
	Observer Observer
	// Logger receives one line per staleness or poll-failure transition.
	Logger logr.Logger
	// Clock drives the pollers; nil means the real clock.
	Clock clock.WithDelayedExecution
	// HTTPClient polls the metrics endpoints; nil means a client of the
	// Tracker's own, whose idle connections Close closes.
	HTTPClient *http.Client
	// MaxBodyBytes bounds a metrics body; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxTenants bounds the tenants counted per backend, and waiting, for
	// the overdraft's shares, until an Apply sets it; zero means
	// config.DefaultMaxTenants.
	MaxTenants int
}

// Tracker counts slots per backend and runs one poller per backend with
// saturation signals. It is safe for concurrent use. Close it to stop the
// pollers.
type Tracker struct {
	opts    Options
	clk     clock.WithDelayedExecution
	obs     Observer
	log     logr.Logger
	client  *http.Client
	ownHTTP bool
	seq     atomic.Uint64 // the last lease number handed out

	maxTenants atomic.Int64 // bounds the entries of waiters and of each backend's holders
	waiters    waiters      // requests waiting for a slot, by tenant and band

	current atomic.Pointer[snapshot]

	mu     sync.Mutex // serialises Apply and Close
	closed bool
}

// snapshot is the immutable set of backends in force.
type snapshot struct {
	byName map[string]*backend
	order  []*backend // as configured, for Stats
	// locking is order sorted by name: the order in which the holders of
	// several backends are locked (overdraft.go).
	locking []*backend
	// signals: some backend has saturation signals, so a Claim counts.
	signals bool
	// pool is every backend of the config in force, with an entry or
	// without, in the order of the pool's weighted round-robin: the
	// candidates of every request, so a request that waited through a
	// reload goes to the backends in force, not those it arrived under.
	pool []string
	// removed holds the backends reloads removed while requests still held
	// their slots, at most maxRemoved: one brought back before they end
	// counts them in its in-flight count, so its maxInFlight still does.
	removed map[string]*backend
}

// maxRemoved bounds snapshot.removed; past it a backend brought back
// starts from 0 in flight (its old slots release into the old count).
const maxRemoved = 1024

// backend is one backend's live state. Its count outlives a reload that
// keeps the backend.
type backend struct {
	name string
	t    *Tracker
	max  atomic.Int64
	// inFlight is shared with the backend of the same name a reload
	// removed while its slots were held, so their releases count here.
	inFlight *atomic.Int64
	full     atomic.Bool // a fresh signal is over its max with nothing in flight to hold back
	// window, when positive, is the in-flight count b may reach, learned
	// from its saturation signals (poller.adjust); 0 means maxInFlight
	// alone bounds it.
	window    atomic.Int64
	contended atomic.Bool // refused a request since the last OnRoom
	retired   atomic.Bool // no longer in force (removed, or the Tracker closed)
	holders   holders     // claimed slots by tenant and band (overdraft.go)
	// over is the overdraft outstanding: slots taken above the window
	// and not yet repaid by a release (overdraft.go). The window's growth
	// does not count them as the server's (poller.adjust).
	over atomic.Int64
	// times are what its slots say about when the next frees (durations.go).
	times slotTimes
	sat   *config.Saturation // guarded by Tracker.mu
	// poller is nil without signals; it is replaced under Tracker.mu and
	// read without it, so that Stats never waits for a poller to stop.
	poller atomic.Pointer[poller]
}

// New returns a Tracker with no backends; Apply gives it some.
func New(o Options) *Tracker {
	t := &Tracker{opts: o, clk: o.Clock, obs: o.Observer, log: o.Logger, client: o.HTTPClient}
	if t.clk == nil {
		t.clk = clock.RealClock{}
	}
	if t.obs == nil {
		t.obs = NopObserver{}
	}
	if t.client == nil {
		t.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		t.ownHTTP = true
	}
	if t.opts.MaxBodyBytes <= 0 {
		t.opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxTenants <= 0 {
		o.MaxTenants = config.DefaultMaxTenants
	}
	t.maxTenants.Store(int64(o.MaxTenants))
	t.current.Store(&snapshot{byName: map[string]*backend{}})
	if fr, ok := o.Shared.(FleetRoom); ok {
		fr.NotifyRoom(t.fleetRoom)
	}
	if fc, ok := o.Shared.(FleetCounts); ok {
		fc.NotifyCounts(t.fleetCount)
	}
	return t
}

// fleetRoom wakes the waiters of the named backend for room made on
// another replica (FleetRoom).
func (t *Tracker) fleetRoom(name string) {
	if b := t.current.Load().byName[name]; b != nil {
		b.roomed()
	}
}

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("capacity tracker closed")

// Validate reports what would keep bs from running, naming the backend
// and field. config.Validate checks more (URLs, metric names, backends
// that exist); this guards the Tracker against a config that skipped it.
func Validate(bs []Backend) error {
	seen := make(map[string]bool, len(bs))
	var errs []error
	for i, b := range bs {
		switch {
		case b.Name == "":
			errs = append(errs, fmt.Errorf("capacity.backends[%d].name is empty; name a backend of the policy", i))
		case seen[b.Name]:
			errs = append(errs, fmt.Errorf("capacity backend %q is listed twice; list each backend once", b.Name))
		}
		seen[b.Name] = true
		if b.MaxInFlight < 1 {
			errs = append(errs, fmt.Errorf("capacity backend %q: maxInFlight %d must be at least 1", b.Name, b.MaxInFlight))
		}
		if s := b.Saturation; s != nil {
			if s.MetricsURL == "" {
				errs = append(errs, fmt.Errorf("capacity backend %q: saturation needs a metrics URL", b.Name))
			}
			if s.Interval.Duration <= 0 || s.Timeout.Duration <= 0 || s.StaleAfter.Duration <= 0 {
				errs = append(errs, fmt.Errorf("capacity backend %q: saturation interval, timeout and staleAfter must be positive, got %s, %s, %s",
					b.Name, s.Interval.Duration, s.Timeout.Duration, s.StaleAfter.Duration))
			}
			if len(s.Signals) == 0 {
				errs = append(errs, fmt.Errorf("capacity backend %q: saturation lists no signals; add one (e.g. vllm:num_requests_waiting) or remove saturation", b.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// Apply puts bs in force (see the package doc's Reload), and maxTenants,
// the policy's fairQueuing.bounds.maxTenants, as the bound on the tenants
// counted for the overdraft's shares (Options.MaxTenants); zero keeps the
// bound. A lower bound counts no new tenant until enough entries leave. On
// an error nothing changes.
func (t *Tracker) Apply(bs []Backend, maxTenants int) error {
	pool := make([]string, len(bs))
	for i, b := range bs {
		pool[i] = b.Name
	}
	return t.ApplyPool(bs, maxTenants, pool)
}

// ApplyPool is Apply for a config whose backends, with a capacity entry
// or without, are pool, in its weighted round-robin order. Every request's
// candidates are the pool in force when it tries for a slot, so a reload
// that replaces or adds backends reaches the requests waiting through it;
// a backend of pool without an entry is untracked. The Tracker keeps pool
// as given: the caller must not change it.
func (t *Tracker) ApplyPool(bs []Backend, maxTenants int, pool []string) error {
	if err := Validate(bs); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	old := t.current.Load()
	next := &snapshot{byName: make(map[string]*backend, len(bs)), order: make([]*backend, 0, len(bs)), pool: pool}
	var room []*backend
	for _, cfg := range bs {
		b := old.byName[cfg.Name]
		if b == nil {
			count := new(atomic.Int64)
			if r := old.removed[cfg.Name]; r != nil {
				count = r.inFlight // brought back while its slots are held
			}
			b = &backend{name: cfg.Name, t: t, inFlight: count}
		}
		prev := b.max.Swap(int64(cfg.MaxInFlight))
		if prev != 0 && int64(cfg.MaxInFlight) > prev {
			room = append(room, b)
		}
		if want := cloneSaturation(cfg.Saturation); !sameSaturation(b.sat, want) {
			if p := b.poller.Swap(nil); p != nil {
				p.stop()
				if b.full.Swap(false) {
					room = append(room, b)
				}
			}
			b.sat = want
			if b.sat != nil {
				b.poller.Store(t.startPoller(b, *b.sat))
			}
		}
		next.byName[cfg.Name] = b
		next.order = append(next.order, b)
		next.signals = next.signals || cfg.Saturation != nil
	}
	for name, b := range old.removed {
		if next.byName[name] == nil && b.inFlight.Load() > 0 {
			next.keepCount(b)
		}
	}
	for name, b := range old.byName {
		if next.byName[name] != nil {
			continue
		}
		b.retired.Store(true) // before the snapshot without it (overdraft.go)
		if p := b.poller.Swap(nil); p != nil {
			p.stop()
			b.full.Store(false)
		}
		if b.inFlight.Load() > 0 {
			next.keepCount(b)
		}
		// Nothing bounds a removed backend: its waiters may go now.
		if b.contended.Load() || b.inFlight.Load() >= b.max.Load() {
			room = append(room, b)
		}
	}
	next.locking = slices.SortedFunc(slices.Values(next.order), func(a, b *backend) int { return strings.Compare(a.name, b.name) })
	if maxTenants > 0 {
		t.maxTenants.Store(int64(maxTenants))
	}
	t.current.Store(next)
	for _, b := range room {
		b.roomed()
	}
	// A backend new to the pool may have room for the waiters, who found
	// full the backends they tried (an empty pool had none to try).
	if o := t.opts.OnRoom; o != nil && len(old.pool) > 0 {
		if i := slices.IndexFunc(pool, func(name string) bool { return !slices.Contains(old.pool, name) }); i >= 0 {
			o(pool[i])
		}
	}
	return nil
}

// tenantLimit is the bound on the entries of the waiters and of each
// backend's holders.
func (t *Tracker) tenantLimit() int { return int(t.maxTenants.Load()) }

// Close stops every poller and drops the backends; slots still held
// release harmlessly. Apply fails afterwards.
func (t *Tracker) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	for _, b := range t.current.Load().byName {
		b.retired.Store(true)
		if p := b.poller.Swap(nil); p != nil {
			p.stop()
		}
	}
	t.current.Store(&snapshot{byName: map[string]*backend{}})
	if t.ownHTTP {
		t.client.CloseIdleConnections()
	}
}

// Slot is one request's place at a backend. The zero Slot holds nothing.
// Keep it where the request's other state lives (it must not be copied
// while held) and Release it on every ending of the response.
type Slot struct {
	b    *backend
	seq  uint64
	held atomic.Bool
	// claimed: the slot counts in b's holders, in band and, unless tenant
	// is "", for tenant, at cost.
	claimed bool
	band    uint8
	tenant  string
	cost    int64
	// stamp is when the slot was taken, when it is timed (durations.go);
	// 0 when not. Written by Acquire before held, read by the Release
	// that wins held.
	stamp int64
}

// Backend returns the name of the backend the slot is held on, or "".
func (s *Slot) Backend() string {
	if !s.held.Load() {
		return ""
	}
	return s.b.name
}

// Release gives the slot back. Only the first call after an Acquire does
// anything; later calls, and calls on a zero Slot, are no-ops.
func (s *Slot) Release() { s.release(true) }

// release is Release; measure says whether the slot's time held tells how
// long the backend takes (see Withdraw).
func (s *Slot) release(measure bool) {
	if !s.held.CompareAndSwap(true, false) {
		return
	}
	b := s.b
	if sh := b.t.opts.Shared; sh != nil {
		sh.Release(b.name, s.seq)
	}
	b.unhold(s)
	b.repay()
	n := b.inFlight.Add(-1)
	maxInFlight := b.max.Load()
	if s.stamp != 0 || busy(n+1, maxInFlight) || b.window.Load() > 0 {
		b.timeRelease(s, n+1, measure) // maybe busy: see durations.go
	}
	if n+1 >= maxInFlight || b.contended.Load() {
		b.roomed()
	}
}

// Acquire takes a slot on the named backend into s, releasing first any
// slot s still holds. It returns Acquired (s now holds the slot), Untracked
// (no entry for the backend: dispatch, s holds nothing), Saturated or
// Unavailable.
func (t *Tracker) Acquire(s *Slot, name string) Result {
	return t.AcquireFor(s, Claim{}, name)
}

// AcquireFor is Acquire for a request of c: its slot is counted for c's
// tenant and band, and it may overdraft a backend held back by its window
// (see the package doc's Overdraft).
func (t *Tracker) AcquireFor(s *Slot, c Claim, name string) Result {
	if s.held.Load() {
		s.Release()
	}
	b := t.current.Load().byName[name]
	if b == nil {
		return Untracked
	}
	return b.acquire(s, &c)
}

// AcquireAny tries the backends of the pool in force in order from start
// (wrapping round), as the proxy's weighted round-robin orders them, and
// takes a slot on the first with room. It returns the chosen backend's
// name, or "" with Saturated when every backend refused (Unavailable when
// one could not be decided and none had room). A backend of the pool
// without an entry is chosen Untracked.
func (t *Tracker) AcquireAny(s *Slot, start int) (string, Result) {
	return t.AcquireAnyFor(s, Claim{}, start)
}

// AcquireAnyFor is AcquireAny for a request of c (see AcquireFor).
func (t *Tracker) AcquireAnyFor(s *Slot, c Claim, start int) (string, Result) {
	if s.held.Load() {
		s.Release()
	}
	snap := t.current.Load()
	n := len(snap.pool)
	worst := Saturated
	for i := range n {
		name := snap.pool[(start+i)%n]
		b := snap.byName[name]
		if b == nil {
			return name, Untracked
		}
		r := b.acquire(s, &c)
		if r.OK() {
			return name, r
		}
		if r == Unavailable {
			worst = Unavailable
		}
	}
	return "", worst
}

// Pool returns the backends of the pool in force (see ApplyPool); the
// caller must not change it.
func (t *Tracker) Pool() []string { return t.current.Load().pool }

// keepCount keeps b, removed with slots in flight, for a reload that
// brings it back: the new backend shares its count.
func (s *snapshot) keepCount(b *backend) {
	if s.removed == nil {
		s.removed = map[string]*backend{}
	}
	if len(s.removed) < maxRemoved {
		s.removed[b.name] = b
	}
}

// Claims reports whether a Claim can count: some backend has saturation
// signals, so a window to overdraft. Without, callers may pass the zero
// Claim and spare working one out.
func (t *Tracker) Claims() bool { return t.current.Load().signals }

// Saturated reports whether the named backend would refuse a request now
// (false for a backend without an entry), by this replica's count and
// signals. It is a hint: a slot is only taken by Acquire.
func (t *Tracker) Saturated(name string) bool {
	b := t.current.Load().byName[name]
	return b != nil && (b.full.Load() || b.inFlight.Load() >= b.max.Load() || b.windowFull())
}

// limits returns b's maxInFlight and the in-flight bound in force on it:
// maxInFlight, or its window when that is lower.
func (b *backend) limits() (maxInFlight, limit int64) {
	maxInFlight = b.max.Load()
	limit = maxInFlight
	if w := b.window.Load(); w > 0 {
		limit = min(limit, w)
	}
	return maxInFlight, limit
}

// acquire takes a slot on b into s for c.
func (b *backend) acquire(s *Slot, c *Claim) Result {
	if b.full.Load() {
		return b.refused()
	}
	maxInFlight, limit := b.limits()
	var n int64
	var over bool
	for {
		over = false
		n = b.inFlight.Load()
		if n >= limit {
			if n >= maxInFlight || !b.mayOverdraft(c, n, limit, maxInFlight) {
				return b.refused()
			}
			over = true
		}
		if b.inFlight.CompareAndSwap(n, n+1) {
			break
		}
	}
	// Counted with the slot, so that a release while the shared store is
	// asked repays it.
	if over {
		b.over.Add(1)
	}
	var seq uint64
	if sh := b.t.opts.Shared; sh != nil {
		// The fleet is bounded by maxInFlight. The window and the
		// overdraft's reserve are learned from, and bound, this replica's
		// count (checked above): the fleet's count, with every other
		// replica's requests in it, is not in the window's units.
		seq = b.t.seq.Add(1)
		if r := sh.Acquire(b.name, int(maxInFlight), b.inFlight.Load(), seq); r != Acquired {
			b.inFlight.Add(-1)
			if over {
				b.repay()
			}
			if r == Saturated {
				return b.refused()
			}
			return r
		}
	}
	s.b, s.seq = b, seq
	b.timeAcquire(s, n+1, limit)
	b.hold(s, c)
	s.held.Store(true)
	return Acquired
}

// refused marks b contended, so that its next release wakes a waiter.
func (b *backend) refused() Result {
	if !b.contended.Load() {
		b.contended.Store(true)
	}
	return Saturated
}

// roomed tells OnRoom that b has room.
func (b *backend) roomed() {
	b.contended.Store(false)
	if f := b.t.opts.OnRoom; f != nil {
		f(b.name)
	}
}

// BackendStats is one backend's state, for metrics and status tools.
type BackendStats struct {
	Backend     string
	InFlight    int
	MaxInFlight int
	// Saturated: at MaxInFlight, or at the window its saturation signals
	// set (see the package doc), as this replica sees it; with
	// Options.Shared a backend full across the fleet shows only as refused
	// acquires.
	Saturated bool
	// Stale: a signal has had no reading for longer than staleAfter.
	Stale bool
	// Overdraft is the slots taken above the saturation window for tenants
	// under their share or of a higher band, not yet repaid by a release.
	Overdraft int
	Signals   []SignalStats
}

// SignalStats is one signal's latest reading.
type SignalStats struct {
	Metric string
	Max    float64
	Value  float64
	// Fresh: read within staleAfter; only a fresh signal saturates.
	Fresh bool
}

// Stats returns every backend's state, in configured order.
func (t *Tracker) Stats() []BackendStats {
	snap := t.current.Load()
	out := make([]BackendStats, 0, len(snap.order))
	for _, b := range snap.order {
		st := BackendStats{
			Backend:     b.name,
			InFlight:    int(b.inFlight.Load()),
			MaxInFlight: int(b.max.Load()),
			Overdraft:   int(b.over.Load()),
		}
		st.Saturated = b.full.Load() || int64(st.InFlight) >= int64(st.MaxInFlight) || b.windowFull()
		if p := b.poller.Load(); p != nil {
			st.Stale, st.Signals = p.stats()
		}
		out = append(out, st)
	}
	return out
}

func sameSaturation(a, b *config.Saturation) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.MetricsURL == b.MetricsURL && a.Interval == b.Interval && a.Timeout == b.Timeout &&
		a.StaleAfter == b.StaleAfter && slices.Equal(a.Signals, b.Signals)
}

func cloneSaturation(s *config.Saturation) *config.Saturation {
	if s == nil {
		return nil
	}
	c := *s
	c.Signals = slices.Clone(s.Signals)
	return &c
}
