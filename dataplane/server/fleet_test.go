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

package server

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// recordingFleet is a FleetGate that lets everything through and records
// what it is given.
type recordingFleet struct {
	mu       sync.Mutex
	limits   []limiter.Config
	weights  []fairqueue.Weights
	arrivals map[string]int
	admitted int
}

func (f *recordingFleet) Arrive(tenant, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals[tenant+"/"+key]++
}

func (f *recordingFleet) Allow(time.Time, string, string) (bool, time.Duration) { return true, 0 }

func (f *recordingFleet) Done(_, _ string, admitted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if admitted {
		f.admitted++
	}
}

func (f *recordingFleet) SetLimits(cfg limiter.Config) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits = append(f.limits, cfg)
}

func (f *recordingFleet) SetWeights(w fairqueue.Weights) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.weights = append(f.weights, w)
}

func TestFleetGateGetsEveryConfigAndSeesRequests(t *testing.T) {
	f := &recordingFleet{arrivals: map[string]int{}}
	mutate := func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(90, 90, time.Second)}
		c.FairQueuing.Enabled = true
		c.FairQueuing.Weights = []config.Weight{{TenantHash: h("alice"), Weight: 3}}
	}
	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), mutate, func(o *Options) { o.Fleet = f })
	if r := wait(t, hs.start(context.Background(), `{"model":"m"}`, alice)); r.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", r.resp.StatusCode)
	}

	// A reload hands the gate the new limits and weights.
	cfg := baseConfig(hs.srv.rt.Load().cfg.Backends[0].URL)
	mutate(cfg)
	cfg.RateLimits.PerModel.Default = limit(45, 45, time.Second)
	if err := hs.srv.Load(cfg, "reloaded"); err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.limits) != 2 || f.limits[0].Model == nil || f.limits[0].Model.Requests != 90 || f.limits[1].Model.Requests != 45 {
		t.Fatalf("gate got limits %+v, want the model limit 90/s and then 45/s", f.limits)
	}
	if len(f.weights) != 2 || f.weights[1].ByTenant[h("alice")] != 3 {
		t.Fatalf("gate got weights %+v, want alice's weight 3 on every load", f.weights)
	}
	if f.arrivals[h("alice")+"/m"] != 1 || f.admitted != 1 {
		t.Fatalf("gate saw arrivals %v and %d admissions, want alice's one request on model m admitted", f.arrivals, f.admitted)
	}
}
