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
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// TestAWindowBoundsThisReplicasCountNotTheFleets: a saturation window is
// learned from this replica's in-flight count (what it had in flight when
// the server's signals were under their max), so it bounds that count; the
// fleet-wide count is bounded by maxInFlight. Before, the window was also
// the limit asked of the shared store, so with 20 requests of other
// replicas in flight a window of 10 refused this replica outright, however
// few of its own it had, until its readings grew the window past the
// fleet's count, one per reading. The overdraft, too, is bounded here, by
// this replica's window and reserve; the store only by maxInFlight.
func TestAWindowBoundsThisReplicasCountNotTheFleets(t *testing.T) {
	fleet := &fakeShared{held: map[uint64]bool{}, others: 20}
	f := newPollFixture(t, vllmMetrics(0, 0.5), Options{Shared: fleet})
	signals := []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 4}}
	if err := f.tr.Apply([]Backend{{Name: "a", MaxInFlight: 40, Saturation: saturation(f.srv.URL+"/metrics", signals...)}}, 0); err != nil {
		t.Fatal(err)
	}
	f.waitPolls(1)
	h := &held{t: t, f: f}
	defer h.releaseAll()
	for range 10 {
		h.take(Acquired)
	}
	f.tick() // under every max with 10 of ours in flight
	h.take(Acquired)
	h.take(Acquired)
	f.srv.set(vllmMetrics(5, 0.5))
	f.tick() // over: our window is cut to 10
	h.take(Saturated)
	h.release(3) // 9 of ours, 29 in the fleet
	h.take(Acquired)
	h.take(Saturated) // at our window

	// Under the window the fleet's count still binds at maxInFlight.
	f.srv.set(vllmMetrics(0, 0.5))
	f.tick() // our window grows to 11
	fleet.mu.Lock()
	fleet.others = 40 - 10
	fleet.mu.Unlock()
	h.take(Saturated) // 10 of ours and 30 others: the fleet is at maxInFlight
}
