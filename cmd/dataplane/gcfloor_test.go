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

package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name               string
		live, roots, floor uint64
		want               int
	}{
		{name: "small live heap: the goal is the floor", live: 2 * mib, floor: 32 * mib, want: 1500},
		{name: "roots count towards the goal", live: 2 * mib, roots: 1 * mib, floor: 32 * mib, want: 1000},
		{name: "uneven division rounds down", live: 3 * mib, floor: 32 * mib, want: 966},
		{name: "live heap at half the floor: Go's default", live: 16 * mib, floor: 32 * mib, want: 100},
		{name: "live heap past the floor: Go's default", live: 200 * mib, floor: 32 * mib, want: 100},
		{name: "nothing measured yet: Go's default", live: 0, floor: 32 * mib, want: 100},
		{name: "near-empty heap: capped", live: 1, floor: 32 * mib, want: 100_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := gcPercentFor(tc.live, tc.roots, tc.floor)
			if got != tc.want {
				t.Errorf("gcPercentFor(%d, %d, %d) = %d, want %d", tc.live, tc.roots, tc.floor, got, tc.want)
			}
			// Go's heap goal: live + (live+roots)*GOGC/100.
			goal := tc.live + (tc.live+tc.roots)*uint64(got)/100
			if tc.live > 0 && got > 100 && got < 100_000 && (goal > tc.floor || goal < tc.floor-tc.live) {
				t.Errorf("heap goal %d for live %d and roots %d, want about the floor %d", goal, tc.live, tc.roots, tc.floor)
			}
		})
	}
}

// gogc reads the GOGC value in force.
func gogc(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestGCFloorRaisesGOGCAfterACollectionAndStops(t *testing.T) {
	if gogc(t) != 100 {
		t.Skip("GOGC is not 100 in this test process")
	}
	stop := startGCFloor(1<<40, func(string) string { return "" }) // far above any test heap
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	// The floor is applied by a finalizer, which runs on its own goroutine
	// after the cycle that found its object: poll for it, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for gogc(t) <= 100 {
		if time.Now().After(deadline) {
			t.Fatal("GOGC still 100 five seconds after collections began: the heap floor is not applied after a GC cycle")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	stopped = true
	if got := gogc(t); got != 100 {
		t.Errorf("GOGC = %d after stop, want 100 restored", got)
	}
}

// TestGCFloorAdjustAfterStopLeavesGOGC checks the other half of stop
// directly: a finalizer already under way when stop ran (so its adjust comes
// after) must not set GOGC again.
func TestGCFloorAdjustAfterStopLeavesGOGC(t *testing.T) {
	if gogc(t) != 100 {
		t.Skip("GOGC is not 100 in this test process")
	}
	g := newGCFloor(1 << 40) // far above any test heap: adjust would raise GOGC
	g.stop()
	g.adjust()
	if got := gogc(t); got != 100 {
		debug.SetGCPercent(100)
		t.Errorf("GOGC = %d after an adjust that followed stop, want 100", got)
	}
}

func TestGCFloorEnabled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		floor uint64
		env   string // GOGC
		want  bool
	}{
		{name: "floor, no GOGC", floor: defaultGCHeapFloor, want: true},
		{name: "GOGC set", floor: 1 << 40, env: "50", want: false},
		{name: "GOGC=100 set: still the operator's", floor: 1 << 40, env: "100", want: false},
		{name: "GOGC=off", floor: 1 << 40, env: "off", want: false},
		{name: "floor 0", floor: 0, want: false},
		{name: "floor 0 and GOGC set", floor: 0, env: "50", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "GOGC" {
					return tc.env
				}
				return ""
			}
			if got := gcFloorEnabled(tc.floor, getenv); got != tc.want {
				t.Errorf("gcFloorEnabled(%d, GOGC=%q) = %v, want %v", tc.floor, tc.env, got, tc.want)
			}
		})
	}
}

// TestGCFloorLeavesAnOperatorsGOGCAlone checks that a disabled floor changes
// nothing, not even on stop: GOGC is set to a value neither the floor nor
// stop would set, so any write shows.
func TestGCFloorLeavesAnOperatorsGOGCAlone(t *testing.T) {
	const operators = 73
	prev := debug.SetGCPercent(operators)
	defer debug.SetGCPercent(prev)
	for _, tc := range []struct {
		name  string
		floor uint64
		env   string
	}{
		{name: "GOGC set", floor: 1 << 40, env: "50"},
		{name: "floor 0", floor: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := startGCFloor(tc.floor, func(k string) string {
				if k == "GOGC" {
					return tc.env
				}
				return ""
			})
			stop()
			if got := gogc(t); got != operators {
				t.Errorf("GOGC = %d, want %d untouched", got, operators)
			}
		})
	}
}
