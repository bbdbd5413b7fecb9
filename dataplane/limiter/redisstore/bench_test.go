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

package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// bareScript is the baseline: one EVALSHA round trip doing nothing.
var bareScript = redis.NewScript("return 1")

// benchAdmission returns a limiter on a Store on a real redis-server with
// the four identity dimensions limited (never exhausted), or only perModel
// when modelOnly, its keys, and the client for the baseline.
func benchAdmission(b *testing.B, modelOnly bool) (*limiter.Limiter, limiter.Keys, redis.UniversalClient) {
	srv := startRedis(b)
	s, err := New(Options{Addresses: []string{srv.addr}, Namespace: "ns", Policy: "bench", Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	big := &limiter.Limit{Requests: 1 << 40, Period: time.Second}
	cfg := limiter.Config{APIKey: big, User: big, Team: big, Model: big}
	if modelOnly {
		cfg = limiter.Config{Model: big}
	}
	l, err := limiter.New(cfg, limiter.Options{Store: s})
	if err != nil {
		b.Fatal(err)
	}
	keys := limiter.Keys{APIKey: "4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a",
		User: "9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e9b7d6c5a4f1c8a0e", Team: "team", Model: "llama"}
	ctx := context.Background()
	if err := bareScript.Run(ctx, s.Client(), nil).Err(); err != nil {
		b.Fatal(err)
	}
	if d, err := l.TakeIdentity(time.Now(), keys); err != nil || !d.Allowed {
		b.Fatalf("warm-up admission: %+v, %v", d, err)
	}
	return l, keys, s.Client()
}

// BenchmarkAdmissionVsBareEvalsha interleaves one admission through the
// Redis store (four identity buckets, or the model bucket alone) with one
// bare EVALSHA round trip to the same Redis, and reports both medians and
// their ratio (target <= 1.3).
func BenchmarkAdmissionVsBareEvalsha(b *testing.B) {
	for _, bc := range []struct {
		name      string
		modelOnly bool
	}{{"four-buckets", false}, {"model-bucket", true}} {
		b.Run(bc.name, func(b *testing.B) {
			l, keys, c := benchAdmission(b, bc.modelOnly)
			ctx := context.Background()
			var bare, admit []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := bareScript.Run(ctx, c, nil).Err(); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if d, err := l.TakeIdentity(t1, keys); err != nil || !d.Allowed {
					b.Fatalf("admission: %+v, %v", d, err)
				}
				bare, admit = append(bare, t1.Sub(t0)), append(admit, time.Since(t1))
			}
			p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
			pb, pa := p50(bare), p50(admit)
			b.ReportMetric(float64(pb.Nanoseconds()), "p50-bare-ns")
			b.ReportMetric(float64(pa.Nanoseconds()), "p50-admission-ns")
			b.ReportMetric(float64(pa)/float64(pb), "p50-ratio")
		})
	}
}

// BenchmarkAdmission measures one four-bucket admission alone, for its
// allocations.
func BenchmarkAdmission(b *testing.B) {
	l, keys, _ := benchAdmission(b, false)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.TakeIdentity(time.Now(), keys); err != nil || !d.Allowed {
			b.Fatalf("admission: %+v, %v", d, err)
		}
	}
}

// BenchmarkBareEvalsha is the baseline alone, for its allocations.
func BenchmarkBareEvalsha(b *testing.B) {
	_, _, c := benchAdmission(b, false)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := bareScript.Run(ctx, c, nil).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
