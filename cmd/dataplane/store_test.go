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
	var stderr testutil.SyncBuffer // read while run still writes
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
	logOnFailure(t, &stderr)
	testutil.Eventually(t, "admitted through Redis", func() bool { code, _ := call(); return code == http.StatusOK })
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
	testutil.Eventually(t, "the store marked down, in /readyz", func() bool {
		if code, body := call(); code != http.StatusServiceUnavailable || !strings.Contains(body, "store_unavailable") {
			t.Fatalf("with Redis down: %d %s; want 503 store_unavailable", code, body)
		}
		return strings.HasPrefix(readyz(), "200 ok: redis rate-limit store down since ")
	})
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "back on Redis", func() bool { code, _ := call(); return code == http.StatusOK })
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

// TestPolicyReadsTheRedisSecretFromSecretsFlag: without Kubernetes, a policy
// whose store.redis.secretRef names a Secret given in --secrets starts and
// authenticates to Redis with the Secret's password (SPEC 10: the store's
// credentials come from files like every other Secret); a Secret that is
// not there is refused naming --secrets.
func TestPolicyReadsTheRedisSecretFromSecretsFlag(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("s3cret")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer upstream.Close()
	dir := t.TempDir()
	policy := write(t, "policy.yaml", []byte("apiVersion: fairqueue.dev/v1alpha1\nkind: FairQueuePolicy\nmetadata: {name: llm, namespace: ns}\nspec:\n"+
		"  rateLimits:\n    perAPIKey: {requests: 1000, period: 1m}\n"+
		"  store:\n    type: Redis\n    redis: {addresses: [\""+m.Addr()+"\"], secretRef: {name: redis-auth}}\n"+
		"  backends:\n  - {name: b, url: \""+upstream.URL+"\"}\n"))
	secrets := filepath.Join(dir, "secrets.yaml")
	if err := os.WriteFile(secrets, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: redis-auth}\nstringData: {password: s3cret}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")

	// Without the Secret in --secrets: refused, naming the flag.
	other := write(t, "other.yaml", []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: unrelated}\nstringData: {password: x}\n"))
	err := run(context.Background(), []string{"--policy", policy, "--secrets", other, "--hash-key-file", keyFile,
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"redis-auth"`) || !strings.Contains(err.Error(), "--secrets "+other) {
		t.Fatalf("a Redis Secret missing from --secrets: %v; want an error naming the Secret and --secrets", err)
	}

	traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--policy", policy, "--secrets", secrets, "--hash-key-file", keyFile,
			"--listen", traffic, "--metrics-listen", ops, "--shutdown-grace", "1s"}, noEnv, &stderr)
	}()
	defer func() {
		cancel()
		waitRun(t, done, 20*time.Second, &stderr)
	}()
	logOnFailure(t, &stderr)
	testutil.Eventually(t, "a request admitted through Redis", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the data plane stopped: %v", err)
		default:
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	found := false
	for _, k := range m.Keys() {
		found = found || strings.HasPrefix(k, "fq:{ns/llm}:api_key:")
	}
	if !found {
		t.Fatalf("no api_key bucket in Redis; keys %v", m.Keys())
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
