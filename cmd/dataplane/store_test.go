package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestRunUsesTheRedisStoreOfTheConfig runs the data plane on a config whose
// store is a password-protected Redis: admissions charge buckets in Redis,
// an outage answers 503 store_unavailable (failureMode Closed), and the data
// plane returns to Redis once it answers again.
func TestRunUsesTheRedisStoreOfTheConfig(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("s3cret")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer upstream.Close()

	c := validConfig()
	c.Backends[0].URL = upstream.URL
	c.RateLimits.PerAPIKey = &config.Limit{Requests: 1000, Period: config.Duration{Duration: time.Minute}, Burst: 1000}
	c.Store = &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
		Addresses: []string{m.Addr()}, Mode: config.RedisStandalone, Secret: &config.SecretRef{Namespace: "ns", Name: "redis-auth"},
		Timeout: config.Duration{Duration: 50 * time.Millisecond}, FailureMode: config.FailClosed,
	}}
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	secretDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretDir, "password"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer // read by until while run still writes
	go func() {
		done <- run(ctx, []string{"--hash-key-file", write(t, "k", key), "--config", write(t, "c.json", data), "--store-secret-dir", secretDir,
			"--listen", traffic, "--metrics-listen", ops, "--shutdown-grace", "1s"}, func(string) string { return "" }, &stderr)
	}()
	defer func() {
		cancel()
		waitRun(t, done, 20*time.Second, &stderr)
	}()
	call := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// until polls the data plane (an external process, in effect) for at most 10s.
	until := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; log:\n%s", what, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	until("admitted through Redis", func() bool { code, _ := call(); return code == http.StatusOK })
	found := false
	for _, k := range m.Keys() {
		found = found || strings.HasPrefix(k, "fq:{ns/llm}:api_key:")
	}
	if !found {
		t.Fatalf("no api_key bucket in Redis; keys %v", m.Keys())
	}

	m.Close()
	readyz := func() string {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprint(resp.StatusCode, " ", string(b))
	}
	// Each call fails alone; consecutive failures over the probe interval
	// mark the store down, which readiness names while staying ready.
	until("the store marked down, in /readyz", func() bool {
		if code, body := call(); code != http.StatusServiceUnavailable || !strings.Contains(body, "store_unavailable") {
			t.Fatalf("with Redis down: %d %s; want 503 store_unavailable", code, body)
		}
		return strings.HasPrefix(readyz(), "200 ok: redis rate-limit store down since ")
	})
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	until("back on Redis", func() bool { code, _ := call(); return code == http.StatusOK })
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`rate_limit_store_up 1`, `rate_limit_store_transitions_total{to="down"} 1`, `rate_limit_store_transitions_total{to="up"} 1`, `rate_limit_live_replicas 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s; it has:\n%s", want, grepLines(string(metrics), "rate_limit_"))
		}
	}
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
