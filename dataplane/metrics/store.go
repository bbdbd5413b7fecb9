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
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Names of the shared limiter store's metrics.
const (
	// StoreLatencyName is the histogram of Redis round trips, by op (take, peek, refund, adjust).
	StoreLatencyName = "rate_limit_store_latency_seconds"
	// StoreErrorsName counts failed store calls by kind (timeout,
	// connection, reply, down).
	StoreErrorsName = "rate_limit_store_errors_total"
	// StoreUpName is 1 while the shared store answers, 0 while it does not.
	StoreUpName = "rate_limit_store_up"
	// StoreFallbackName is 1 while requests are decided by per-replica
	// in-memory buckets because the shared store is unreachable (failure
	// mode Open), else 0.
	StoreFallbackName = "rate_limit_store_fallback"
	// StoreTransitionsName counts changes of the store's state, by to (up, down).
	StoreTransitionsName = "rate_limit_store_transitions_total"
	// LiveReplicasName is the number of live data-plane replicas this
	// replica counts, which divides each limit in the fail-open fallback.
	LiveReplicasName = "rate_limit_live_replicas"
)

// StoreLatencyBuckets are the store latency histogram's upper bounds in
// seconds: 100us to 1s, dense around the default 50ms timeout.
var StoreLatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// storeOps and storeErrorKinds are the fixed label values; anything else is
// recorded as "unknown".
var (
	storeOps        = [...]string{"take", "peek", "refund", "adjust"}
	storeErrorKinds = [...]string{"timeout", "connection", "reply", "down"}
)

// StoreMetrics are the shared limiter store's collectors, with their label
// children created up front. It implements redisstore.Observer and counts
// live replicas for redisstore's replica counters.
type StoreMetrics struct {
	latency     [len(storeOps)]prometheus.Observer
	latencyVec  *prometheus.HistogramVec
	errors      [len(storeErrorKinds)]prometheus.Counter
	errorsVec   *prometheus.CounterVec
	up          prometheus.Gauge
	fallback    prometheus.Gauge
	toUp, toDn  prometheus.Counter
	replicas    prometheus.Gauge
	initialized atomic.Bool
}

// NewStore creates the store collectors and registers them on reg.
func NewStore(reg prometheus.Registerer) (*StoreMetrics, error) {
	m := &StoreMetrics{
		latencyVec: collector.HistogramVec(StoreLatencyName, "Round-trip time of shared rate-limit store calls, by op.", StoreLatencyBuckets, "op"),
		errorsVec: collector.CounterVec(StoreErrorsName, "Failed shared rate-limit store calls, by kind: timeout, connection, reply (an error answered by Redis) or down (answered without contacting the store known to be unreachable).",
			"kind"),
		up:       collector.Gauge(StoreUpName, "1 while the shared rate-limit store answers, 0 while it does not."),
		fallback: collector.Gauge(StoreFallbackName, "1 while requests are decided by per-replica in-memory buckets because the shared store is unreachable (failureMode Open)."),
		replicas: collector.Gauge(LiveReplicasName, "Live data-plane replicas of the policy as this replica counts them; each limit is divided by it in the fail-open fallback."),
	}
	transitions := collector.CounterVec(StoreTransitionsName, "Changes of the shared rate-limit store's state, by the state entered: up or down.", "to")
	m.toUp, m.toDn = transitions.WithLabelValues("up"), transitions.WithLabelValues("down")
	for i, op := range storeOps {
		m.latency[i] = m.latencyVec.WithLabelValues(op)
	}
	for i, k := range storeErrorKinds {
		m.errors[i] = m.errorsVec.WithLabelValues(k)
	}
	if err := registerAll(reg, "store metrics", "NewStore", m.latencyVec, m.errorsVec, m.up, m.fallback, transitions, m.replicas); err != nil {
		return nil, err
	}
	return m, nil
}

// StoreLatency records one round trip of op.
func (m *StoreMetrics) StoreLatency(op string, d time.Duration) {
	if i := slices.Index(storeOps[:], op); i >= 0 {
		m.latency[i].Observe(d.Seconds())
		return
	}
	m.latencyVec.WithLabelValues(unknownLabel).Observe(d.Seconds())
}

// StoreError counts one failed call of kind.
func (m *StoreMetrics) StoreError(kind string) {
	if i := slices.Index(storeErrorKinds[:], kind); i >= 0 {
		m.errors[i].Inc()
		return
	}
	m.errorsVec.WithLabelValues(unknownLabel).Inc()
}

// StoreState records the store's state; a change after the first call
// counts as a transition.
func (m *StoreMetrics) StoreState(up, fallback bool) {
	if m.initialized.Swap(true) {
		if up {
			m.toUp.Inc()
		} else {
			m.toDn.Inc()
		}
	}
	m.up.Set(b2f(up))
	m.fallback.Set(b2f(fallback))
}

// LiveReplicas records the number of live replicas counted.
func (m *StoreMetrics) LiveReplicas(n int) { m.replicas.Set(float64(n)) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
