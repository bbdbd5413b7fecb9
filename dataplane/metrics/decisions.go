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
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// maxCountedStores bounds the in-memory stores whose own counts decisions
// reads. A data plane has one; past the bound a limiter keeps telling each
// decision (limiter.MemoryObserver), so nothing is lost.
const maxCountedStores = 4

// decisions is rate_limit_decisions_total, every series pre-created: the
// decisions the limiter tells it (ObserveDecision) plus, at scrape time, the
// counts the in-memory stores keep under their shard locks, so the request
// path on such a store pays no atomic add per bucket.
type decisions struct {
	desc   *prometheus.Desc
	labels [limiter.NumDimensions][limiter.NumOutcomes][2]string
	told   [limiter.NumDimensions][limiter.NumOutcomes]atomic.Uint64

	mu     sync.Mutex
	stores []*limiter.MemoryStore // at most maxCountedStores
}

var _ prometheus.Collector = (*decisions)(nil)

func newDecisions() *decisions {
	c := &decisions{desc: prometheus.NewDesc(DecisionsName,
		"Rate-limit bucket checks by dimension (limit_type) and outcome.", []string{"dimension", "outcome"}, nil)}
	for d := range limiter.NumDimensions {
		for o := range limiter.NumOutcomes {
			c.labels[d][o] = [2]string{limiter.Dimension(d).String(), limiter.Outcome(o).String()}
		}
	}
	return c
}

// observe counts one outcome told by the limiter.
func (c *decisions) observe(d limiter.Dimension, o limiter.Outcome) {
	if int(d) < limiter.NumDimensions && int(o) < limiter.NumOutcomes {
		c.told[d][o].Add(1)
	}
}

// countsMemory adds s to the stores read at scrape time, unless the bound
// is reached.
func (c *decisions) countsMemory(s *limiter.MemoryStore) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, have := range c.stores {
		if have == s {
			return true
		}
	}
	if len(c.stores) == maxCountedStores {
		return false
	}
	c.stores = append(c.stores, s)
	return true
}

// Describe implements prometheus.Collector.
func (c *decisions) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *decisions) Collect(ch chan<- prometheus.Metric) {
	var sum [limiter.NumDimensions][limiter.NumOutcomes]uint64
	c.mu.Lock()
	for _, s := range c.stores {
		s.AddDecisions(&sum)
	}
	c.mu.Unlock()
	for d := range sum {
		for o := range sum[d] {
			v := sum[d][o] + c.told[d][o].Load()
			l := &c.labels[d][o]
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), l[0], l[1])
		}
	}
}
