package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func redisConfig() *Config {
	c := validConfig()
	c.Store = &Store{Type: StoreRedis, Redis: &RedisStore{
		Addresses: []string{"redis.cache.svc:6379"}, Mode: RedisStandalone,
		Secret:  &SecretRef{Namespace: "team-a", Name: "redis-auth"},
		Timeout: dur(DefaultStoreTimeout), FailureMode: FailClosed,
	}}
	return c
}

func TestStoreRoundTripsWithoutSecretValues(t *testing.T) {
	c := redisConfig()
	data, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(compact.Bytes(), []byte(`"store":{"type":"Redis","redis":{"addresses":["redis.cache.svc:6379"],"mode":"Standalone","secret":{"namespace":"team-a","name":"redis-auth"},"db":0,"tls":false,"timeout":"250ms","failureMode":"Closed"}}`)) {
		t.Fatalf("rendered store section is not as documented:\n%s", data)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Store.IsRedis() || got.Store.Redis.Secret.Name != "redis-auth" || got.Store.Redis.Timeout.Duration != DefaultStoreTimeout {
		t.Fatalf("parsed store %+v", got.Store)
	}

	// The memory default renders no store section, so every config
	// rendered before the store existed keeps its bytes and hash.
	c.Store = nil
	data, err = Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(`"store"`)) {
		t.Fatalf("a memory store renders a store section:\n%s", data)
	}
}

func TestStoreValidateNamesEveryBadField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"unknown type", func(c *Config) { c.Store.Type = "Etcd" }, `store.type: must be "Memory" or "Redis", got "Etcd"`},
		{"Redis without redis", func(c *Config) { c.Store.Redis = nil }, "store.redis: is required"},
		{"Memory with redis", func(c *Config) { c.Store.Type = StoreMemory }, "store.redis: must be omitted"},
		{"no address", func(c *Config) { c.Store.Redis.Addresses = nil }, "store.redis.addresses: must list at least one"},
		{"address without port", func(c *Config) { c.Store.Redis.Addresses = []string{"redis"} }, `store.redis.addresses[0]: must be host:port`},
		{"sentinel without master", func(c *Config) { c.Store.Redis.Mode = RedisSentinel }, "store.redis.sentinelMasterName: is required"},
		{"unknown mode", func(c *Config) { c.Store.Redis.Mode = "Ring" }, "store.redis.mode: must be"},
		{"negative db", func(c *Config) { c.Store.Redis.DB = -1 }, "store.redis.db: must be >= 0"},
		{"timeout zero", func(c *Config) { c.Store.Redis.Timeout = dur(0) }, "store.redis.timeout: must be > 0"},
		{"unknown failure mode", func(c *Config) { c.Store.Redis.FailureMode = "Ignore" }, `store.redis.failureMode: must be "Closed" or "Open"`},
		{"bad secret name", func(c *Config) { c.Store.Redis.Secret.Name = "Redis_Auth" }, "store.redis.secret.name"},
		{"refill longer than Redis can count", func(c *Config) {
			c.RateLimits.PerModel.Overrides[0].Limit = Limit{Requests: 1, Period: dur(24 * time.Hour), Burst: 100}
		}, "rateLimits.perModel.overrides[0].limit: takes 2400h0m0s to refill completely"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := redisConfig()
			tc.mutate(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The same long refill is fine in memory.
	c := validConfig()
	c.RateLimits.PerModel.Overrides[0].Limit = Limit{Requests: 1, Period: dur(24 * time.Hour), Burst: 100}
	if err := c.Validate(); err != nil {
		t.Fatalf("a memory store refused a long refill: %v", err)
	}
}

func TestStoreDeepCopyIsIndependent(t *testing.T) {
	c := redisConfig()
	n := c.DeepCopy()
	n.Store.Redis.Addresses[0] = "other:1"
	n.Store.Redis.Secret.Name = "other"
	n.Store.Type = StoreMemory
	if c.Store.Redis.Addresses[0] != "redis.cache.svc:6379" || c.Store.Redis.Secret.Name != "redis-auth" || c.Store.Type != StoreRedis {
		t.Fatalf("changing the copy changed the original: %+v %+v", c.Store, c.Store.Redis)
	}
}
