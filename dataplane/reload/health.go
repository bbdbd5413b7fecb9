package reload

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Metric names of the config source's health.
const (
	// SourceUpName is a gauge: 1 while the config source reads or watches
	// successfully, 0 while it fails (the last good config stays in force).
	SourceUpName = "fairqueue_config_source_up"
	// SourceErrorsName counts failed reads or watches of the config source.
	SourceErrorsName = "fairqueue_config_source_errors_total"
)

// SourceLogInterval is how often a source that keeps failing is logged
// again; the first failure and the recovery are logged at once.
const SourceLogInterval = 30 * time.Second

// HealthSink is implemented by sinks that track whether a Source reaches
// the place it reads from. A Source reports to its Sink when the Sink
// implements it; Reloader does.
type HealthSink interface {
	// SourceError reports a failed read or watch of source; the source
	// keeps retrying.
	SourceError(source string, err error)
	// SourceOK reports a successful read or watch of source.
	SourceOK(source string)
}

var _ HealthSink = (*Reloader)(nil)

// sourceHealth is the Reloader's record of its source's failures.
type sourceHealth struct {
	mu         sync.Mutex
	since      time.Time // first failure of the current run of failures
	lastErr    error
	failures   int // in the current run; 0 while the source works
	lastLogged time.Time

	up     prometheus.Gauge
	errors prometheus.Counter
}

func newSourceHealth() *sourceHealth {
	h := &sourceHealth{
		up: collector.Gauge(SourceUpName,
			"Whether the config source (the ConfigMap watch) currently reads successfully (1) or fails (0); the last good config stays in force either way."),
		errors: collector.Counter(SourceErrorsName,
			"Failed reads or watches of the config source; each is retried with a backoff capped at one second."),
	}
	h.up.Set(1) // no failure seen yet
	return h
}

// SourceError implements HealthSink: it counts the failure, sets the up
// gauge to 0, and logs the first failure at once and later ones at most
// every SourceLogInterval.
func (r *Reloader) SourceError(source string, err error) {
	h := r.health
	now := r.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errors.Inc()
	h.up.Set(0)
	h.lastErr = err
	h.failures++
	if h.failures == 1 {
		h.since, h.lastLogged = now, now
		r.log.Error(err, "Config source failing; the config in force stays, retrying with backoff",
			"source", source, "configHash", r.Hash(), "maxBackoff", MaxWatchBackoff.String())
		return
	}
	if now.Sub(h.lastLogged) >= SourceLogInterval {
		h.lastLogged = now
		r.log.Error(err, "Config source still failing; the config in force stays",
			"source", source, "for", now.Sub(h.since).Round(time.Second).String(), "failures", h.failures, "configHash", r.Hash())
	}
}

// SourceOK implements HealthSink: after failures it logs the recovery and
// sets the up gauge back to 1.
func (r *Reloader) SourceOK(source string) {
	h := r.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures == 0 {
		return
	}
	r.log.Info("Config source reachable again", "source", source,
		"after", r.clk.Now().Sub(h.since).Round(time.Millisecond).String(), "failures", h.failures)
	h.lastErr, h.failures = nil, 0
	h.up.Set(1)
}

// SourceHealth returns nil while the config source works, else an error
// saying since when it fails and why. The config in force stays either way.
func (r *Reloader) SourceHealth() error {
	h := r.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures == 0 {
		return nil
	}
	return fmt.Errorf("config source failing for %s (%d failures): %w",
		r.clk.Now().Sub(h.since).Round(time.Second), h.failures, h.lastErr)
}
