package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/loadgen"
	"github.com/fairqueue/fairqueue/internal/modelsim"
)

// Token lengths of a tenant's requests when the load file names none, in
// capacity mode: a short chat turn.
const (
	defaultPromptTokens = 256
	defaultOutputTokens = 128
)

// LoadModelServer shapes the simulated model servers of capacity mode;
// zero fields take internal/modelsim's defaults (vLLM serving an 8B model
// on one A100 80GB: 256 sequences, a 150,000-token KV cache).
type LoadModelServer struct {
	MaxNumSeqs    int `json:"maxNumSeqs,omitempty"`
	KVCacheTokens int `json:"kvCacheTokens,omitempty"`
}

// tokens returns the prompt and output tokens of tenant i's requests.
func (l *Load) tokens(i int) (prompt, output int) {
	t := l.Tenants[i]
	return cmpOr(t.PromptTokens, defaultPromptTokens), cmpOr(t.OutputTokens, defaultOutputTokens)
}

func cmpOr(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// validateTokens checks the token lengths of a load file.
func (l *Load) validateTokens() error {
	for _, t := range l.Tenants {
		if t.PromptTokens < 0 || t.OutputTokens < 0 || t.PromptTokens*4 > loadgen.MaxPromptBytes {
			return fmt.Errorf("tenant %s: promptTokens %d and outputTokens %d must be from 0 (the default, %d and %d) to %d",
				t.Name, t.PromptTokens, t.OutputTokens, defaultPromptTokens, defaultOutputTokens, loadgen.MaxPromptBytes/4)
		}
	}
	if m := l.ModelServer; m != nil && (m.MaxNumSeqs < 0 || m.KVCacheTokens < 0) {
		return fmt.Errorf("modelServer: maxNumSeqs %d and kvCacheTokens %d must not be negative", m.MaxNumSeqs, m.KVCacheTokens)
	}
	return nil
}

// parseTenantTokens applies the --tenant-tokens NAME=PROMPT:OUTPUT flags to
// load's tenants.
func parseTenantTokens(load *Load, flags []string) error {
	for _, f := range flags {
		name, lengths, ok := strings.Cut(f, "=")
		p, o, ok2 := strings.Cut(lengths, ":")
		prompt, err1 := strconv.Atoi(p)
		output, err2 := strconv.Atoi(o)
		if !ok || !ok2 || err1 != nil || err2 != nil || prompt < 1 || output < 1 {
			return fmt.Errorf("--tenant-tokens %q: give NAME=PROMPT:OUTPUT, a tenant of the load file and its requests' prompt and output tokens, such as --tenant-tokens acme=2000:256", f)
		}
		i := slices.IndexFunc(load.Tenants, func(t LoadTenant) bool { return t.Name == name })
		if i < 0 {
			names := make([]string, len(load.Tenants))
			for j, t := range load.Tenants {
				names[j] = t.Name
			}
			return fmt.Errorf("--tenant-tokens: the load file has no tenant %q; its tenants are %s", name, strings.Join(names, ", "))
		}
		load.Tenants[i].PromptTokens, load.Tenants[i].OutputTokens = prompt, output
	}
	return load.validateTokens()
}

// requestFor returns the body and extra headers of tenant i's requests: a
// streamed chat completion whose prompt is about its promptTokens (four
// bytes a token, which the data plane's estimate reads) and whose
// max_tokens is its outputTokens; the simulator takes the prompt's length
// exactly from its header.
func (l *Load) requestFor(i int, model string) ([]byte, map[string]string) {
	prompt, output := l.tokens(i)
	body := loadgen.RequestBody(model, loadgen.Tenant{PromptBytes: prompt * 4, MaxTokens: output, Stream: true})
	return body, map[string]string{modelsim.PromptTokensHeader: strconv.Itoa(prompt)}
}

// simBackend is what a simulation's requests are sent to: the fixed-time
// backend, or the model-server simulators of capacity mode.
type simBackend interface {
	http.RoundTripper
	// inFlight counts requests dispatched whose response has not ended.
	inFlight() int64
	// parked reports whether everything at the backend waits for the clock.
	parked() bool
	// progress changes whenever the backend does something, so a settle
	// sees it move.
	progress() int64
	// next is the time to the backend's next timer, if it has one.
	next() (time.Duration, bool)
}

func (u *simUpstream) inFlight() int64             { return u.n.Load() }
func (u *simUpstream) parked() bool                { return true }
func (u *simUpstream) progress() int64             { return 0 }
func (u *simUpstream) next() (time.Duration, bool) { return 0, false }

// simClock is the fake clock as one simulated model server sees it: it
// remembers when the server's step timer is due, so the simulation steps the
// clock exactly there and knows whether the server's loop waits on it.
type simClock struct {
	*testingclock.FakeClock
	mu  sync.Mutex
	due time.Time
}

// NewTimer implements clock.Clock.
func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	due := c.Now().Add(d)
	t := c.FakeClock.NewTimer(d)
	c.mu.Lock()
	c.due = due
	c.mu.Unlock()
	return t
}

// until returns the time to the step timer, when it is still ahead.
func (c *simClock) until() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.due.Sub(c.Now())
	return d, d > 0
}

// modelServer is one backend of the policy, simulated.
type modelServer struct {
	name    string
	sim     *modelsim.Server
	clk     *simClock
	metrics *httptest.Server // its /metrics on loopback, for the data plane's pollers
	// interval is the policy's poll interval; 0 without saturation signals.
	interval    time.Duration
	maxInFlight int32
	// polled counts answered polls; polling, polls in progress.
	polled, polling atomic.Int64
	// late counts the settle polls a due poll has not been answered in;
	// skipped, the due polls given up on (pollLate).
	late, skipped int64

	// The steady-state window's figures (modelServers.observe).
	waitingSeconds, runningSeconds, kvSeconds, seconds float64
	waitingMax                                         int
	from, to                                           modelsim.Stats
	fromSet, toSet                                     bool
}

// maxPollLateness bounds the settle polls that wait for a due poll of the
// data plane's poller (about a millisecond of real time): a poll travels
// over loopback HTTP, and one that has not come by then is given up on, so
// a poller whose timer runs late slows the simulation little.
const maxPollLateness = 100

// pollLate reports whether a poll due by since (one at the load, then one
// every interval) has not been answered yet; after maxPollLateness calls
// it is given up on and counted in skipped.
func (s *modelServer) pollLate(since time.Duration) bool {
	if s.interval <= 0 {
		return false
	}
	due := 1 + int64(since/s.interval) - s.skipped
	if s.polled.Load() >= due {
		s.late = 0
		return false
	}
	if s.late++; s.late > maxPollLateness {
		s.skipped += due - s.polled.Load()
		s.late = 0
		return false
	}
	return true
}

// modelServers are the policy's backends as continuous-batching model
// servers (internal/modelsim) on the simulation's fake clock, in process:
// requests reach them through RoundTrip, without a socket, and stream their
// tokens back through a pipe; their /metrics are served on loopback for the
// data plane's saturation pollers, whose HTTP client is their own.
type modelServers struct {
	clk    *testingclock.FakeClock
	loaded time.Time
	list   []*modelServer
	byHost map[string]*modelServer

	open     atomic.Int64 // responses not ended
	sent     atomic.Int64 // requests handed to a simulator
	writing  atomic.Int64 // simulator writes not yet read by the data plane
	written  atomic.Int64 // tokens the simulators wrote and the data plane read
	received atomic.Int64 // tokens the clients received
}

// newModelServers starts a simulated model server per backend of cfg and
// returns them with a copy of cfg whose saturation pollers read their
// metrics.
func newModelServers(clk *testingclock.FakeClock, cfg *config.Config, ms *LoadModelServer) (*modelServers, *config.Config, error) {
	out := cfg.DeepCopy()
	m := &modelServers{clk: clk, byHost: map[string]*modelServer{}}
	simCfg := modelsim.Config{}
	if ms != nil {
		simCfg.MaxNumSeqs, simCfg.KVCacheTokens = ms.MaxNumSeqs, ms.KVCacheTokens
	}
	for _, b := range out.Backends {
		u, err := url.Parse(b.URL)
		if err != nil {
			m.close()
			return nil, nil, fmt.Errorf("backend %s: %w", b.Name, err)
		}
		s := &modelServer{name: b.Name, clk: &simClock{FakeClock: clk}}
		if s.sim, err = modelsim.New(s.clk, simCfg); err != nil {
			m.close()
			return nil, nil, fmt.Errorf("modelServer: %w", err)
		}
		s.metrics = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.polling.Add(1)
			defer func() {
				s.polled.Add(1)
				s.polling.Add(-1)
			}()
			s.sim.ServeHTTP(w, r)
		}))
		if c := out.Capacity.Backend(b.Name); c != nil {
			s.maxInFlight = c.MaxInFlight
			if c.Saturation != nil {
				c.Saturation.MetricsURL = s.metrics.URL + "/metrics"
				s.interval = c.Saturation.Interval.Duration
			}
		}
		m.list = append(m.list, s)
		m.byHost[u.Host] = s
	}
	return m, out, nil
}

// start marks when the config was loaded: the pollers' first poll.
func (m *modelServers) start() { m.loaded = m.clk.Now() }

func (m *modelServers) close() {
	for _, s := range m.list {
		s.metrics.Close()
		s.sim.Close()
	}
}

func (m *modelServers) inFlight() int64 { return m.open.Load() }
func (m *modelServers) progress() int64 {
	return m.sent.Load() + m.written.Load() + m.received.Load() + m.writing.Load()
}

// parked reports whether every simulator waits for the clock (a step timer
// ahead, or nothing to run), every request handed to one is in its queue or
// batch, every token it produced reached its client, and every poll due by
// now was answered.
func (m *modelServers) parked() bool {
	var generated, requests int64
	for _, s := range m.list {
		st := s.sim.Stats()
		if _, ahead := s.clk.until(); !ahead && st.Running+st.Waiting > 0 {
			return false
		}
		generated += st.GenerationTokens
		requests += int64(st.Running+st.Waiting) + st.Finished + st.Aborted + st.Rejected
		if s.polling.Load() > 0 || s.pollLate(m.clk.Since(m.loaded)) {
			return false
		}
	}
	return m.writing.Load() == 0 && m.written.Load() == generated && m.received.Load() == generated && m.sent.Load() == requests
}

// next is the time to the earliest simulator step.
func (m *modelServers) next() (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, s := range m.list {
		if d, ok := s.clk.until(); ok && (!found || d < best) {
			best, found = d, true
		}
	}
	return best, found
}

// observe accumulates the simulators' state over dt from elapsed, when in
// [from, to): time-weighted queue, batch and KV cache, and the counters at
// the window's ends.
func (m *modelServers) observe(elapsed, dt, from, to time.Duration) {
	for _, s := range m.list {
		st := s.sim.Stats()
		if elapsed >= from && !s.fromSet {
			s.from, s.fromSet = st, true
		}
		if elapsed >= to && !s.toSet {
			s.to, s.toSet = st, true
		}
		if elapsed < from || elapsed >= to {
			continue
		}
		secs := dt.Seconds()
		s.seconds += secs
		s.waitingSeconds += float64(st.Waiting) * secs
		s.runningSeconds += float64(st.Running) * secs
		s.kvSeconds += st.KVCacheUsage * secs
		s.waitingMax = max(s.waitingMax, st.Waiting)
	}
}

// deltaKey counts one streamed token: each chunk of a token carries one
// delta (the usage chunk has none).
var deltaKey = []byte(`"delta":{`)

// RoundTrip hands req to the simulator of its backend and returns as soon as
// the simulator sent its status, with a body that streams what it writes.
func (m *modelServers) RoundTrip(req *http.Request) (*http.Response, error) {
	s := m.byHost[req.URL.Host]
	if s == nil {
		return nil, fmt.Errorf("no simulated backend at %s", req.URL.Host)
	}
	if at, ok := req.Context().Value(dispatchKey{}).(*time.Time); ok {
		*at = m.clk.Now()
	}
	m.open.Add(1)
	m.sent.Add(1)
	pr, pw := io.Pipe()
	w := &pipeResponse{m: m, header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		s.sim.ServeHTTP(w, req)
		w.WriteHeader(http.StatusOK) // a handler that wrote nothing
		_ = pw.Close()
	}()
	<-w.ready
	var once sync.Once
	body := &simBody{Reader: pr, close: func() error {
		once.Do(func() { m.open.Add(-1) })
		return pr.Close()
	}}
	return &http.Response{StatusCode: w.code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: body, Request: req, ContentLength: -1}, nil
}

// simBody is a simulated response body; Close ends the response once.
type simBody struct {
	io.Reader
	close func() error
}

func (b *simBody) Close() error { return b.close() }

// pipeResponse is the http.ResponseWriter a simulator answers into: its
// status and headers go to RoundTrip, its body through the pipe.
type pipeResponse struct {
	m      *modelServers
	header http.Header
	sent   http.Header
	code   int
	pw     *io.PipeWriter
	ready  chan struct{}
	once   sync.Once
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.m.writing.Add(1)
	n, err := w.pw.Write(p)
	w.m.written.Add(int64(bytes.Count(p[:n], deltaKey)))
	w.m.writing.Add(-1)
	return n, err
}

// Flush implements http.Flusher: every write reaches the pipe at once.
func (w *pipeResponse) Flush() {}

// simWriter records a simulated client's answer: the body (for refusals'
// reasons) and, of a stream, when each token arrived.
type simWriter struct {
	*httptest.ResponseRecorder
	tokens func(n int) // called with the tokens of each write
	carry  []byte      // the tail of the last write, for a delta split across two
}

func (w *simWriter) Write(p []byte) (int, error) {
	if w.tokens != nil {
		joined := slices.Concat(w.carry, p)
		if n := bytes.Count(joined, deltaKey); n > 0 {
			w.tokens(n)
		}
		// A tail shorter than the key: a delta it begins is counted with
		// the next write, and none counts twice.
		w.carry = append([]byte(nil), joined[max(0, len(joined)-len(deltaKey)+1):]...)
	}
	return w.ResponseRecorder.Write(p)
}

// SimTenantCapacity is a tenant's figures in capacity mode, in -o
// json|yaml: what a streamed request of its lengths got from the simulated
// model servers, over the steady-state window.
type SimTenantCapacity struct {
	PromptTokens int `json:"promptTokens"`
	OutputTokens int `json:"outputTokens"`
	// CompletionsPerSecond counts streams that ended in the window;
	// OutputTokensPerSecond the tokens the tenant received in it.
	CompletionsPerSecond  float64 `json:"completionsPerSecond"`
	OutputTokensPerSecond float64 `json:"outputTokensPerSecond"`
	// TTFTP50Seconds and TTFTP99Seconds are arrival to first token of the
	// requests admitted in the window: the queue wait, the model server's
	// own queue and the prefill.
	TTFTP50Seconds float64 `json:"ttftP50Seconds"`
	TTFTP99Seconds float64 `json:"ttftP99Seconds"`
}

// SimModelServer is one simulated model server (a backend of the policy)
// over the steady-state window.
type SimModelServer struct {
	Backend string `json:"backend"`
	// MaxInFlight is the policy's for the backend; 0 when it has none.
	MaxInFlight int32 `json:"maxInFlight"`
	// WaitingMean and WaitingMax are the requests in the server's own FCFS
	// queue (vllm:num_requests_waiting), time-weighted; RunningMean, those
	// in its batch; KVCacheUsageMean, the share of its KV cache in use.
	WaitingMean      float64 `json:"waitingMean"`
	WaitingMax       int     `json:"waitingMax"`
	RunningMean      float64 `json:"runningMean"`
	KVCacheUsageMean float64 `json:"kvCacheUsageMean"`
	// OutputTokensPerSecond is what the server generated; Preemptions,
	// sequences it preempted for KV space.
	OutputTokensPerSecond float64 `json:"outputTokensPerSecond"`
	Preemptions           int64   `json:"preemptions"`
}

// simCapacityOutput fills the capacity figures of o from res.
func simCapacityOutput(o *SimulationOutput, load *Load, res *SimResult) {
	if len(res.Servers) == 0 {
		return
	}
	secs := res.Seconds()
	for i := range o.Tenants {
		r := &res.Tenants[i]
		prompt, output := load.tokens(i)
		o.Tenants[i].Capacity = &SimTenantCapacity{PromptTokens: prompt, OutputTokens: output,
			CompletionsPerSecond: float64(r.Steady.Completed) / secs, OutputTokensPerSecond: float64(r.Steady.OutputTokens) / secs,
			TTFTP50Seconds: quantileOf(r.TTFTs, 0.5).Seconds(), TTFTP99Seconds: quantileOf(r.TTFTs, 0.99).Seconds()}
	}
	for _, s := range res.Servers {
		ms := SimModelServer{Backend: s.name, MaxInFlight: s.maxInFlight, WaitingMax: s.waitingMax,
			OutputTokensPerSecond: float64(s.to.GenerationTokens-s.from.GenerationTokens) / secs,
			Preemptions:           s.to.Preemptions - s.from.Preemptions}
		if s.seconds > 0 {
			ms.WaitingMean, ms.RunningMean, ms.KVCacheUsageMean = s.waitingSeconds/s.seconds, s.runningSeconds/s.seconds, s.kvSeconds/s.seconds
		}
		o.ModelServers = append(o.ModelServers, ms)
	}
	o.Notes = append(o.Notes, "Capacity mode: each backend is a simulated continuous-batching model server (internal/modelsim: vLLM's "+
		"scheduler calibrated to an 8B model on one A100, docs/modelsim.md) on the same virtual clock, answering each tenant's "+
		"streamed requests of PROMPT/OUTPUT tokens; serviceTime is not used. TTFT runs from arrival to the first token "+
		"(gateway queue, server queue, prefill). The clock steps to each server step exactly; the data plane's other timers "+
		"have a millisecond's resolution.")
}

// printCapacitySimulation writes the tenant and model-server tables of a
// capacity-mode simulation.
func printCapacitySimulation(w *printer, o *SimulationOutput) {
	bands := len(o.Bands) > 0
	band := ""
	if bands {
		band = "BAND\t"
	}
	w.printf("TENANT\t%sWEIGHT\tPROMPT/OUTPUT\tOFFERED/S\tADMITTED/S\tCOMPLETIONS/S\tOUTPUT TOK/S\tTTFT P50\tTTFT P99\tSHARE\tWAIT P99\tREFUSED/S BY REASON\n", band)
	for _, t := range o.Tenants {
		c := t.Capacity
		if bands {
			band = orDefault(t.Band, "-") + "\t"
		}
		w.printf("%s\t%s%s\t%d/%d\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\n", t.Name, band, weightString(t.Weight), c.PromptTokens, c.OutputTokens,
			t.OfferedPerSecond, t.AdmittedPerSecond, c.CompletionsPerSecond, c.OutputTokensPerSecond,
			seconds(c.TTFTP50Seconds), seconds(c.TTFTP99Seconds), percentOf(t.Share, t.AdmittedPerSecond > 0),
			seconds(t.WaitP99Seconds), rates(t.RefusedPerSecond))
	}
	w.printf("\nMODEL SERVER\tMAX IN FLIGHT\tWAITING MEAN\tWAITING MAX\tRUNNING MEAN\tKV CACHE MEAN\tOUTPUT TOK/S\tPREEMPTIONS\n")
	for _, s := range o.ModelServers {
		w.printf("%s\t%s\t%.1f\t%d\t%.1f\t%.0f%%\t%.0f\t%d\n", s.Backend, weightString(s.MaxInFlight), s.WaitingMean, s.WaitingMax,
			s.RunningMean, 100*s.KVCacheUsageMean, s.OutputTokensPerSecond, s.Preemptions)
	}
}
