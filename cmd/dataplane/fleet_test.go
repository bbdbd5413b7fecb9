package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/internal/redistest"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestFleetMembershipOnRealRedis runs the data plane without Kubernetes on
// a real Redis store failing open, beside a second replica's membership
// report: the fallback's live-replica count is the fleet's (2, not the
// default 1 of --store-replicas), the replica publishes its hash key's
// fingerprint, and it stays in the exchange while it still admits (the
// shutdown delay) and withdraws as soon as it stops, so the fleet neither
// double-books its share during the drain nor keeps it after.
func TestFleetMembershipOnRealRedis(t *testing.T) {
	addr := redistest.Start(t).Addr()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rc.Close() }()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer upstream.Close()

	c := validConfig()
	c.Backends[0].URL = upstream.URL
	c.FairQueuing.Enabled = true
	c.FairQueuing.TenantDimension = identity.DimensionAPIKey
	c.RateLimits.PerModel = &config.ModelLimits{Default: &config.Limit{Requests: 1000, Period: config.Duration{Duration: time.Second}, Burst: 1000}}
	c.Store = &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
		Addresses: []string{addr}, Mode: config.RedisStandalone,
		Timeout: config.Duration{Duration: 50 * time.Millisecond}, FailureMode: config.FailOpen,
	}}
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "fq:{ns/llm}:fleet:"
	members, demand := prefix, prefix+"m"
	// Another replica's membership, valid for a minute by Redis's clock.
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	expiry := strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)
	if err := rc.HSet(context.Background(), members, "r2", expiry+`|{"r":"r2","ts":null,"f":"`+config.KeyFingerprint(key)+`"}`).Err(); err != nil {
		t.Fatal(err)
	}

	traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--hash-key-file", write(t, "k", key), "--config", write(t, "c.json", data), "--pod-name", "r1",
			"--listen", traffic, "--metrics-listen", ops, "--shutdown-delay", "3s", "--shutdown-grace", "1s"}, func(string) string { return "" }, &stderr)
	}()
	logOnFailure(t, &stderr)
	call := func() int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	field := func(hash string) string { return rc.HGet(context.Background(), hash, "r1").Val() }
	liveReplicas := func() string {
		resp, err := http.Get("http://" + ops + "/metrics")
		if err != nil {
			return ""
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "rate_limit_live_replicas "); ok {
				return v
			}
		}
		return ""
	}

	testutil.Eventually(t, "admitted", func() bool { return call() == http.StatusOK })
	testutil.Eventually(t, "r1's demand report in Redis", func() bool { return field(demand) != "" })
	testutil.Eventually(t, "r1's membership with its key's fingerprint", func() bool {
		return strings.Contains(field(members), `"f":"`+config.KeyFingerprint(key)+`"`)
	})
	testutil.Eventually(t, "the fail-open fallback counting the fleet's 2 replicas", func() bool { return liveReplicas() == "2" })

	cancel()
	stopped := time.Now()
	time.Sleep(time.Second) // the data plane is draining on the real clock
	if field(members) == "" {
		t.Fatalf("r1 left the fleet %s into its 3s shutdown delay, while it still admits its queued requests at its gate rates", time.Since(stopped))
	}
	testutil.EventuallyWithin(t, 4*time.Second, "r1's membership withdrawn when the shutdown delay ends", func() bool { return field(members) == "" })
	waitRun(t, done, 20*time.Second, &stderr)
}

func TestFleetReplicasCountsOneUntilThePacerIsSet(t *testing.T) {
	var r fleetReplicas
	if n := r.Live(); n != 1 {
		t.Fatalf("Live() = %d without a pacer, want 1", n)
	}
	w, err := newStoreWiring(&options{}, nil, "", "", prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.fleet == nil {
		t.Fatal("without Kubernetes and --store-replicas the fallback does not count through the fleet exchange")
	}
	w2, err := newStoreWiring(&options{storeReplicas: 3}, nil, "", "", prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer w2.close()
	if w2.fleet != nil {
		t.Fatal("--store-replicas 3 is overridden by the fleet exchange's count")
	}
}
