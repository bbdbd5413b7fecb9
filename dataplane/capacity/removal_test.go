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
	"slices"
	"testing"
)

// TestRemovingAFullBackendWakesItsWaiters: a reload that drops a backend's
// capacity entry leaves nothing bounding it, so the waiters refused on it
// are told at once instead of at their next retry; an idle backend's
// removal tells no one.
func TestRemovingAFullBackendWakesItsWaiters(t *testing.T) {
	var r rooms
	tr := newTracker(t, Options{OnRoom: r.on}, Backend{Name: "full", MaxInFlight: 1}, Backend{Name: "idle", MaxInFlight: 1})
	var held, refused Slot
	if tr.Acquire(&held, "full") != Acquired || tr.Acquire(&refused, "full") != Saturated {
		t.Fatal("want one slot taken and one refused")
	}
	if err := tr.Apply(nil, 0); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	calls := append([]string(nil), r.calls...)
	r.mu.Unlock()
	if len(calls) != 1 || calls[0] != "full" {
		t.Fatalf("OnRoom calls %q on removal, want [full]", calls)
	}
	if got := tr.Acquire(&refused, "full"); got != Untracked {
		t.Fatalf("acquire on the removed backend: %v, want untracked", got)
	}
	held.Release() // into the old count, harmlessly
}

// TestAcquireAnyGoesToThePoolInForce: a request that waits through a
// reload tries the backends the reload put in force: never one it removed
// (b, full or not), a backend it added (c) at once, and a backend of the
// pool without an entry untracked. The added backend wakes the waiters,
// who found full the backends they tried.
func TestAcquireAnyGoesToThePoolInForce(t *testing.T) {
	var r rooms
	tr := newTracker(t, Options{OnRoom: r.on}, Backend{Name: "a", MaxInFlight: 1}, Backend{Name: "b", MaxInFlight: 1})
	var holdA, holdB, s Slot
	if tr.Acquire(&holdA, "a") != Acquired || tr.Acquire(&holdB, "b") != Acquired {
		t.Fatal("want a and b held")
	}
	defer holdA.Release()
	defer holdB.Release()
	if name, got := tr.AcquireAny(&s, 0); name != "" || got != Saturated {
		t.Fatalf("a and b full: %q %v, want saturated", name, got)
	}
	r.reset()
	if err := tr.ApplyPool([]Backend{{Name: "a", MaxInFlight: 1}, {Name: "c", MaxInFlight: 1}}, 0, []string{"a", "c", "free"}); err != nil {
		t.Fatal(err)
	}
	if calls := r.snapshot(); !slices.Contains(calls, "c") {
		t.Errorf("OnRoom calls %q on a reload adding c, want c", calls)
	}
	tests := []struct {
		name  string
		start int
		want  string
		res   Result
	}{
		{"a full: the added c", 0, "c", Acquired},
		{"a and c full: the pool backend without an entry", 1, "free", Untracked},
		{"from free", 2, "free", Untracked},
	}
	var held []*Slot
	for _, tc := range tests {
		s := new(Slot)
		name, got := tr.AcquireAny(s, tc.start)
		if name != tc.want || got != tc.res {
			t.Errorf("%s: AcquireAny = %q, %v; want %q, %v", tc.name, name, got, tc.want, tc.res)
		}
		held = append(held, s)
	}
	for _, s := range held {
		s.Release()
	}
	// Apply names its backends as the pool.
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	if name, got := tr.AcquireAny(&s, 1); name != "" || got != Saturated {
		t.Errorf("after Apply of a alone, full: %q, %v; want saturated", name, got)
	}
}

// TestABackendBroughtBackKeepsItsSlotsInFlight: a reload removes a backend
// while requests hold its slots and a later one brings it back before they
// end. Its count must still hold them, or the backend gets maxInFlight new
// requests on top of the ones still running; and their releases must come
// back to it exactly once.
func TestABackendBroughtBackKeepsItsSlotsInFlight(t *testing.T) {
	b := Backend{Name: "b", MaxInFlight: 2}
	tr := newTracker(t, Options{}, b)
	var s1, s2, s3 Slot
	if tr.Acquire(&s1, "b") != Acquired || tr.Acquire(&s2, "b") != Acquired {
		t.Fatal("want two slots")
	}
	if err := tr.Apply(nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Apply([]Backend{b}, 0); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(tr, "b"); n != 2 {
		t.Fatalf("in flight once brought back = %d, want the 2 still held", n)
	}
	if got := tr.Acquire(&s3, "b"); got != Saturated {
		t.Fatalf("a third request on a backend holding 2 of 2: %v, want saturated", got)
	}
	s1.Release()
	s1.Release()
	if n := inFlight(tr, "b"); n != 1 {
		t.Fatalf("in flight after one release = %d, want 1", n)
	}
	if got := tr.Acquire(&s3, "b"); got != Acquired {
		t.Fatalf("after a release: %v, want acquired", got)
	}
	s2.Release()
	s3.Release()
	if n := inFlight(tr, "b"); n != 0 {
		t.Fatalf("in flight at the end = %d, want exactly 0", n)
	}
}
