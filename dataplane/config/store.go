package config

import (
	"fmt"
	"net"
	"time"
)

// StoreType is where the data plane keeps rate-limit bucket state.
type StoreType string

// Store types.
const (
	// StoreMemory keeps bucket state in each replica (the default).
	StoreMemory StoreType = "Memory"
	// StoreRedis keeps bucket state in a Redis shared by every replica.
	StoreRedis StoreType = "Redis"
)

// RedisMode says how RedisStore.Addresses are read.
type RedisMode string

// Redis modes.
const (
	// RedisStandalone is one Redis server at exactly one address.
	RedisStandalone RedisMode = "Standalone"
	// RedisCluster is a Redis Cluster reached through seed nodes.
	RedisCluster RedisMode = "Cluster"
	// RedisSentinel is a primary found through Redis Sentinel.
	RedisSentinel RedisMode = "Sentinel"
)

// FailureMode is what the data plane does while Redis is unreachable.
type FailureMode string

// Failure modes.
const (
	// FailClosed answers 503 store_unavailable while Redis is unreachable.
	FailClosed FailureMode = "Closed"
	// FailOpen decides by per-replica buckets, each limit divided by the
	// live replicas, while Redis is unreachable.
	FailOpen FailureMode = "Open"
)

// Bounds of the store section.
const (
	// DefaultStoreTimeout is the default bound on one store call: a Redis
	// that has not answered by then is unavailable for that request. It
	// covers the p99.9 of healthy calls on a busy machine
	// (redisstore's BenchmarkTakeLatencyUnderLoad: 32 concurrent takes at
	// load average 25-30 on 2 cores measured p99 42-49ms and p99.9
	// 168-184ms), so a slow call is rare and fails alone.
	DefaultStoreTimeout = 250 * time.Millisecond
	// MinStoreTimeout is the shortest store timeout accepted.
	MinStoreTimeout = time.Millisecond
	// MaxStoreTimeout is the longest store timeout accepted.
	MaxStoreTimeout = 5 * time.Second
	// MaxStoreAddresses bounds the Redis addresses.
	MaxStoreAddresses = 16
	// MaxRedisRefillWindow is the longest time a bucket kept in Redis may
	// take to refill completely (burst x period / requests), about 52 days:
	// the store's script computes in nanoseconds exact to 2^53.
	MaxRedisRefillWindow = time.Duration(1 << 52)
)

// Store says where the data plane keeps rate-limit bucket state. A nil
// Store in Config means StoreMemory.
type Store struct {
	// Type is StoreMemory or StoreRedis.
	Type StoreType `json:"type"`
	// Redis locates the shared Redis; set exactly when Type is StoreRedis.
	Redis *RedisStore `json:"redis,omitempty"`
}

// RedisStore is the rendered Redis connection, without any secret value.
type RedisStore struct {
	// Addresses are host:port pairs: one for RedisStandalone, seed nodes
	// for RedisCluster, sentinels for RedisSentinel.
	Addresses []string `json:"addresses"`
	// Mode is RedisStandalone, RedisCluster or RedisSentinel.
	Mode RedisMode `json:"mode"`
	// SentinelMasterName names the primary; set exactly with RedisSentinel.
	SentinelMasterName string `json:"sentinelMasterName,omitempty"`
	// Secret, if set, names the Secret holding the optional data keys
	// username, password and ca.crt; the data plane reads it by name.
	Secret *SecretRef `json:"secret,omitempty"`
	// DB is the logical database, 0 to 15; 0 with RedisCluster.
	DB int32 `json:"db"`
	// TLS connects with TLS.
	TLS bool `json:"tls"`
	// Timeout bounds one store call on the request path.
	Timeout Duration `json:"timeout"`
	// FailureMode is FailClosed or FailOpen.
	FailureMode FailureMode `json:"failureMode"`
}

// SecretRef names a Secret.
type SecretRef struct {
	// Namespace of the Secret.
	Namespace string `json:"namespace"`
	// Name of the Secret.
	Name string `json:"name"`
}

// IsRedis reports whether s selects the shared Redis store.
func (s *Store) IsRedis() bool { return s != nil && s.Type == StoreRedis && s.Redis != nil }

func (s *Store) validate(c *Config, errs *fieldErrors) {
	if s == nil {
		return
	}
	switch s.Type {
	case StoreMemory:
		if s.Redis != nil {
			errs.add("store.redis", "must be omitted when store.type is %q", StoreMemory)
		}
		return
	case StoreRedis:
		if s.Redis == nil {
			errs.add("store.redis", "is required when store.type is %q: name the Redis addresses", StoreRedis)
			return
		}
	default:
		errs.add("store.type", "must be %q or %q, got %q", StoreMemory, StoreRedis, s.Type)
		return
	}
	r := s.Redis
	if n := len(r.Addresses); n == 0 || n > MaxStoreAddresses {
		errs.add("store.redis.addresses", "must list 1 to %d host:port addresses, got %d", MaxStoreAddresses, n)
	}
	for i, a := range r.Addresses {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			errs.add(fmt.Sprintf("store.redis.addresses[%d]", i), "must be host:port, such as redis.cache.svc:6379, got %q", a)
		}
	}
	switch r.Mode {
	case RedisStandalone:
		if len(r.Addresses) > 1 {
			errs.add("store.redis.addresses", "mode %q takes exactly one address, got %d", RedisStandalone, len(r.Addresses))
		}
	case RedisCluster:
		if r.DB != 0 {
			errs.add("store.redis.db", "must be 0 with mode %q, got %d", RedisCluster, r.DB)
		}
	case RedisSentinel:
		if r.SentinelMasterName == "" {
			errs.add("store.redis.sentinelMasterName", "is required with mode %q", RedisSentinel)
		}
	default:
		errs.add("store.redis.mode", "must be %q, %q or %q, got %q", RedisStandalone, RedisCluster, RedisSentinel, r.Mode)
	}
	if r.Mode != RedisSentinel && r.SentinelMasterName != "" {
		errs.add("store.redis.sentinelMasterName", "must be empty unless mode is %q", RedisSentinel)
	}
	if r.DB < 0 || r.DB > 15 {
		errs.add("store.redis.db", "must be 0 to 15, got %d", r.DB)
	}
	if t := r.Timeout.Duration; t < MinStoreTimeout || t > MaxStoreTimeout {
		errs.add("store.redis.timeout", "must be from %s to %s, got %s", MinStoreTimeout, MaxStoreTimeout, t)
	}
	if r.FailureMode != FailClosed && r.FailureMode != FailOpen {
		errs.add("store.redis.failureMode", "must be %q or %q, got %q", FailClosed, FailOpen, r.FailureMode)
	}
	if sec := r.Secret; sec != nil {
		requireDNSName("store.redis.secret.namespace", sec.Namespace, 63, errs)
		requireDNSName("store.redis.secret.name", sec.Name, 253, errs)
	}
	c.eachLimit(func(path, unit string, l *Limit) {
		if w := l.refillWindow(); w > MaxRedisRefillWindow {
			errs.add(path, "takes %s to refill completely (burst x period / %s), longer than the Redis store's %s; lower burst or raise %s",
				w, unit, MaxRedisRefillWindow, unit)
		}
	})
}
