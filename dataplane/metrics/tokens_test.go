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

func TestDeferredSeriesWithoutBands(t *testing.T) {
	tk, reg := register(t, NewTokens)
	tk.QueueChanged(2, 1)
	tk.HeldAhead("", 1)
	tk.Granted("team", "", "", time.Second)
	tk.Refused("team", "", "", fairqueue.ReasonDeadlineExceeded)
	tk.Refused("team", "", "", fairqueue.ReasonDisabled) // admitted, not refused
	tk.DeferralRefused("", "table_full")
	const want = `
# HELP rate_limit_deferred_grants_total Held requests whose token reservation was granted, by priority band.
# TYPE rate_limit_deferred_grants_total counter
rate_limit_deferred_grants_total{band=""} 1
# HELP rate_limit_deferred_held Requests held now for their token reservation (deferred admission), by priority band.
# TYPE rate_limit_deferred_held gauge
rate_limit_deferred_held{band=""} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), DeferredHeldName, DeferredGrantsName); err != nil {
		t.Fatal(err)
	}
	for reason, want := range map[string]float64{"deadline_exceeded": 1, "table_full": 1, "shutdown": 0} {
		if got := testutil.ToFloat64(tk.refused.WithLabelValues(reason, "")); got != want {
			t.Errorf("refused_total{%s} = %v, want %v", reason, got, want)
		}
	}
}

func TestDeferredSeriesByBand(t *testing.T) {
	tk, reg := register(t, NewTokens)
	tk.BandQueueChanged("interactive", 1)
	tk.BandQueueChanged("batch", 4)
	tk.QueueChanged(5, 2)
	tk.HeldAhead("batch", 1)
	tk.Granted("team", "", "interactive", 10*time.Millisecond)
	tk.Granted("team", "", "batch", 3*time.Second)
	tk.Granted("team", "", "batch", 2*time.Second)
	tk.Refused("team", "", "batch", fairqueue.ReasonWaitExceedsBudget)
	tk.DeferralRefused("batch", "table_full")
	const want = `
# HELP rate_limit_deferred_grants_total Held requests whose token reservation was granted, by priority band.
# TYPE rate_limit_deferred_grants_total counter
rate_limit_deferred_grants_total{band=""} 0
rate_limit_deferred_grants_total{band="batch"} 2
rate_limit_deferred_grants_total{band="interactive"} 1
# HELP rate_limit_deferred_held Requests held now for their token reservation (deferred admission), by priority band.
# TYPE rate_limit_deferred_held gauge
rate_limit_deferred_held{band=""} 0
rate_limit_deferred_held{band="batch"} 5
rate_limit_deferred_held{band="interactive"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), DeferredHeldName, DeferredGrantsName); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ reason, band string }{{"wait_exceeds_budget", "batch"}, {"table_full", "batch"}} {
		if got := testutil.ToFloat64(tk.refused.WithLabelValues(tc.reason, tc.band)); got != 1 {
			t.Errorf("refused_total{%s, %s} = %v, want 1", tc.reason, tc.band, got)
		}
	}

	// A reload removes the bands: each is reported at 0 once, and the
	// requests held are in band "" again, admitted holds included.
	tk.HeldAhead("batch", -1)
	tk.BandQueueChanged("interactive", 0)
	tk.BandQueueChanged("batch", 0)
	tk.QueueChanged(3, 1)
	tk.HeldAhead("", 1)
	const unbanded = `
# HELP rate_limit_deferred_held Requests held now for their token reservation (deferred admission), by priority band.
# TYPE rate_limit_deferred_held gauge
rate_limit_deferred_held{band=""} 4
rate_limit_deferred_held{band="batch"} 0
rate_limit_deferred_held{band="interactive"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(unbanded), DeferredHeldName); err != nil {
		t.Fatal(err)
	}
}

func TestDeferredBandLabelIsBounded(t *testing.T) {
	tk, _ := register(t, NewTokens)
	for i := range 3 * MaxBandSeries {
		band := fmt.Sprintf("band-%d", i)
		tk.Granted("team", "", band, time.Millisecond)
		tk.DeferralRefused(band, "no such reason")
		tk.BandQueueChanged(band, 1)
	}
	// "" and "unknown" besides MaxBandSeries bands.
	if got, want := testutil.CollectAndCount(tk.grants), MaxBandSeries+2; got != want {
		t.Errorf("grants_total has %d series, want %d", got, want)
	}
	if got, want := testutil.ToFloat64(tk.grants.WithLabelValues(unknownLabel)), float64(2*MaxBandSeries); got != want {
		t.Errorf("grants_total{unknown} = %v, want the %v grants of bands past the bound", got, want)
	}
	if got, want := testutil.ToFloat64(tk.refused.WithLabelValues(unknownLabel, unknownLabel)), float64(2*MaxBandSeries); got != want {
		t.Errorf("refused_total{unknown, unknown} = %v, want %v", got, want)
	}
}

func TestDeferredRecordingDoesNotAllocate(t *testing.T) {
	tk, _ := register(t, NewTokens)
	tk.Granted("team", "", "batch", time.Millisecond) // creates the band's series
	allocs := testing.AllocsPerRun(100, func() {
		tk.QueueChanged(1, 1)
		tk.BandQueueChanged("batch", 1)
		tk.HeldAhead("batch", 1)
		tk.HeldAhead("batch", -1)
		tk.Granted("team", "", "batch", time.Millisecond)
		tk.Refused("team", "", "", fairqueue.ReasonQueueFull)
		tk.DeferralRefused("batch", "table_full")
	})
	if allocs != 0 {
		t.Fatalf("recording allocates %v times per event set, want 0", allocs)
	}
}
