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

package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkAdmitFastPath measures a request that no limit refuses with fair
// queuing on: pre-auth (global, client) and all four identity buckets checked
// and charged, the no-barging check, and limiter metrics recorded.
func BenchmarkAdmitFastPath(b *testing.B) {
	huge := &limiter.Limit{Requests: 1 << 40, Period: time.Second}
	cfg := limiter.Config{Global: huge, Client: huge, APIKey: huge, User: huge, Team: huge, Model: huge}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	lim, err := limiter.New(cfg, limiter.Options{Observer: m})
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.RealClock{}
	q := fairqueue.New(clk, fairqueue.Bounds{}, fairqueue.Weights{}, m)
	defer q.Close()
	c, err := New(clk, lim, q, Settings{Enabled: true, TenantDimension: identity.DimensionUser}, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	r := Request{
		ClientAddr:   "10.1.2.3",
		Identity:     identity.Set{APIKey: identity.Hash(key, "sk-1"), User: identity.Hash(key, "alice"), Team: identity.Hash(key, "red")},
		Model:        "llama-3-70b",
		TotalTimeout: time.Minute,
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := c.Admit(ctx, r); !d.Allowed {
			b.Fatalf("refused: %+v", d)
		}
	}
}

// BenchmarkXTimeRateAllow is the reference point for BenchmarkAdmitFastPath:
// one golang.org/x/time/rate bucket, one Allow, measured in the same run.
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1<<40), 1<<40)
	b.ReportAllocs()
	for b.Loop() {
		if !l.Allow() {
			b.Fatal("refused")
		}
	}
}

// BenchmarkXTimeRateSixKeyed is the like-for-like reference for
// BenchmarkAdmitFastPath: the same six buckets (global, client, api key,
// user, team, model) built the way a user of golang.org/x/time/rate would
// build them, one limiter for the global bucket and one sync.Map of
// limiters per keyed dimension, looked up by the same keys, with one
// reading of the clock per request.
func BenchmarkXTimeRateSixKeyed(b *testing.B) {
	newLimiter := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1<<40), 1<<40) }
	global := newLimiter()
	var keyed [5]sync.Map // client, api key, user, team, model
	get := func(m *sync.Map, key string) *rate.Limiter {
		if l, ok := m.Load(key); ok {
			return l.(*rate.Limiter)
		}
		l, _ := m.LoadOrStore(key, newLimiter())
		return l.(*rate.Limiter)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	keys := [5]string{"10.1.2.3", identity.Hash(key, "sk-1"), identity.Hash(key, "alice"), identity.Hash(key, "red"), "llama-3-70b"}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		ok := global.AllowN(now, 1)
		for i := range keyed {
			ok = ok && get(&keyed[i], keys[i]).AllowN(now, 1)
		}
		if !ok {
			b.Fatal("refused")
		}
	}
}
