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
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// The fast path against its floor: one atomic add and one subtract, what
// any in-flight counter costs.
func BenchmarkBaselineAtomicAddPair(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		n.Add(1)
		n.Add(-1)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	tr := New(Options{})
	defer tr.Close()
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30}}, 0); err != nil {
		b.Fatal(err)
	}
	var s Slot
	b.ReportAllocs()
	for b.Loop() {
		if tr.Acquire(&s, "vllm-a") != Acquired {
			b.Fatal("refused")
		}
		s.Release()
	}
}

// A claimed slot on a backend with signals: the tenant's count is kept
// (overdraft.go), an entry made and removed each time. The metrics URL
// answers nothing: the poller's failures leave the window alone.
func BenchmarkAcquireForRelease(b *testing.B) {
	tr := New(Options{})
	defer tr.Close()
	sat := &config.Saturation{MetricsURL: "http://127.0.0.1:1/metrics", Interval: config.Duration{Duration: time.Hour},
		Timeout: config.Duration{Duration: time.Second}, StaleAfter: config.Duration{Duration: time.Hour},
		Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 0}}}
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30, Saturation: sat}}, 0); err != nil {
		b.Fatal(err)
	}
	var s Slot
	c := Claim{Tenant: "tenant-key-hash", Weight: 1}
	b.ReportAllocs()
	for b.Loop() {
		if tr.AcquireFor(&s, c, "vllm-a") != Acquired {
			b.Fatal("refused")
		}
		s.Release()
	}
}

// AcquireAny over a pool of three whose first two are full.
func BenchmarkAcquireAnyThirdCandidate(b *testing.B) {
	tr := New(Options{OnRoom: func(string) {}})
	defer tr.Close()
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 1}, {Name: "b", MaxInFlight: 1}, {Name: "c", MaxInFlight: 1 << 30}}, 0); err != nil {
		b.Fatal(err)
	}
	var fa, fb, s Slot
	tr.Acquire(&fa, "a")
	tr.Acquire(&fb, "b")
	b.ReportAllocs()
	for b.Loop() {
		if name, _ := tr.AcquireAny(&s, 0); name != "c" {
			b.Fatal("not c")
		}
		s.Release()
	}
}

func BenchmarkBaselineAtomicAddPairParallel(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
			n.Add(-1)
		}
	})
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	tr := New(Options{})
	defer tr.Close()
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30}}, 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var s Slot
		for pb.Next() {
			if tr.Acquire(&s, "vllm-a") != Acquired {
				b.Error("refused")
				return
			}
			s.Release()
		}
	})
}

// saturatedAt returns a Tracker whose backend "a", with signals, is at its
// window with n tenants holding one slot each, n others waiting and heavy
// holding n slots more: heavy, over its share, is refused an overdraft
// after the shares are weighed.
func saturatedAt(b *testing.B, n int, heavy Claim) (*Tracker, *backend) {
	b.Helper()
	tr := New(Options{Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), MaxTenants: 4 * n})
	b.Cleanup(tr.Close)
	if err := tr.Apply(signalled("a"), 0); err != nil {
		b.Fatal(err)
	}
	take := func(c Claim) {
		s := new(Slot)
		if r := tr.AcquireFor(s, c, "a"); r != Acquired {
			b.Fatalf("acquire for %+v: %v", c, r)
		}
		b.Cleanup(s.Release)
	}
	for i := range n {
		take(Claim{Tenant: fmt.Sprintf("holder-%d", i), Weight: 1 + i%4})
		take(heavy)
		b.Cleanup(tr.Waiting(Claim{Tenant: fmt.Sprintf("waiter-%d", i), Weight: 1 + i%4}))
	}
	ba := tr.current.Load().byName["a"]
	ba.window.Store(ba.inFlight.Load())
	return tr, ba
}

// A refused AcquireFor at a backend at its window, for a tenant over its
// share (every arrival and wake attempt of a flood), by the tenants holding
// and waiting: the shares are weighed from running sums, so the cost does
// not grow with the tenants.
func BenchmarkRefusedAcquireFor(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			heavy := Claim{Tenant: "heavy", Weight: 1}
			tr, _ := saturatedAt(b, n, heavy)
			var s Slot
			b.ReportAllocs()
			for b.Loop() {
				if tr.AcquireFor(&s, heavy, "a") != Saturated {
					b.Fatal("not refused")
				}
			}
		})
	}
}

// The overdraft decision of a refused AcquireFor, before (scan: every
// tenant holding or waiting summed, the reference in overdraft_test.go,
// without mayOverdraft's cheap prechecks) and after (sums), on the same
// state. Run with -count: each round runs
// both, alternating, so that the noise of a shared machine falls on both.
func BenchmarkRefusedOverdraftDecision(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			heavy := Claim{Tenant: "heavy", Weight: 1}
			_, ba := saturatedAt(b, n, heavy)
			limit := ba.window.Load()
			for _, impl := range []struct {
				name   string
				decide func(*Claim) bool
			}{
				{"scan", ba.scanDecides},
				{"sums", func(c *Claim) bool { return ba.mayOverdraft(c, limit, limit, 1<<30) }},
			} {
				b.Run(impl.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if impl.decide(&heavy) {
							b.Fatal("heavy may overdraft")
						}
					}
				})
			}
		})
	}
}
