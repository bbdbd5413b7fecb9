package modelsim

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names are vLLM's, so that anything reading a vLLM server's
// /metrics (fairqueue's saturation signals, dashboards) reads the simulator
// the same way. Every series carries vLLM's model_name label.
const (
	MetricRunning          = "vllm:num_requests_running"
	MetricWaiting          = "vllm:num_requests_waiting"
	MetricKVCacheUsage     = "vllm:kv_cache_usage_perc"
	MetricGPUCacheUsage    = "vllm:gpu_cache_usage_perc" // vLLM's name before V1
	MetricPromptTokens     = "vllm:prompt_tokens_total"
	MetricGenerationTokens = "vllm:generation_tokens_total"
	MetricPreemptions      = "vllm:num_preemptions_total"
	MetricRequestSuccess   = "vllm:request_success_total"
	MetricTTFT             = "vllm:time_to_first_token_seconds"
	MetricQueueTime        = "vllm:request_queue_time_seconds"
	MetricE2E              = "vllm:e2e_request_latency_seconds"
)

// ttftBuckets are vLLM's buckets for time to first token.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}

// latencyBuckets are vLLM's buckets for request latencies.
var latencyBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}

// stateMetric is one gauge or counter read from a Stats snapshot.
type stateMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(Stats) float64
}

// stateCollector exports the engine's state and counters from one Stats
// snapshot per scrape, so that a scrape's values are of one moment.
type stateCollector struct {
	s       *Server
	metrics []stateMetric
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st))
	}
}

func (s *Server) registerMetrics() {
	labels := prometheus.Labels{"model_name": s.cfg.ModelName}
	metric := func(name, help string, typ prometheus.ValueType, f func(Stats) float64) stateMetric {
		return stateMetric{desc: prometheus.NewDesc(name, help, nil, labels), typ: typ, value: f}
	}
	kvUsage := func(st Stats) float64 { return st.KVCacheUsage }
	s.reg.MustRegister(&stateCollector{s: s, metrics: []stateMetric{
		metric(MetricRunning, "Requests in the running batch.", prometheus.GaugeValue, func(st Stats) float64 { return float64(st.Running) }),
		metric(MetricWaiting, "Requests waiting in the server's queue.", prometheus.GaugeValue, func(st Stats) float64 { return float64(st.Waiting) }),
		metric(MetricKVCacheUsage, "KV-cache usage: 1 means full.", prometheus.GaugeValue, kvUsage),
		metric(MetricGPUCacheUsage, "KV-cache usage: 1 means full (the name before vLLM V1).", prometheus.GaugeValue, kvUsage),
		metric(MetricPromptTokens, "Prompt tokens prefilled.", prometheus.CounterValue, func(st Stats) float64 { return float64(st.PromptTokens) }),
		metric(MetricGenerationTokens, "Output tokens generated.", prometheus.CounterValue, func(st Stats) float64 { return float64(st.GenerationTokens) }),
		metric(MetricPreemptions, "Running requests preempted for KV space.", prometheus.CounterValue, func(st Stats) float64 { return float64(st.Preemptions) }),
	}})
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		s.reg.MustRegister(h)
		return h
	}
	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequestSuccess,
		Help: "Requests answered in full, by finish reason.", ConstLabels: labels}, []string{"finished_reason"})
	for _, reason := range []string{"length", "stop"} {
		success.WithLabelValues(reason) // present from the start, at 0
	}
	s.reg.MustRegister(success)
	ttft := histogram(MetricTTFT, "Time to first token, arrival to the first token's step end.", ttftBuckets)
	queued := histogram(MetricQueueTime, "Time a request waited in the queue before its first admission.", latencyBuckets)
	e2e := histogram(MetricE2E, "Arrival to the last token.", latencyBuckets)
	// The hooks run under s.mu, from the scheduler's goroutine.
	s.eng.onFirstToken = func(d time.Duration) { ttft.Observe(d.Seconds()) }
	s.eng.onAdmit = func(d time.Duration) { queued.Observe(d.Seconds()) }
	s.eng.onFinish = func(d time.Duration, reason string) {
		e2e.Observe(d.Seconds())
		success.WithLabelValues(reason).Inc()
	}
}
