package loadgen

import (
	"net/url"
	"strconv"
	"time"
)

// Summary is the JSON report of one run.
type Summary struct {
	// Start is when the first arrival was due.
	Start time.Time `json:"start"`
	// DurationSeconds is the configured arrival window.
	DurationSeconds float64 `json:"duration_seconds"`
	// ElapsedSeconds is how long the run took, draining included.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Interrupted is set when the run was cancelled before its end.
	Interrupted bool `json:"interrupted,omitempty"`
	// Targets are the base URLs requests were spread over, passwords masked.
	Targets []string `json:"targets"`
	// MaxOutstanding is the bound on requests in flight.
	MaxOutstanding int `json:"max_outstanding"`
	// Tenants holds one entry per tenant, in configuration order.
	Tenants []TenantSummary `json:"tenants"`
}

// TenantSummary is what one tenant offered and what became of it. Offered
// equals Sent plus DroppedClientSide; every sent request ends up in Completed
// (an HTTP status arrived) or in Errors (keyed "timeout", "canceled" or
// "transport"), except that a response whose body broke off counts in both.
type TenantSummary struct {
	// Name is the tenant's configured name.
	Name string `json:"name"`
	// Rate is the configured offered rate in requests per second.
	Rate float64 `json:"rate"`
	// Offered counts scheduled arrivals.
	Offered uint64 `json:"offered"`
	// Sent counts requests put on the wire.
	Sent uint64 `json:"sent"`
	// DroppedClientSide counts arrivals that found MaxOutstanding requests
	// already in flight and were not sent.
	DroppedClientSide uint64 `json:"dropped_client_side"`
	// Completed counts requests answered with an HTTP status.
	Completed uint64 `json:"completed"`
	// Status counts answers by HTTP status code.
	Status map[string]uint64 `json:"status"`
	// Admitted counts 2xx answers.
	Admitted uint64 `json:"admitted"`
	// Refused counts 429 and 503 answers.
	Refused uint64 `json:"refused"`
	// RefusedByReason counts refusals by error.details.fair_queue.reason;
	// refusals without one count as "immediate", unreadable bodies as
	// "unparsed".
	RefusedByReason map[string]uint64 `json:"refused_by_reason"`
	// RefusedByLimitType counts refusals by error.details.limit_type.
	RefusedByLimitType map[string]uint64 `json:"refused_by_limit_type"`
	// Errors counts requests that failed without a complete answer.
	Errors map[string]uint64 `json:"errors"`
	// LatencyMS summarises the time from send to the end of the body.
	LatencyMS Percentiles `json:"latency_ms"`
	// AdmittedLatencyMS is LatencyMS of the admitted (2xx) answers only.
	AdmittedLatencyMS Percentiles `json:"admitted_latency_ms"`
	// WaitMS summarises the x-fair-queue-wait-ms header of the answers that
	// carried one (admitted after queueing, or refused by the queue).
	WaitMS Percentiles `json:"wait_ms"`
	// AdmittedWaitMS is WaitMS of the admitted answers only: how long the
	// requests that got through spent queued.
	AdmittedWaitMS Percentiles `json:"admitted_wait_ms"`
	// AdmittedHeldMS summarises the x-fair-queue-deferred-ms header of the
	// admitted answers that carried one: how long deferred admission held
	// them until their token budget allowed them.
	AdmittedHeldMS Percentiles `json:"admitted_held_ms"`
	// TTFTMS summarises the time to first token of the admitted streamed
	// answers: from send to the first event that carries generated text.
	TTFTMS Percentiles `json:"ttft_ms"`
	// TTFTQueuedMS splits TTFTMS: the part the same answers spent in the
	// data plane's fair queue, from their x-fair-queue-wait-ms header (0
	// for an answer without one, which did not queue). TTFTAfterQueueMS is
	// the rest, TTFT less that wait: the proxy and the upstream server.
	TTFTQueuedMS     Percentiles `json:"ttft_queued_ms"`
	TTFTAfterQueueMS Percentiles `json:"ttft_after_queue_ms"`
	// AdmittedPerSecond counts admitted answers by the second of the run
	// they arrived in.
	AdmittedPerSecond []uint64 `json:"admitted_per_second"`
	// RefusedPerSecond counts refusals by the second of the run they
	// arrived in.
	RefusedPerSecond []uint64 `json:"refused_per_second"`
	// TokensSettled sums the usage.total_tokens the admitted answers
	// reported (a stream's in its final usage chunk): the tokens the tenant
	// was charged in the end.
	TokensSettled uint64 `json:"tokens_settled"`
	// PromptTokens and CompletionTokens split TokensSettled.
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	// AdmittedWithoutUsage counts admitted answers that reported no usage,
	// whose tokens are missing from TokensSettled.
	AdmittedWithoutUsage uint64 `json:"admitted_without_usage"`
	// TokensPerSecond counts settled tokens by the second of the run the
	// answer ended in.
	TokensPerSecond []uint64 `json:"tokens_per_second"`
	// MeanTokensPerSecond is TokensSettled over the tenant's arrival window
	// (from its start to its stop or the run's duration).
	MeanTokensPerSecond float64 `json:"mean_tokens_per_second"`
}

// Percentiles summarises a distribution in milliseconds, to about 1%.
type Percentiles struct {
	// Count is the number of observations.
	Count uint64 `json:"count"`
	// P50 is the median.
	P50 float64 `json:"p50"`
	// P99 is the 99th percentile.
	P99 float64 `json:"p99"`
	// Max is the largest observation.
	Max float64 `json:"max"`
}

// tenantStats accumulates one tenant's outcomes; guarded by tenantState.mu.
type tenantStats struct {
	offered, sent, dropped, completed uint64
	admitted, refused                 uint64
	status                            map[int]uint64
	reasons, limitTypes, errors       map[string]uint64
	latency, wait                     histogram
	admittedLatency, admittedWait     histogram
	admittedHeld, ttft                histogram
	ttftQueued, ttftAfterQueue        histogram
	tokens, promptTokens              uint64
	completionTokens, withoutUsage    uint64
}

// summary snapshots the run. Call it after run returned.
func (g *generator) summary(interrupted bool) *Summary {
	s := &Summary{
		Start:           g.start,
		DurationSeconds: g.cfg.Duration.Seconds(),
		ElapsedSeconds:  g.clk.Since(g.start).Seconds(),
		Interrupted:     interrupted,
		Targets:         redactTargets(g.cfg.Targets),
		MaxOutstanding:  g.cfg.MaxOutstanding,
	}
	last := g.bucket()
	for _, ts := range g.tenants {
		ts.mu.Lock()
		st := &ts.stats
		s.Tenants = append(s.Tenants, TenantSummary{
			Name:               ts.spec.Name,
			Rate:               ts.spec.Rate,
			Offered:            st.offered,
			Sent:               st.sent,
			DroppedClientSide:  st.dropped,
			Completed:          st.completed,
			Status:             statusKeys(st.status),
			Admitted:           st.admitted,
			Refused:            st.refused,
			RefusedByReason:    nonNil(st.reasons),
			RefusedByLimitType: nonNil(st.limitTypes),
			Errors:             nonNil(st.errors),
			LatencyMS:          st.latency.summary(),
			AdmittedLatencyMS:  st.admittedLatency.summary(),
			WaitMS:             st.wait.summary(),
			AdmittedWaitMS:     st.admittedWait.summary(),
			AdmittedHeldMS:     st.admittedHeld.summary(),
			TTFTMS:             st.ttft.summary(),
			TTFTQueuedMS:       st.ttftQueued.summary(),
			TTFTAfterQueueMS:   st.ttftAfterQueue.summary(),
			AdmittedPerSecond:  append([]uint64(nil), ts.admitted[:last+1]...),
			RefusedPerSecond:   append([]uint64(nil), ts.refused[:last+1]...),

			TokensSettled:        st.tokens,
			PromptTokens:         st.promptTokens,
			CompletionTokens:     st.completionTokens,
			AdmittedWithoutUsage: st.withoutUsage,
			TokensPerSecond:      append([]uint64(nil), ts.tokens[:last+1]...),
			MeanTokensPerSecond:  perSecond(st.tokens, ts.sched.until-ts.sched.from),
		})
		ts.mu.Unlock()
	}
	return s
}

// perSecond returns n over window, or 0 for an empty window.
func perSecond(n uint64, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) / window.Seconds()
}

// redactTargets returns the targets with any password in them masked.
func redactTargets(targets []string) []string {
	out := make([]string, len(targets))
	for i, t := range targets {
		out[i] = t
		if u, err := url.Parse(t); err == nil {
			out[i] = u.Redacted()
		}
	}
	return out
}

// statusKeys returns the status counts keyed by the code as text, for JSON.
func statusKeys(m map[int]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for code, n := range m {
		out[strconv.Itoa(code)] = n
	}
	return out
}

// nonNil returns m, or an empty map so the JSON shows {} rather than null.
func nonNil(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}
