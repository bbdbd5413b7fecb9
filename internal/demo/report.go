package demo

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/fairqueue/fairqueue/internal/chart"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// Settle is how long after the load starts, and after the patch, the shares
// are left to settle before a steady window begins.
const Settle = 3 * time.Second

// SteadyWindows returns the windows in which shares are compared with the
// weighted shares: from Settle after the start until the patch, and from
// Settle after the patch until the end of the load.
// Without a patch, the first window runs to the end and the second is empty.
func (r *Result) SteadyWindows() (before, after [2]time.Duration) {
	if r.PatchStart < 0 {
		return [2]time.Duration{Settle, r.Duration}, [2]time.Duration{r.Duration, r.Duration}
	}
	return [2]time.Duration{Settle, r.PatchStart}, [2]time.Duration{r.PatchStart + Settle, r.Duration}
}

// Answered sums what the load generator sent, got answered and admitted,
// over all tenants.
func (r *Result) Answered() (sent, completed, admitted, lost uint64) {
	if r.Summary == nil {
		return 0, 0, 0, 0
	}
	for _, t := range r.Summary.Tenants {
		sent += t.Sent
		completed += t.Completed
		admitted += t.Admitted
		for _, n := range t.Errors {
			lost += n
		}
		lost += t.DroppedClientSide
	}
	return sent, completed, admitted, lost
}

// DataPlaneAdmitted sums the replicas' admitted counters.
func (r *Result) DataPlaneAdmitted() float64 {
	sum := 0.0
	for _, d := range r.DataPlanes {
		sum += d.Admitted
	}
	return sum
}

// WriteReport prints the shares in the steady windows, the weight change's
// timing and the request accounting.
func (r *Result) WriteReport(out io.Writer) {
	w := &strings.Builder{}
	defer func() { _, _ = io.WriteString(out, w.String()) }()
	switch r.Scenario {
	case ScenarioTokens:
		r.writeTokenReport(w)
		return
	case ScenarioFleet:
		r.writeFleetReport(w)
		return
	case ScenarioBands:
		r.writeBandsReport(w)
		return
	}
	before, after := r.SteadyWindows()
	fmt.Fprintf(w, "\n==> Shares in the steady windows\n")
	fmt.Fprintf(w, "    %-8s  %-22s %-22s\n", "tenant", fmt.Sprintf("%s-%s", before[0], before[1].Round(time.Second)), fmt.Sprintf("%s-%s", after[0].Round(time.Second), after[1]))
	sb, sa := r.Shares(before[0], before[1]), r.Shares(after[0], after[1])
	wb, wa := testutil.WeightedShares(WeightsBefore), testutil.WeightedShares(WeightsAfter)
	for i, t := range Tenants {
		fmt.Fprintf(w, "    %-8s  %6s (weighted %4.1f%%)   %6s (weighted %4.1f%%)\n", t.Name, percent(sb[i]), 100*wb[i], percent(sa[i]), 100*wa[i])
	}
	fmt.Fprintf(w, "    worst deviation from the weighted share: %.1f%% before, %.1f%% after the change\n",
		100*MaxRelativeError(sb, wb), 100*MaxRelativeError(sa, wa))
	if r.PatchStart >= 0 {
		fmt.Fprintf(w, "==> Weight change at %.1fs", r.PatchStart.Seconds())
		for i, at := range r.ReplicaLoaded {
			if at >= 0 {
				fmt.Fprintf(w, "; dataplane-%d reloaded +%s", i+1, (at - r.PatchStart).Round(time.Millisecond))
			} else {
				fmt.Fprintf(w, "; dataplane-%d never reloaded", i+1)
			}
		}
		if r.Moved >= 0 {
			fmt.Fprintf(w, "; shares moved +%s\n", (r.Moved - r.PatchStart).Round(time.Millisecond))
		} else {
			fmt.Fprintf(w, "; shares never moved\n")
		}
	}
	sent, completed, admitted, lost := r.Answered()
	fmt.Fprintf(w, "==> Requests: %d sent, %d answered, %d admitted, %d without an answer; the data planes counted %.0f admitted\n",
		sent, completed, admitted, lost, r.DataPlaneAdmitted())
	if r.Summary != nil {
		for _, t := range r.Summary.Tenants {
			fmt.Fprintf(w, "    %-8s offered %5d  admitted %5d  refused %5d %v  admitted wait p50 %.0fms p99 %.0fms\n",
				t.Name, t.Offered, t.Admitted, t.Refused, t.RefusedByReason, t.AdmittedWaitMS.P50, t.AdmittedWaitMS.P99)
		}
	}
}

// MaxRelativeError returns the largest |got-want|/want over the tenants; NaN
// counts as a full miss.
func MaxRelativeError(got, want []float64) float64 {
	worst := 0.0
	for i := range want {
		e := math.Abs(got[i]-want[i]) / want[i]
		if math.IsNaN(e) {
			e = 1
		}
		worst = max(worst, e)
	}
	return worst
}

// Chart returns the per-second shares of the run, with the weighted shares
// in force and a marker at the patch.
func (r *Result) Chart() *chart.Shares {
	switch r.Scenario {
	case ScenarioTokens:
		return r.tokenChart()
	case ScenarioFleet:
		return r.fleetChart()
	case ScenarioBands:
		return r.bandsChart()
	}
	seconds := 0
	for _, s := range r.Admitted {
		seconds = max(seconds, (len(s)*int(Tick)+int(time.Second)-1)/int(time.Second))
	}
	seconds = min(seconds, int(r.Duration/time.Second), chart.MaxPoints)
	c := &chart.Shares{Title: "fairqueue demo: share of admitted requests per second, 2 replicas"}
	for i, t := range Tenants {
		ct := chart.Tenant{Name: fmt.Sprintf("%s (%.0f req/s offered)", t.Name, t.Rate)}
		for s := range seconds {
			from := time.Duration(s) * time.Second
			ct.Share = append(ct.Share, r.Shares(from, from+time.Second)[i])
			weights := WeightsBefore
			if r.PatchStart >= 0 && from+time.Second/2 >= r.PatchStart {
				weights = WeightsAfter
			}
			ct.Weighted = append(ct.Weighted, testutil.WeightedShares(weights)[i])
		}
		c.Tenants = append(c.Tenants, ct)
	}
	if r.PatchStart >= 0 {
		c.Markers = append(c.Markers, chart.Marker{At: r.PatchStart.Seconds(), Label: "weight change (Secret " + TenantsSecret + ")"})
	}
	return c
}

// DataPlaneTokensSettled sums the replicas' settled tokens of the model token
// limit.
func (r *Result) DataPlaneTokensSettled() float64 {
	sum := 0.0
	for _, d := range r.DataPlanes {
		sum += d.TokensSettled
	}
	return sum
}

// TokenWeights are the token scenario's weights: every tenant at 1.
func (r *Result) TokenWeights() []float64 {
	w := make([]float64, len(r.Tenants))
	for i := range w {
		w[i] = 1
	}
	return w
}

// writeTokenReport prints the token scenario's outcome: each tenant's
// settled tokens per second and share of them in the steady window, against
// its weighted share, and the token accounting.
func (r *Result) writeTokenReport(w *strings.Builder) {
	win, _ := r.SteadyWindows()
	secs := (win[1] - win[0]).Seconds()
	shares, weighted := r.TokenShares(win[0], win[1]), testutil.WeightedShares(r.TokenWeights())
	reqShares := r.Shares(win[0], win[1])
	fmt.Fprintf(w, "\n==> Settled tokens in the steady window %s-%s (fairQueuing.cost %s)\n", win[0], win[1].Round(time.Second), r.Cost)
	fmt.Fprintf(w, "    %-8s %9s %10s %9s %11s %14s\n", "tenant", "tokens/s", "tok share", "weighted", "requests/s", "request share")
	for i, t := range r.Tenants {
		tokens, admitted := windowSum(r.Tokens, i, win), windowSum(r.Admitted, i, win)
		fmt.Fprintf(w, "    %-8s %9.0f %10s %8.1f%% %11.1f %14s\n", t.Name, float64(tokens)/secs, percent(shares[i]), 100*weighted[i],
			float64(admitted)/secs, percent(reqShares[i]))
	}
	fmt.Fprintf(w, "    worst deviation from the weighted token share: %.1f%%\n", 100*MaxRelativeError(shares, weighted))
	sent, completed, admitted, lost := r.Answered()
	fmt.Fprintf(w, "==> Requests: %d sent, %d answered, %d admitted, %d without an answer\n", sent, completed, admitted, lost)
	if r.Summary != nil {
		var tokens uint64
		for _, t := range r.Summary.Tenants {
			tokens += t.TokensSettled
			fmt.Fprintf(w, "    %-8s offered %5d  admitted %5d  refused %5d %v  tokens %7d (%d without usage)  held p50 %.0fms p99 %.0fms\n",
				t.Name, t.Offered, t.Admitted, t.Refused, t.RefusedByLimitType, t.TokensSettled, t.AdmittedWithoutUsage, t.AdmittedHeldMS.P50, t.AdmittedHeldMS.P99)
		}
		fmt.Fprintf(w, "==> Tokens: the answers reported %d; the data planes settled %.0f on the model token limit\n", tokens, r.DataPlaneTokensSettled())
	}
}

// windowSum sums series[i] over the ticks of win.
func windowSum(series [][]uint64, i int, win [2]time.Duration) uint64 {
	if i >= len(series) {
		return 0
	}
	var n uint64
	for k := max(int(win[0]/Tick), 0); k < int(win[1]/Tick) && k < len(series[i]); k++ {
		n += series[i][k]
	}
	return n
}

// tokenChart returns the per-second shares of settled tokens against the
// weighted shares.
func (r *Result) tokenChart() *chart.Shares {
	seconds := 0
	for _, s := range r.Tokens {
		seconds = max(seconds, (len(s)*int(Tick)+int(time.Second)-1)/int(time.Second))
	}
	seconds = min(seconds, int(r.Duration/time.Second), chart.MaxPoints)
	c := &chart.Shares{Title: fmt.Sprintf("fairqueue token demo: share of settled tokens per second, fairQueuing.cost %s", r.Cost)}
	weighted := testutil.WeightedShares(r.TokenWeights())
	for i, t := range r.Tenants {
		ct := chart.Tenant{Name: fmt.Sprintf("%s (%.0f req/s of %d-byte prompts)", t.Name, t.Rate, t.PromptBytes)}
		for s := range seconds {
			from := time.Duration(s) * time.Second
			ct.Share = append(ct.Share, r.TokenShares(from, from+time.Second)[i])
			ct.Weighted = append(ct.Weighted, weighted[i])
		}
		c.Tenants = append(c.Tenants, ct)
	}
	return c
}
