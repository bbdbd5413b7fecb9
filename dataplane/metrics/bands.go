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
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

// MaxBandSeries bounds the values of the queue series' band label besides
// "" (no band) and "unknown": the bands of the configs loaded since the
// process started, twice the bands one config may have, so that renaming
// every band once keeps its own series. A band past it is recorded as
// "unknown".
const MaxBandSeries = 2 * fairqueue.MaxBands

// bandLabels bounds the band label values of a set of series: "" (no band),
// the first MaxBandSeries band names seen, and "unknown" for the rest. S is
// what one band's series are (label children, or just the label value).
type bandLabels[S any] struct {
	// series creates the series of a band label value.
	series func(name string) S
	// none are the series of band "", set by init and never changed.
	none S
	mu   sync.Mutex
	// names and named are the named bands and their series, at most
	// MaxBandSeries plus "unknown".
	names []string
	named []S
}

// init creates the series of band "" with series, which later creates those
// of each band on its first event.
func (t *bandLabels[S]) init(series func(name string) S) {
	t.series = series
	t.none = series("")
}

// of returns the series of band name, creating them on its first event.
func (t *bandLabels[S]) of(name string) S {
	if name == "" {
		return t.none
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ofLocked(name)
}

func (t *bandLabels[S]) ofLocked(name string) S {
	if name == "" {
		return t.none
	}
	if i := slices.Index(t.names, name); i >= 0 {
		return t.named[i]
	}
	switch {
	case len(t.named) > MaxBandSeries:
		return t.named[MaxBandSeries] // "unknown"
	case len(t.named) == MaxBandSeries:
		name = unknownLabel
	}
	s := t.series(name)
	t.names = append(t.names, name)
	t.named = append(t.named, s)
	return s
}

// bandSeries are one band's label children of the queue series.
type bandSeries struct {
	name  string
	depth prometheus.Gauge
	// types are the band's wait, grant and refusal series by limit type
	// (limitTypes' index), created on the band's first event of that limit
	// type, as a band's are on its first event: a replica exports the
	// limit types its configs queue for, not every one (a scrape, and
	// kubectl fairqueue simulate's many, gather them all).
	types [len(limitTypes)]atomic.Pointer[limitSeries]
	// queued is the band's last reported depth; bandTable.mu guards it.
	queued int
}

// limitSeries are one band's and one limit type's wait, grant and refusal
// series, for every tenant dimension and reason.
type limitSeries struct {
	wait    [len(tenantDimensions)]prometheus.Observer
	grants  [len(tenantDimensions)]prometheus.Counter
	refused [len(tenantDimensions)][len(reasons)]prometheus.Counter
}

// bandTable holds the series of every band seen. The depth of band "" (no
// band) exists from the start: the requests in no named band, all of them
// without bands and none with them, so the depth summed over bands is the
// queue's.
type bandTable struct {
	bandLabels[*bandSeries]
	total int
}

// init creates the depth series of band "".
func (t *bandTable) init(m *Metrics) {
	t.bandLabels.init(func(name string) *bandSeries {
		return &bandSeries{name: name, depth: m.depth.WithLabelValues(name)}
	})
}

// limit returns b's series of limit type i (an index of limitTypes),
// creating them on their first use. Two first uses at once create the same
// label children, so either result serves.
func (b *bandSeries) limit(m *Metrics, i int) *limitSeries {
	if l := b.types[i].Load(); l != nil {
		return l
	}
	lt := limitTypes[i]
	l := new(limitSeries)
	for j, d := range tenantDimensions {
		l.wait[j] = m.wait.WithLabelValues(string(d), lt, b.name)
		l.grants[j] = m.grants.WithLabelValues(string(d), lt, b.name)
		for k, r := range reasons {
			l.refused[j][k] = m.refused.WithLabelValues(string(d), string(r), lt, b.name)
		}
	}
	b.types[i].CompareAndSwap(nil, l)
	return b.types[i].Load()
}

// setTotal records the depth of the whole queue.
func (t *bandTable) setTotal(depth int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total = depth
	t.setNoneLocked()
}

// setDepth records the depth of band name.
func (t *bandTable) setDepth(name string, depth int) {
	if name == "" {
		return // the depth outside every band follows from the total
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.ofLocked(name)
	b.queued = depth
	b.depth.Set(float64(depth))
	t.setNoneLocked()
}

// setNoneLocked sets the depth of band "": the requests in no named band.
func (t *bandTable) setNoneLocked() {
	n := t.total
	for _, b := range t.named {
		n -= b.queued
	}
	t.none.depth.Set(float64(max(n, 0)))
}
