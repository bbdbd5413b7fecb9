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

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// swapScript stores this replica's report in the key's hash with an expiry
// taken from Redis's own clock (so replica clock skew does not matter), drops
// the expired reports of other replicas, and returns the live ones: one round
// trip, atomic, touching one key (one Cluster slot).
//
// KEYS[1] the key's report hash; ARGV[1] replica; ARGV[2] report; ARGV[3] TTL in ms.
//
//nolint:dupword // Lua closes nested blocks with consecutive "end"s.
var swapScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], (now + ttl) .. '|' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], 4 * ttl)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, '|', 1, true)
  if sep == nil or tonumber(string.sub(v, 1, sep - 1)) < now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = string.sub(v, sep + 1)
  end
end
return out
`)

// RedisExchange is an Exchange on Redis: one hash per limit key, one field per
// replica, expiring by Redis's clock. Each call touches one key, so it works
// on a single server, Sentinel or Cluster.
type RedisExchange struct {
	source RedisSource
}

// RedisSource returns the Redis client the policy's buckets live in and the
// key prefix for the exchange, or a nil client while the buckets are not
// shared (the memory store is in force).
type RedisSource func() (client redis.UniversalClient, prefix string)

// NewRedisExchange returns an Exchange storing the reports of limit key k
// under prefix+k. Give it the policy's bucket prefix plus "fleet:"
// (redisstore.KeyPrefix(namespace, policy) + "fleet:"): the prefix's hash tag
// then puts a policy's reports in the slot of its buckets.
func NewRedisExchange(client redis.UniversalClient, prefix string) *RedisExchange {
	return &RedisExchange{source: func() (redis.UniversalClient, string) { return client, prefix }}
}

// NewRedisExchangeFrom returns an Exchange that asks source for the client and
// prefix on every call, so it follows a store that a config reload switches
// between memory and Redis. While source returns a nil client every call
// fails with ErrNotShared.
func NewRedisExchangeFrom(source RedisSource) *RedisExchange {
	return &RedisExchange{source: source}
}

// Swap implements Exchange.
func (e *RedisExchange) Swap(ctx context.Context, key string, r Report, ttl time.Duration) ([]Report, error) {
	client, prefix := e.source()
	if client == nil {
		return nil, ErrNotShared
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode fleet report: %w", err)
	}
	hashKey := prefix + key
	res, err := swapScript.Run(ctx, client, []string{hashKey}, r.Replica, payload, ttl.Milliseconds()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("swap fleet reports in Redis: %w", err)
	}
	out := make([]Report, 0, len(res))
	var errs []error
	for _, s := range res {
		var rep Report
		if err := json.Unmarshal([]byte(s), &rep); err != nil {
			errs = append(errs, fmt.Errorf("decode a fleet report under %q (written by another version?): %w", hashKey, err))
			continue
		}
		out = append(out, rep)
	}
	return out, errors.Join(errs...)
}

// Leave implements Exchange.
func (e *RedisExchange) Leave(ctx context.Context, key, replica string) error {
	client, prefix := e.source()
	if client == nil {
		return ErrNotShared
	}
	if err := client.HDel(ctx, prefix+key, replica).Err(); err != nil {
		return fmt.Errorf("withdraw fleet report from Redis: %w", err)
	}
	return nil
}
