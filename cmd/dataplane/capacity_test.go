package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/redistest"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestCapacitySlotsFollowTheStoresFailureMode runs the data plane in
// capacity mode (maxInFlight 2) on a Redis store shared by 2 replicas
// (--store-replicas), against a real redis-server: a slot is a lease in
// Redis, and with Redis killed the slots follow the policy's failureMode:
// Closed answers 503 store_unavailable, Open decides on this replica's
// share of maxInFlight (2 over 2 replicas: 1), as the rate limits' Open
// fallback divides theirs.
func TestCapacitySlotsFollowTheStoresFailureMode(t *testing.T) {
	for _, mode := range []config.FailureMode{config.FailClosed, config.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			srv := redistest.Start(t)
			release := make(chan struct{}, 4)
			arrived := make(chan struct{}, 4)
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Hold") != "" {
					arrived <- struct{}{}
					select {
					case <-release:
					case <-r.Context().Done():
					case <-time.After(20 * time.Second):
					}
				}
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			defer upstream.Close()

			c := validConfig()
			c.Backends[0].URL = upstream.URL
			c.Capacity = &config.Capacity{Backends: []config.BackendCapacity{{Name: c.Backends[0].Name, MaxInFlight: 2}}}
			c.Store = &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
				Addresses: []string{srv.Addr()}, Mode: config.RedisStandalone,
				Timeout: config.Duration{Duration: 50 * time.Millisecond}, FailureMode: mode,
			}}
			data, err := config.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			var stderr testutil.SyncBuffer
			go func() {
				done <- run(ctx, []string{"--hash-key-file", write(t, "k", key), "--config", write(t, "c.json", data), "--store-replicas", "2",
					"--listen", traffic, "--metrics-listen", ops, "--shutdown-grace", "1s"}, func(string) string { return "" }, &stderr)
			}()
			defer func() {
				cancel()
				waitRun(t, done, 20*time.Second, &stderr)
			}()
			logOnFailure(t, &stderr)
			call := func(hold bool) (int, string) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+traffic+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				if hold {
					req.Header.Set("X-Hold", "1")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, err.Error()
				}
				defer func() { _ = resp.Body.Close() }()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			held := func() <-chan int {
				out := make(chan int, 1)
				go func() { code, _ := call(true); out <- code }()
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatal("the held request never reached the upstream")
				}
				return out
			}

			testutil.Eventually(t, "the data plane serving", func() bool { code, _ := call(false); return code == http.StatusOK })
			rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer func() { _ = rc.Close() }()
			first := held()
			if n, err := rc.ZCard(context.Background(), "fq:{ns/llm}:capacity:"+c.Backends[0].Name).Result(); err != nil || n != 1 {
				t.Fatalf("leases in Redis while a request is at the backend: %d, %v; want 1", n, err)
			}
			release <- struct{}{}
			if code := <-first; code != http.StatusOK {
				t.Fatalf("held request: %d", code)
			}

			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			if mode == config.FailClosed {
				if code, body := call(false); code != http.StatusServiceUnavailable || !strings.Contains(body, "store_unavailable") || !strings.Contains(body, "backend slot counts") {
					t.Fatalf("with Redis down, failing closed: %d %s; want 503 store_unavailable", code, body)
				}
				return
			}
			if code, body := call(false); code != http.StatusOK {
				t.Fatalf("with Redis down, failing open: %d %s; want 200 on the local share", code, body)
			}
			second := held() // the replica's share of 1
			if code, body := call(false); code != http.StatusTooManyRequests || !strings.Contains(body, `"limit_type":"capacity"`) {
				t.Errorf("over the local share: %d %s; want 429 limit_type capacity", code, body)
			}
			release <- struct{}{}
			if code := <-second; code != http.StatusOK {
				t.Fatalf("held request: %d", code)
			}
		})
	}
}
