package server

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestFairnessThroughHTTP saturates a per-model limit with three tenants at
// weights 1:1:3, each with several concurrent clients, and checks that every
// tenant's share of admitted requests is within 5% of its weighted share.
func TestFairnessThroughHTTP(t *testing.T) {
	const (
		clientsPerTenant = 4
		grants           = 250
		tokenEvery       = 100 * time.Millisecond
	)
	tenants := []struct {
		user   string
		weight int32
	}{{"u1", 1}, {"u2", 1}, {"u3", 3}}

	hs := newHarness(t, fakeupstream.New(fakeupstream.Options{}), func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.RateLimits.PerModel = &config.ModelLimits{Default: limit(1, 1, tokenEvery)}
		c.FairQueuing.Enabled = true
		c.FairQueuing.Bounds.MaxWait = dur(10 * time.Minute)
		for _, tn := range tenants {
			c.FairQueuing.Weights = append(c.FairQueuing.Weights, config.Weight{TenantHash: h(tn.user), Weight: tn.weight})
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admitted := make([]atomic.Int64, len(tenants))
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i, tn := range tenants {
		for range clientsPerTenant {
			wg.Add(1)
			go func() {
				defer wg.Done()
				header := map[string]string{"X-User": tn.user}
				for ctx.Err() == nil {
					r := <-hs.start(ctx, `{"model":"llama"}`, header)
					switch {
					case r.err != nil:
					case r.resp.StatusCode == 200:
						admitted[i].Add(1)
					default:
						refused.Add(1)
					}
				}
			}()
		}
	}

	rt := hs.srv.rt.Load()
	backlogged := func() bool {
		depth, _ := rt.fairQueue().Stats()
		return depth == len(tenants)*clientsPerTenant && rt.fairQueue().Settled()
	}
	testutil.Eventually(t, "every client is queued", backlogged)
	base := make([]int64, len(tenants))
	var total int64
	for i := range admitted {
		base[i] = admitted[i].Load()
		total -= base[i]
	}
	for total < grants {
		testutil.Eventually(t, "every client is queued again", backlogged)
		hs.clk.Step(tokenEvery)
		total = -base[0] - base[1] - base[2]
		for i := range admitted {
			total += admitted[i].Load()
		}
	}
	cancel()
	wg.Wait()

	if n := refused.Load(); n != 0 {
		t.Errorf("%d requests were refused; with a 10m maxWait every request should wait its turn", n)
	}
	var sumWeights int32
	for _, tn := range tenants {
		sumWeights += tn.weight
	}
	for i, tn := range tenants {
		got := float64(admitted[i].Load()-base[i]) / float64(total)
		want := float64(tn.weight) / float64(sumWeights)
		t.Logf("tenant %s (weight %d): %.3f of %d grants, weighted share %.3f", tn.user, tn.weight, got, total, want)
		if math.Abs(got/want-1) > 0.05 {
			t.Errorf("tenant %s got %.3f of the admissions, want %.3f within 5%%", tn.user, got, want)
		}
	}
}
