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

package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

func storeConfig(addr string, secret *config.SecretRef) *config.Config {
	return &config.Config{
		Policy: config.PolicyRef{Namespace: "team-a", Name: "llm"},
		Store: &config.Store{Type: config.StoreRedis, Redis: &config.RedisStore{
			Addresses: []string{addr}, Mode: config.RedisStandalone, Secret: secret,
			Timeout: config.Duration{Duration: 50 * time.Millisecond}, FailureMode: config.FailClosed,
		}},
	}
}

func TestSwitchFollowsTheConfig(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireUserAuth("fq", "s3cret")
	secrets := map[string]map[string][]byte{"team-a/redis-auth": {"username": []byte("fq"), "password": []byte("s3cret")}}
	getter := func(_ context.Context, ns, name string) (map[string][]byte, error) {
		if d, ok := secrets[ns+"/"+name]; ok {
			return d, nil
		}
		return nil, errors.New("not found")
	}
	sw := NewSwitch(SwitchOptions{Secrets: getter})
	defer func() { _ = sw.Close() }()
	l := lim(1, time.Minute, 0)
	take := func() limiter.Decision {
		t.Helper()
		d, err := sw.Take(time.Now(), userBatch("u", l))
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		return d
	}

	if sw.Redis() != nil || !take().Allowed || take().Allowed {
		t.Fatal("a new Switch does not decide by its memory store")
	}

	withSecret := storeConfig(m.Addr(), &config.SecretRef{Namespace: "team-a", Name: "redis-auth"})
	p, err := sw.Prepare(context.Background(), withSecret)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if sw.Redis() != nil {
		t.Fatal("Prepare put the store in force before Commit")
	}
	p.Commit()
	redisStore := sw.Redis()
	if redisStore == nil || !take().Allowed {
		t.Fatal("after Commit the Switch does not decide by Redis (whose bucket is fresh)")
	}
	if !m.Exists("fq:{team-a/llm}:user:u") {
		t.Fatalf("no bucket in Redis; keys %v", m.Keys())
	}

	// An unchanged section keeps the store and its state.
	p, err = sw.Prepare(context.Background(), storeConfig(m.Addr(), &config.SecretRef{Namespace: "team-a", Name: "redis-auth"}))
	if err != nil {
		t.Fatal(err)
	}
	p.Commit()
	if sw.Redis() != redisStore || take().Allowed {
		t.Fatal("reloading an unchanged store section replaced the store")
	}

	// A config that cannot be applied changes nothing.
	for _, tc := range []struct {
		cfg  *config.Config
		want string
	}{
		{storeConfig(m.Addr(), &config.SecretRef{Namespace: "team-a", Name: "missing"}), "reading Secret team-a/missing"},
		{storeConfig("no-port", nil), `"no-port" is not host:port`},
	} {
		if _, err := sw.Prepare(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Prepare = %v, want an error containing %q", err, tc.want)
		}
		if sw.Redis() != redisStore {
			t.Fatal("a refused config changed the store")
		}
	}

	// A prepared store that is discarded is closed, and so is a replaced one.
	p, err = sw.Prepare(context.Background(), &config.Config{Policy: withSecret.Policy})
	if err != nil {
		t.Fatal(err)
	}
	p.Commit()
	if sw.Redis() != nil || take().Allowed {
		t.Fatal("back on memory, the memory bucket of before should still be empty")
	}
	p, err = sw.Prepare(context.Background(), withSecret)
	if err != nil {
		t.Fatal(err)
	}
	p.Discard()
	if sw.Redis() != nil {
		t.Fatal("a discarded store was put in force")
	}
}

func TestSwitchNeedsASecretReaderForASecret(t *testing.T) {
	sw := NewSwitch(SwitchOptions{})
	_, err := sw.Prepare(context.Background(), storeConfig("127.0.0.1:1", &config.SecretRef{Namespace: "ns", Name: "auth"}))
	if err == nil || !strings.Contains(err.Error(), "--store-secret-dir") {
		t.Fatalf("Prepare = %v, want an error saying how to give the data plane the Secret", err)
	}
}

// The data plane's store metrics are what it passes as the Observer.
var _ Observer = (*metrics.StoreMetrics)(nil)
