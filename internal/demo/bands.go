package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/fairqueue/fairqueue/internal/chart"
)

// The bands scenario (ScenarioBands): two priority bands, interactive above
// batch. chat, in interactive, offers two thirds of the capacity at a steady
// rate from the start; batch, in the default band batch, floods with three
// times the capacity from FloodAt of the duration on. Strict priority gives
// chat all it asks for, at the latency it had alone, and batch every grant
// chat leaves: the spare third. With one band and equal weights (the
// negative control, --bands=false) chat would get only half the capacity.
const (
	// ChatVar is the tenants Secret variable holding chat's API key, which
	// the policy's weights entry puts in the interactive band.
	ChatVar = "INTERACTIVE_TENANT"
	// BandInteractive and BandBatch are the scenario's bands, highest first.
	BandInteractive = "interactive"
	BandBatch       = "batch"
	// chatShare is chat's offered rate as a fraction of the capacity, and
	// batchFlood batch's, as a multiple of it.
	chatShare  = 2.0 / 3
	batchFlood = 3.0
)

// FloodAt is the fraction of the duration after which batch starts
// flooding; before it chat runs alone, which gives its baseline latency.
const FloodAt = 0.25

// bandTenants returns the bands scenario's clients for a capacity of
// capacity requests per second in all, batch starting at floodAt.
func bandTenants(capacity float64, floodAt time.Duration) []Tenant {
	return []Tenant{
		{Name: "chat", APIKey: "sk-demo-chat-00000000000000000000", Rate: chatShare * capacity},
		{Name: "batch", APIKey: "sk-demo-batch-0000000000000000000", Rate: batchFlood * capacity, Start: floodAt},
	}
}

// bandsPolicy returns the bands scenario's FairQueuePolicy: the model
// limited to perModel requests per second per replica, fair queuing on API
// keys, and, with bands, priority bands interactive and batch (the default),
// the tenant whose key ChatVar holds in interactive. Without bands (the
// negative control) both tenants share one band at weight 1.
func bandsPolicy(backendURL string, perModel int, bands bool) []byte {
	if !bands {
		return requestPolicy(backendURL, perModel, "", ChatVar, "1")
	}
	spec := fmt.Sprintf("    priorityBands:\n    - {name: %s}\n    - {name: %s}\n    defaultBand: %s\n", BandInteractive, BandBatch, BandBatch)
	return requestPolicy(backendURL, perModel, spec, ChatVar, "1\n      band: "+BandInteractive)
}

// bandsExpected returns each tenant's expected share of the admissions in a
// second that starts at from: chat's all while it is alone; during the flood
// chat's offered rate over the capacity (all it asks) with bands, half
// without, and batch the rest.
func bandsExpected(tenants []Tenant, capacity float64, bands bool, from time.Duration) []float64 {
	if from < tenants[1].Start {
		return []float64{1, 0}
	}
	chat := min(tenants[0].Rate/capacity, 1)
	if !bands {
		chat = 0.5
	}
	return []float64{chat, 1 - chat}
}

// BandWindow is what each tenant got in one stretch of the bands scenario.
type BandWindow struct {
	// Name says what the stretch is ("chat alone", "batch flooding").
	Name     string
	From, To time.Duration
	// Counts are per tenant, indexed like Result.Tenants.
	Counts []Counts
}

// bandWindows returns the stretches of the bands scenario the report
// compares: chat alone, from Settle to the flood, and the flood, from Settle
// after it starts to the end.
func bandWindows(tenants []Tenant, duration time.Duration) [][2]time.Duration {
	flood := tenants[1].Start
	return [][2]time.Duration{{min(Settle, flood/2), flood}, {flood + Settle, duration}}
}

// bandWindowNames name the stretches of bandWindows.
var bandWindowNames = []string{"chat alone", "batch flooding"}

// writeBandsReport prints the bands scenario's outcome: per tenant and
// stretch, offered and admitted rates, share against the expected share,
// latency and queue wait; then whether chat kept its rate and latency
// through the flood and how much of the spare capacity batch took.
func (r *Result) writeBandsReport(w *strings.Builder) {
	mode := "priority bands interactive > batch"
	if !r.Bands {
		mode = "one band, equal weights (the negative control)"
	}
	fmt.Fprintf(w, "\n==> Per tenant, %s; capacity %.0f/s\n", mode, r.Capacity)
	fmt.Fprintf(w, "    %-8s %9s %10s %7s %9s %12s %12s %9s %9s\n", "tenant", "offered/s", "admitted/s", "share", "expected",
		"latency p50", "latency p99", "wait p50", "wait p99")
	for _, win := range r.BandWindows {
		secs := (win.To - win.From).Seconds()
		var total uint64
		for _, c := range win.Counts {
			total += c.Admitted
		}
		expected := bandsExpected(r.Tenants, r.Capacity, r.Bands, win.From)
		fmt.Fprintf(w, "    %s, %s-%s:\n", win.Name, win.From.Round(time.Second), win.To.Round(time.Second))
		for i, t := range r.Tenants {
			c := win.Counts[i]
			offered := t.Rate
			if win.To <= t.Start {
				offered = 0
			}
			share := nan
			if total > 0 {
				share = float64(c.Admitted) / float64(total)
			}
			fmt.Fprintf(w, "    %-8s %9.1f %10.1f %7s %8.1f%% %12s %12s %9s %9s\n", t.Name, offered, float64(c.Admitted)/secs,
				percent(share), 100*expected[i], millis(quantile(c.Latencies, 0.5)), millis(quantile(c.Latencies, 0.99)),
				millis(quantile(c.Waits, 0.5)), millis(quantile(c.Waits, 0.99)))
		}
	}
	if len(r.BandWindows) == 2 {
		alone, flood := r.BandWindows[0], r.BandWindows[1]
		secs := (flood.To - flood.From).Seconds()
		chat, batch := float64(flood.Counts[0].Admitted)/secs, float64(flood.Counts[1].Admitted)/secs
		spare := r.Capacity - r.Tenants[0].Rate
		fmt.Fprintf(w, "==> During the flood chat got %.1f%% of the %.1f/s it asked; its latency p99 went from %s alone to %s\n",
			100*chat/r.Tenants[0].Rate, r.Tenants[0].Rate, millis(quantile(alone.Counts[0].Latencies, 0.99)), millis(quantile(flood.Counts[0].Latencies, 0.99)))
		fmt.Fprintf(w, "==> batch took %.1f/s: %.1f%% of the %.1f/s chat left spare; admitted in all %.1f/s of the %.0f/s capacity\n",
			batch, 100*batch/spare, spare, chat+batch, r.Capacity)
	}
	sent, completed, admitted, lost := r.Answered()
	fmt.Fprintf(w, "==> Requests: %d sent, %d answered, %d admitted, %d without an answer; the data planes counted %.0f admitted\n",
		sent, completed, admitted, lost, r.DataPlaneAdmitted())
}

// bandsChart returns the per-second shares of the bands scenario against
// the expected shares, with a marker where the flood starts.
func (r *Result) bandsChart() *chart.Shares {
	seconds := 0
	for _, s := range r.Admitted {
		seconds = max(seconds, (len(s)*int(Tick)+int(time.Second)-1)/int(time.Second))
	}
	seconds = min(seconds, int(r.Duration/time.Second), chart.MaxPoints)
	title := "fairqueue bands demo: share of admitted requests per second, chat in band interactive, batch in band batch"
	if !r.Bands {
		title = "fairqueue bands demo, negative control: one band, equal weights"
	}
	c := &chart.Shares{Title: title}
	for i, t := range r.Tenants {
		ct := chart.Tenant{Name: fmt.Sprintf("%s (%.0f req/s offered)", t.Name, t.Rate)}
		for s := range seconds {
			from := time.Duration(s) * time.Second
			ct.Share = append(ct.Share, r.Shares(from, from+time.Second)[i])
			ct.Weighted = append(ct.Weighted, bandsExpected(r.Tenants, r.Capacity, r.Bands, from)[i])
		}
		c.Tenants = append(c.Tenants, ct)
	}
	c.Markers = append(c.Markers, chart.Marker{At: r.Tenants[1].Start.Seconds(), Label: "batch starts flooding"})
	return c
}
