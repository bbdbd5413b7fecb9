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
	"sync/atomic"
	"testing"
	"time"

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
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30}}); err != nil {
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
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30, Saturation: sat}}); err != nil {
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

// AcquireAny over three candidates whose first two are full.
func BenchmarkAcquireAnyThirdCandidate(b *testing.B) {
	tr := New(Options{OnRoom: func(string) {}})
	defer tr.Close()
	if err := tr.Apply([]Backend{{Name: "a", MaxInFlight: 1}, {Name: "b", MaxInFlight: 1}, {Name: "c", MaxInFlight: 1 << 30}}); err != nil {
		b.Fatal(err)
	}
	var fa, fb, s Slot
	tr.Acquire(&fa, "a")
	tr.Acquire(&fb, "b")
	cands := []string{"a", "b", "c"}
	b.ReportAllocs()
	for b.Loop() {
		if i, _ := tr.AcquireAny(&s, cands, 0); i != 2 {
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
	if err := tr.Apply([]Backend{{Name: "vllm-a", MaxInFlight: 1 << 30}}); err != nil {
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
