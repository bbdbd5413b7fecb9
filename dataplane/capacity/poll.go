/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package capacity

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// poller reads one backend's signals every Interval until stopped. It is
// the only goroutine a backend has, and Apply or Close stops it.
type poller struct {
	t       *Tracker
	b       *backend
	cfg     config.Saturation
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	started time.Time

	polls atomic.Int64 // polls done and waiting for the next, for tests

	mu      sync.Mutex
	values  []float64
	read    []time.Time // each signal's last reading; zero before the first
	stale   bool
	failing bool // the last poll failed

	// clear is the in-flight count at the last reading under every max,
	// -1 before one. The poller's goroutine alone uses it (adjust).
	clear int64
}

// startPoller starts b's poller; Tracker.mu is held.
func (t *Tracker) startPoller(b *backend, cfg config.Saturation) *poller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{
		t: t, b: b, cfg: cfg, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		started: t.clk.Now(), clear: -1,
		values: make([]float64, len(cfg.Signals)),
		read:   make([]time.Time, len(cfg.Signals)),
	}
	go p.run()
	return p
}

// stop ends the poller, an ongoing poll included, and waits for it.
func (p *poller) stop() {
	p.cancel()
	<-p.done
}

func (p *poller) run() {
	defer close(p.done)
	for {
		start := p.t.clk.Now()
		p.poll()
		// Interval runs from one poll's start to the next; a poll that
		// took longer is followed at once, never overlapped.
		timer := p.t.clk.NewTimer(max(p.cfg.Interval.Duration-p.t.clk.Since(start), 0))
		p.polls.Add(1)
		select {
		case <-p.ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
	}
}

// poll reads the signals once and re-evaluates the backend's saturation.
func (p *poller) poll() {
	ctx, cancel := context.WithCancel(p.ctx)
	var timedOut atomic.Bool
	tm := p.t.clk.AfterFunc(p.cfg.Timeout.Duration, func() {
		timedOut.Store(true)
		cancel()
	})
	vals, found, kind, err := p.fetch(ctx)
	tm.Stop()
	cancel()
	if p.ctx.Err() != nil {
		return // stopped
	}
	if err != nil && timedOut.Load() {
		kind, err = ErrorTimeout, fmt.Errorf("no complete answer within %s: %w", p.cfg.Timeout.Duration, err)
	}
	p.record(p.t.clk.Now(), vals, found, kind, err)
}

// record takes one poll's outcome at now.
func (p *poller) record(now time.Time, vals []float64, found []bool, kind string, err error) {
	name := p.b.name
	if err != nil {
		p.t.obs.PollError(name, kind)
	}
	p.mu.Lock()
	var missing []string
	for i, sg := range p.cfg.Signals {
		if err == nil && found[i] {
			p.values[i], p.read[i] = vals[i], now
			p.t.obs.SignalValue(name, sg.Metric, vals[i])
		} else if err == nil {
			missing = append(missing, sg.Metric)
		}
	}
	if err == nil && len(missing) > 0 {
		p.t.obs.PollError(name, ErrorMissing)
		kind, err = ErrorMissing, fmt.Errorf("no gauge named %q in the body; check the signal's metric name and that the URL serves Prometheus text", missing)
	}
	full, stale := false, false
	for i, sg := range p.cfg.Signals {
		last := p.read[i]
		if last.IsZero() {
			last = p.started // a grace of staleAfter before the first reading
		}
		if now.Sub(last) > p.cfg.StaleAfter.Duration {
			stale = true
			continue
		}
		if !p.read[i].IsZero() && sg.Saturated(p.values[i]) {
			full = true
		}
	}
	wasFailing, wasStale := p.failing, p.stale
	p.failing, p.stale = err != nil, stale
	p.mu.Unlock()

	switch {
	case err != nil && !wasFailing:
		p.t.log.Info("backend metrics poll failed; its signals go stale if this lasts", "backend", name, "kind", kind, "url", p.cfg.MetricsURL, "staleAfter", p.cfg.StaleAfter.Duration, "error", err.Error())
	case err == nil && wasFailing:
		p.t.log.Info("backend metrics poll succeeded again", "backend", name)
	}
	if stale != wasStale {
		p.t.obs.Stale(name, stale)
		if stale {
			p.t.log.Info("backend saturation signals are stale; maxInFlight alone decides until they are read again", "backend", name, "staleAfter", p.cfg.StaleAfter.Duration)
		} else {
			p.t.log.Info("backend saturation signals are fresh again", "backend", name)
		}
	}
	switch {
	case stale:
		p.adjust(false, false)
	case err == nil:
		p.adjust(full, true)
	} // a failed poll within staleAfter leaves the last reading in force
}

// adjust moves b's window after a reading (see the package doc's Window).
// A signal read every interval cannot see the requests dispatched since:
// blocking every request until the next reading clears wastes the slots
// released meanwhile (the light tenants of make bench-capacity waited a
// third of a second at p50 for that reading), and letting every waiter
// through when it clears fills the server's own queue before the next
// reading can see them. So once a reading has said saturated the backend
// keeps a window, the in-flight count it may reach, and admits on every
// release up to it:
//
//   - a reading over a max cuts the window to the in-flight count of the
//     last reading under every max (what the server took), and at least
//     one below what is in flight now, so the server's queue drains; with
//     nothing in flight the backend refuses outright until a reading
//     clears;
//   - a reading under every max grows it to one above what is in flight,
//     or by one, and drops it at maxInFlight. One at a time: a faster
//     increase (doubling up to maxInFlight/32 per reading) overshot by up
//     to a dozen heavy requests before a reading could see them, and a
//     server whose KV cache binds holds them in its queue for seconds;
//   - stale signals drop it: maxInFlight alone decides (SPEC 6b); a failed
//     poll before that changes nothing.
//
// Only the poller's goroutine calls it.
func (p *poller) adjust(over, fresh bool) {
	b := p.b
	n, limit := b.inFlight.Load(), b.max.Load()
	was := b.window.Load()
	w, room := was, false
	switch {
	case !fresh:
		w = 0
		room = b.full.Swap(false) || was > 0 && b.contended.Load()
	case over:
		if w == 0 || w > n-1 {
			w = n - 1
		}
		if p.clear >= 0 && p.clear < w {
			w = p.clear
		}
		b.full.Store(w < 1) // nothing of ours to hold back: refuse outright
		w = max(w, 1)
	default:
		p.clear = n
		room = b.full.Swap(false)
		if w > 0 {
			// From what is in flight less the overdraft outstanding
			// (overdraft.go): it is not the server taking more, or each
			// reading would grow the window by the reserve. The cut
			// above counts it: it is in the server's batch.
			if w = max(w, n-b.over.Load()) + 1; w >= limit {
				w = 0
			}
			room = room || (w == 0 || w > was) && b.contended.Load()
		}
	}
	if w == 0 {
		b.over.Store(0) // no window, nothing above it
	}
	b.window.Store(w)
	if room {
		b.roomed()
	}
}

// windowFull reports whether b is at its window.
func (b *backend) windowFull() bool {
	w := b.window.Load()
	return w > 0 && b.inFlight.Load() >= w
}

// stats returns the poller's signals as Tracker.Stats reports them.
func (p *poller) stats() (stale bool, out []SignalStats) {
	now := p.t.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out = make([]SignalStats, len(p.cfg.Signals))
	for i, sg := range p.cfg.Signals {
		out[i] = SignalStats{Metric: sg.Metric, Max: sg.Max, Value: p.values[i],
			Fresh: !p.read[i].IsZero() && now.Sub(p.read[i]) <= p.cfg.StaleAfter.Duration}
	}
	return p.stale, out
}

// fetch GETs the endpoint and returns each signal's value and whether it
// was found, or the error's kind and the error.
func (p *poller) fetch(ctx context.Context) (vals []float64, found []bool, kind string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.MetricsURL, nil)
	if err != nil {
		return nil, nil, ErrorConnection, err
	}
	// The classic text format, whatever the server's default.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := p.t.client.Do(req)
	if err != nil {
		return nil, nil, ErrorConnection, err
	}
	defer func() {
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, ErrorStatus, fmt.Errorf("%s answered %s", p.cfg.MetricsURL, resp.Status)
	}
	names := make([]string, len(p.cfg.Signals))
	for i, sg := range p.cfg.Signals {
		names[i] = sg.Metric
	}
	text, err := selectLines(resp.Body, names, p.t.opts.MaxBodyBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, nil, ErrorTooLarge, err
		}
		return nil, nil, ErrorConnection, err
	}
	vals, found, err = gaugeValues(text, names)
	if err != nil {
		return nil, nil, ErrorParse, err
	}
	return vals, found, "", nil
}

var errTooLarge = errors.New("metrics body over the read limit")

// maxLine is the longest line kept; longer lines (no gauge of interest is
// one) are skipped.
const maxLine = 64 << 10

// selectLines reads at most limit bytes of r and keeps only the sample and
// TYPE lines of the named metrics, so that a large body (vLLM's histograms)
// costs a scan, not a parse.
func selectLines(r io.Reader, names []string, limit int64) ([]byte, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	br := bufio.NewReaderSize(lr, maxLine)
	var out []byte
	skipping := false // inside a line longer than maxLine
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			skipping = true
			continue
		case skipping:
			skipping = false
		case len(line) > 0 && wanted(line, names):
			out = append(out, line...)
			if line[len(line)-1] != '\n' {
				out = append(out, '\n')
			}
		}
		if lr.N <= 0 {
			return nil, fmt.Errorf("%w of %d bytes", errTooLarge, limit)
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// wanted reports whether line is a sample or TYPE line of one of names.
func wanted(line []byte, names []string) bool {
	line = bytes.TrimLeft(line, " \t")
	if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
		for _, n := range names {
			if r, ok := bytes.CutPrefix(rest, []byte(n)); ok && len(r) > 0 && (r[0] == ' ' || r[0] == '\t') {
				return true
			}
		}
		return false
	}
	for _, n := range names {
		if r, ok := bytes.CutPrefix(line, []byte(n)); ok && len(r) > 0 && (r[0] == '{' || r[0] == ' ' || r[0] == '\t') {
			return true
		}
	}
	return false
}

// gaugeValues parses text (Prometheus text format) and returns each named
// gauge's largest value over its series (see config.Signal).
func gaugeValues(text []byte, names []string) ([]float64, []bool, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, nil, fmt.Errorf("the metrics body is not Prometheus text format: %w", err)
	}
	vals, found := make([]float64, len(names)), make([]bool, len(names))
	for i, n := range names {
		fam := fams[n]
		if fam == nil {
			continue
		}
		v, ok := math.Inf(-1), false
		for _, m := range fam.GetMetric() {
			var x float64
			switch fam.GetType() {
			case dto.MetricType_GAUGE:
				x = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				x = m.GetUntyped().GetValue()
			default:
				continue
			}
			if !math.IsNaN(x) {
				v, ok = max(v, x), true
			}
		}
		vals[i], found[i] = v, ok
	}
	return vals, found, nil
}
