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

	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// fakeGate holds each tenant back until a set time and records what it is told.
type fakeGate struct {
	mu       sync.Mutex
	until    map[string]time.Time
	arrivals map[string]int
	admitted map[string]int
	refused  map[string]int
}

func newFakeGate() *fakeGate {
	return &fakeGate{until: map[string]time.Time{}, arrivals: map[string]int{}, admitted: map[string]int{}, refused: map[string]int{}}
}

func (g *fakeGate) Arrive(tenant, key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrivals[tenant+"/"+key]++
}

func (g *fakeGate) Allow(now time.Time, tenant, _ string) (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := g.until[tenant]; now.Before(u) {
		return false, u.Sub(now)
	}
	return true, 0
}

func (g *fakeGate) Done(tenant, key string, admitted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if admitted {
		g.admitted[tenant+"/"+key]++
	} else {
		g.refused[tenant+"/"+key]++
	}
}

func (g *fakeGate) counts(tenant string) (arrivals, admitted, refused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := tenant + "/m"
	return g.arrivals[k], g.admitted[k], g.refused[k]
}

// TestGateHoldsBackATenantWithoutSpendingItsToken checks the fleet pacing
// hook: a request the gate holds back waits in the fair queue without taking
// a token, and is admitted once the gate lets it through.
func TestGateHoldsBackATenantWithoutSpendingItsToken(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{Model: lim(10, time.Second)}, settings: on})
	g := newFakeGate()
	e.c.SetGate(g)
	g.until[alice.User] = t0.Add(300 * time.Millisecond)

	ch := e.admitAsync(context.Background(), Request{Identity: alice, Model: "m", TotalTimeout: time.Minute})
	testutil.Eventually(t, "the held request to queue", func() bool { return e.depth() == 1 && e.queue.Settled() })
	if p, err := e.lim.PeekIdentity(e.clk.Now(), limiter.Keys{Model: "m"}); err != nil || p.Tightest.Remaining != 10 {
		t.Fatalf("the model bucket has %d tokens left (err %v) while the request is held, want all 10", p.Tightest.Remaining, err)
	}
	e.clk.Step(300 * time.Millisecond)
	d := receive(t, ch)
	if !d.Allowed || !d.Queue.Queued {
		t.Fatalf("got %+v, want admitted after queuing", d)
	}
	if a, ok, no := g.counts(alice.User); a != 1 || ok != 1 || no != 0 {
		t.Fatalf("gate saw %d arrivals, %d admissions and %d refusals, want 1, 1, 0", a, ok, no)
	}

	// Without the gate, the same request goes straight through.
	e.c.SetGate(nil)
	g.until[alice.User] = e.clk.Now().Add(time.Hour)
	if d := e.c.Admit(context.Background(), Request{Identity: alice, Model: "m"}); !d.Allowed || d.Queue.Queued {
		t.Fatalf("without a gate got %+v, want admitted at once", d)
	}
}

// TestGateIsToldOnlyModelBucketOutcomes checks that the gate learns of
// admissions and model-bucket refusals, never of other buckets' refusals.
func TestGateIsToldOnlyModelBucketOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		cfg         limiter.Config
		wantRefused int
	}{
		{"model bucket refuses", limiter.Config{Model: lim(1, time.Hour)}, 1},
		{"user bucket refuses", limiter.Config{User: lim(1, time.Hour), Model: lim(100, time.Second)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: tc.cfg, settings: on})
			g := newFakeGate()
			e.c.SetGate(g)
			r := Request{Identity: alice, Model: "m", TotalTimeout: time.Second}
			if d := e.c.Admit(context.Background(), r); !d.Allowed {
				t.Fatalf("first request refused: %+v", d)
			}
			if d := e.c.Admit(context.Background(), r); d.Allowed {
				t.Fatalf("second request admitted: %+v", d)
			}
			if a, ok, no := g.counts(alice.User); a != 2 || ok != 1 || no != tc.wantRefused {
				t.Fatalf("gate saw %d arrivals, %d admissions and %d refusals, want 2, 1, %d", a, ok, no, tc.wantRefused)
			}
		})
	}
}
