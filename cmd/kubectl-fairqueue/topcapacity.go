package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

// backendSample is what one scrape said about one backend in capacity mode
// (the fairqueue_backend_* series).
type backendSample struct {
	inFlight, max     float64
	saturated, stale  bool
	signals           map[string]float64 // latest reading by metric name
	pollErrors        float64            // counter, all kinds
	hasMax, hasGauges bool
}

// parseBackend records one capacity series of a scrape into s.
func (s *replicaSample) parseBackend(name string, m *dto.Metric, label func(*dto.Metric, string) string) {
	be := label(m, "backend")
	b := s.byBackend[be]
	if b == nil {
		b = &backendSample{signals: map[string]float64{}}
		s.byBackend[be] = b
	}
	v := m.GetGauge().GetValue()
	switch name {
	case metrics.BackendInFlightName:
		b.inFlight, b.hasGauges = v, true
	case metrics.BackendMaxInFlightName:
		b.max, b.hasMax = v, true
	case metrics.BackendSaturatedName:
		b.saturated = v > 0
	case metrics.BackendStaleName:
		b.stale = v > 0
	case metrics.BackendSignalName:
		b.signals[label(m, "signal")] = v
	case metrics.BackendPollErrorsName:
		b.pollErrors += m.GetCounter().GetValue()
	}
}

// capacityQueued reads the capacity waiters of a scrape: the queue depth
// series labelled limit_type="capacity" when the data plane exports one.
func (s *replicaSample) capacityQueued(m *dto.Metric, label func(*dto.Metric, string) string) {
	if label(m, "limit_type") == admission.LimitTypeCapacity {
		s.capWaiting += m.GetGauge().GetValue()
		s.hasCapWaiting = true
	}
}

// signalMaxes returns each backend's signal thresholds from the policy's
// rendered capacity; nil (every max unknown) without it.
func signalMaxes(c *config.Capacity) map[string]map[string]float64 {
	if c == nil {
		return nil
	}
	out := map[string]map[string]float64{}
	for _, b := range c.Backends {
		if b.Saturation == nil {
			continue
		}
		out[b.Name] = map[string]float64{}
		for _, s := range b.Saturation.Signals {
			out[b.Name][s.Metric] = s.Max
		}
	}
	return out
}

// printCapacity prints the backend table of top when the replicas run
// capacity mode: one row per backend and replica, from the second scrape,
// with the poll errors of the window. maxes are the policy's signal
// thresholds by backend and metric (nil with --metrics-url: unknown).
func printCapacity(out io.Writer, pods []string, before, after []replicaSample, interval time.Duration, maxes map[string]map[string]float64) error {
	type row struct {
		backend, pod string
		b            *backendSample
		pollErrs     float64
	}
	var rows []row
	var waiting, queued float64
	exported := false
	for i, pod := range pods {
		b, a := before[i], after[i]
		if firstErr(b.err, a.err) != nil {
			continue
		}
		queued += a.depth
		if a.hasCapWaiting {
			waiting += a.capWaiting
			exported = true
		}
		for name, ab := range a.byBackend {
			if !ab.hasGauges {
				continue // poll errors of a backend no longer configured
			}
			var errs float64
			if bb := b.byBackend[name]; bb != nil {
				errs = counterDelta(ab.pollErrors, bb.pollErrors)
			} else {
				errs = ab.pollErrors
			}
			rows = append(rows, row{backend: name, pod: pod, b: ab, pollErrs: errs})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].backend != rows[j].backend {
			return rows[i].backend < rows[j].backend
		}
		return rows[i].pod < rows[j].pod
	})
	secs := interval.Seconds()
	w := newTable(out)
	w.printf("BACKEND\tREPLICA\tIN FLIGHT\tSATURATED\tSIGNALS (value/max)\tSTALE\tPOLL ERRORS/S\n")
	for _, r := range rows {
		b := r.b
		inFlight := fmt.Sprintf("%.0f/%.0f", b.inFlight, b.max)
		if b.max > 0 {
			inFlight += fmt.Sprintf(" (%.0f%%)", 100*b.inFlight/b.max)
		}
		stale := "no"
		switch {
		case len(b.signals) == 0:
			stale = "-"
		case b.stale:
			stale = "yes (maxInFlight alone decides)"
		}
		w.printf("%s\t%s\t%s\t%s\t%s\t%s\t%.1f\n", r.backend, r.pod, inFlight, saturatedBy(b, maxes[r.backend]),
			signalValues(b, maxes[r.backend]), stale, r.pollErrs/secs)
	}
	if exported {
		w.printf("\nWaiting for a backend (limit_type capacity): %.0f, of %.0f queued\n", waiting, queued)
	} else {
		w.printf("\nQueued for any limit, capacity included: %.0f (these data planes do not export capacity waiters apart)\n", queued)
	}
	w.printf("\n")
	return w.flush()
}

// saturatedBy says whether the backend takes no more requests and why: at
// maxInFlight, or the signals over their max (when the max is known).
func saturatedBy(b *backendSample, maxes map[string]float64) string {
	if !b.saturated {
		return "no"
	}
	if b.hasMax && b.inFlight >= b.max {
		return "yes: at maxInFlight"
	}
	var over []string
	if !b.stale {
		for _, name := range slices.Sorted(maps.Keys(b.signals)) {
			if m, ok := maxes[name]; ok && (&config.Signal{Max: m}).Saturated(b.signals[name]) {
				over = append(over, name)
			}
		}
	}
	if len(over) == 0 {
		return "yes: a signal (max unknown)"
	}
	return "yes: " + strings.Join(over, ", ")
}

// signalValues prints each signal's latest reading against its max ("?"
// when the policy was not read).
func signalValues(b *backendSample, maxes map[string]float64) string {
	if len(b.signals) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(b.signals))
	for _, name := range slices.Sorted(maps.Keys(b.signals)) {
		limit := "?"
		if m, ok := maxes[name]; ok {
			limit = strconv.FormatFloat(m, 'g', -1, 64)
		}
		parts = append(parts, fmt.Sprintf("%s=%s/%s", name, strconv.FormatFloat(b.signals[name], 'g', 4, 64), limit))
	}
	return strings.Join(parts, " ")
}
