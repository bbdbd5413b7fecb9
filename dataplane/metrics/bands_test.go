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
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

func TestQueueSeriesByBand(t *testing.T) {
	m, reg := newMetrics(t)
	m.Granted("user", "model", "interactive", 20*time.Millisecond)
	m.Granted("user", "model", "batch", 2*time.Second)
	m.Granted("user", "model", "batch", time.Second)
	m.Refused("team", "model", "batch", fairqueue.ReasonWaitExceedsBudget)
	m.BandQueueChanged("interactive", 2)
	m.BandQueueChanged("batch", 3)
	m.QueueChanged(5, 2)

	const want = `
# HELP rate_limit_fair_queue_depth Requests held in the fair queues now, by priority band.
# TYPE rate_limit_fair_queue_depth gauge
rate_limit_fair_queue_depth{band=""} 0
rate_limit_fair_queue_depth{band="batch"} 3
rate_limit_fair_queue_depth{band="interactive"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), QueueDepthName); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"user", "model", "interactive"}, 1},
		{[]string{"user", "model", "batch"}, 2},
		{[]string{"user", "model", ""}, 0},
	} {
		if got := testutil.ToFloat64(m.grants.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("grants_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(m.refused.WithLabelValues("team", "wait_exceeds_budget", "model", "batch")); got != 1 {
		t.Errorf("refused_total{team, wait_exceeds_budget, model, batch} = %v, want 1", got)
	}

	// The bands are removed by a reload: the queue reports each at 0 once,
	// and the depth outside every band is the whole queue's again.
	m.BandQueueChanged("interactive", 0)
	m.BandQueueChanged("batch", 0)
	m.QueueChanged(4, 2)
	const unbanded = `
# HELP rate_limit_fair_queue_depth Requests held in the fair queues now, by priority band.
# TYPE rate_limit_fair_queue_depth gauge
rate_limit_fair_queue_depth{band=""} 4
rate_limit_fair_queue_depth{band="batch"} 0
rate_limit_fair_queue_depth{band="interactive"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(unbanded), QueueDepthName); err != nil {
		t.Fatal(err)
	}
}

func TestBandLabelIsBounded(t *testing.T) {
	m, _ := newMetrics(t)
	for i := range 3 * MaxBandSeries {
		band := fmt.Sprintf("band-%d", i)
		m.Granted("user", "model", band, time.Millisecond)
		m.Refused("user", "model", band, fairqueue.ReasonQueueFull)
		m.BandQueueChanged(band, 1)
	}
	// "" and "unknown" besides MaxBandSeries bands.
	if got, want := testutil.CollectAndCount(m.depth), MaxBandSeries+2; got != want {
		t.Errorf("depth has %d series, want at most %d", got, want)
	}
	// The one limit type used, in "unknown" and MaxBandSeries bands.
	if got, want := testutil.CollectAndCount(m.grants), len(tenantDimensions)*(MaxBandSeries+1); got != want {
		t.Errorf("grants_total has %d series, want at most %d", got, want)
	}
	if got, want := testutil.ToFloat64(m.grants.WithLabelValues("user", "model", unknownLabel)), float64(2*MaxBandSeries); got != want {
		t.Errorf("grants_total{user, unknown} = %v, want the %v grants of bands past the bound", got, want)
	}
}

func TestBandIgnoredIsCountedByReason(t *testing.T) {
	m, _ := newMetrics(t)
	m.BandIgnored("raise")
	m.BandIgnored("unknown")
	m.BandIgnored("unknown")
	m.BandIgnored("some-band-name") // not a reason: never a label
	for reason, want := range map[string]float64{"raise": 1, "unknown": 2} {
		if got := testutil.ToFloat64(m.bandIgnored.WithLabelValues(reason)); got != want {
			t.Errorf("%s{reason=%q} = %v, want %v", QueueBandIgnoredName, reason, got, want)
		}
	}
	if got := testutil.CollectAndCount(m.bandIgnored); got != 2 {
		t.Errorf("%s has %d series, want one per reason", QueueBandIgnoredName, got)
	}
}
