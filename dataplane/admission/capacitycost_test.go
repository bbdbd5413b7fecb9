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
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestCapacityWaitChargesTheEstimatedTokens: with fairQueuing.cost Tokens, a
// request whose reservation is estimated (a Reserver, as the server sends
// every request) and that waits for a backend slot is charged its
// reservation by the fair queue, not one grant: long prompts pay their
// share of the backends (issue 22).
func TestCapacityWaitChargesTheEstimatedTokens(t *testing.T) {
	e := newTokenEnv(t, tokenOpts{cfg: limiter.Config{ModelTokens: tokensPerSecond(1 << 20)}, settings: on,
		tokens: TokenSettings{Enabled: true, MaxWait: 10 * time.Second, CostTokens: true}})
	tr := capacity.New(capacity.Options{OnRoom: func(string) { e.c.WakeCapacity() }})
	t.Cleanup(tr.Close)
	if err := tr.Apply([]capacity.Backend{{Name: "a", MaxInFlight: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	r := Request{Identity: alice, Model: "m", Reserver: reserverFunc(func() int64 { return 300 }),
		Capacity: Capacity{Tracker: tr}}

	var first Ticket
	if d := e.c.Begin(context.Background(), r, &first); !d.Allowed {
		t.Fatalf("first request: %+v, want admitted to the free slot", d)
	}
	type result struct {
		d  Decision
		tk *Ticket
	}
	done := make(chan result, 1)
	go func() {
		tk := new(Ticket)
		done <- result{e.c.Begin(context.Background(), r, tk), tk}
	}()
	testutil.Eventually(t, "the second request to wait for the slot", func() bool { d, _ := e.queue.Stats(); return d == 1 })
	first.Done(300)
	got := recv(t, "the second request's decision", done)
	defer got.tk.Done(300)
	if !got.d.Allowed || !got.d.Queue.Queued {
		t.Fatalf("second request: %+v, want admitted after waiting for the slot", got.d)
	}
	if got.tk.settle.accounted != 300 {
		t.Errorf("the fair queue charged the capacity wait %d, want the reservation's 300 tokens", got.tk.settle.accounted)
	}
}
