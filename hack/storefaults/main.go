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

// Command storefaults measures, from outside, what a fleet of data planes
// with a Redis store in failureMode Open admits while Redis is out of
// memory and while it flaps: it starts a real redis-server on loopback, an
// upstream answering 200, and --replicas data-plane processes (the binary
// given by --dataplane) sharing one global limit, offers each replica
// --rate requests per second, and prints the admitted (200) requests per
// second in each phase:
//
//	healthy: Redis works;
//	full:    Redis refuses writes (3 MiB written, then maxmemory 2mb with
//	         noeviction);
//	healthy: maxmemory lifted again;
//	edge:    maxmemory 4 KiB above the memory in use, so that Redis refuses
//	         some writes and accepts others;
//	healthy: lifted again;
//	flap:    Redis frozen (SIGSTOP) for --stop, thawed for --run, repeated.
//
// Usage:
//
//	go build -o /tmp/dataplane ./cmd/dataplane
//	go run ./hack/storefaults --dataplane /tmp/dataplane
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/internal/proc"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storefaults:", err)
		os.Exit(1)
	}
}

type options struct {
	dataplane string
	replicas  int
	limit     int64
	burst     int64
	rate      int
	phase     time.Duration
	stop, run time.Duration
	timeout   time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.dataplane, "dataplane", "/tmp/dataplane", "the data-plane `binary` to run")
	flag.IntVar(&o.replicas, "replicas", 2, "data-plane processes sharing the store (also --store-replicas)")
	flag.Int64Var(&o.limit, "limit", 40, "the fleet's global limit, requests per second")
	flag.Int64Var(&o.burst, "burst", 10, "the global limit's burst")
	flag.IntVar(&o.rate, "rate", 60, "requests per second offered to each replica")
	flag.DurationVar(&o.phase, "phase", 8*time.Second, "length of each phase")
	flag.DurationVar(&o.stop, "stop", 400*time.Millisecond, "how long Redis is frozen in each flap")
	flag.DurationVar(&o.run, "run", 200*time.Millisecond, "how long Redis runs between freezes")
	flag.DurationVar(&o.timeout, "timeout", config.DefaultStoreTimeout, "store.redis.timeout")
	flag.Parse()

	dir, err := os.MkdirTemp("", "storefaults")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := redistest.Launch(ctx, "", dir, "--maxmemory-policy", "noeviction")
	if err != nil {
		return err
	}
	defer func() { _ = srv.Resume(); _ = srv.Kill() }()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = admin.Close() }()

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer upstream.Close()
	key := configtest.Key
	c := configtest.Valid(key, upstream.URL)
	c.RateLimits.Global = &config.Limit{Requests: o.limit, Period: config.Duration{Duration: time.Second}, Burst: o.burst}
	c.Store = &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
		Addresses: []string{srv.Addr()}, Mode: config.RedisStandalone, FailureMode: config.FailOpen,
		Timeout: config.Duration{Duration: o.timeout},
	}}
	data, err := config.Marshal(c)
	if err != nil {
		return err
	}
	cfgFile, keyFile := filepath.Join(dir, "config.json"), filepath.Join(dir, "key")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return err
	}
	var addrs []string
	for i := range o.replicas {
		traffic, err1 := proc.FreeAddr()
		ops, err2 := proc.FreeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, o.dataplane, "--config", cfgFile, "--hash-key-file", keyFile,
			"--listen", traffic, "--metrics-listen", ops, "--store-replicas", fmt.Sprint(o.replicas))
		logName := filepath.Join(dir, fmt.Sprintf("dataplane-%d.log", i))
		logf, err := os.Create(logName)
		if err != nil {
			return err
		}
		defer func() { _ = logf.Close() }()
		cmd.Stdout, cmd.Stderr = logf, logf
		dp, err := proc.StartReady(cmd, proc.HTTPReady("http://"+ops+"/readyz"), 60*time.Second)
		if err != nil {
			log, _ := os.ReadFile(logName) // best effort: the error says what failed
			return fmt.Errorf("data plane %d: %w\n%s", i, err, log)
		}
		defer func() { _ = dp.Stop() }() // the measurements are printed; how it ended does not matter
		addrs = append(addrs, traffic)
	}

	var admitted, offered atomic.Int64
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	for _, a := range addrs {
		wg.Go(func() { offer(client, "http://"+a+"/v1/chat/completions", o.rate, stopLoad, &admitted, &offered) })
	}
	measure := func(name string, during func(end time.Time)) {
		a0, f0 := admitted.Load(), offered.Load()
		start := time.Now()
		end := start.Add(o.phase)
		during(end)
		for time.Now().Before(end) {
			time.Sleep(10 * time.Millisecond)
		}
		el := time.Since(start).Seconds()
		fmt.Printf("%-8s admitted %6.1f/s of %6.1f/s offered (fleet limit %d/s, burst %d)\n",
			name, float64(admitted.Load()-a0)/el, float64(offered.Load()-f0)/el, o.limit, o.burst)
	}
	time.Sleep(time.Second) // warm up: connections, the script loaded
	measure("healthy", func(time.Time) {})
	measure("full", func(time.Time) { fill(ctx, admin) })
	measure("healthy", func(time.Time) { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })
	measure("edge", func(time.Time) { edge(ctx, admin) })
	measure("healthy", func(time.Time) { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })
	measure("flap", func(end time.Time) {
		for time.Now().Add(o.stop + o.run).Before(end) {
			_ = srv.Pause()
			time.Sleep(o.stop)
			_ = srv.Resume()
			time.Sleep(o.run)
		}
	})
	close(stopLoad)
	wg.Wait()
	return nil
}

// offer sends rate requests per second to url until stop closes, counting
// those answered 200.
func offer(c *http.Client, url string, rate int, stop <-chan struct{}, admitted, offered *atomic.Int64) {
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		offered.Add(1)
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m","messages":[]}`))
			req.Header.Set("Authorization", "Bearer k1")
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				admitted.Add(1)
			}
		})
	}
}

// fill writes about 3 MiB and lowers maxmemory to 2mb: Redis then refuses
// every write as out of memory (noeviction).
func fill(ctx context.Context, c *redis.Client) {
	junk := strings.Repeat("x", 64<<10)
	for i := range 48 {
		_ = c.Set(ctx, fmt.Sprintf("junk:%d", i), junk, 0).Err()
	}
	_ = c.ConfigSet(ctx, "maxmemory", "2mb").Err()
}

// edge sets maxmemory a few KiB above the memory in use, so that Redis
// refuses some writes and accepts others as buckets come and go.
func edge(ctx context.Context, c *redis.Client) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			var used int64
			if _, err := fmt.Sscan(v, &used); err == nil {
				_ = c.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+4096)).Err()
			}
		}
	}
}
