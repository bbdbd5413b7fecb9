package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestScrape(t *testing.T) {
	const page = `# TYPE rate_limit_decisions_total counter
rate_limit_decisions_total{dimension="model",outcome="allowed"} 120
rate_limit_decisions_total{dimension="model",outcome="refused"} 999
rate_limit_decisions_total{dimension="global",outcome="allowed"} 500
# TYPE rate_limit_fair_queue_grants_total counter
rate_limit_fair_queue_grants_total{tenant_dimension="apiKey"} 80
rate_limit_fair_queue_grants_total{tenant_dimension="user"} 0
# TYPE rate_limit_fair_queue_refused_total counter
rate_limit_fair_queue_refused_total{tenant_dimension="apiKey",reason="tenant_queue_full"} 7
rate_limit_fair_queue_refused_total{tenant_dimension="apiKey",reason="queue_full"} 3
# TYPE rate_limit_tokens_settled_total counter
rate_limit_tokens_settled_total{limit_type="model_tokens"} 4500
rate_limit_tokens_settled_total{limit_type="api_key_tokens"} 777
# TYPE rate_limit_deferred_refused_total counter
rate_limit_deferred_refused_total{reason="held_full"} 4
rate_limit_deferred_refused_total{reason="wait_exceeds_budget"} 5
# TYPE fairqueue_config_info gauge
fairqueue_config_info{hash="old"} 0
fairqueue_config_info{hash="new"} 1
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	c, err := scrape(context.Background(), srv.Client(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if c.Admitted != 120 || c.Grants != 80 || c.QueueRefused != 10 {
		t.Errorf("scraped admitted %v, grants %v, queue refusals %v; want 120 (model allowed only), 80 and 10", c.Admitted, c.Grants, c.QueueRefused)
	}
	if c.TokensSettled != 4500 || c.DeferredRefused != 9 {
		t.Errorf("scraped tokens settled %v, deferred refusals %v; want 4500 (model tokens only) and 9", c.TokensSettled, c.DeferredRefused)
	}
	if !c.Loaded("old") || c.Loaded("new") {
		t.Errorf("config hashes %v: want the replica to count as reloaded from old, not from new", c.ConfigHashes)
	}
	srv.Config.Handler = http.NotFoundHandler()
	if _, err := scrape(context.Background(), srv.Client(), srv.URL+"/metrics"); err == nil {
		t.Error("scrape accepted a 404")
	}
}
