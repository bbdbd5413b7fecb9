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

import "testing"

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

// TestAcquireAnySkipsBackendsAReloadRemoved: a request that waited through
// a reload lists the backends of the config it arrived under. One the
// reload removed from the pool is skipped, not taken as a backend without
// an entry; a backend of the pool without an entry is still untracked; and
// when every candidate is gone the caller's pool answers.
func TestAcquireAnySkipsBackendsAReloadRemoved(t *testing.T) {
	tr := newTracker(t, Options{}, Backend{Name: "a", MaxInFlight: 1}, Backend{Name: "b", MaxInFlight: 1})
	var holdA, s Slot
	if tr.Acquire(&holdA, "a") != Acquired {
		t.Fatal("a: want a slot")
	}
	defer holdA.Release()
	if err := tr.ApplyPool([]Backend{{Name: "a", MaxInFlight: 1}}, 0, []string{"a", "free"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		candidates []string
		start      int
		idx        int
		want       Result
	}{
		{"removed b skipped, a full", []string{"a", "b"}, 1, -1, Saturated},
		{"a pool backend without an entry is untracked", []string{"b", "free"}, 0, 1, Untracked},
		{"every candidate gone", []string{"b", "c"}, 1, 1, Untracked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, got := tr.AcquireAny(&s, tc.candidates, tc.start)
			if idx != tc.idx || got != tc.want {
				t.Errorf("AcquireAny = %d, %v; want %d, %v", idx, got, tc.idx, tc.want)
			}
			s.Release()
		})
	}
	// Without the pool (Apply), a backend without an entry is untracked.
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	if idx, got := tr.AcquireAny(&s, []string{"a", "b"}, 0); idx != 1 || got != Untracked {
		t.Errorf("after Apply: %d, %v; want b untracked", idx, got)
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
