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

package redisslots

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
)

// trackerOnly is a replica as a data plane builds it: Leases without
// Options.OnRoom, and a Tracker whose OnRoom wakes its fair queue.
func (f *fleet) trackerOnly(name string) (*capacity.Tracker, chan string) {
	f.t.Helper()
	l, err := New(Options{Store: func() *redisstore.Store { return f.store }, Replica: name, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(l.Close)
	rooms := make(chan string, 64)
	tr := capacity.New(capacity.Options{Shared: l, OnRoom: func(b string) {
		select {
		case rooms <- b:
		default:
		}
	}})
	f.t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "vllm-a", MaxInFlight: 1}}); err != nil {
		f.t.Fatal(err)
	}
	f.waitSubscribers(int64(f.replicas + 1))
	f.replicas++
	return tr, rooms
}

// TestATrackerHearsAnotherReplicasRelease: a Tracker whose Shared is Leases
// wakes its waiters (its OnRoom) when a slot frees on another replica, with
// nothing set in Leases' Options, as cmd/dataplane builds them. Before,
// only Options.OnRoom was told, which the data plane could not set (its
// Tracker is built after its Leases), so a waiter on a replica without the
// flood heard only of its own releases and retried on a timer.
func TestATrackerHearsAnotherReplicasRelease(t *testing.T) {
	f := newFleet(t)
	a, _ := f.trackerOnly("a")
	b, bRooms := f.trackerOnly("b")
	var a1, b1 capacity.Slot
	if r := a.Acquire(&a1, "vllm-a"); r != capacity.Acquired {
		t.Fatalf("a: %v", r)
	}
	if r := b.Acquire(&b1, "vllm-a"); r != capacity.Saturated {
		t.Fatalf("b with a holding the fleet's one slot: %v, want saturated", r)
	}
	a1.Release()
	select {
	case got := <-bRooms:
		if got != "vllm-a" {
			t.Fatalf("room on %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's Tracker was not told of the slot a released within 10 s")
	}
	if r := b.Acquire(&b1, "vllm-a"); r != capacity.Acquired {
		t.Fatalf("b after the room: %v", r)
	}
	b1.Release()
}
