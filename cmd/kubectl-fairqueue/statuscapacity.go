package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

// CapacityStatus is a policy's capacity mode (spec.capacity), in `status -o
// json|yaml`, with every default resolved as the operator renders it.
type CapacityStatus struct {
	Backends []BackendCapacityStatus `json:"backends"`
}

// BackendCapacityStatus is one backend's capacity.
type BackendCapacityStatus struct {
	Name        string `json:"name"`
	MaxInFlight int32  `json:"maxInFlight"`
	// Saturation is absent when maxInFlight alone decides.
	Saturation *SaturationStatus `json:"saturation,omitempty"`
}

// SaturationStatus is where and how often a backend's metrics are read, and
// the signals that mark it saturated.
type SaturationStatus struct {
	// MetricsURL is the URL polled, without its query (which may hold a
	// token).
	MetricsURL        string         `json:"metricsURL"`
	IntervalSeconds   float64        `json:"intervalSeconds"`
	StaleAfterSeconds float64        `json:"staleAfterSeconds"`
	TimeoutSeconds    float64        `json:"timeoutSeconds"`
	Signals           []SignalStatus `json:"signals"`
}

// SignalStatus is one saturation signal: the backend is saturated while
// the gauge's value is over Max.
type SignalStatus struct {
	Metric string  `json:"metric"`
	Max    float64 `json:"max"`
}

// capacityStatus is spec's capacity as the operator renders it; nil without.
func capacityStatus(spec *fqv1alpha1.FairQueuePolicySpec) *CapacityStatus {
	c := render.Capacity(spec)
	if c == nil {
		return nil
	}
	out := &CapacityStatus{Backends: make([]BackendCapacityStatus, 0, len(c.Backends))}
	for _, b := range c.Backends {
		bs := BackendCapacityStatus{Name: b.Name, MaxInFlight: b.MaxInFlight}
		if s := b.Saturation; s != nil {
			bs.Saturation = &SaturationStatus{MetricsURL: withoutQuery(s.MetricsURL),
				IntervalSeconds: s.Interval.Seconds(), StaleAfterSeconds: s.StaleAfter.Seconds(), TimeoutSeconds: s.Timeout.Seconds(),
				Signals: make([]SignalStatus, 0, len(s.Signals))}
			for _, sig := range s.Signals {
				bs.Saturation.Signals = append(bs.Saturation.Signals, SignalStatus{Metric: sig.Metric, Max: sig.Max})
			}
		}
		out.Backends = append(out.Backends, bs)
	}
	return out
}

// withoutQuery prints a metrics URL without its query and fragment, which
// may carry a token.
func withoutQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.RawQuery != ""
	u.RawQuery, u.Fragment, u.User = "", "", nil
	if q {
		return u.String() + "?…"
	}
	return u.String()
}

// signalList prints signals as "vllm:num_requests_waiting>4, ...": a
// backend is saturated while a value is over its max.
func signalList(sigs []SignalStatus) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = s.Metric + ">" + strconv.FormatFloat(s.Max, 'g', -1, 64)
	}
	return strings.Join(parts, ", ")
}

// capacityList is the list's CAPACITY column: each backend's maxInFlight,
// "+sat" when signals are read ("vllm-a:264+sat,vllm-b:64"); "-" without.
func capacityList(c *CapacityStatus) string {
	if c == nil {
		return "-"
	}
	parts := make([]string, len(c.Backends))
	for i, b := range c.Backends {
		parts[i] = fmt.Sprintf("%s:%d", b.Name, b.MaxInFlight)
		if b.Saturation != nil {
			parts[i] += "+sat"
		}
	}
	return strings.Join(parts, ",")
}

// printCapacityLine writes the capacity line of `status POLICY`'s header.
func printCapacityLine(w *printer, s *PolicyStatus) {
	if s.Capacity != nil {
		w.printf("Capacity:\t%d backend(s); when every backend is saturated, a request with an identity waits in the fair queue "+
			"(limit_type capacity), one without gets 429\n", len(s.Capacity.Backends))
	}
}

// printCapacityStatus writes the capacity table of `status POLICY`; wide
// adds each poll's timeout.
func printCapacityStatus(w *printer, s *PolicyStatus, wide bool) {
	c := s.Capacity
	if c == nil {
		return
	}
	extra := ""
	if wide {
		extra = "\tTIMEOUT"
	}
	w.printf("\nBACKEND\tMAX IN FLIGHT\tSATURATION SOURCE\tINTERVAL\tSTALE AFTER%s\tSIGNALS (saturated when over)\n", extra)
	for _, b := range c.Backends {
		sat := b.Saturation
		if sat == nil {
			if wide {
				extra = "\t-"
			}
			w.printf("%s\t%d\t%s\t-\t-%s\t-\n", b.Name, b.MaxInFlight, "none (maxInFlight alone decides)", extra)
			continue
		}
		if wide {
			extra = "\t" + seconds(sat.TimeoutSeconds)
		}
		w.printf("%s\t%d\t%s\t%s\t%s%s\t%s\n", b.Name, b.MaxInFlight, sat.MetricsURL, seconds(sat.IntervalSeconds),
			seconds(sat.StaleAfterSeconds), extra, signalList(sat.Signals))
	}
}
