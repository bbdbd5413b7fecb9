package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkRecord measures the bookkeeping cost of one answered request.
func BenchmarkRecord(b *testing.B) {
	ts := &tenantState{admitted: make([]uint64, 10), refused: make([]uint64, 10)}
	o := outcome{status: 429, latency: 12 * time.Millisecond, wait: 3 * time.Millisecond, hasWait: true, reason: "tenant_queue_full", limitType: "user"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ts.record(o, i%10)
	}
}

// BenchmarkRequest measures the client-side cost of one request against a
// local server that answers at once: what the generator spends per arrival
// on top of the server's own time.
func BenchmarkRequest(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-fair-queue-wait-ms", "5")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"details":{"limit_type":"user","fair_queue":{"reason":"queue_full"}}}}`))
	}))
	defer srv.Close()
	cfg := Config{Targets: []string{srv.URL}, Tenants: []Tenant{{Name: "t", Rate: 1, APIKey: "sk-bench", User: "u"}}, Duration: time.Second}
	cfg.Default()
	g := newGenerator(cfg)
	defer g.close()
	ts := g.tenants[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ts.record(g.do(ctx, ts, srv.URL), 0)
	}
	if ts.stats.refused == 0 {
		b.Fatal("no request was classified as refused")
	}
}
