package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Defaults of capacity mode, shared by the operator (which fills them before
// rendering) and the data plane.
const (
	// DefaultMetricsPath is the path, on a backend's url, of its Prometheus
	// metrics when the policy names neither a path nor a URL: where vLLM,
	// SGLang and TGI serve them.
	DefaultMetricsPath = "/metrics"
	// DefaultSaturationInterval is the default time between two polls of a
	// backend's metrics: vLLM updates its gauges every scheduler step, and
	// a quarter second keeps a saturated server's queue from growing by
	// more than a few requests between polls.
	DefaultSaturationInterval = 250 * time.Millisecond
	// DefaultSaturationStaleAfter is the default age after which a
	// backend's last metrics are ignored: four default intervals, so one
	// slow or failed poll does not make them stale.
	DefaultSaturationStaleAfter = time.Second
	// DefaultSaturationTimeout is the default bound on one poll, below the
	// default interval.
	DefaultSaturationTimeout = 200 * time.Millisecond
)

// Capacity is the rendered capacity mode (SPEC section 6b): admission
// against what the backends can take. A nil Capacity in Config means the
// mode is off and no backend is counted.
type Capacity struct {
	// Backends are the backends with a capacity, sorted by Name; a backend
	// of Config.Backends without an entry is never saturated.
	Backends []BackendCapacity `json:"backends"`
}

// BackendCapacity is the capacity of one backend.
type BackendCapacity struct {
	// Name is the name of a backend in Config.Backends.
	Name string `json:"name"`
	// MaxInFlight is the most requests at the backend at once, from
	// dispatch to the response's end; it alone decides while Saturation is
	// nil or its metrics are stale.
	MaxInFlight int32 `json:"maxInFlight"`
	// Saturation, if set, says how the backend's metrics are polled and
	// which gauges mark it saturated.
	Saturation *Saturation `json:"saturation,omitempty"`
}

// Saturation is how one backend's metrics are read. Every field holds its
// effective value: the renderer resolves the policy's defaults.
type Saturation struct {
	// MetricsURL is the absolute http or https URL polled for the
	// backend's Prometheus metrics (text exposition format).
	MetricsURL string `json:"metricsURL"`
	// Interval is the time between the starts of two polls; polls of one
	// backend never overlap.
	Interval Duration `json:"interval"`
	// StaleAfter is how old the last successful poll may be before its
	// values are ignored and MaxInFlight alone decides.
	StaleAfter Duration `json:"staleAfter"`
	// Timeout bounds one poll.
	Timeout Duration `json:"timeout"`
	// Signals are the gauges, in the policy's order; the backend is
	// saturated while any fresh signal is over its Max.
	Signals []Signal `json:"signals"`
}

// Signal is one gauge with its threshold.
type Signal struct {
	// Metric is the Prometheus metric name. When it has several series,
	// the largest value counts; a metric absent from a poll is stale.
	Metric string `json:"metric"`
	// Max is the largest value at which the backend still takes requests:
	// it is saturated while the metric's value is greater than Max.
	Max float64 `json:"max"`
}

// Saturated reports whether value marks the backend saturated: it is
// greater than s.Max. The data plane and the tools decide with it, so the
// comparison is written once.
func (s *Signal) Saturated(value float64) bool { return value > s.Max }

// Backend returns the capacity of the backend named name, or nil when the
// mode is off or the backend has none.
func (c *Capacity) Backend(name string) *BackendCapacity {
	if c == nil {
		return nil
	}
	for i := range c.Backends {
		if c.Backends[i].Name == name {
			return &c.Backends[i]
		}
	}
	return nil
}

func (c *Capacity) normalize() {
	if c == nil {
		return
	}
	slices.SortFunc(c.Backends, func(a, b BackendCapacity) int { return strings.Compare(a.Name, b.Name) })
}

// validate checks what the data plane needs to run capacity mode: entries
// naming known backends once, counts and durations it sizes and waits by,
// a URL it can poll and metric names it can look up.
func (c *Capacity) validate(backends []Backend, errs *fieldErrors) {
	if c == nil {
		return
	}
	if len(c.Backends) == 0 {
		errs.add("capacity.backends", "must list at least one backend; omit capacity to turn the mode off")
	}
	seen := map[string]int{}
	for i, b := range c.Backends {
		path := fmt.Sprintf("capacity.backends[%d]", i)
		switch j, dup := seen[b.Name]; {
		case dup:
			errs.add(path+".name", "duplicates capacity.backends[%d] (%q)", j, b.Name)
		case !slices.ContainsFunc(backends, func(x Backend) bool { return x.Name == b.Name }):
			errs.add(path+".name", "is %q, which is not in backends", b.Name)
		}
		seen[b.Name] = i
		atLeastOne(path+".maxInFlight", int64(b.MaxInFlight), errs)
		b.Saturation.validate(path+".saturation", errs)
	}
}

func (s *Saturation) validate(path string, errs *fieldErrors) {
	if s == nil {
		return
	}
	validateHTTPURL(path+".metricsURL", s.MetricsURL, errs)
	positive(path+".interval", s.Interval, errs)
	positive(path+".staleAfter", s.StaleAfter, errs)
	positive(path+".timeout", s.Timeout, errs)
	if len(s.Signals) == 0 {
		errs.add(path+".signals", "must list at least one signal; omit saturation to count in-flight requests only")
	}
	for i, sig := range s.Signals {
		p := fmt.Sprintf("%s.signals[%d]", path, i)
		if !isMetricName(sig.Metric) {
			errs.add(p+".metric", "must be a Prometheus metric name (letters, digits, '_' and ':', not starting with a digit), got %q", sig.Metric)
		}
		if math.IsNaN(sig.Max) || math.IsInf(sig.Max, 0) {
			errs.add(p+".max", "must be a finite number, got %v", sig.Max)
		}
	}
}

// isMetricName reports whether s is a Prometheus metric name,
// [a-zA-Z_:][a-zA-Z0-9_:]*.
func isMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
