package server

import (
	"net/http"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

func TestPerTenantMetricsFollowTrafficAndReloads(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	weighted := func(c *config.Config) {
		c.Identity.TrustHeaders = true
		c.FairQueuing.Enabled = true
		c.FairQueuing.Weights = []config.Weight{{TenantHash: h("alice"), Weight: 4}}
	}
	hs := newHarness(t, ok, weighted)
	alice := map[string]string{"tenant_dimension": "user", "tenant": identity.Short(h("alice"))}
	bob := map[string]string{"tenant_dimension": "user", "tenant": identity.Short(h("bob"))}
	if got := metricValue(t, hs.reg, metrics.TenantWeightName, map[string]string{"tenant": alice["tenant"]}); got != 4 {
		t.Fatalf("alice's weight before any request = %v, want 4: weighted tenants always have series", got)
	}
	for _, user := range []string{"alice", "alice", "bob"} {
		readAll(t, hs.do(`{"model":"m"}`, map[string]string{"X-User": user}))
	}
	if got := metricValue(t, hs.reg, metrics.TenantGrantsName, alice); got != 2 {
		t.Errorf("alice's grants = %v, want 2", got)
	}
	if got := metricValue(t, hs.reg, metrics.TenantGrantsName, bob); got != 1 {
		t.Errorf("bob's grants = %v, want 1", got)
	}
	if got := metricValue(t, hs.reg, metrics.TenantWeightName, map[string]string{"tenant": bob["tenant"]}); got != 1 {
		t.Errorf("bob's weight = %v, want the default 1", got)
	}

	// A reload that drops alice's entry gives her the default weight.
	cfg := baseConfig(hs.srv.rt.Load().cfg.Backends[0].URL)
	cfg.Identity.TrustHeaders = true
	cfg.FairQueuing.Enabled = true
	if err := hs.srv.Load(cfg, "reloaded"); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, hs.reg, metrics.TenantWeightName, map[string]string{"tenant": alice["tenant"]}); got != 1 {
		t.Errorf("alice's weight after her entry was removed = %v, want the default 1", got)
	}
}
