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
	"sync"
	"sync/atomic"
)

// defaultGCHeapFloor is the default of --gc-heap-floor.
const defaultGCHeapFloor = 32 << 20

// Why a heap floor: every proxied request allocates about 10 KiB (most of
// it net/http's), so the collector runs every few hundred requests, and
// each cycle marks the whole live heap. The data plane's live heap is a few
// MiB even when idle (client-go's type registrations, the limiter and
// fair-queue tables), several times a bare reverse proxy's, so with the
// default GOGC=100 (heap goal twice the live heap, at least 4 MiB) marking
// cost about a tenth of the CPU per request under load (make bench-http,
// BENCHMARKS.md). Keeping the heap goal at least a floor makes cycles rarer
// while the live heap is small; once GOGC=100's goal (about twice the live
// heap) reaches the floor, that goal applies again, so the heap goal is
// max(floor, GOGC=100's goal) and the bounds on bodies and tables still hold.

// gcPercentFor returns the GOGC value whose heap goal is floor for a live
// heap of live bytes and scan roots (goroutine stacks and globals) of roots
// bytes, never below 100 (Go's default). Go's goal is
// live + (live+roots)*GOGC/100.
func gcPercentFor(live, roots, floor uint64) int {
	const maxPercent = 100_000 // a near-empty heap: still a finite goal
	if live == 0 || floor <= 2*live+roots {
		return 100
	}
	p := (floor - live) * 100 / (live + roots)
	return int(min(max(p, 100), maxPercent))
}

// gcFloor keeps the collector's heap goal at least floor bytes: after every
// cycle it sets GOGC from the live heap that cycle measured. It does nothing
// when the operator set GOGC, which then decides alone; GOMEMLIMIT still
// applies either way, as Go enforces it whatever GOGC says.
type gcFloor struct {
	floor uint64
	// mu orders adjust against stop, so no GOGC is set after stop restored 100.
	mu      sync.Mutex
	stopped atomic.Bool
	sample  []metrics.Sample
	// percent is the GOGC value last set (guarded by mu), so an unchanged one
	// is not set again.
	percent int
}

// gcFloorEnabled reports whether the heap floor applies: not for a floor of
// 0, and not when the environment (read through getenv) sets GOGC, whatever
// its value, as the operator's GOGC then decides alone.
func gcFloorEnabled(floor uint64, getenv func(string) string) bool {
	return floor != 0 && getenv("GOGC") == ""
}

// startGCFloor starts keeping the heap goal at least floor bytes and returns
// the function that stops it and restores GOGC=100. When gcFloorEnabled says
// no it changes nothing and the returned function does nothing.
func startGCFloor(floor uint64, getenv func(string) string) (stop func()) {
	if !gcFloorEnabled(floor, getenv) {
		return func() {}
	}
	g := newGCFloor(floor)
	g.arm()
	return g.stop
}

func newGCFloor(floor uint64) *gcFloor {
	return &gcFloor{floor: floor, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
}

// stop stops adjusting GOGC and restores 100; no adjust that runs later (a
// finalizer already under way) sets GOGC again.
func (g *gcFloor) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped.Store(true)
	debug.SetGCPercent(100)
}

// gcSentinel is garbage the moment it is made; its finalizer runs after the
// collection that found it and arms a new one, the usual way to run code
// after each GC cycle without polling. (It holds a pointer, so it is never
// batched by the tiny allocator, which would delay the finalizer.)
type gcSentinel struct{ g *gcFloor }

func (g *gcFloor) arm() {
	runtime.SetFinalizer(&gcSentinel{g: g}, func(s *gcSentinel) {
		if s.g.stopped.Load() {
			return
		}
		s.g.adjust()
		s.g.arm()
	})
}

// adjust sets GOGC for the live heap the last cycle measured, when it
// differs from the value set before.
func (g *gcFloor) adjust() {
	g.mu.Lock()
	defer g.mu.Unlock()
	metrics.Read(g.sample)
	for _, m := range g.sample {
		if m.Value.Kind() != metrics.KindUint64 {
			return // not reported by this Go: leave GOGC alone
		}
	}
	p := gcPercentFor(g.sample[0].Value.Uint64(), g.sample[1].Value.Uint64()+g.sample[2].Value.Uint64(), g.floor)
	if p != g.percent && !g.stopped.Load() {
		debug.SetGCPercent(p)
		g.percent = p
	}
}
