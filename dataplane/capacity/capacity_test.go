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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/dataplane/config"

	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rooms records OnRoom calls.
type rooms struct {
	mu    sync.Mutex
	calls []string
}

func (r *rooms) on(b string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, b)
}

func (r *rooms) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func newTracker(t *testing.T, o Options, bs ...Backend) *Tracker {
	t.Helper()
	tr := New(o)
	t.Cleanup(tr.Close)
	if err := tr.Apply(bs, 0); err != nil {
		t.Fatal(err)
	}
	return tr
}

func inFlight(tr *Tracker, name string) int {
	for _, st := range tr.Stats() {
		if st.Backend == name {
			return st.InFlight
		}
	}
	return -1
}

func TestAcquireStopsAtMaxInFlightAndReleaseMakesRoom(t *testing.T) {
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 2})
	var s1, s2, s3 Slot
	if r := tr.Acquire(&s1, "a"); r != Acquired {
		t.Fatalf("first: %v", r)
	}
	if r := tr.Acquire(&s2, "a"); r != Acquired {
		t.Fatalf("second: %v", r)
	}
	if r := tr.Acquire(&s3, "a"); r != Saturated {
		t.Fatalf("third at maxInFlight 2: %v, want saturated", r)
	}
	if !tr.Saturated("a") || !tr.Stats()[0].Saturated {
		t.Fatal("backend at maxInFlight not reported saturated")
	}
	if s3.Backend() != "" {
		t.Fatal("a refused slot holds a backend")
	}
	s1.Release()
	if r := tr.Acquire(&s3, "a"); r != Acquired || s3.Backend() != "a" {
		t.Fatalf("after a release: %v on %q", r, s3.Backend())
	}
	s2.Release()
	s3.Release()
	if n := inFlight(tr, "a"); n != 0 {
		t.Fatalf("in flight after every release: %d", n)
	}
}

func TestAcquireOnABackendWithoutCapacityIsUntracked(t *testing.T) {
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 1})
	var s Slot
	if r := tr.Acquire(&s, "other"); r != Untracked || !r.OK() {
		t.Fatalf("got %v, want untracked", r)
	}
	s.Release() // nothing held: a no-op
	if n := inFlight(tr, "a"); n != 0 {
		t.Fatalf("in flight on a: %d", n)
	}
}

func TestReleaseIsIdempotentAndCountsNeverGoNegative(t *testing.T) {
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 1})
	var zero Slot
	zero.Release()
	var s Slot
	if r := tr.Acquire(&s, "a"); r != Acquired {
		t.Fatal(r)
	}
	var wg sync.WaitGroup
	for range 8 { // every ending of a response releases, concurrently
		wg.Go(s.Release)
	}
	testutil.WaitGroupWithin(t, 10*time.Second, "concurrent releases", &wg)
	if n := inFlight(tr, "a"); n != 0 {
		t.Fatalf("in flight after 8 releases of one slot: %d, want 0", n)
	}
	var other Slot
	if r := tr.Acquire(&other, "a"); r != Acquired {
		t.Fatal(r)
	}
	s.Release() // a late release of the old slot must not free the new one
	if n := inFlight(tr, "a"); n != 1 {
		t.Fatalf("a stale release freed another request's slot: in flight %d, want 1", n)
	}
}

func TestAcquireIntoAHeldSlotReleasesItFirst(t *testing.T) {
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 1}, Backend{Name: "b", MaxInFlight: 1})
	var s Slot
	tr.Acquire(&s, "a")
	if r := tr.Acquire(&s, "b"); r != Acquired {
		t.Fatal(r)
	}
	if inFlight(tr, "a") != 0 || inFlight(tr, "b") != 1 {
		t.Fatalf("a=%d b=%d, want 0 and 1", inFlight(tr, "a"), inFlight(tr, "b"))
	}
}

func TestConcurrentSlotsNeverExceedMaxInFlight(t *testing.T) {
	const limit = 4
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: limit})
	var holding, peak atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 2000 {
				var s Slot
				if tr.Acquire(&s, "a") != Acquired {
					continue
				}
				n := holding.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				holding.Add(-1)
				s.Release()
				s.Release()
			}
		})
	}
	testutil.WaitGroupWithin(t, 10*time.Second, "the workers", &wg)
	if p := peak.Load(); p > limit {
		t.Fatalf("%d slots held at once, maxInFlight %d", p, limit)
	}
	if n := inFlight(tr, "a"); n != 0 {
		t.Fatalf("in flight at the end: %d", n)
	}
}

func TestOnRoomWakesOnReleaseOfAFullOrRefusingBackendOnly(t *testing.T) {
	var rm rooms
	tr := newTracker(t, Options{OnRoom: rm.on}, Backend{Name: "a", MaxInFlight: 2})
	var s1, s2, s3 Slot
	tr.Acquire(&s1, "a")
	s1.Release()
	if rm.count() != 0 {
		t.Fatal("a release below maxInFlight with no refusal woke the queue")
	}
	tr.Acquire(&s1, "a")
	tr.Acquire(&s2, "a")
	if tr.Acquire(&s3, "a") != Saturated {
		t.Fatal("not saturated")
	}
	s1.Release() // at maxInFlight: room
	if rm.count() != 1 {
		t.Fatalf("release at maxInFlight: %d wake-ups, want 1", rm.count())
	}
	tr.Acquire(&s1, "a")
	s1.Release() // full before it: another wake-up
	s2.Release() // neither full nor refused since: none
	if rm.count() != 2 {
		t.Fatalf("%d wake-ups, want 2", rm.count())
	}
}

func TestAcquireAnyTakesTheFirstBackendWithRoomFromStart(t *testing.T) {
	tr := newTracker(t, Options{},
		Backend{Name: "a", MaxInFlight: 1}, Backend{Name: "b", MaxInFlight: 1}, Backend{Name: "c", MaxInFlight: 1})
	var sb, s1, s2, s3 Slot
	tr.Acquire(&sb, "b")
	tests := []struct {
		start int
		slot  *Slot
		want  string
		res   Result
	}{
		{start: 1, slot: &s1, want: "c", res: Acquired}, // b full: c
		{start: 4, slot: &s2, want: "a", res: Acquired}, // b, c full: wraps to a
		{start: 0, slot: &s3, want: "", res: Saturated},
	}
	for _, tc := range tests {
		name, r := tr.AcquireAny(tc.slot, tc.start)
		if name != tc.want || r != tc.res {
			t.Fatalf("from %d: got %q %v, want %q %v", tc.start, name, r, tc.want, tc.res)
		}
	}
	// A backend of the pool without an entry is untracked.
	if err := tr.ApplyPool([]Backend{{Name: "a", MaxInFlight: 1}}, 0, []string{"a", "untracked"}); err != nil {
		t.Fatal(err)
	}
	if name, r := tr.AcquireAny(&s3, 0); name != "untracked" || r != Untracked {
		t.Fatalf("a backend without an entry: %q %v", name, r)
	}
	if err := tr.ApplyPool(nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if name, r := tr.AcquireAny(&s3, 0); name != "" || r != Saturated {
		t.Fatalf("an empty pool: %q %v", name, r)
	}
}

func TestReloadKeepsCountsAndReleaseAfterReloadIsSafe(t *testing.T) {
	var rm rooms
	tr := newTracker(t, Options{OnRoom: rm.on}, Backend{Name: "a", MaxInFlight: 2}, Backend{Name: "gone", MaxInFlight: 1})
	var s1, s2, sg, s3 Slot
	tr.Acquire(&s1, "a")
	tr.Acquire(&s2, "a")
	tr.Acquire(&sg, "gone")
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(tr, "a"); n != 2 {
		t.Fatalf("a kept backend lost its count: %d, want 2", n)
	}
	sg.Release() // its backend is gone: harmless
	s1.Release()
	if tr.Acquire(&s3, "a") != Saturated {
		t.Fatal("a lowered maxInFlight admitted over it")
	}
	before := rm.count()
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 3}}, 0); err != nil {
		t.Fatal(err)
	}
	if rm.count() != before+1 {
		t.Fatal("a raised maxInFlight did not wake the queue")
	}
	if tr.Acquire(&s3, "a") != Acquired {
		t.Fatal("a raised maxInFlight still refuses")
	}
	s2.Release()
	s3.Release()
	tr.Close()
	s3.Release() // after Close: harmless
	if err := tr.Apply(nil, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
}

func TestValidateNamesTheBackendAndField(t *testing.T) {
	sig := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}}
	sec := config.Duration{Duration: time.Second}
	tests := []struct {
		name string
		bs   []Backend
		want string
	}{
		{"ok", []Backend{{Name: "a", MaxInFlight: 1, Saturation: &config.Saturation{MetricsURL: "http://a/metrics", Interval: sec, Timeout: sec, StaleAfter: sec, Signals: sig}}}, ""},
		{"no name", []Backend{{MaxInFlight: 1}}, "name is empty"},
		{"twice", []Backend{{Name: "a", MaxInFlight: 1}, {Name: "a", MaxInFlight: 1}}, `"a" is listed twice`},
		{"zero max", []Backend{{Name: "a"}}, "maxInFlight 0 must be at least 1"},
		{"no url", []Backend{{Name: "a", MaxInFlight: 1, Saturation: &config.Saturation{Interval: sec, Timeout: sec, StaleAfter: sec, Signals: sig}}}, "needs a metrics URL"},
		{"no interval", []Backend{{Name: "a", MaxInFlight: 1, Saturation: &config.Saturation{MetricsURL: "u", Timeout: sec, StaleAfter: sec, Signals: sig}}}, "must be positive, got 0s, 1s, 1s"},
		{"no signals", []Backend{{Name: "a", MaxInFlight: 1, Saturation: &config.Saturation{MetricsURL: "u", Interval: sec, Timeout: sec, StaleAfter: sec}}}, "lists no signals"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.bs)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want it to contain %q", err, tc.want)
			}
		})
	}
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 1})
	if err := tr.Apply([]Backend{{Name: "a"}}, 0); err == nil || tr.Stats()[0].MaxInFlight != 1 {
		t.Fatal("an invalid Apply changed the backends in force")
	}
}

// fakeShared is a Shared holding a fleet count.
type fakeShared struct {
	mu       sync.Mutex
	held     map[uint64]bool
	others   int // slots other replicas hold
	answer   Result
	released []uint64
}

func (f *fakeShared) Acquire(_ string, limit int, _ int64, seq uint64) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answer != Acquired {
		return f.answer
	}
	if len(f.held)+f.others >= limit {
		return Saturated
	}
	f.held[seq] = true
	return Acquired
}

func (f *fakeShared) Release(_ string, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.held, seq)
	f.released = append(f.released, seq)
}

func TestSharedCountsDecideAndEachLeaseIsReleasedOnce(t *testing.T) {
	sh := &fakeShared{held: map[uint64]bool{}, others: 2}
	var rm rooms
	tr := newTracker(t, Options{Shared: sh, OnRoom: rm.on}, Backend{Name: "a", MaxInFlight: 3})
	var s1, s2 Slot
	if r := tr.Acquire(&s1, "a"); r != Acquired {
		t.Fatal(r)
	}
	if r := tr.Acquire(&s2, "a"); r != Saturated {
		t.Fatalf("fleet at maxInFlight: %v", r)
	}
	if n := inFlight(tr, "a"); n != 1 {
		t.Fatalf("a fleet refusal left the local count at %d, want 1", n)
	}
	s1.Release()
	s1.Release()
	if len(sh.released) != 1 || rm.count() != 1 {
		t.Fatalf("released leases %v, wake-ups %d: want one each", sh.released, rm.count())
	}
	sh.answer = Unavailable
	if r := tr.Acquire(&s2, "a"); r != Unavailable || r.OK() {
		t.Fatalf("store failing closed: %v", r)
	}
	if name, r := tr.AcquireAny(&s2, 0); name != "" || r != Unavailable {
		t.Fatalf("AcquireAny with the store failing closed: %q %v", name, r)
	}
	if n := inFlight(tr, "a"); n != 0 {
		t.Fatalf("in flight after unavailable: %d", n)
	}
}

func (r *rooms) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

func (r *rooms) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}
