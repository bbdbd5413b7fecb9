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
	"math"
	"sync/atomic"
	"time"
)

// DefaultReleaseSpacing is the time between one backend's slots coming
// free assumed before anything is known: before it has released a
// measured slot, and while it has held its slots for less than this times
// their number. It is a prior, not a measurement, kept short so that a
// request that would fit its budget is not refused at arrival on a guess:
// the backend's own slots replace it within the first request's duration
// (see Tracker.NextRelease).
const DefaultReleaseSpacing = 50 * time.Millisecond

// fleetBusyLead is slotTimes.fleetBusy while the fleet is busy: more than
// any limit, so every slot is timed.
const fleetBusyLead = 1 << 40

// durationWeight is the EWMA weight (1/8) of a released slot's duration.
const durationWeight = 8

// slotTimes is what a backend's slots say about when the next one frees.
//
// Only slots taken while the backend is at least half full (of the smaller
// of maxInFlight and its window) are timed: the two clock readings cost
// more than the rest of an acquire and release (BenchmarkAcquireReleaseBusy
// against BenchmarkAcquireRelease, figures in docs/capacity.md "Cost":
// go test -run XXX -bench 'AcquireRelease(Busy)?$' -benchmem ./dataplane/capacity/),
// the times matter only when requests wait for a slot, and a backend gets
// there through half full. Its releases at or over half full are timed
// too, timed slot or not.
type slotTimes struct {
	// held is the EWMA of how long the timed slots were held, from
	// acquire to release, in nanoseconds of the Tracker's clock; 0 before
	// the first. A slot whose request never reached the backend
	// (Slot.Withdraw) is not counted: it says nothing of the backend.
	held atomic.Int64
	// quiet is when the backend last released a slot at or over half
	// full, or last reached half full, whichever is later; 0 before
	// either. Since then it has held at least half its slots and freed
	// none.
	quiet atomic.Int64
	// fleet is the fleet's count of slots held on the backend as the
	// Shared store last answered this replica (FleetCounts), or 0 when not
	// known: no store, the store down or failing. fleetBusy is fleetBusyLead
	// when that count was at least half of maxInFlight, else 0: timeAcquire
	// subtracts it from the limit, which keeps it inlined.
	fleet     atomic.Int64
	fleetBusy atomic.Int64
	// warmEnd is when, by the Tracker's clock in nanoseconds, the Shared
	// store's warm-up, in which it refuses every acquire, was last said to
	// end; 0 before any. warmTimer: a wake at that end is pending.
	warmEnd   atomic.Int64
	warmTimer atomic.Bool
}

// FleetCounts is implemented by a Shared that learns, with its answers,
// how many slots the whole fleet holds on a backend (package redisslots:
// the lease set's size, returned by the scripts an acquire, a release and a
// renewal run anyway). New registers the Tracker with it. With it the
// spacing of releases counts the fleet's slots, whose releases wake
// waiters here too (FleetRoom), not only this replica's: with R replicas
// sharing a backend evenly, this replica's count alone overstated the time
// between releases R-fold.
type FleetCounts interface {
	// NotifyCounts sets the function told, after each answer of the store
	// on backend, the slots held on it across the fleet (inFlight, -1 when
	// not known: the store did not answer, is down, or is warming up), and
	// how long from now the store still refuses every acquire (warm, 0
	// when it does not). It is called on the acquiring and releasing
	// goroutines and the Shared's own and must not block.
	NotifyCounts(f func(backend string, inFlight int64, warm time.Duration))
}

// fleetCount records what the Shared store said of backend name
// (FleetCounts). A warm-up's end wakes the backend's waiters: no release
// announces it, and without the wake they would wait out their Retry-After.
func (t *Tracker) fleetCount(name string, inFlight int64, warm time.Duration) {
	b := t.current.Load().byName[name]
	if b == nil {
		return
	}
	b.times.fleet.Store(max(inFlight, 0))
	var lead int64
	if inFlight > 0 && busy(inFlight, b.max.Load()) {
		lead = fleetBusyLead
	}
	b.times.fleetBusy.Store(lead)
	if warm > 0 {
		b.warmUntil(t.clk.Now().UnixNano() + int64(warm))
	}
}

// warmUntil notes that the store refuses acquires on b until end (the
// Tracker's clock, nanoseconds), and wakes b's waiters then, once per end:
// the acquires refused in one warm-up all name about the same end.
func (b *backend) warmUntil(end int64) {
	for {
		old := b.times.warmEnd.Load()
		if end <= old || b.times.warmEnd.CompareAndSwap(old, end) {
			break
		}
	}
	if b.times.warmTimer.CompareAndSwap(false, true) {
		b.wakeAtWarmEnd()
	}
}

// wakeAtWarmEnd tells OnRoom of b when its warm-up ends, or sleeps again if
// the end moved later meanwhile. A wake a little early (Redis's clock runs
// the warm-up) is refused and names the end again. The timer's function
// starts a goroutine because a fake clock runs it holding its lock, which
// a reading of the clock would wait for.
func (b *backend) wakeAtWarmEnd() {
	d := b.times.warmEnd.Load() - b.t.clk.Now().UnixNano()
	if d > 0 {
		b.t.clk.AfterFunc(time.Duration(d), func() { go b.wakeAtWarmEnd() })
		return
	}
	b.times.warmTimer.Store(false)
	if b.retired.Load() {
		return
	}
	b.roomed()
	// An end named after the timer fired but before warmTimer cleared.
	if b.times.warmEnd.Load() > b.t.clk.Now().UnixNano() && b.times.warmTimer.CompareAndSwap(false, true) {
		b.wakeAtWarmEnd()
	}
}

// busy reports whether count slots held are at least half of limit: the
// slots taken then are timed.
func busy(count, limit int64) bool { return 2*count >= limit }

// timeAcquire stamps s, just taken on b as its count-th slot under limit,
// with the time when b is busy, here or across the fleet (its count as the
// shared store last said: this replica's slots are then a sample of the
// fleet's durations, however few of them it holds), and notes b's reaching
// half full here. The check is inlined; only a busy backend pays a call
// and a clock reading. s.b must already be b (the call reads it from s,
// one argument fewer: the inliner's budget).
func (b *backend) timeAcquire(s *Slot, count, limit int64) {
	s.stamp = 0
	if 2*count >= limit-b.times.fleetBusy.Load() {
		s.stampBusy(count)
	}
}

// stampBusy is timeAcquire past its inlined check, on s.b.
func (s *Slot) stampBusy(count int64) {
	b := s.b
	limit := b.limit()
	now := b.t.clk.Now().UnixNano()
	s.stamp = now
	if busy(count, limit) && (!busy(count-1, limit) || b.times.quiet.Load() == 0) {
		b.times.quiet.Store(now)
	}
}

// timeRelease measures s's time held, if it was stamped and measure says
// it counts, and notes the release of b's count-th slot (count before the
// release), when b is busy. Release calls it only when s was stamped or b
// may be busy (at half its maxInFlight, or with a window), so a backend
// under half full without a window pays a comparison.
func (b *backend) timeRelease(s *Slot, count int64, measure bool) {
	at := s.stamp
	if !measure {
		at = 0
	}
	if at == 0 && !busy(count, b.limit()) {
		return
	}
	now := b.t.clk.Now().UnixNano()
	b.times.quiet.Store(now)
	if at == 0 {
		return
	}
	d := max(now-at, 1)
	for {
		old := b.times.held.Load()
		next := d
		if old > 0 {
			next = max(old+(d-old)/durationWeight, 1)
		}
		if b.times.held.CompareAndSwap(old, next) {
			return
		}
	}
}

// limit is the in-flight bound in force on b (backend.limits).
func (b *backend) limit() int64 {
	_, limit := b.limits()
	return limit
}

// Withdraw is Release for a slot whose request never reached the backend
// (no dispatch after all): its time held is not measured, since it says
// nothing about how long the backend takes.
func (s *Slot) Withdraw() { s.release(false) }

// NextRelease returns the expected time until the next of the named
// backends' slots frees, and the spacing of releases after it: the
// expected time between slots coming free on them together (names without
// a capacity entry are skipped; none at all gives DefaultReleaseSpacing
// for both), at the Tracker's clock now. They are what a request waiting
// for a slot counts its wait in, and what a capacity refusal's Retry-After
// is told: the time to the next release of slots freeing at random, and
// successive refusals one spacing apart. The next is the spacing, or the
// time left of the shared store's warm-up when later: no slot frees before
// it ends, and a client told less retries into it. Only the first release
// waits for the warm-up's end: refusals and waiters after it are told the
// spacing on top of it, not the warm-up again.
//
// Each backend frees its n slots in flight at n per mean time a slot is
// held (the EWMA of its timed slots): that is right from its first
// release on, however bursty its releases are, and per backend, since one
// backend's slots may last twice another's. The backends' rates add up.
// An EWMA of the gaps between releases, which this replaces, was
// measured across all backends, took two releases to say anything, and
// counted the idle time between two busy spells as a gap.
//
// With a Shared store that counts the fleet's slots (FleetCounts), n is
// the fleet's count as the store last answered this replica (or this
// replica's, when larger: it is live), since a slot freed on any replica
// wakes waiters here; the mean time held is still this replica's own
// timed slots, a fair sample of the fleet's (the same backend, the same
// requests), timed while the backend is half full across the fleet. When
// the store has not answered (down, failing, failing open) the local
// count stands, as the local count decides the acquires then. While the
// store is warming up (it refuses every acquire, see package redisslots)
// the next release is no sooner than the warm-up's end (NextRelease).
//
// The slots in flight are evidence too. A backend that has held its busy
// slots for L without freeing one frees them no faster than one per L/n:
// the oldest has lasted at least L. Before its first release that is all
// that is known (a request that has run for L says little about when it
// ends, and a spacing below L/n is contradicted by it); after, it bounds
// the mean from below when the slots run longer than they used to, down
// to a backend that hangs, whose spacing then grows with the time it has
// freed nothing and whose waiters are refused at arrival once that passes
// their budget. Until L/n passes DefaultReleaseSpacing the prior stands.
// L is this replica's slots' (it sees no other replica's releases but
// while the backend is contended), and bounds the mean time held as the
// timed slots do.
//
// The time to the next release is taken as the spacing, the mean residual
// of releases at random. The ages of the slots could say more with few
// slots of regular length (one slot 900ms into a 1s request frees in
// 100ms, not 1s), but with many slots of varying length, as on a model
// server, releases are close to random; and the spacing is never less
// than the time to the oldest slot's expected end, so a client that
// obeys a Retry-After counted from it does not come back before a slot
// could have freed.
func (t *Tracker) NextRelease(names []string) (next, spacing time.Duration) {
	snap := t.current.Load()
	var now, warm int64
	var rate float64 // releases per nanosecond
	for _, name := range names {
		b := snap.byName[name]
		if b == nil {
			continue
		}
		if now == 0 {
			now = t.clk.Now().UnixNano()
		}
		rate += 1 / float64(b.spacing(now))
		warm = max(warm, b.times.warmEnd.Load()-now)
	}
	if rate == 0 {
		return DefaultReleaseSpacing, DefaultReleaseSpacing
	}
	spacing = time.Duration(math.Round(1 / rate))
	return max(spacing, time.Duration(warm)), spacing
}

// spacing is b's own expected time between releases at now (see
// NextRelease), in nanoseconds, at least 1.
func (b *backend) spacing(now int64) int64 {
	count := b.inFlight.Load()
	n := max(count, b.times.fleet.Load(), 1)
	s := int64(DefaultReleaseSpacing)
	if held := b.times.held.Load(); held > 0 {
		s = held / n
	}
	if q := b.times.quiet.Load(); q > 0 && count > 0 && busy(count, b.limit()) {
		s = max(s, (now-q)/n)
	}
	return max(s, 1)
}
