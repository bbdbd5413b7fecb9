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
