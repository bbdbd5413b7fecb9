package render

import (
	"strings"
	"time"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

// renderCapacity renders spec.capacity with every default resolved, so the
// data plane reads effective values only. It renders nothing when the
// policy has no capacity, so policies without it keep their bytes.
func renderCapacity(spec *fqv1alpha1.FairQueuePolicySpec) *config.Capacity {
	if spec.Capacity == nil {
		return nil
	}
	out := &config.Capacity{Backends: make([]config.BackendCapacity, 0, len(spec.Capacity.Backends))}
	for _, b := range spec.Capacity.Backends {
		bc := config.BackendCapacity{Name: b.Name, MaxInFlight: b.MaxInFlight}
		if s := b.Saturation; s != nil {
			bc.Saturation = &config.Saturation{
				MetricsURL: metricsURL(spec.Backends, b.Name, s),
				Interval:   durationOr(s.Interval, config.DefaultSaturationInterval),
				StaleAfter: durationOr(s.StaleAfter, config.DefaultSaturationStaleAfter),
				Timeout:    durationOr(s.Timeout, config.DefaultSaturationTimeout),
				Signals:    make([]config.Signal, 0, len(s.Signals)),
			}
			for _, sig := range s.Signals {
				bc.Saturation.Signals = append(bc.Saturation.Signals, config.Signal{Metric: sig.Metric, Max: sig.Max})
			}
		}
		out.Backends = append(out.Backends, bc)
	}
	return out
}

// metricsURL is where the named backend's metrics are polled: metricsURL
// when set, otherwise metricsPath (by default /metrics) on the backend's
// url, joined with one slash as the proxy joins a request's path to it.
func metricsURL(backends []fqv1alpha1.Backend, name string, s *fqv1alpha1.Saturation) string {
	if s.MetricsURL != "" {
		return s.MetricsURL
	}
	path := s.MetricsPath
	if path == "" {
		path = config.DefaultMetricsPath
	}
	for _, b := range backends {
		if b.Name == name {
			return strings.TrimSuffix(b.URL, "/") + path
		}
	}
	// The API server refuses a capacity entry naming no backend, and
	// config.Validate refuses this URL with the entry's path.
	return path
}

// durationOr returns d as a config duration, or def when d is unset.
func durationOr(d fqv1alpha1.Duration, def time.Duration) config.Duration {
	if v := d.Duration(); v > 0 {
		return config.Duration{Duration: v}
	}
	return config.Duration{Duration: def}
}

// Capacity returns spec.capacity as the operator renders it, every default
// resolved; nil when the policy has none. kubectl fairqueue status shows
// it, so the effective values it prints are the renderer's.
func Capacity(spec *fqv1alpha1.FairQueuePolicySpec) *config.Capacity { return renderCapacity(spec) }
