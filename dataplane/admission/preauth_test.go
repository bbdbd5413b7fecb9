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
	"errors"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/limiter/limitertest"
)

// TestPreAuth checks that PreAuth, used alone for requests answered before
// the admission core, charges the same buckets and answers with the same
// decision as Admit's pre-auth step.
func TestPreAuth(t *testing.T) {
	cases := []struct {
		name string
		opts envOpts
		want Decision
	}{{
		name: "global refusal",
		opts: envOpts{cfg: limiter.Config{Global: lim(1, time.Second)}, settings: on},
		want: Decision{Status: StatusTooManyRequests, LimitType: "global", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionGlobal, Limit: 1, Reset: time.Second}},
	}, {
		name: "per-client refusal",
		opts: envOpts{cfg: limiter.Config{Client: lim(1, time.Second)}, settings: on},
		want: Decision{Status: StatusTooManyRequests, LimitType: "client", RetryAfter: time.Second, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionClient, Limit: 1, Reset: time.Second}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts)
			if d, ok := e.c.PreAuth(e.clk.Now(), "10.0.0.1"); !ok || d != (Decision{Allowed: true, Status: StatusOK}) {
				t.Fatalf("first PreAuth = %+v, %v; want admitted", d, ok)
			}
			got, ok := e.c.PreAuth(e.clk.Now(), "10.0.0.1")
			if ok || got != tc.want {
				t.Fatalf("second PreAuth =\n %+v, %v\nwant\n %+v, false", got, ok, tc.want)
			}
			// Admit's pre-auth step answers the same.
			if got := e.c.Admit(context.Background(), Request{ClientAddr: "10.0.0.1", Identity: alice}); got != tc.want {
				t.Fatalf("Admit =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}

	t.Run("store outage", func(t *testing.T) {
		e := newEnv(t, envOpts{cfg: limiter.Config{Global: lim(1, time.Second)}, store: limitertest.DownStore{}})
		got, ok := e.c.PreAuth(e.clk.Now(), "10.0.0.1")
		if ok || got.Status != StatusServiceUnavailable || got.RetryAfter != time.Second || !errors.Is(got.Err, limiter.ErrStoreUnavailable) {
			t.Fatalf("PreAuth = %+v, %v; want a 503 carrying the store error", got, ok)
		}
	})
}

func TestBackendRefusal(t *testing.T) {
	t.Run("per-backend limit configured", func(t *testing.T) {
		e := newEnv(t, envOpts{cfg: limiter.Config{Backend: lim(2, time.Second)}})
		want := Decision{Status: StatusTooManyRequests, LimitType: "backend", RetryAfter: 300 * time.Millisecond, HasQuota: true,
			Quota: limiter.Quota{Dimension: limiter.DimensionBackend, Limit: 2, Reset: 800 * time.Millisecond}}
		if got := e.c.backendRefusal(300 * time.Millisecond); got != want {
			t.Fatalf("backendRefusal =\n %+v\nwant\n %+v", got, want)
		}
	})
	t.Run("no per-backend limit", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		want := Decision{Status: StatusTooManyRequests, LimitType: "backend", RetryAfter: time.Second}
		if got := e.c.backendRefusal(time.Second); got != want {
			t.Fatalf("backendRefusal =\n %+v\nwant\n %+v", got, want)
		}
	})
}

func TestRefundGivesBackWhatAdmitTook(t *testing.T) {
	e := newEnv(t, envOpts{cfg: limiter.Config{User: lim(1, time.Minute), Model: lim(1, time.Minute)}})
	r := Request{Identity: alice, Model: "m"}
	if d := e.c.Admit(context.Background(), r); !d.Allowed {
		t.Fatalf("first Admit refused: %+v", d)
	}
	if err := e.c.refund(r); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if d := e.c.Admit(context.Background(), r); !d.Allowed {
		t.Fatalf("Admit after Refund refused: %+v", d)
	}
	if d := e.c.Admit(context.Background(), r); d.Allowed {
		t.Fatal("Admit allowed with no token left")
	}

	down := newEnv(t, envOpts{cfg: limiter.Config{User: lim(1, time.Minute)}, store: limitertest.DownStore{}})
	if err := down.c.refund(r); !errors.Is(err, limiter.ErrStoreUnavailable) {
		t.Fatalf("Refund with the store down = %v, want ErrStoreUnavailable", err)
	}
}
