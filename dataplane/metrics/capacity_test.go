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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
)

// TestCapacityExportsEachSignalBesideItsMax: the dashboard draws a signal's
// value against its max, so both are exported per backend and signal.
func TestCapacityExportsEachSignalBesideItsMax(t *testing.T) {
	stats := []capacity.BackendStats{{
		Backend: "vllm-a", InFlight: 3, MaxInFlight: 4, Saturated: true, Overdraft: 1,
		Signals: []capacity.SignalStats{{Metric: "vllm:num_requests_waiting", Max: 4, Value: 6, Fresh: true}},
	}, {Backend: "vllm-b", InFlight: 0, MaxInFlight: 4, Stale: true}}
	c, reg := register(t, func(reg prometheus.Registerer) (*Capacity, error) {
		return NewCapacity(reg, func() []capacity.BackendStats { return stats })
	})
	c.PollError("vllm-b", "timeout")
	const want = `
# HELP fairqueue_backend_saturation_signal The latest reading of a saturation signal (the largest over its series).
# TYPE fairqueue_backend_saturation_signal gauge
fairqueue_backend_saturation_signal{backend="vllm-a",signal="vllm:num_requests_waiting"} 6
# HELP fairqueue_backend_saturation_signal_max The configured max of a saturation signal: a fresh reading above it saturates the backend.
# TYPE fairqueue_backend_saturation_signal_max gauge
fairqueue_backend_saturation_signal_max{backend="vllm-a",signal="vllm:num_requests_waiting"} 4
# HELP fairqueue_backend_overdraft Slots taken above the saturation window for tenants under their share or of a higher band, not yet repaid by a release (capacity mode).
# TYPE fairqueue_backend_overdraft gauge
fairqueue_backend_overdraft{backend="vllm-a"} 1
fairqueue_backend_overdraft{backend="vllm-b"} 0
# HELP fairqueue_backend_saturation_stale 1 while the backend's saturation signals are stale (maxInFlight alone decides).
# TYPE fairqueue_backend_saturation_stale gauge
fairqueue_backend_saturation_stale{backend="vllm-a"} 0
fairqueue_backend_saturation_stale{backend="vllm-b"} 1
# HELP fairqueue_backend_saturation_poll_errors_total Failed polls of a backend's metrics endpoint, by kind (timeout, connection, status, too_large, parse, missing).
# TYPE fairqueue_backend_saturation_poll_errors_total counter
fairqueue_backend_saturation_poll_errors_total{backend="vllm-b",kind="timeout"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), BackendSignalName, BackendSignalMaxName, BackendOverdraftName, BackendStaleName, BackendPollErrorsName); err != nil {
		t.Fatal(err)
	}
}
