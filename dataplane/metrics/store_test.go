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

package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStoreMetrics(t *testing.T) {
	m, reg := register(t, NewStore)
	m.StoreState(true, false) // the initial state is no transition
	m.StoreLatency("take", 3*time.Millisecond)
	m.StoreLatency("sk-secret-looking-op", time.Millisecond)
	m.StoreError("timeout")
	m.StoreError("down")
	m.StoreError("down")
	m.StoreError("user 4f1c8a0e")
	m.StoreState(false, true)
	m.LiveReplicas(3)

	want := `
# HELP rate_limit_store_errors_total Failed shared rate-limit store calls, by kind: timeout, connection, reply (an error answered by Redis) or down (answered without contacting the store known to be unreachable).
# TYPE rate_limit_store_errors_total counter
rate_limit_store_errors_total{kind="connection"} 0
rate_limit_store_errors_total{kind="down"} 2
rate_limit_store_errors_total{kind="reply"} 0
rate_limit_store_errors_total{kind="timeout"} 1
rate_limit_store_errors_total{kind="unknown"} 1
# HELP rate_limit_store_fallback 1 while requests are decided by per-replica in-memory buckets because the shared store is unreachable (failureMode Open).
# TYPE rate_limit_store_fallback gauge
rate_limit_store_fallback 1
# HELP rate_limit_store_up 1 while the shared rate-limit store answers, 0 while it does not.
# TYPE rate_limit_store_up gauge
rate_limit_store_up 0
# HELP rate_limit_store_transitions_total Changes of the shared rate-limit store's state, by the state entered: up or down.
# TYPE rate_limit_store_transitions_total counter
rate_limit_store_transitions_total{to="down"} 1
rate_limit_store_transitions_total{to="up"} 0
# HELP rate_limit_live_replicas Live data-plane replicas of the policy as this replica counts them; each limit is divided by it in the fail-open fallback.
# TYPE rate_limit_live_replicas gauge
rate_limit_live_replicas 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), StoreErrorsName, StoreFallbackName, StoreUpName, StoreTransitionsName, LiveReplicasName); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.latencyVec); n != 5 {
		t.Fatalf("%d latency series, want take, peek, refund, adjust and unknown", n)
	}
}
