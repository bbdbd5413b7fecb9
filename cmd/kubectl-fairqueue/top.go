package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// scrapeFunc reads one pod's metrics page through the API server's pod proxy.
type scrapeFunc func(ctx context.Context, namespace, pod, port string) ([]byte, error)

func topVerb() *verb {
	var interval time.Duration
	var port string
	var count int
	var opts topOptions
	return &verb{
		name: "top", args: "POLICY",
		short: "live queue tables per replica and per tenant: grants/s, share vs weighted share, waits, refusals",
		long: "Scrape the metrics of every data-plane replica serving a FairQueuePolicy (found through its report\n" +
			"Leases) through the API server's pod proxy, twice, --interval apart, and print two tables. Per replica:\n" +
			"grants/s by tenant dimension, each replica's share, the queue wait p50/p99, refusals/s by reason, depth\n" +
			"and tenants. Per tenant, across all replicas: grants/s, share of all grants vs weighted share (its\n" +
			"weight over the weights of the tenants granted or queued now), mean wait, queued and refusals/s by\n" +
			"reason. Tenants are shown by the first 12 hex digits of their identity hash; each replica exports its\n" +
			"weighted tenants and its most active others (--tenant-metrics-top), the rest as \"other\". With\n" +
			"--resolve, tenants with a weights entry are also named, by hashing each entry's identity with the\n" +
			"policy's hash key: this needs get on the policy's hash-key and weightsFrom Secrets. API keys are\n" +
			"named by the ${VAR} they come from, never shown. Needs get on pods/proxy and list on leases.",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&interval, "interval", 5*time.Second, "time between the two scrapes rates are computed from")
			fs.StringVar(&port, "port", "9090", "the data plane's metrics port (number or name)")
			fs.IntVar(&count, "count", 1, "how many tables to print, one per --interval; 0 means until interrupted")
			fs.BoolVar(&opts.resolve, "resolve", false, "name the tenants that have a weights entry (needs get on the policy's Secrets)")
			fs.IntVar(&opts.tenants, "tenants", 20, "most tenant rows to print, busiest first; 0 means all")
		},
		run: func(ctx context.Context, g *globals, args []string, out io.Writer) error {
			name, err := onePolicy("top", args)
			if err != nil {
				return err
			}
			if interval <= 0 {
				return fmt.Errorf("--interval %v must be positive", interval)
			}
			if opts.tenants < 0 {
				return fmt.Errorf("--tenants %d must not be negative", opts.tenants)
			}
			if err := g.connect(); err != nil {
				return err
			}
			opts.port, opts.interval, opts.count = port, interval, count
			return runTop(ctx, g, name, opts, g.podProxy, out)
		},
	}
}

// podProxy reads a pod's /metrics through the API server.
func (g *globals) podProxy(ctx context.Context, namespace, pod, port string) ([]byte, error) {
	if g.kube == nil {
		return nil, fmt.Errorf("no Kubernetes clientset")
	}
	return g.kube.CoreV1().Pods(namespace).ProxyGet("http", pod, port, "metrics", nil).DoRaw(ctx)
}

// replicaSample is what one scrape of one replica said.
type replicaSample struct {
	depth, tenants float64
	grants         map[string]float64       // by tenant dimension
	refused        map[string]float64       // by reason
	wait           map[float64]float64      // cumulative bucket counts by upper bound
	byTenant       map[string]*tenantSample // by tenant label (hash prefix or "other")
	hash           string
	err            error
}

// tenantSample is what one scrape said about one tenant.
type tenantSample struct {
	dim                  string
	grants, wait, queued float64
	weight               float64            // 0 when not exported (the "other" tenants)
	refused              map[string]float64 // by reason
}

// topOptions are top's flags.
type topOptions struct {
	port     string
	interval time.Duration
	count    int
	// resolve names the weighted tenants; tenants is the most tenant rows.
	resolve bool
	tenants int
}

func runTop(ctx context.Context, g *globals, policy string, o topOptions, scrape scrapeFunc, out io.Writer) error {
	port, interval, count := o.port, o.interval, o.count
	var names map[string]string
	if o.resolve {
		var err error
		if names, err = resolveTenants(ctx, g, policy); err != nil {
			return err
		}
	}
	for n := 0; count == 0 || n < count; n++ {
		var leases coordinationv1.LeaseList
		lctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := g.client.List(lctx, &leases, client.InNamespace(g.namespace), client.MatchingLabels{
			reload.LeasePolicyLabel: policy, reload.LeaseComponentLabel: reload.LeaseComponentValue,
		})
		cancel()
		if err != nil {
			return fmt.Errorf("listing the data-plane report Leases in %s: %w", g.namespace, err)
		}
		var pods []string
		for i := range leases.Items {
			pods = append(pods, holder(&leases.Items[i]))
		}
		sort.Strings(pods)
		if len(pods) == 0 {
			return fmt.Errorf("no data-plane replica reports for policy %s/%s: are the data planes running with --configmap and POD_NAME? (kubectl fairqueue status %s)",
				g.namespace, policy, policy)
		}
		before := scrapeAll(ctx, g.namespace, port, pods, scrape)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		after := scrapeAll(ctx, g.namespace, port, pods, scrape)
		if err := printTop(out, pods, before, after, interval); err != nil {
			return err
		}
		if err := printTenants(out, before, after, interval, o.tenants, names); err != nil {
			return err
		}
	}
	return nil
}

func scrapeAll(ctx context.Context, namespace, port string, pods []string, scrape scrapeFunc) []replicaSample {
	out := make([]replicaSample, len(pods))
	for i, pod := range pods {
		sctx, cancel := context.WithTimeout(ctx, requestTimeout)
		data, err := scrape(sctx, namespace, pod, port)
		cancel()
		if err != nil {
			out[i].err = fmt.Errorf("scraping %s/%s:%s through the pod proxy (needs get on pods/proxy): %w", namespace, pod, port, err)
			continue
		}
		out[i] = parseSample(data)
	}
	return out
}

// parseSample reads the data plane's metrics from a scrape.
func parseSample(data []byte) replicaSample {
	s := replicaSample{grants: map[string]float64{}, refused: map[string]float64{}, wait: map[float64]float64{},
		byTenant: map[string]*tenantSample{}}
	tenant := func(m *dto.Metric) *tenantSample {
		var name, dim string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "tenant":
				name = l.GetValue()
			case "tenant_dimension":
				dim = l.GetValue()
			}
		}
		ts := s.byTenant[name]
		if ts == nil {
			ts = &tenantSample{refused: map[string]float64{}}
			s.byTenant[name] = ts
		}
		if dim != "" {
			ts.dim = dim
		}
		return ts
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		s.err = fmt.Errorf("the metrics page does not parse: %w", err)
		return s
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch name {
			case metrics.QueueDepthName:
				s.depth = m.GetGauge().GetValue()
			case metrics.QueueTenantsName:
				s.tenants = m.GetGauge().GetValue()
			case metrics.QueueGrantsName:
				s.grants[label(m, "tenant_dimension")] += m.GetCounter().GetValue()
			case metrics.QueueRefusedName:
				s.refused[label(m, "reason")] += m.GetCounter().GetValue()
			case metrics.QueueWaitName:
				for _, b := range m.GetHistogram().GetBucket() {
					s.wait[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			case reload.ConfigInfoName:
				s.hash = label(m, "hash")
			case metrics.TenantGrantsName:
				tenant(m).grants += m.GetCounter().GetValue()
			case metrics.TenantWaitName:
				tenant(m).wait += m.GetCounter().GetValue()
			case metrics.TenantQueuedName:
				tenant(m).queued += m.GetGauge().GetValue()
			case metrics.TenantWeightName:
				tenant(m).weight = m.GetGauge().GetValue()
			case metrics.TenantRefusedName:
				tenant(m).refused[label(m, "reason")] += m.GetCounter().GetValue()
			}
		}
	}
	return s
}

// quantile estimates the q-quantile of the waits between two scrapes from
// the histogram's bucket deltas, interpolating linearly inside a bucket as
// PromQL's histogram_quantile does.
func quantile(q float64, before, after map[float64]float64) (time.Duration, bool) {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, false
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		c := after[b] - before[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return time.Duration(prevBound * float64(time.Second)), true
			}
			frac := 0.0
			if c > prevCount {
				frac = (rank - prevCount) / (c - prevCount)
			}
			return time.Duration((prevBound + frac*(b-prevBound)) * float64(time.Second)), true
		}
		prevBound, prevCount = b, c
	}
	return 0, false
}

func printTop(out io.Writer, pods []string, before, after []replicaSample, interval time.Duration) error {
	secs := interval.Seconds()
	var fleet float64
	for i := range pods {
		if before[i].err == nil && after[i].err == nil {
			for d, v := range after[i].grants {
				fleet += v - before[i].grants[d]
			}
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	w := &printer{w: tw}
	w.printf("REPLICA\tCONFIG\tDEPTH\tTENANTS\tGRANTS/S\tSHARE\tWAIT P50\tWAIT P99\tREFUSED/S BY REASON\n")
	for i, pod := range pods {
		b, a := before[i], after[i]
		if err := firstErr(b.err, a.err); err != nil {
			w.printf("%s\t-\t-\t-\t-\t-\t-\t-\t%v\n", pod, err)
			continue
		}
		var grants float64
		var dims []string
		for d, v := range a.grants {
			if delta := v - b.grants[d]; delta > 0 {
				grants += delta
				dims = append(dims, fmt.Sprintf("%s=%.1f", d, delta/secs))
			}
		}
		sort.Strings(dims)
		share := "-"
		if fleet > 0 {
			share = fmt.Sprintf("%.1f%%", 100*grants/fleet)
		}
		p50, p99 := "-", "-"
		if v, ok := quantile(0.5, b.wait, a.wait); ok {
			p50 = v.Round(time.Millisecond).String()
		}
		if v, ok := quantile(0.99, b.wait, a.wait); ok {
			p99 = v.Round(time.Millisecond).String()
		}
		var refused []string
		for r, v := range a.refused {
			if delta := v - b.refused[r]; delta > 0 {
				refused = append(refused, fmt.Sprintf("%s=%.1f", r, delta/secs))
			}
		}
		sort.Strings(refused)
		grantStr := fmt.Sprintf("%.1f", grants/secs)
		if len(dims) > 0 {
			grantStr += " (" + strings.Join(dims, " ") + ")"
		}
		w.printf("%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\n", pod, orDefault(a.hash, "-"), a.depth, a.tenants, grantStr, share, p50, p99,
			orDefault(strings.Join(refused, " "), "-"))
	}
	w.printf("\n")
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
