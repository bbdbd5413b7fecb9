package demo

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/internal/loadgen"
)

// Tick is the resolution of the live per-tenant series.
const Tick = 100 * time.Millisecond

// Bounds of the observer's buffers.
const (
	// maxTicks bounds the series length: an hour of ticks.
	maxTicks = int(time.Hour / Tick)
	// maxWaitSamples bounds the wait samples kept per tenant per tick.
	maxWaitSamples = 1024
	// maxErrorBody is how much of a refusal body is read to find its reason.
	maxErrorBody = 64 << 10
)

// Refusal reasons counted by the observer besides the fair queue's own.
const (
	// ReasonImmediate is a refusal that did not involve the queue.
	ReasonImmediate = loadgen.ReasonImmediate
	// ReasonOther is a refusal whose reason is unknown or unreadable.
	ReasonOther = "other"
	// ReasonTransport is a request that got no HTTP answer.
	ReasonTransport = "transport_error"
)

// reasons are the refusal reasons tracked, in display order; anything else
// counts as ReasonOther, so the counts stay bounded.
// A refusal without a fair-queue reason by a token limit counts under its
// limit type (api_key_tokens, user_tokens, team_tokens, model_tokens).
var reasons = []string{
	"tenant_queue_full", "queue_full", "tenant_table_full", "wait_exceeds_budget",
	"deadline_exceeded", "shutdown", "api_key_tokens", "user_tokens", "team_tokens", "model_tokens",
	ReasonImmediate, ReasonTransport, ReasonOther,
}

// Counts is what one tenant got during one or more ticks.
type Counts struct {
	// Admitted counts 2xx answers.
	Admitted uint64
	// Refused counts refusals (429 or 503) by reason, indexed like Reasons().
	Refused []uint64
	// Waits holds the x-fair-queue-wait-ms of admitted answers that waited,
	// in milliseconds (sampled: at most maxWaitSamples per tick).
	Waits []float64
	// Held holds the x-fair-queue-deferred-ms of admitted answers that
	// deferred admission held, in milliseconds (sampled likewise).
	Held []float64
	// Tokens sums the usage.total_tokens of the admitted answers whose body
	// ended in the tick.
	Tokens uint64
	// Latencies holds the time from sending each admitted request to its
	// answer's headers, in milliseconds (sampled likewise).
	Latencies []float64
}

// Reasons returns the refusal reasons in the order of Counts.Refused.
func Reasons() []string { return slices.Clone(reasons) }

func (c *Counts) add(o *Counts) {
	c.Admitted += o.Admitted
	if c.Refused == nil {
		c.Refused = make([]uint64, len(reasons))
	}
	for i, n := range o.Refused {
		c.Refused[i] += n
	}
	c.Waits = append(c.Waits, o.Waits...)
	c.Held = append(c.Held, o.Held...)
	c.Latencies = append(c.Latencies, o.Latencies...)
	c.Tokens += o.Tokens
}

// Observer is an http.RoundTripper that watches the load generator's
// answers as they arrive and counts them per tenant per Tick, so the demo
// can print a live table while the run is still going.
type Observer struct {
	next     http.RoundTripper
	clk      clock.PassiveClock
	tenantOf map[string]int // Authorization header value -> tenant index

	mu    sync.Mutex
	start time.Time
	ticks [][]Counts // [tenant][tick]
}

// NewObserver watches answers to requests carrying "Authorization: Bearer
// <apiKeys[i]>" as tenant i, passing every request on to next.
func NewObserver(next http.RoundTripper, clk clock.PassiveClock, apiKeys []string) *Observer {
	o := &Observer{next: next, clk: clk, tenantOf: make(map[string]int, len(apiKeys)), ticks: make([][]Counts, len(apiKeys))}
	for i, k := range apiKeys {
		o.tenantOf["Bearer "+k] = i
	}
	o.start = clk.Now()
	return o
}

// Restart makes now tick 0 and forgets everything counted so far.
func (o *Observer) Restart() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.start = o.clk.Now()
	for i := range o.ticks {
		o.ticks[i] = nil
	}
}

// Elapsed returns the time since tick 0.
func (o *Observer) Elapsed() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.clk.Since(o.start)
}

// RoundTrip implements http.RoundTripper.
func (o *Observer) RoundTrip(req *http.Request) (*http.Response, error) {
	tenant, known := o.tenantOf[req.Header.Get("Authorization")]
	sent := o.clk.Now()
	resp, err := o.next.RoundTrip(req)
	latency := float64(o.clk.Since(sent)) / float64(time.Millisecond)
	if !known {
		return resp, err
	}
	if err != nil {
		o.record(tenant, func(c *Counts) { c.Refused[reasonIndex(ReasonTransport)]++ })
		return resp, err
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		wait, waited := loadgen.WaitHeader(resp.Header)
		held, wasHeld := loadgen.HeldHeader(resp.Header)
		o.record(tenant, func(c *Counts) {
			c.Admitted++
			if waited && len(c.Waits) < maxWaitSamples {
				c.Waits = append(c.Waits, float64(wait)/float64(time.Millisecond))
			}
			if wasHeld && len(c.Held) < maxWaitSamples {
				c.Held = append(c.Held, float64(held)/float64(time.Millisecond))
			}
			if len(c.Latencies) < maxWaitSamples {
				c.Latencies = append(c.Latencies, latency)
			}
		})
		resp.Body = &usageBody{rc: resp.Body, tap: loadgen.NewUsageTap(resp.Header.Get("Content-Type")), done: func(u loadgen.Usage) {
			o.record(tenant, func(c *Counts) { c.Tokens += uint64(max(u.Total, 0)) })
		}}
	case loadgen.IsRefusal(resp.StatusCode):
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
		reason, limitType, ok := loadgen.Classify(data)
		switch {
		case !ok:
			reason = ReasonOther
		case reason == ReasonImmediate && strings.HasSuffix(limitType, "_tokens"):
			reason = limitType
		}
		o.record(tenant, func(c *Counts) { c.Refused[reasonIndex(reason)]++ })
	}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// usageBody passes an admitted answer's body through a usage tap and, when
// the body ends or is closed, calls done once with the usage found, if any.
type usageBody struct {
	rc   io.ReadCloser
	tap  *loadgen.UsageTap
	done func(loadgen.Usage)
	once sync.Once
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	_, _ = b.tap.Write(p[:n]) // never fails
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *usageBody) Close() error {
	b.finish()
	return b.rc.Close()
}

func (b *usageBody) finish() {
	b.once.Do(func() {
		if u, ok := b.tap.Usage(); ok {
			b.done(u)
		}
	})
}

// record applies f to the counts of tenant's current tick.
func (o *Observer) record(tenant int, f func(*Counts)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tick := int(o.clk.Since(o.start) / Tick)
	if tick < 0 || tick >= maxTicks {
		return
	}
	s := o.ticks[tenant]
	for len(s) <= tick {
		s = append(s, Counts{Refused: make([]uint64, len(reasons))})
	}
	o.ticks[tenant] = s
	f(&s[tick])
}

// Window sums each tenant's counts over the ticks in [from, to).
func (o *Observer) Window(from, to time.Duration) []Counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Counts, len(o.ticks))
	lo, hi := int(from/Tick), int(to/Tick)
	for i, s := range o.ticks {
		out[i].Refused = make([]uint64, len(reasons))
		for t := max(lo, 0); t < hi && t < len(s); t++ {
			out[i].add(&s[t])
		}
	}
	return out
}

// reasonIndex returns the index of reason in reasons, or that of ReasonOther.
func reasonIndex(reason string) int {
	if i := slices.Index(reasons, reason); i >= 0 {
		return i
	}
	return len(reasons) - 1
}

// quantile returns the q-quantile of v (sorted in place), or NaN when empty.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return nan
	}
	slices.Sort(v)
	i := int(q * float64(len(v)-1))
	return v[i]
}

// Admitted returns a copy of each tenant's admitted count per tick.
func (o *Observer) Admitted() [][]uint64 {
	return o.series(func(c *Counts) uint64 { return c.Admitted })
}

// Tokens returns a copy of each tenant's settled tokens per tick.
func (o *Observer) Tokens() [][]uint64 {
	return o.series(func(c *Counts) uint64 { return c.Tokens })
}

// series returns f of each tenant's counts per tick.
func (o *Observer) series(f func(*Counts) uint64) [][]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([][]uint64, len(o.ticks))
	for i, s := range o.ticks {
		out[i] = make([]uint64, len(s))
		for k := range s {
			out[i][k] = f(&s[k])
		}
	}
	return out
}
