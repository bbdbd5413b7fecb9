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
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestCapacityLightTenantOverdraftsTheFloodsWindow: with a backend held
// back by its saturation window and a heavy tenant's request waiting for a
// slot, a light tenant's request is admitted at once (it holds less than
// its share of the slots), while the heavy one keeps waiting (issue 22).
func TestCapacityLightTenantOverdraftsTheFloodsWindow(t *testing.T) {
	e := newEnv(t, envOpts{settings: on, bounds: fairqueue.Bounds{MaxWait: time.Hour}})
	var waiting atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %d\n", waiting.Load())
	}))
	t.Cleanup(srv.Close)
	tr := capacity.New(capacity.Options{Clock: e.clk, OnRoom: func(string) { e.c.WakeCapacity() }})
	t.Cleanup(tr.Close)
	backend := capacity.Backend{Name: "a", MaxInFlight: 64}
	if err := tr.Apply([]capacity.Backend{backend}, 0); err != nil {
		t.Fatal(err)
	}
	heavy := Request{Identity: bob, Capacity: Capacity{Tracker: tr}}
	light := Request{Identity: alice, Capacity: heavy.Capacity}
	ctx := context.Background()
	var held []*Ticket
	t.Cleanup(func() {
		for _, tk := range held {
			tk.Done(0)
		}
	})
	begin := func(r Request) {
		t.Helper()
		tk := new(Ticket)
		if d := e.c.Begin(ctx, r, tk); !d.Allowed {
			t.Fatalf("request refused: %+v", d)
		}
		held = append(held, tk)
	}
	for range 10 {
		begin(heavy)
	}
	// Signals from now: a first reading under its max with 10 in flight.
	backend.Saturation = &config.Saturation{MetricsURL: srv.URL, Interval: config.Duration{Duration: time.Second},
		Timeout: config.Duration{Duration: time.Second}, StaleAfter: config.Duration{Duration: time.Hour},
		Signals: []config.Signal{{Metric: "vllm:num_requests_waiting", Max: 0}}}
	if err := tr.Apply([]capacity.Backend{backend}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the first reading", func() bool {
		s := tr.Stats()[0].Signals
		return len(s) == 1 && s[0].Fresh
	})
	begin(heavy)
	begin(heavy)
	waiting.Store(3) // over: the window is the 10 the server took
	e.clk.Step(time.Second)
	testutil.Eventually(t, "the reading over the max", func() bool { return tr.Stats()[0].Saturated })
	held[0].Done(0)
	held[1].Done(0)
	held = held[2:]

	hctx, cancel := context.WithCancel(ctx)
	heavyDone := make(chan Decision, 1)
	go func() {
		var tk Ticket
		d := e.c.Begin(hctx, heavy, &tk)
		tk.Done(0)
		heavyDone <- d
	}()
	testutil.Eventually(t, "the heavy request to wait", func() bool { return e.depth() == 1 })

	lctx, lcancel := context.WithTimeout(ctx, testTimeout) // a wait fails the test, not hangs it
	defer lcancel()
	var tk Ticket
	d := e.c.Begin(lctx, light, &tk)
	defer tk.Done(0)
	if !d.Allowed || d.Queue.Waited != 0 || tk.Backend() != "a" {
		t.Fatalf("light request: %+v on %q, want admitted at once to a", d, tk.Backend())
	}
	if e.depth() != 1 {
		t.Fatal("the heavy request, over its share, did not keep waiting")
	}
	cancel()
	if d := recv(t, "the heavy request's end", heavyDone); d.Allowed {
		t.Fatalf("heavy request admitted over its share: %+v", d)
	}
}
