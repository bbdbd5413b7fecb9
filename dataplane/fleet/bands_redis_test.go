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
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

// TestFleetBandsOnRealRedis is the fleet target: three replicas
// exchanging their demand, bands included, through a real redis-server,
// with skewed routing (the interactive tenant only on replica 0, the batch
// tenants on all three). The replicas, their queues and the shared bucket
// run on the simulation's fake clock, so the shares are deterministic up to
// the order Redis returns the reports in; only the exchange is real (its
// reports' expiry follows Redis's real clock, so their TTL covers the run).
// The same scenario in real time through the admission controllers is
// TestRealRedisFleetBands, behind the soak build tag.
func TestFleetBandsOnRealRedis(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { _ = client.Close() })
	warm, end := 3*time.Second, 30*time.Second
	for i, tc := range bandCases() {
		t.Run(tc.name, func(t *testing.T) {
			ex := NewRedisExchange(client, redisstore.KeyPrefix("ns", fmt.Sprintf("bands%d", i))+"fleet:")
			res := simulate(t, simScenario{replicas: 3, shared: true, paced: true, bands: tc.bands, loads: tc.loads, duration: end, seed: 1,
				exchange: ex, ttl: time.Hour}, [2]time.Duration{warm, end})
			rates, total := res.rates(warm, end)
			checkBands(t, rates, total, tc.want, 0.05)
		})
	}
}
