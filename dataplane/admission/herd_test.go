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
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// obedientClients simulates n clients of one API key arriving together at
// the fake clock's start, each retrying a 429 up to retries times exactly
// when its retry-after-ms (rounded up to the millisecond, as the header is)
// says, as OpenAI's client libraries do. The clock advances a millisecond
// at a time and only once every request has been queued or answered. It
// returns how many calls ended in a 429 after their last retry, the attempts
// made, and when the last call ended.
func obedientClients(t *testing.T, e *env, n, retries int) (final429, attempts int, last time.Duration) {
	t.Helper()
	type answer struct {
		client int
		dec    Decision
	}
	answers := make(chan answer, n)
	next := make([]time.Duration, n) // next attempt, from t0; -1 once finished
	tries := make([]int, n)
	launched, received := 0, 0
	req := Request{Identity: identity.Set{APIKey: "key-herd"}}
	settled := func() bool {
		for {
			select {
			case a := <-answers:
				received++
				now := e.clk.Since(t0)
				switch {
				case a.dec.Allowed:
					next[a.client], last = -1, now
				case a.dec.Status != StatusTooManyRequests:
					t.Fatalf("client %d: %+v", a.client, a.dec)
				case tries[a.client] > retries:
					next[a.client], last = -1, now
					final429++
				default:
					ms := a.dec.RetryAfter.Truncate(time.Millisecond)
					if ms < a.dec.RetryAfter {
						ms += time.Millisecond
					}
					next[a.client] = now + max(ms, time.Millisecond)
				}
				continue
			default:
			}
			return e.queue.Settled() && launched-received == e.depth()
		}
	}
	for step := 0; ; step++ {
		if step > 60_000 {
			t.Fatalf("clients still running after a minute of fake time")
		}
		now := e.clk.Since(t0)
		pending := false
		for i := range n {
			switch {
			case next[i] < 0:
				continue
			case next[i] == now:
				tries[i]++
				attempts++
				launched++
				go func() { answers <- answer{i, e.c.Admit(context.Background(), req)} }()
				// One arrival at a time, each queued or answered before the
				// next, as requests reach a server one after another.
				testutil.Eventually(t, "the request to be queued or answered", settled)
			}
			pending = true
		}
		if !pending && launched == received {
			return final429, attempts, last
		}
		e.clk.Step(time.Millisecond)
		testutil.Eventually(t, "the queue to settle", settled)
	}
}

// TestObedientRetriesAllFit: clients that obey retry-after-ms all get
// through when the offered work fits in maxWait plus their retries (SPEC 5:
// refusals issued close together for the same queue are told successive
// room times). One key at 5 requests/s (burst 5), maxWait 5s, four retries
// each, as openai-node's maxRetries 4. Told one shared time, each round of
// retries found room for one, and 10 of 20 calls ended in a 429.
func TestObedientRetriesAllFit(t *testing.T) {
	cases := []struct {
		depth, clients int
	}{
		{depth: 1, clients: 12},
		{depth: 1, clients: 20},
		{depth: 1, clients: 50},
		{depth: fairqueue.DefaultMaxQueueDepthPerTenant, clients: 50},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("depth %d, %d clients", tc.depth, tc.clients), func(t *testing.T) {
			e := newEnv(t, envOpts{
				cfg:      limiter.Config{APIKey: &limiter.Limit{Requests: 5, Period: time.Second, Burst: 5}},
				settings: Settings{Enabled: true, TenantDimension: identity.DimensionAPIKey},
				bounds:   fairqueue.Bounds{MaxQueueDepthPerTenant: tc.depth, MaxWait: 5 * time.Second},
			})
			final429, attempts, last := obedientClients(t, e, tc.clients, 4)
			t.Logf("%d clients: %d final 429s, %d attempts, last answered at %v", tc.clients, final429, attempts, last)
			if final429 != 0 {
				t.Errorf("%d of %d calls ended in a 429 after 4 retries, want 0", final429, tc.clients)
			}
			// The work takes (clients-5)/5 seconds at 5/s after the burst;
			// successive room times keep the key busy.
			if want := time.Duration(tc.clients-5) * 200 * time.Millisecond; last > want+time.Second {
				t.Errorf("last call answered at %v, want about %v (the key kept busy)", last, want)
			}
		})
	}
}
