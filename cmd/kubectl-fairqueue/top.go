package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

// scrapeFunc reads one pod's metrics page through the API server's pod proxy.
type scrapeFunc func(ctx context.Context, namespace, pod, port string) ([]byte, error)

func newTopCommand(g *globals) *cobra.Command {
	var rawURLs []string
	opts := topOptions{}
	cmd := &cobra.Command{
		Use:   "top (POLICY | --metrics-url URL...)",
		Short: "Live queue tables per replica and per tenant: grants/s, share vs weighted share, waits, refusals",
		Long: "Scrape the metrics of every data-plane replica serving a FairQueuePolicy (found through its report\n" +
			"Leases) through the API server's pod proxy, twice, --interval apart, and print the tables. Per replica:\n" +
			"grants/s by tenant dimension, each replica's share, the queue wait p50/p99, refusals/s by reason, depth\n" +
			"and tenants. With priority bands, per band across all replicas: grants/s, share, depth, wait p50/p99\n" +
			"and refusals/s, highest band first (by name with --metrics-url). In capacity mode (spec.capacity), per backend\n" +
			"and replica: in flight against maxInFlight, saturated or not and by what, each saturation signal's last value\n" +
			"against its max (\"?\" with --metrics-url), stale or not, and poll errors/s. Per tenant, across all replicas: grants/s, share of all grants vs weighted share (its\n" +
			"weight over the weights of the tenants granted or queued now), mean wait, queued and refusals/s by\n" +
			"reason. Tenants are shown by the first 12 hex digits of their identity hash; each replica exports its\n" +
			"weighted tenants and its most active others (--tenant-metrics-top), the rest as \"other\". With\n" +
			"--resolve, tenants with a weights entry are also named, by hashing each entry's identity with the\n" +
			"policy's hash key: this needs get on the policy's hash-key and weightsFrom Secrets. API keys are\n" +
			"named by the ${VAR} they come from, never shown. Needs get on pods/proxy and list on leases.\n\n" +
			"With --metrics-url (repeatable) top scrapes those metrics endpoints directly instead, one per replica, without\n" +
			"a cluster and without POLICY: for standalone data planes and for debugging. top exits non-zero when no\n" +
			"replica could be scraped.",
		Example: "  kubectl fairqueue top llm -n team-a --interval 10s --count 0\n" +
			"  kubectl fairqueue top --metrics-url http://127.0.0.1:9090/metrics",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.timeout = g.timeout
			switch {
			case opts.interval <= 0:
				return fmt.Errorf("--interval %v must be positive", opts.interval)
			case opts.tenants < 0:
				return fmt.Errorf("--tenants %d must not be negative", opts.tenants)
			}
			if len(rawURLs) > 0 {
				urls := make([]*url.URL, len(rawURLs))
				for i, raw := range rawURLs {
					u, err := metricsURL(raw)
					if err != nil {
						return err
					}
					urls[i] = u
				}
				switch {
				case len(args) > 0:
					return fmt.Errorf("with --metrics-url top scrapes the URLs given and takes no POLICY (got %q); drop one or the other", args)
				case opts.resolve:
					return errors.New("--resolve reads the policy's Secrets from the cluster; it works with POLICY, not with --metrics-url")
				}
				return runTopDirect(cmd.Context(), opts, urls, &http.Client{Timeout: g.timeout}, g.streams.Out)
			}
			name, err := onePolicy("top", args)
			if err != nil {
				return err
			}
			if err := g.connect(); err != nil {
				return err
			}
			return runTop(cmd.Context(), g, name, opts, g.podProxy, g.streams.Out)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.interval, "interval", 5*time.Second, "time between the two scrapes rates are computed from")
	f.StringVar(&opts.port, "port", "9090", "the data plane's metrics port (number or name)")
	f.IntVar(&opts.count, "count", 1, "how many tables to print, one per --interval; 0 means until interrupted")
	f.BoolVar(&opts.resolve, "resolve", false, "name the tenants that have a weights entry (needs get on the policy's Secrets)")
	f.IntVar(&opts.tenants, "tenants", 20, "most tenant rows to print, busiest first; 0 means all")
	f.StringArrayVar(&rawURLs, "metrics-url", nil, "scrape this data-plane metrics endpoint directly (http://HOST:9090/metrics; repeat it for each replica) "+
		"instead of the replicas of POLICY through the API server")
	return cmd
}

// podProxy reads a pod's /metrics through the API server.
func (g *globals) podProxy(ctx context.Context, namespace, pod, port string) ([]byte, error) {
	if g.kube == nil {
		return nil, fmt.Errorf("no Kubernetes clientset")
	}
	// As Pods().ProxyGet, but through Do, whose Error decodes the API
	// server's Status (DoRaw's error keeps only the status code).
	res := g.kube.CoreV1().RESTClient().Get().Namespace(namespace).Resource("pods").SubResource("proxy").
		Name(utilnet.JoinSchemeNamePort("http", pod, port)).Suffix("metrics").Do(ctx)
	data, err := res.Raw()
	if err != nil {
		return nil, res.Error()
	}
	return data, nil
}

// proxyError says why scraping pod through the API server's pod proxy failed
// and what to do: a pod that does not exist is not a missing permission.
func proxyError(namespace, pod, port string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) && apierrors.IsNotFound(err) {
		if d := status.Status().Details; d != nil && d.Kind == "pods" && d.Name == pod {
			return fmt.Errorf("pod %s/%s does not exist, but a report Lease names it: the replica is gone (deleted or replaced) "+
				"and its Lease has not been cleaned up; kubectl fairqueue status shows which replicas are live: %w", namespace, pod, err)
		}
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("scraping %s/%s:%s through the API server's pod proxy is forbidden: it needs get on pods/proxy in %s "+
			"(or scrape the replica directly with --metrics-url): %w", namespace, pod, port, namespace, err)
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("scraping %s/%s:%s through the API server's pod proxy: the pod answered 404; is --port %s its metrics port? %w",
			namespace, pod, port, port, err)
	}
	return fmt.Errorf("scraping %s/%s:%s through the API server's pod proxy: %w", namespace, pod, port, err)
}

// maxMetricsPage bounds the metrics page read from one replica.
const maxMetricsPage = 32 << 20

// metricsURL checks a --metrics-url; one without a path scrapes /metrics.
func metricsURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--metrics-url %q is not an http(s) URL such as http://127.0.0.1:9090/metrics", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u, nil
}

// httpScrape reads a metrics page from u.
func httpScrape(ctx context.Context, c *http.Client, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s (is the data plane running, and is this its metrics port?): %w", u.Redacted(), err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: HTTP %s; give the data plane's metrics endpoint (its metrics port, path /metrics)", u.Redacted(), res.Status)
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, maxMetricsPage+1))
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", u.Redacted(), err)
	}
	if len(data) > maxMetricsPage {
		return nil, fmt.Errorf("scraping %s: the metrics page is larger than %d MiB", u.Redacted(), maxMetricsPage>>20)
	}
	return data, nil
}

// target is one replica to scrape.
type target struct {
	name   string
	scrape func(ctx context.Context) ([]byte, error)
}

// runTopDirect scrapes the metrics endpoints at urls, without a cluster.
func runTopDirect(ctx context.Context, o topOptions, urls []*url.URL, c *http.Client, out io.Writer) error {
	targets := make([]target, len(urls))
	for i, u := range urls {
		targets[i] = target{name: u.Redacted(), scrape: func(ctx context.Context) ([]byte, error) { return httpScrape(ctx, c, u) }}
	}
	return topLoop(ctx, o, func(context.Context) ([]target, error) { return targets, nil }, nil, out)
}

// replicaSample is what one scrape of one replica said.
type replicaSample struct {
	depth, tenants float64
	grants         map[string]float64       // by tenant dimension
	refused        map[string]float64       // by reason
	wait           map[float64]float64      // cumulative bucket counts by upper bound
	byTenant       map[string]*tenantSample // by tenant label (hash prefix or "other")
	byBand         map[string]*bandSample   // by band label ("" without bands)
	byBackend      map[string]*backendSample
	// capWaiting is the queue depth labelled limit_type capacity, when the
	// data plane exports it (hasCapWaiting).
	capWaiting    float64
	hasCapWaiting bool
	hash          string
	err           error
}

// tenantSample is what one scrape said about one tenant.
type tenantSample struct {
	dim                  string
	grants, wait, queued float64
	weight               float64            // 0 when not exported (the "other" tenants)
	refused              map[string]float64 // by reason
}

// bandSample is what one scrape said about one priority band.
type bandSample struct {
	depth, grants, refused float64
	wait                   map[float64]float64 // cumulative bucket counts by upper bound
}

// topOptions are top's flags.
type topOptions struct {
	port     string
	interval time.Duration
	count    int
	// timeout bounds each scrape and API call (--request-timeout; 0: none).
	timeout time.Duration
	// resolve names the weighted tenants; tenants is the most tenant rows.
	resolve bool
	tenants int
	// bandOrder lists the policy's bands, highest first; nil orders them
	// by name.
	bandOrder []string
	// capacity is the policy's rendered capacity, for the signals' max;
	// nil with --metrics-url (every max unknown).
	capacity *config.Capacity
}

func runTop(ctx context.Context, g *globals, policy string, o topOptions, scrape scrapeFunc, out io.Writer) error {
	// The policy gives the band order and the signals' max. top needs only
	// the replicas' metrics: without get on the policy, bands come by name
	// and each max shows as "?".
	pctx, cancel := withTimeout(ctx, o.timeout)
	if p, err := g.getPolicy(pctx, policy); err == nil {
		for _, b := range p.Spec.FairQueuing.PriorityBands {
			o.bandOrder = append(o.bandOrder, b.Name)
		}
		o.capacity = render.Capacity(&p.Spec)
	}
	cancel()
	var names map[string]string
	if o.resolve {
		var err error
		if names, err = resolveTenants(ctx, g, policy); err != nil {
			return err
		}
	}
	replicas := func(ctx context.Context) ([]target, error) {
		lctx, cancel := withTimeout(ctx, o.timeout)
		leases, err := replicaLeases(lctx, g, g.namespace, policy)
		cancel()
		if err != nil {
			return nil, err
		}
		var pods []string
		for i := range leases {
			pods = append(pods, holder(&leases[i]))
		}
		sort.Strings(pods)
		if len(pods) == 0 {
			return nil, fmt.Errorf("no data-plane replica reports for policy %s/%s: are the data planes running with --configmap and POD_NAME? (kubectl fairqueue status %s)",
				g.namespace, policy, policy)
		}
		targets := make([]target, len(pods))
		for i, pod := range pods {
			targets[i] = target{name: pod, scrape: func(ctx context.Context) ([]byte, error) {
				data, err := scrape(ctx, g.namespace, pod, o.port)
				if err != nil {
					return nil, proxyError(g.namespace, pod, o.port, err)
				}
				return data, nil
			}}
		}
		return targets, nil
	}
	return topLoop(ctx, o, replicas, names, out)
}

// topLoop prints o.count tables (0: until ctx ends) of the replicas that
// replicas returns, each from two scrapes o.interval apart. It fails when no
// replica could be scraped twice for a table.
func topLoop(ctx context.Context, o topOptions, replicas func(context.Context) ([]target, error), names map[string]string, out io.Writer) error {
	for n := 0; o.count == 0 || n < o.count; n++ {
		targets, err := replicas(ctx)
		if err != nil {
			return err
		}
		before := scrapeAll(ctx, targets, o.timeout)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.interval):
		}
		after := scrapeAll(ctx, targets, o.timeout)
		pods := make([]string, len(targets))
		for i, t := range targets {
			pods[i] = t.name
		}
		if err := printTop(out, pods, before, after, o.interval); err != nil {
			return err
		}
		if err := printBands(out, before, after, o.interval, o.bandOrder); err != nil {
			return err
		}
		if err := printCapacity(out, pods, before, after, o.interval, signalMaxes(o.capacity)); err != nil {
			return err
		}
		if err := printTenants(out, before, after, o.interval, o.tenants, names); err != nil {
			return err
		}
		var first error
		scraped := 0
		for i := range targets {
			if err := firstErr(before[i].err, after[i].err); err != nil {
				first = cmp.Or(first, err)
			} else {
				scraped++
			}
		}
		if scraped == 0 {
			return fmt.Errorf("no replica could be scraped (%d tried, errors in the table above); the first: %w", len(targets), first)
		}
	}
	return nil
}

func scrapeAll(ctx context.Context, targets []target, timeout time.Duration) []replicaSample {
	out := make([]replicaSample, len(targets))
	for i, t := range targets {
		sctx, cancel := withTimeout(ctx, timeout)
		data, err := t.scrape(sctx)
		cancel()
		if err != nil {
			out[i].err = err
			continue
		}
		out[i] = parseSample(data)
	}
	return out
}

// parseSample reads the data plane's metrics from a scrape.
func parseSample(data []byte) replicaSample {
	s := replicaSample{grants: map[string]float64{}, refused: map[string]float64{}, wait: map[float64]float64{},
		byTenant: map[string]*tenantSample{}, byBand: map[string]*bandSample{}, byBackend: map[string]*backendSample{}}
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
	band := func(m *dto.Metric) *bandSample {
		name := label(m, "band")
		b := s.byBand[name]
		if b == nil {
			b = &bandSample{wait: map[float64]float64{}}
			s.byBand[name] = b
		}
		return b
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch name {
			case metrics.QueueDepthName:
				s.depth += m.GetGauge().GetValue()
				band(m).depth += m.GetGauge().GetValue()
				s.capacityQueued(m, label)
			case metrics.BackendInFlightName, metrics.BackendMaxInFlightName, metrics.BackendSaturatedName,
				metrics.BackendStaleName, metrics.BackendSignalName, metrics.BackendPollErrorsName:
				s.parseBackend(name, m, label)
			case metrics.QueueTenantsName:
				s.tenants = m.GetGauge().GetValue()
			case metrics.QueueGrantsName:
				s.grants[label(m, "tenant_dimension")] += m.GetCounter().GetValue()
				band(m).grants += m.GetCounter().GetValue()
			case metrics.QueueRefusedName:
				s.refused[label(m, "reason")] += m.GetCounter().GetValue()
				band(m).refused += m.GetCounter().GetValue()
			case metrics.QueueWaitName:
				bw := band(m).wait
				for _, b := range m.GetHistogram().GetBucket() {
					s.wait[b.GetUpperBound()] += float64(b.GetCumulativeCount())
					bw[b.GetUpperBound()] += float64(b.GetCumulativeCount())
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
	w := newTable(out)
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
	return w.flush()
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// bandRow is one band's figures over a top window, summed over replicas.
type bandRow struct {
	name                   string
	grants, refused, depth float64
	waitBefore, waitAfter  map[float64]float64
}

// printBands prints the per-band table when the replicas export bands
// (queue metrics with a non-empty band label), in order (highest first;
// bands not in it after, by name).
func printBands(out io.Writer, before, after []replicaSample, interval time.Duration, order []string) error {
	rows := map[string]*bandRow{}
	for i := range after {
		b, a := before[i], after[i]
		if firstErr(b.err, a.err) != nil {
			continue
		}
		for name, ab := range a.byBand {
			if name == "" {
				continue // the series of a data plane without bands
			}
			bb := b.byBand[name]
			if bb == nil {
				bb = &bandSample{wait: map[float64]float64{}}
			}
			r := rows[name]
			if r == nil {
				r = &bandRow{name: name, waitBefore: map[float64]float64{}, waitAfter: map[float64]float64{}}
				rows[name] = r
			}
			r.grants += counterDelta(ab.grants, bb.grants)
			r.refused += counterDelta(ab.refused, bb.refused)
			r.depth += ab.depth
			for le, v := range ab.wait {
				r.waitAfter[le] += v
				r.waitBefore[le] += bb.wait[le]
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	list := make([]*bandRow, 0, len(rows))
	var total float64
	for _, r := range rows {
		list = append(list, r)
		total += r.grants
	}
	rank := func(name string) int {
		for i, o := range order {
			if o == name {
				return i
			}
		}
		return len(order)
	}
	sort.Slice(list, func(i, j int) bool {
		ri, rj := rank(list[i].name), rank(list[j].name)
		if ri != rj {
			return ri < rj
		}
		return list[i].name < list[j].name
	})
	secs := interval.Seconds()
	w := newTable(out)
	w.printf("BAND\tGRANTS/S\tSHARE\tDEPTH\tWAIT P50\tWAIT P99\tREFUSED/S\n")
	for _, r := range list {
		share, p50, p99 := "-", "-", "-"
		if total > 0 {
			share = fmt.Sprintf("%.1f%%", 100*r.grants/total)
		}
		if v, ok := quantile(0.5, r.waitBefore, r.waitAfter); ok {
			p50 = v.Round(time.Millisecond).String()
		}
		if v, ok := quantile(0.99, r.waitBefore, r.waitAfter); ok {
			p99 = v.Round(time.Millisecond).String()
		}
		w.printf("%s\t%.1f\t%s\t%.0f\t%s\t%s\t%.1f\n", r.name, r.grants/secs, share, r.depth, p50, p99, r.refused/secs)
	}
	w.printf("\n")
	return w.flush()
}
