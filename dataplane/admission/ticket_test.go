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
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestTicketSettlesOnce: however many times, and from however many
// goroutines, a ticket is ended, its reservation is settled once.
func TestTicketSettlesOnce(t *testing.T) {
	e := newTokenEnv(t, tokenOpts{cfg: limiter.Config{ModelTokens: tokensPerSecond(1000)}, tokens: deferOn})
	r := Request{Identity: alice, Model: "m", Tokens: 600}
	var tk Ticket
	if d := e.c.Begin(context.Background(), r, &tk); !d.Allowed || !tk.Settles() {
		t.Fatalf("Begin: %+v, want admitted with a reservation to settle", d)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk.Done(200)
		}()
	}
	testutil.WaitGroupWithin(t, testTimeout, "the concurrent Done calls", &wg)
	tk.Done(0)
	if !e.tokensLeft(t, r, 800) || e.tokensLeft(t, r, 801) {
		t.Error("after ending a ticket of 600 that used 200 nine times, the bucket should hold exactly 800 tokens")
	}
	if n := histogramCount(t, e, metrics.TokensEstimateRatioName); n != 1 {
		t.Errorf("%d settlements observed, want 1", n)
	}
}

// TestTicketNoBackendRefundsOnce: a ticket given back because no backend can
// take the request returns its identity token once, however often it is
// given back, and answers the per-backend 429 each time.
func TestTicketNoBackendRefundsOnce(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(2, time.Minute)}})
	r := Request{Identity: alice}
	if d := e.c.Admit(context.Background(), r); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	var tk Ticket
	if d := e.c.Begin(context.Background(), r, &tk); !d.Allowed {
		t.Fatalf("second request: %+v", d)
	}
	for range 2 {
		if d := tk.NoBackend(time.Second); d.Status != StatusTooManyRequests || d.LimitType != "backend" || d.RetryAfter != time.Second {
			t.Fatalf("NoBackend: %+v, want the per-backend 429 after 1s", d)
		}
	}
	tk.Done(0)
	if d := e.c.Admit(context.Background(), r); !d.Allowed {
		t.Fatalf("after NoBackend: %+v, want the refunded token", d)
	}
	if d := e.c.Admit(context.Background(), r); d.Allowed {
		t.Fatal("a ticket given back twice refunded two tokens")
	}
}

// TestRefusedTicketIsEmpty: a refused request's ticket holds nothing, and
// ending it does nothing.
func TestRefusedTicketIsEmpty(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(1, time.Minute)}})
	r := Request{Identity: alice}
	e.c.Admit(context.Background(), r)
	var tk Ticket
	if d := e.c.Begin(context.Background(), r, &tk); d.Allowed || tk.Settles() {
		t.Fatalf("over the limit: %+v, settles %v; want refused with nothing to settle", d, tk.Settles())
	}
	tk.Done(100)
	if d := tk.NoBackend(time.Second); d.Status != 0 {
		t.Errorf("NoBackend on a refused ticket = %+v, want nothing", d)
	}
}

// histogramCount returns the sample count of the histogram name.
func histogramCount(t *testing.T, e *tokenEnv, name string) uint64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
