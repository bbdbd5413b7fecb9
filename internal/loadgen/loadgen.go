// Package loadgen is an open-loop HTTP load generator for fairqueue: each
// tenant offers chat requests of its own size at a constant rate that does
// not depend on how fast the server answers, and the outcome (admitted,
// refused by reason, latency, queue wait, admitted per second, tokens settled
// per second) is summarised per tenant. It backs the
// fqload command, the demo, the end-to-end test and the benchmarks.
//
// Time comes from an injected k8s.io/utils clock, so the arrival schedule can
// be driven by a fake clock in tests. At most Config.MaxOutstanding requests
// are in flight at once; an arrival that finds no free slot is counted as
// dropped client side rather than delayed, which would close the loop.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Defaults applied by Config.Default.
const (
	// DefaultPath is the request path, the OpenAI chat completions endpoint.
	DefaultPath = "/v1/chat/completions"
	// DefaultModel is the model named in request bodies.
	DefaultModel = "fqload-model"
	// DefaultTimeout bounds one request, queueing included.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxOutstanding bounds requests in flight at once.
	DefaultMaxOutstanding = 512
	// DefaultUserHeader carries a tenant's user id when it sets one.
	DefaultUserHeader = "x-user-id"
	// DefaultTeamHeader carries a tenant's team id when it sets one.
	DefaultTeamHeader = "x-team-id"
)

// Bounds enforced by Config.Validate, so that every buffer the generator
// keeps has a known size.
const (
	// MaxTenants is the largest number of tenants in one run.
	MaxTenants = 256
	// MaxRate is the largest per-tenant rate in requests per second.
	MaxRate = 100000
	// MaxDuration is the longest run.
	MaxDuration = time.Hour
	// MaxOutstandingLimit is the largest accepted MaxOutstanding.
	MaxOutstandingLimit = 100000
	// MaxPromptBytes is the largest Tenant.PromptBytes.
	MaxPromptBytes = 1 << 20
	// MaxMaxTokens is the largest Tenant.MaxTokens.
	MaxMaxTokens = 1 << 20
	// maxBodyRead is how much of a response body is read to classify it.
	maxBodyRead = 64 << 10
	// maxBodyDrain is how much more is discarded so the connection is reused.
	maxBodyDrain = 1 << 20
)

// Tenant is one simulated client: who it claims to be and how fast it sends.
type Tenant struct {
	// Name labels the tenant in the summary; it is never sent.
	Name string
	// Rate is the offered load in requests per second.
	Rate float64
	// APIKey, if set, is sent as "Authorization: Bearer <APIKey>".
	APIKey string
	// User, if set, is sent in Config.UserHeader.
	User string
	// Team, if set, is sent in Config.TeamHeader.
	Team string
	// Headers are extra request headers.
	Headers map[string]string
	// Start delays the tenant's first request by this much after the run starts.
	Start time.Duration
	// Stop, if positive, ends the tenant's arrivals at this offset, before the
	// run's Duration.
	Stop time.Duration
	// PromptBytes is the size of the user message's content: English words
	// cut to exactly this many bytes. 0 sends the 6-byte "fqload".
	PromptBytes int
	// MaxTokens is the request's max_tokens; 0 sends 1.
	MaxTokens int
	// Stream asks for a streamed answer ("stream": true) and for its usage
	// chunk (stream_options.include_usage), from which the tokens are counted.
	Stream bool
}

// Config describes one run.
type Config struct {
	// Targets are base URLs (scheme and host, optional path prefix) that
	// requests are spread over round-robin, for example one per data-plane
	// replica.
	Targets []string
	// Path is appended to each target; default DefaultPath.
	Path string
	// Tenants are the simulated clients.
	Tenants []Tenant
	// Duration is how long arrivals are scheduled for.
	Duration time.Duration
	// Model is the "model" field of every request body; default DefaultModel.
	Model string
	// Timeout bounds each request from send to the end of its body; default
	// DefaultTimeout.
	Timeout time.Duration
	// MaxOutstanding bounds requests in flight at once; default
	// DefaultMaxOutstanding.
	MaxOutstanding int
	// UserHeader and TeamHeader name the headers that carry Tenant.User and
	// Tenant.Team; defaults DefaultUserHeader and DefaultTeamHeader.
	UserHeader string
	TeamHeader string
	// Client sends the requests; nil means a client tuned for MaxOutstanding
	// keep-alive connections per target.
	Client *http.Client
	// Clock schedules arrivals and measures latency; nil means the real clock.
	Clock clock.Clock
}

// Default fills the zero fields of c with their defaults.
func (c *Config) Default() {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxOutstanding == 0 {
		c.MaxOutstanding = DefaultMaxOutstanding
	}
	if c.UserHeader == "" {
		c.UserHeader = DefaultUserHeader
	}
	if c.TeamHeader == "" {
		c.TeamHeader = DefaultTeamHeader
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// Validate reports every problem in c, each naming the field and how to fix
// it. Call it after Default.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("no target: give at least one base URL, such as http://127.0.0.1:8080"))
	}
	for i, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("targets[%d] %q is not an absolute http(s) URL such as http://127.0.0.1:8080", i, t))
		}
	}
	if !strings.HasPrefix(c.Path, "/") {
		errs = append(errs, fmt.Errorf("path %q must start with /", c.Path))
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("duration %v must be positive and at most %v", c.Duration, MaxDuration))
	}
	if c.Timeout <= 0 || c.Timeout > MaxDuration {
		errs = append(errs, fmt.Errorf("timeout %v must be positive and at most %v", c.Timeout, MaxDuration))
	}
	if c.MaxOutstanding < 1 || c.MaxOutstanding > MaxOutstandingLimit {
		errs = append(errs, fmt.Errorf("max outstanding %d must be between 1 and %d", c.MaxOutstanding, MaxOutstandingLimit))
	}
	if len(c.Tenants) == 0 || len(c.Tenants) > MaxTenants {
		errs = append(errs, fmt.Errorf("%d tenants configured: give between 1 and %d", len(c.Tenants), MaxTenants))
	}
	names := make(map[string]bool, len(c.Tenants))
	for i, t := range c.Tenants {
		switch {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("tenants[%d] has no name: name every tenant", i))
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("tenants[%d] name %q is used twice: names must be unique", i, t.Name))
		}
		names[t.Name] = true
		if !(t.Rate > 0 && t.Rate <= MaxRate) {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s) rate %v must be above 0 and at most %d requests per second", i, t.Name, t.Rate, MaxRate))
		}
		if t.Start < 0 || t.Start >= c.Duration {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s) start %v must be at least 0 and before the duration %v", i, t.Name, t.Start, c.Duration))
		}
		if t.Stop < 0 || (t.Stop > 0 && t.Stop <= t.Start) {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s) stop %v must be 0 (run to the end) or after start %v", i, t.Name, t.Stop, t.Start))
		}
		if t.PromptBytes < 0 || t.PromptBytes > MaxPromptBytes {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s) prompt bytes %d must be between 0 (the default prompt) and %d", i, t.Name, t.PromptBytes, MaxPromptBytes))
		}
		if t.MaxTokens < 0 || t.MaxTokens > MaxMaxTokens {
			errs = append(errs, fmt.Errorf("tenants[%d] (%s) max tokens %d must be between 0 (meaning 1) and %d", i, t.Name, t.MaxTokens, MaxMaxTokens))
		}
	}
	return errors.Join(errs...)
}

// Run offers the configured load and returns the summary once every
// scheduled arrival has fired and every sent request has finished. Cancelling
// ctx stops scheduling, cancels the requests in flight and still returns the
// summary of what happened so far, with Summary.Interrupted set.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid load configuration: %w", err)
	}
	g := newGenerator(cfg)
	defer g.close()
	g.run(ctx)
	return g.summary(ctx.Err() != nil), nil
}

// generator holds the state of one run.
type generator struct {
	cfg     Config
	client  *http.Client
	clk     clock.Clock
	start   time.Time
	tenants []*tenantState
	// slots holds one token per request in flight; its capacity is the
	// MaxOutstanding bound.
	slots   chan struct{}
	wg      sync.WaitGroup
	target  atomic.Uint64
	buckets int
	// ownClient is set when client was built here and its idle connections
	// must be closed at the end of the run.
	ownClient bool
	// scheduleDone, if set, is called once no arrival is left to fire, before
	// waiting for the requests in flight. Tests use it to tell a finished
	// schedule from one waiting on its clock.
	scheduleDone func()
}

// tenantState is one tenant's schedule, prepared request parts and stats.
type tenantState struct {
	spec     Tenant
	sched    *arrivals
	header   http.Header
	body     []byte
	mu       sync.Mutex
	stats    tenantStats
	admitted []uint64
	refused  []uint64
	tokens   []uint64
}

func newGenerator(cfg Config) *generator {
	g := &generator{
		cfg:    cfg,
		client: cfg.Client,
		clk:    cfg.Clock,
		slots:  make(chan struct{}, cfg.MaxOutstanding),
		// One bucket per second of arrivals plus the longest a request can
		// still take after the last one.
		buckets: int((cfg.Duration+cfg.Timeout)/time.Second) + 2,
	}
	if g.client == nil {
		g.ownClient = true
		g.client = &http.Client{Transport: &http.Transport{
			// No HTTP_PROXY: load goes straight to the data plane.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        cfg.MaxOutstanding,
			MaxIdleConnsPerHost: cfg.MaxOutstanding,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	for _, t := range cfg.Tenants {
		until := cfg.Duration
		if t.Stop > 0 && t.Stop < until {
			until = t.Stop
		}
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		for k, v := range t.Headers {
			h.Set(k, v)
		}
		if t.APIKey != "" {
			h.Set("Authorization", "Bearer "+t.APIKey)
		}
		if t.User != "" {
			h.Set(cfg.UserHeader, t.User)
		}
		if t.Team != "" {
			h.Set(cfg.TeamHeader, t.Team)
		}
		g.tenants = append(g.tenants, &tenantState{
			spec:     t,
			sched:    newArrivals(t.Rate, t.Start, until),
			header:   h,
			body:     RequestBody(cfg.Model, t),
			admitted: make([]uint64, g.buckets),
			refused:  make([]uint64, g.buckets),
			tokens:   make([]uint64, g.buckets),
		})
	}
	return g
}

// run fires arrivals on schedule until none is left or ctx ends, then waits
// for the requests in flight.
func (g *generator) run(ctx context.Context) {
	g.start = g.clk.Now()
	defer g.wg.Wait()
	for {
		ts, at, ok := g.nextArrival()
		if !ok {
			if g.scheduleDone != nil {
				g.scheduleDone()
			}
			return
		}
		if wait := at - g.clk.Since(g.start); wait > 0 {
			timer := g.clk.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C():
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		ts.sched.next++
		g.fire(ctx, ts)
	}
}

// close releases the connections of a client the generator built.
func (g *generator) close() {
	if g.ownClient {
		g.client.CloseIdleConnections()
	}
}

// nextArrival returns the tenant whose next arrival is earliest, and its
// offset. Ties go to the tenant listed first.
func (g *generator) nextArrival() (*tenantState, time.Duration, bool) {
	var (
		best   *tenantState
		bestAt time.Duration
	)
	for _, ts := range g.tenants {
		at, ok := ts.sched.due()
		if ok && (best == nil || at < bestAt) {
			best, bestAt = ts, at
		}
	}
	return best, bestAt, best != nil
}

// fire sends one request for ts if a slot is free and counts it as dropped
// client side otherwise. It never blocks.
func (g *generator) fire(ctx context.Context, ts *tenantState) {
	select {
	case g.slots <- struct{}{}:
	default:
		ts.mu.Lock()
		ts.stats.offered++
		ts.stats.dropped++
		ts.mu.Unlock()
		return
	}
	ts.mu.Lock()
	ts.stats.offered++
	ts.stats.sent++
	ts.mu.Unlock()
	target := g.cfg.Targets[int((g.target.Add(1)-1)%uint64(len(g.cfg.Targets)))]
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() { <-g.slots }()
		ts.record(g.do(ctx, ts, target), g.bucket())
	}()
}

// bucket returns the index of the current second of the run.
func (g *generator) bucket() int {
	return min(int(g.clk.Since(g.start)/time.Second), g.buckets-1)
}

// outcome is what one request came back with.
type outcome struct {
	status     int
	err        string
	latency    time.Duration
	wait       time.Duration
	hasWait    bool
	reason     string
	limitType  string
	classified bool
	usage      Usage
	hasUsage   bool
	held       time.Duration
	hasHeld    bool
	ttft       time.Duration
	hasTTFT    bool
}

// requestBody is an OpenAI chat completion request.
type requestBody struct {
	Model         string         `json:"model"`
	Messages      []message      `json:"messages"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// promptText is cut and repeated to make prompts of a given size: English
// words, which real tokenizers encode at about 4.5 bytes per token.
const promptText = "The quick brown fox jumps over the lazy dog while every tenant waits for its fair share of the tokens. "

// RequestBody returns the chat completion request tenant t sends for model.
func RequestBody(model string, t Tenant) []byte {
	content := "fqload"
	if t.PromptBytes > 0 {
		content = strings.Repeat(promptText, t.PromptBytes/len(promptText)+1)[:t.PromptBytes]
	}
	body := requestBody{Model: model, Messages: []message{{Role: "user", Content: content}}, MaxTokens: max(t.MaxTokens, 1)}
	if t.Stream {
		body.Stream, body.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	data, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("encoding a request body of strings and numbers: %v", err)) // cannot happen
	}
	return data
}

// do sends one request and classifies its answer.
func (g *generator) do(ctx context.Context, ts *tenantState, target string) outcome {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(target, "/")+g.cfg.Path, bytes.NewReader(ts.body))
	if err != nil {
		return outcome{err: "request"}
	}
	req.Header = ts.header.Clone()
	began := g.clk.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		return outcome{err: errorKind(ctx, err), latency: g.clk.Since(began)}
	}
	defer func() { _ = resp.Body.Close() }()
	body := io.Reader(resp.Body)
	var (
		tap   *UsageTap
		first *firstToken
	)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		tap = NewUsageTap(resp.Header.Get("Content-Type"))
		body = io.TeeReader(resp.Body, tap)
		if tap.stream {
			first = &firstToken{clk: g.clk}
			body = io.TeeReader(body, first)
		}
	}
	data, readErr := io.ReadAll(io.LimitReader(body, maxBodyRead))
	if readErr == nil {
		_, readErr = io.CopyN(io.Discard, body, maxBodyDrain)
		if errors.Is(readErr, io.EOF) {
			readErr = nil
		}
	}
	o := outcome{status: resp.StatusCode, latency: g.clk.Since(began)}
	if readErr != nil {
		o.err = errorKind(ctx, readErr)
	}
	if tap != nil {
		o.usage, o.hasUsage = tap.Usage()
	}
	if first != nil && !first.at.IsZero() {
		o.ttft, o.hasTTFT = first.at.Sub(began), true
	}
	o.wait, o.hasWait = WaitHeader(resp.Header)
	o.held, o.hasHeld = HeldHeader(resp.Header)
	if IsRefusal(resp.StatusCode) {
		o.reason, o.limitType, o.classified = Classify(data)
	}
	return o
}

// WaitHeader reads the time a data plane says a request spent queued, from
// its x-fair-queue-wait-ms header.
func WaitHeader(h http.Header) (time.Duration, bool) {
	return msHeader(h, "x-fair-queue-wait-ms")
}

// HeldHeader reads the time a data plane says a request was held by deferred
// admission until its token budget allowed it, from its
// x-fair-queue-deferred-ms header.
func HeldHeader(h http.Header) (time.Duration, bool) {
	return msHeader(h, "x-fair-queue-deferred-ms")
}

// msHeader reads a header holding a non-negative number of milliseconds.
func msHeader(h http.Header, name string) (time.Duration, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// errorKind names a transport failure: "timeout" when the request's own
// deadline passed, "canceled" when the run was interrupted, else "transport".
func errorKind(ctx context.Context, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "timeout"
	case errors.Is(ctx.Err(), context.Canceled):
		return "canceled"
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "transport"
	}
}

// IsRefusal reports whether status is one the data plane refuses with.
func IsRefusal(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// errorBody is the part of the OpenAI-style error body that names why a
// request was refused.
type errorBody struct {
	Error struct {
		Details struct {
			LimitType string `json:"limit_type"`
			FairQueue *struct {
				Reason string `json:"reason"`
			} `json:"fair_queue"`
		} `json:"details"`
	} `json:"error"`
}

// Refusal reasons reported for refusals without a fair_queue reason.
const (
	// ReasonImmediate is a refusal that did not involve the queue.
	ReasonImmediate = "immediate"
	// ReasonUnparsed is a refusal whose body was not the expected JSON.
	ReasonUnparsed = "unparsed"
)

// Classify returns the refusal reason (error.details.fair_queue.reason, or
// ReasonImmediate when the queue was not involved) and limit type of a data
// plane's error body; ok is false, with ReasonUnparsed, when the body is not
// the expected JSON.
func Classify(data []byte) (reason, limitType string, ok bool) {
	var b errorBody
	if err := json.Unmarshal(data, &b); err != nil {
		return ReasonUnparsed, "", false
	}
	reason = ReasonImmediate
	if fq := b.Error.Details.FairQueue; fq != nil && fq.Reason != "" {
		reason = fq.Reason
	}
	return reason, b.Error.Details.LimitType, true
}

// record adds o to the tenant's stats; second is the run second it finished in.
func (ts *tenantState) record(o outcome, second int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	s := &ts.stats
	if o.err != "" && o.status == 0 {
		s.errors = addCount(s.errors, o.err)
		return
	}
	s.completed++
	if s.status == nil {
		s.status = map[int]uint64{}
	}
	// Bounded: net/http only accepts three-digit status codes.
	s.status[o.status]++
	s.latency.record(o.latency)
	if o.hasWait {
		s.wait.record(o.wait)
	}
	switch {
	case o.err != "":
		// The status arrived but the body broke off: neither admitted nor refused.
		s.errors = addCount(s.errors, o.err)
	case o.status >= 200 && o.status < 300:
		s.admitted++
		ts.admitted[second]++
		if o.hasHeld {
			s.admittedHeld.record(o.held)
		}
		if o.hasUsage {
			s.tokens += uint64(max(o.usage.Total, 0))
			s.promptTokens += uint64(max(o.usage.Prompt, 0))
			s.completionTokens += uint64(max(o.usage.Completion, 0))
			ts.tokens[second] += uint64(max(o.usage.Total, 0))
		} else {
			s.withoutUsage++
		}
		s.admittedLatency.record(o.latency)
		if o.hasTTFT {
			s.ttft.record(o.ttft)
			var queued time.Duration // no header: it did not queue
			if o.hasWait {
				queued = min(o.wait, o.ttft)
			}
			s.ttftQueued.record(queued)
			s.ttftAfterQueue.record(o.ttft - queued)
		}
		if o.hasWait {
			s.admittedWait.record(o.wait)
		}
	case IsRefusal(o.status):
		s.refused++
		ts.refused[second]++
		s.reasons = addCount(s.reasons, o.reason)
		if o.limitType != "" {
			s.limitTypes = addCount(s.limitTypes, o.limitType)
		}
	}
}

// maxKeys bounds the distinct keys of each count map, since reasons and
// limit types come from the server; further keys are counted under OtherKey.
const maxKeys = 32

// OtherKey collects counts beyond the first maxKeys distinct keys of a map.
const OtherKey = "other"

// addCount increments m[key], allocating m on first use.
func addCount(m map[string]uint64, key string) map[string]uint64 {
	if m == nil {
		m = map[string]uint64{}
	}
	if _, ok := m[key]; !ok && len(m) >= maxKeys-1 {
		key = OtherKey
	}
	m[key]++
	return m
}
