package demo

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairqueue/fairqueue/internal/loadgen"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// loadResult is what runLoad measured.
type loadResult struct {
	admitted, tokens      [][]uint64
	summary               *loadgen.Summary
	bandWindows           []BandWindow
	patchStart, patchDone time.Duration
	loaded                []time.Duration
}

// runLoad offers the scenario's load through targets, prints the live table
// when asked, and, when the scenario changes weights, patches the tenants
// Secret at o.ChangeAt.
func runLoad(ctx context.Context, o Options, sc scenario, p *progress, pl *plane) (*loadResult, error) {
	targets, metricsURLs := pl.targets, pl.metricsURLs
	keys := make([]string, len(sc.tenants))
	names := make([]string, len(sc.tenants))
	tenants := make([]loadgen.Tenant, len(sc.tenants))
	for i, t := range sc.tenants {
		keys[i], names[i] = t.APIKey, t.Name
		tenants[i] = loadgen.Tenant{Name: t.Name, Rate: t.Rate, APIKey: t.APIKey, PromptBytes: t.PromptBytes, MaxTokens: t.MaxTokens, Stream: t.Stream, Start: t.Start}
	}
	base := &http.Transport{Proxy: nil, MaxIdleConns: 2 * loadgen.DefaultMaxOutstanding, MaxIdleConnsPerHost: loadgen.DefaultMaxOutstanding, IdleConnTimeout: 30 * time.Second}
	defer base.CloseIdleConnections()
	bal, err := newBalancer(base, targets)
	if err != nil {
		return nil, err
	}
	obs := NewObserver(bal, clk, keys)
	cfg := loadgen.Config{
		Targets:  targets,
		Tenants:  tenants,
		Duration: o.Duration,
		Timeout:  20 * time.Second,
		Client:   &http.Client{Transport: obs},
		Clock:    clk,
	}

	switch {
	case sc.bands:
		bands := fmt.Sprintf("priority bands %s > %s: %s in %s, %s in %s (the default)", BandInteractive, BandBatch,
			sc.tenants[0].Name, BandInteractive, sc.tenants[1].Name, BandBatch)
		if o.NoBands {
			bands = "one band, equal weights (the negative control)"
		}
		p.printf("==> Offering load for %s through %s: %s %.0f/s from the start, %s %.0f/s from %s; capacity %.0f/s; %s\n",
			o.Duration, replicasText(len(targets)), sc.tenants[0].Name, sc.tenants[0].Rate, sc.tenants[1].Name, sc.tenants[1].Rate,
			sc.tenants[1].Start, sc.capacity, bands)
	case sc.tokens:
		var rates []string
		for _, t := range sc.tenants {
			kind := ""
			if t.Stream {
				kind = " streamed"
			}
			rates = append(rates, fmt.Sprintf("%s %.0f/s of %d-byte prompts, max_tokens %d%s", t.Name, t.Rate, t.PromptBytes, t.MaxTokens, kind))
		}
		p.printf("==> Offering load for %s through %s: %s\n", o.Duration, replicasText(len(targets)), strings.Join(rates, "; "))
		p.printf("    capacity %d tokens per %s per replica (%d tokens/s in all); fairQueuing.cost %s; weights %s\n",
			o.TokensPerPeriod, TokenPeriod, o.TokensPerPeriod*len(targets)/int(TokenPeriod/time.Second), o.Cost, weightsText(names, sc.weights))
	default:
		var rates []string
		for _, t := range sc.tenants {
			rates = append(rates, fmt.Sprintf("%s %.0f/s", t.Name, t.Rate))
		}
		p.printf("==> Offering load for %s through %s: %s; capacity %d/s (%d/s per replica); weights %s\n",
			o.Duration, replicasText(len(targets)), strings.Join(rates, ", "), o.PerModel*len(targets), o.PerModel, weightsText(names, sc.weights))
		p.printf("    at %s, %s so that %s names %s instead of %s: weights %s\n",
			o.ChangeAt, pl.change.what, PriorityVar, Tenants[priorityAfter].Name, Tenants[priorityBefore].Name, weightsText(names, sc.weightsAfter))
	}

	res := &loadResult{patchStart: -1, patchDone: -1, loaded: make([]time.Duration, len(metricsURLs))}
	for i := range res.loaded {
		res.loaded[i] = -1
	}
	obs.Restart()
	summaries := make(chan *loadgen.Summary, 1)
	errs := make(chan error, 1)
	go func() {
		s, err := loadgen.Run(ctx, cfg)
		if err != nil {
			errs <- err
			return
		}
		summaries <- s
	}()

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex // guards res's patch and loaded fields
		patchErr error
	)
	defer wg.Wait()
	// A scenario without a weight change never patches.
	patched, movedReported := sc.weightsAfter == nil, false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for second := 1; ; second++ {
		select {
		case s := <-summaries:
			res.summary = s
			res.admitted, res.tokens = obs.Admitted(), obs.Tokens()
			if sc.bands {
				for i, win := range bandWindows(sc.tenants, o.Duration) {
					res.bandWindows = append(res.bandWindows, BandWindow{Name: bandWindowNames[i], From: win[0], To: win[1], Counts: obs.Window(win[0], win[1])})
				}
			}
			wg.Wait()
			return res, patchErr
		case err := <-errs:
			return nil, err
		case <-tick.C:
		}
		now := obs.Elapsed()
		if !patched && now >= o.ChangeAt {
			patched = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := obs.Elapsed()
				err := pl.change.apply(ctx)
				done := obs.Elapsed()
				mu.Lock()
				res.patchStart, res.patchDone, patchErr = start, done, err
				mu.Unlock()
				p.printf("    >>> %5.1fs  %s: %s now names %s (took %s)\n",
					start.Seconds(), pl.change.what, PriorityVar, Tenants[priorityAfter].Name, (done - start).Round(time.Millisecond))
				if err != nil {
					p.printf("    >>> %s failed: %v\n", pl.change.what, err)
					return
				}
				watchReload(ctx, obs, metricsURLs, pl.initialHash, func(replica int, at time.Duration) {
					mu.Lock()
					res.loaded[replica] = at
					mu.Unlock()
					p.printf("    >>> %5.1fs  dataplane-%d loaded the new config (%s after the patch)\n", at.Seconds(), replica+1, (at - start).Round(time.Millisecond))
				})
				if pl.change.status == nil {
					return
				}
				if status, err := pl.change.status(ctx, len(metricsURLs)); err == nil {
					p.printf("    >>> %5.1fs  kubectl get fqp %s:\n        %s\n", obs.Elapsed().Seconds(), PolicyName, strings.ReplaceAll(status, "\n", "\n        "))
				}
			}()
		}
		mu.Lock()
		patchStart := res.patchStart
		mu.Unlock()
		if patchStart >= 0 && !movedReported && sc.weightsAfter != nil {
			if moved := MovedAfter(obs.Admitted(), patchStart, o.Duration); moved >= 0 {
				movedReported = true
				p.printf("    >>> %5.1fs  shares moved to the new weights, %s after the patch\n", moved.Seconds(), (moved - patchStart).Round(time.Millisecond))
			}
		}
		if o.Live && time.Duration(second)*time.Second <= o.Duration+time.Second {
			weighted, head := testutil.WeightedShares(sc.weights), "weighted"
			// A second shows the weights in force for most of it.
			if patchStart >= 0 && time.Duration(second)*time.Second-time.Second/2 >= patchStart {
				weighted = testutil.WeightedShares(sc.weightsAfter)
			}
			if sc.bands {
				weighted, head = bandsExpected(sc.tenants, sc.capacity, !o.NoBands, time.Duration(second-1)*time.Second), "expected"
			}
			printSecond(p, second, names, obs.Window(time.Duration(second-1)*time.Second, time.Duration(second)*time.Second), weighted, sc.tokens, head)
		}
	}
}

// watchReload polls each replica's metrics until it reports a config hash
// other than initial, calling loaded once per replica, for at most 10s.
func watchReload(ctx context.Context, obs *Observer, metricsURLs []string, initial string, loaded func(replica int, at time.Duration)) {
	c := &http.Client{Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	done := make([]bool, len(metricsURLs))
	deadline := time.Now().Add(10 * time.Second)
	for left := len(done); left > 0 && time.Now().Before(deadline); {
		for i, u := range metricsURLs {
			if done[i] {
				continue
			}
			if m, err := scrape(ctx, c, u); err == nil && m.Loaded(initial) {
				done[i] = true
				left--
				loaded(i, obs.Elapsed())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// statusColumns are the FairQueuePolicy status fields the demo shows.
const statusColumns = `custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,` +
	`CONFIG-HASH:.status.configHash,REPLICAS:.status.dataPlaneReplicas,UPDATED:.status.updatedReplicas`

// waitStatus waits, for at most 5s, until the policy's status counts
// replicas updated replicas, and returns `kubectl get fqp` output.
func waitStatus(ctx context.Context, kc kubectl, replicas int) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := kc.run(ctx, nil, "get", "fqp", PolicyName, "-n", Namespace, "-o", "jsonpath={.status.updatedReplicas}")
		if (err == nil && n == strconv.Itoa(replicas)) || time.Now().After(deadline) {
			return kc.run(ctx, nil, "get", "fqp", PolicyName, "-n", Namespace, "-o", statusColumns)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// replicasText renders "1 data-plane replica" or "n data-plane replicas".
func replicasText(n int) string {
	if n == 1 {
		return "1 data-plane replica"
	}
	return fmt.Sprintf("%d data-plane replicas", n)
}

// weightsText renders weights as "acme 1 : globex 1 : initech 3".
func weightsText(names []string, w []float64) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %g", n, w[i])
	}
	return strings.Join(parts, " : ")
}

// printSecond prints one second of the live table: per tenant, admitted
// requests and settled tokens, the share (of requests, or with byTokens of
// tokens) against the expected share (headed expectHead: the weighted
// share, or the bands' share), the wait (queued, or with byTokens held by
// deferred admission) and the refusals.
func printSecond(p *progress, second int, names []string, counts []Counts, weighted []float64, byTokens bool, expectHead string) {
	var b strings.Builder
	shareHead, waitHead := "share", "wait"
	if byTokens {
		shareHead, waitHead = "tok share", "held"
	}
	if second%10 == 1 {
		fmt.Fprintf(&b, "\n    %5s  %-8s %10s %8s %9s %9s %9s %9s   %s\n", "time", "tenant", "admitted/s", "tokens/s", shareHead, expectHead,
			waitHead+" p50", waitHead+" p99", "refused/s by reason")
	}
	total := uint64(0)
	for _, c := range counts {
		if byTokens {
			total += c.Tokens
		} else {
			total += c.Admitted
		}
	}
	for i, c := range counts {
		when := ""
		if i == 0 {
			when = fmt.Sprintf("%ds", second)
		}
		share, part, waits := nan, c.Admitted, c.Waits
		if byTokens {
			part, waits = c.Tokens, c.Held
		}
		if total > 0 {
			share = float64(part) / float64(total)
		}
		fmt.Fprintf(&b, "    %5s  %-8s %10d %8d %9s %8.1f%% %9s %9s   %s\n", when, names[i], c.Admitted, c.Tokens,
			percent(share), 100*weighted[i], millis(quantile(waits, 0.5)), millis(quantile(waits, 0.99)), refusalsText(c.Refused))
	}
	p.printf("%s", b.String())
}

func percent(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func millis(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0fms", v)
}

// refusalsText renders the non-zero refusal counts as "reason=n ...".
func refusalsText(refused []uint64) string {
	var parts []string
	for i, n := range refused {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", reasons[i], n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
