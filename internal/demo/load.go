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
)

// loadResult is what runLoad measured.
type loadResult struct {
	admitted              [][]uint64
	summary               *loadgen.Summary
	patchStart, patchDone time.Duration
	loaded                []time.Duration
}

// runLoad offers the scenario's load through targets, prints the live table
// when asked, and patches the tenants Secret at o.ChangeAt.
func runLoad(ctx context.Context, o Options, p *progress, kc kubectl, targets, metricsURLs []string, initialHash string) (*loadResult, error) {
	keys := make([]string, len(Tenants))
	tenants := make([]loadgen.Tenant, len(Tenants))
	for i, t := range Tenants {
		keys[i] = t.APIKey
		tenants[i] = loadgen.Tenant{Name: t.Name, Rate: t.Rate, APIKey: t.APIKey}
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

	var rates []string
	for _, t := range Tenants {
		rates = append(rates, fmt.Sprintf("%s %.0f/s", t.Name, t.Rate))
	}
	p.printf("==> Offering load for %s through %d data-plane replicas: %s; capacity %d/s (%d/s per replica); weights %s\n",
		o.Duration, len(targets), strings.Join(rates, ", "), o.PerModel*len(targets), o.PerModel, weightsText(WeightsBefore))
	p.printf("    at %s, kubectl patches Secret %s so that %s names %s instead of %s: weights %s\n",
		o.ChangeAt, TenantsSecret, PriorityVar, Tenants[priorityAfter].Name, Tenants[priorityBefore].Name, weightsText(WeightsAfter))

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
	patched, movedReported := false, false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for second := 1; ; second++ {
		select {
		case s := <-summaries:
			res.summary = s
			res.admitted = obs.Admitted()
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
				patch := fmt.Sprintf(`{"stringData":{%q:%q}}`, PriorityVar, Tenants[priorityAfter].APIKey)
				_, err := kc.run(ctx, nil, "patch", "secret", TenantsSecret, "-n", Namespace, "--type", "merge", "-p", patch)
				done := obs.Elapsed()
				mu.Lock()
				res.patchStart, res.patchDone, patchErr = start, done, err
				mu.Unlock()
				p.printf("    >>> %5.1fs  kubectl patch secret %s: %s now names %s (took %s)\n",
					start.Seconds(), TenantsSecret, PriorityVar, Tenants[priorityAfter].Name, (done - start).Round(time.Millisecond))
				if err != nil {
					p.printf("    >>> patch failed: %v\n", err)
					return
				}
				watchReload(ctx, obs, metricsURLs, initialHash, func(replica int, at time.Duration) {
					mu.Lock()
					res.loaded[replica] = at
					mu.Unlock()
					p.printf("    >>> %5.1fs  dataplane-%d loaded the new config (%s after the patch)\n", at.Seconds(), replica+1, (at - start).Round(time.Millisecond))
				})
				if status, err := waitStatus(ctx, kc, len(metricsURLs)); err == nil {
					p.printf("    >>> %5.1fs  kubectl get fqp %s:\n        %s\n", obs.Elapsed().Seconds(), PolicyName, strings.ReplaceAll(status, "\n", "\n        "))
				}
			}()
		}
		mu.Lock()
		patchStart := res.patchStart
		mu.Unlock()
		if patchStart >= 0 && !movedReported {
			if moved := MovedAfter(obs.Admitted(), patchStart, o.Duration); moved >= 0 {
				movedReported = true
				p.printf("    >>> %5.1fs  shares moved to the new weights, %s after the patch\n", moved.Seconds(), (moved - patchStart).Round(time.Millisecond))
			}
		}
		if o.Live && time.Duration(second)*time.Second <= o.Duration+time.Second {
			weights := WeightsBefore
			// A second shows the weights in force for most of it.
			if patchStart >= 0 && time.Duration(second)*time.Second-time.Second/2 >= patchStart {
				weights = WeightsAfter
			}
			printSecond(p, second, obs.Window(time.Duration(second-1)*time.Second, time.Duration(second)*time.Second), WeightedShares(weights))
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

// weightsText renders weights as "acme 1 : globex 1 : initech 3".
func weightsText(w []float64) string {
	parts := make([]string, len(Tenants))
	for i, t := range Tenants {
		parts[i] = fmt.Sprintf("%s %g", t.Name, w[i])
	}
	return strings.Join(parts, " : ")
}

// printSecond prints one second of the live table.
func printSecond(p *progress, second int, counts []Counts, weighted []float64) {
	var b strings.Builder
	if second%10 == 1 {
		fmt.Fprintf(&b, "\n    %5s  %-8s %10s %7s %9s %9s %9s   %s\n", "time", "tenant", "admitted/s", "share", "weighted", "wait p50", "wait p99", "refused/s by reason")
	}
	total := uint64(0)
	for _, c := range counts {
		total += c.Admitted
	}
	for i, c := range counts {
		when := ""
		if i == 0 {
			when = fmt.Sprintf("%ds", second)
		}
		share := nan
		if total > 0 {
			share = float64(c.Admitted) / float64(total)
		}
		fmt.Fprintf(&b, "    %5s  %-8s %10d %7s %8.1f%% %9s %9s   %s\n", when, Tenants[i].Name, c.Admitted,
			percent(share), 100*weighted[i], millis(quantile(c.Waits, 0.5)), millis(quantile(c.Waits, 0.99)), refusalsText(c.Refused))
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
