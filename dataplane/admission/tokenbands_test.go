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
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// TestTokenRefusalWithoutHoldIsCountedInItsBand: a token refusal answered
// without holding (its refill cannot fit the hold's budget) is counted in
// the band the request would have been held in: its tenant's, or the lower
// one it asked for.
func TestTokenRefusalWithoutHoldIsCountedInItsBand(t *testing.T) {
	w := fairqueue.Weights{
		Default:     1,
		Bands:       []fairqueue.Band{{Name: "interactive"}, {Name: "batch"}},
		DefaultBand: 1,
		TenantBand:  map[string]int{alice.User: 0},
	}
	e := newTokenEnv(t, tokenOpts{
		cfg:      limiter.Config{ModelTokens: tokensPerSecond(1000)},
		settings: on,
		tokens:   TokenSettings{Enabled: true, MaxWait: 100 * time.Millisecond},
		bounds:   fairqueue.Bounds{MaxWait: 100 * time.Millisecond},
		weights:  w,
	})
	reload(e.c, func(p *policy) {
		p.queues = &queueConfig{weights: w, bounds: fairqueue.Bounds{MaxWait: time.Hour}, deferralBounds: fairqueue.Bounds{MaxWait: 100 * time.Millisecond}}
	})
	log := &refusalLog{refused: map[string]int{}}
	e.c.SetTokenObserver(log)
	if d := e.c.Admit(context.Background(), Request{Identity: alice, Model: "m", Tokens: 1000}); !d.Allowed {
		t.Fatalf("the burst: %+v", d)
	}
	// Each needs 500 ms of refill, past the 100 ms budget: refused at once.
	for _, r := range []Request{
		{Identity: alice, Model: "m", Tokens: 500},
		{Identity: alice, Model: "m", Tokens: 500, Band: "batch"},
		{Identity: bob, Model: "m", Tokens: 500},
		{Identity: bob, Model: "m", Tokens: 500, Band: "interactive"}, // a raise changes nothing
	} {
		if d := e.c.Admit(context.Background(), r); d.Allowed || d.Tokens.Deferred {
			t.Fatalf("%+v: %+v, want refused without a hold", r, d)
		}
	}
	want := map[string]int{"interactive/wait_exceeds_budget": 1, "batch/wait_exceeds_budget": 3}
	if !reflect.DeepEqual(log.refused, want) {
		t.Errorf("refusals by band/reason %v, want %v", log.refused, want)
	}
}

// refusalLog is a TokenObserver that counts refusals by band.
type refusalLog struct {
	mu      sync.Mutex
	refused map[string]int
}

func (*refusalLog) TokensReserved(limiter.Dimension, int64) {}
func (*refusalLog) TokensSettled(limiter.Dimension, int64)  {}
func (*refusalLog) Estimated(int64, int64)                  {}
func (*refusalLog) HeldAhead(string, int)                   {}
func (l *refusalLog) DeferralRefused(band, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused[band+"/"+reason]++
}
