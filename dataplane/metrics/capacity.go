package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairqueue/fairqueue/dataplane/capacity"
)

// Capacity mode's metric names (SPEC 6b). The backend label is a configured
// backend name, bounded by the config.
const (
	BackendInFlightName    = "fairqueue_backend_in_flight"
	BackendMaxInFlightName = "fairqueue_backend_max_in_flight"
	BackendSaturatedName   = "fairqueue_backend_saturated"
	BackendOverdraftName   = "fairqueue_backend_overdraft"
	BackendStaleName       = "fairqueue_backend_saturation_stale"
	BackendSignalName      = "fairqueue_backend_saturation_signal"
	BackendSignalMaxName   = "fairqueue_backend_saturation_signal_max"
	BackendPollErrorsName  = "fairqueue_backend_saturation_poll_errors_total"
)

// Capacity exports the capacity tracker's state: the per-backend gauges are
// read from Tracker.Stats when scraped, so the request path updates
// nothing; poll errors are counted as the pollers report them.
type Capacity struct {
	stats     func() []capacity.BackendStats
	inFlight  *prometheus.Desc
	max       *prometheus.Desc
	saturated *prometheus.Desc
	overdraft *prometheus.Desc
	stale     *prometheus.Desc
	signal    *prometheus.Desc
	signalMax *prometheus.Desc
	pollErrs  *prometheus.CounterVec
}

var _ capacity.Observer = (*Capacity)(nil)

// NewCapacity registers capacity mode's metrics on reg; stats is called at
// each scrape and may return nil while capacity mode is off.
func NewCapacity(reg prometheus.Registerer, stats func() []capacity.BackendStats) (*Capacity, error) {
	c := &Capacity{
		stats: stats,
		inFlight: prometheus.NewDesc(BackendInFlightName,
			"Requests at the backend now, counted by this replica from dispatch to the response's end (capacity mode).", []string{"backend"}, nil),
		max: prometheus.NewDesc(BackendMaxInFlightName,
			"The backend's configured maxInFlight (capacity mode).", []string{"backend"}, nil),
		saturated: prometheus.NewDesc(BackendSaturatedName,
			"1 while the backend takes no more requests: at maxInFlight, or a fresh saturation signal over its max.", []string{"backend"}, nil),
		overdraft: prometheus.NewDesc(BackendOverdraftName,
			"Slots taken above the saturation window for tenants under their share or of a higher band, not yet repaid by a release (capacity mode).", []string{"backend"}, nil),
		stale: prometheus.NewDesc(BackendStaleName,
			"1 while the backend's saturation signals are stale (maxInFlight alone decides).", []string{"backend"}, nil),
		signal: prometheus.NewDesc(BackendSignalName,
			"The latest reading of a saturation signal (the largest over its series).", []string{"backend", "signal"}, nil),
		signalMax: prometheus.NewDesc(BackendSignalMaxName,
			"The configured max of a saturation signal: a fresh reading above it saturates the backend.", []string{"backend", "signal"}, nil),
		pollErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: BackendPollErrorsName,
			Help: "Failed polls of a backend's metrics endpoint, by kind (timeout, connection, status, too_large, parse, missing)."},
			[]string{"backend", "kind"}),
	}
	if err := registerAll(reg, "capacity metrics", "NewCapacity", c, c.pollErrs); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *Capacity) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.max
	ch <- c.saturated
	ch <- c.overdraft
	ch <- c.stale
	ch <- c.signal
	ch <- c.signalMax
}

// Collect implements prometheus.Collector.
func (c *Capacity) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.stats() {
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(b.InFlight), b.Backend)
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(b.MaxInFlight), b.Backend)
		ch <- prometheus.MustNewConstMetric(c.saturated, prometheus.GaugeValue, b2f(b.Saturated), b.Backend)
		ch <- prometheus.MustNewConstMetric(c.overdraft, prometheus.GaugeValue, float64(b.Overdraft), b.Backend)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, b2f(b.Stale), b.Backend)
		for _, s := range b.Signals {
			ch <- prometheus.MustNewConstMetric(c.signal, prometheus.GaugeValue, s.Value, b.Backend, s.Metric)
			ch <- prometheus.MustNewConstMetric(c.signalMax, prometheus.GaugeValue, s.Max, b.Backend, s.Metric)
		}
	}
}

// SignalValue implements capacity.Observer; the value is read at scrape.
func (c *Capacity) SignalValue(string, string, float64) {}

// Stale implements capacity.Observer; staleness is read at scrape.
func (c *Capacity) Stale(string, bool) {}

// PollError implements capacity.Observer.
func (c *Capacity) PollError(backend, kind string) { c.pollErrs.WithLabelValues(backend, kind).Inc() }
