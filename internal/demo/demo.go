// Package demo runs fairqueue's demonstration scenario on one machine and
// reports what happened: a local control plane (hack/localcp), the operator,
// a fake OpenAI-compatible upstream and two data-plane replicas run as local
// processes; the demo applies a FairQueuePolicy with kubectl, offers load
// from three tenants (one flooding, weights 1:1:3) through both replicas,
// changes the weights midway by patching a Secret, and measures each
// tenant's share of admitted requests against its weighted share.
//
// The token scenario (Options.Scenario ScenarioTokens) limits the model in
// tokens instead, with deferred admission and token-weighted fair queuing,
// and measures each tenant's share of the tokens settled while one tenant
// sends prompts ten times larger than the others.
//
// The bands scenario (ScenarioBands) puts an interactive tenant in a
// priority band above a batch tenant that floods, and measures that the
// interactive tenant keeps its rate and latency while batch takes the spare
// capacity (see bands.go).
//
// hack/demo prints the live table and writes the chart; test/e2e runs the
// same scenario headless and asserts on the Result.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/gobuild"
	"github.com/fairqueue/fairqueue/internal/loadgen"
	"github.com/fairqueue/fairqueue/internal/proc"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

var nan = math.NaN()

// Tenant is one of the scenario's simulated clients.
type Tenant struct {
	// Name labels the tenant in the table and chart.
	Name string
	// APIKey identifies the tenant to the data plane.
	APIKey string
	// Rate is the tenant's offered load in requests per second.
	Rate float64
	// PromptBytes, MaxTokens and Stream shape the tenant's requests (see
	// loadgen.Tenant); zero values send the smallest request.
	PromptBytes int
	MaxTokens   int
	Stream      bool
	// Clients is, in the fleet scenario, how many closed-loop clients the
	// tenant keeps on each replica (instead of an offered Rate).
	Clients []int
	// Start delays the tenant's first request by this much after the load
	// starts.
	Start time.Duration
}

// Tenants are the scenario's clients: acme floods, and all three offer more
// than their weighted share of the capacity, so all three stay backlogged
// and the scheduler alone decides the shares.
var Tenants = []Tenant{
	{Name: "acme", APIKey: "sk-demo-acme-00000000000000000000", Rate: 150},
	{Name: "globex", APIKey: "sk-demo-globex-000000000000000000", Rate: 60},
	{Name: "initech", APIKey: "sk-demo-initech-00000000000000000", Rate: 90},
}

// Weights before and after the change, indexed like Tenants.
var (
	// WeightsBefore hold while PRIORITY_TENANT names initech.
	WeightsBefore = []float64{1, 1, 3}
	// WeightsAfter hold once the patch makes PRIORITY_TENANT name acme.
	WeightsAfter = []float64{3, 1, 1}
)

// The indexes in Tenants of the tenant PRIORITY_TENANT names before and after
// the change.
const priorityBefore, priorityAfter = 2, 0

// Replicas is the number of data-plane replicas of the shares and tokens
// scenarios (one when standalone).
const Replicas = 2

// Options configure one run.
type Options struct {
	// RepoDir is the repository root; default the current directory.
	RepoDir string
	// BinDir holds the binaries, and bin/k8s the control plane's; default
	// RepoDir/bin.
	BinDir string
	// Build builds the binaries into BinDir first.
	Build bool
	// WorkDir receives the logs, kubeconfig and config files; default a new
	// temporary directory. It is removed at the end unless KeepWorkDir is set
	// or the run failed.
	WorkDir string
	// KeepWorkDir keeps WorkDir after a successful run.
	KeepWorkDir bool
	// Duration is how long load is offered; default 60s.
	Duration time.Duration
	// ChangeAt is when, after the load started, the weights change; default
	// half of Duration.
	ChangeAt time.Duration
	// PerModel is each replica's model limit in requests per second; default
	// 45. In the fleet scenario it is the limit the fleet shares; default 90.
	PerModel int
	// Out receives progress lines and, with Live, the table; default io.Discard.
	Out io.Writer
	// Live prints the per-tenant table every second.
	Live bool
	// Scenario is ScenarioShares (the default) or ScenarioTokens.
	Scenario string
	// TokensPerPeriod is, in the token scenario, each replica's model limit
	// in tokens per TokenPeriod; default 20000.
	TokensPerPeriod int
	// Cost is, in the token scenario, fairQueuing.cost: "Tokens" (the
	// default) or "Requests", the negative control.
	Cost string
	// Standalone runs the scenario without a control plane: one data plane
	// reads the policy and the tenants Secret from files (--policy,
	// --secrets), and the weight change rewrites the Secret's file. It needs
	// no envtest binaries and starts in seconds.
	Standalone bool
	// OutageAt is, in the fleet scenario, when Redis is killed after the
	// load starts, and Outage how long it stays down (0: no outage).
	OutageAt, Outage time.Duration
	// FailureMode is, in the fleet scenario, the store's behaviour while
	// Redis is down.
	FailureMode redisstore.FailureMode
	// RedisServer is, in the fleet scenario, the redis-server binary: empty
	// looks up "redis-server" on PATH, "-" uses the embedded miniredis.
	RedisServer string
	// NoBands runs the bands scenario's negative control: the same load
	// with one band and equal weights.
	NoBands bool
}

func (o *Options) defaults() error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Scenario == ScenarioFleet {
		if o.PerModel == 0 {
			o.PerModel = 90
		}
		return o.validateFleet()
	}
	if o.RepoDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		o.RepoDir = wd
	}
	if o.BinDir == "" {
		o.BinDir = filepath.Join(o.RepoDir, "bin")
	}
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	if o.ChangeAt == 0 {
		o.ChangeAt = o.Duration / 2
	}
	if o.PerModel == 0 {
		o.PerModel = 45
	}
	if o.Scenario == "" {
		o.Scenario = ScenarioShares
	}
	if o.TokensPerPeriod == 0 {
		o.TokensPerPeriod = 20000
	}
	if o.Cost == "" {
		o.Cost = CostTokens
	}
	switch {
	case o.Scenario != ScenarioShares && o.Scenario != ScenarioTokens && o.Scenario != ScenarioBands:
		return fmt.Errorf("scenario %q: give %s, %s, %s or %s", o.Scenario, ScenarioShares, ScenarioTokens, ScenarioBands, ScenarioFleet)
	case o.Cost != CostTokens && o.Cost != CostRequests:
		return fmt.Errorf("cost %q: give %s or %s", o.Cost, CostTokens, CostRequests)
	case o.TokensPerPeriod < 2*maxReservation || o.TokensPerPeriod > 100000000:
		return fmt.Errorf("tokens per period %d: give between %d (a large request's reservation twice) and 100000000", o.TokensPerPeriod, 2*maxReservation)
	case o.Duration < 10*time.Second || o.Duration > 30*time.Minute:
		return fmt.Errorf("duration %v: give between 10s and 30m", o.Duration)
	case o.ChangeAt < 3*time.Second || o.ChangeAt > o.Duration-3*time.Second:
		return fmt.Errorf("change at %v: give a time at least 3s after the start and 3s before the end of the %v load", o.ChangeAt, o.Duration)
	case o.PerModel < 1 || o.PerModel > 10000:
		return fmt.Errorf("per-model limit %d: give between 1 and 10000 requests per second", o.PerModel)
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	// Scenario is the scenario that ran, and Cost its fairQueuing.cost.
	Scenario, Cost string
	// Tenants are the scenario's clients, indexed like Admitted.
	Tenants []Tenant
	// Duration is how long load was offered.
	Duration time.Duration
	// Admitted[i][k] counts tenant i's admitted answers in tick k (Tick long)
	// after the load started.
	Admitted [][]uint64
	// Tokens[i][k] counts the tokens tenant i's admitted answers that ended
	// in tick k reported in their usage.
	Tokens [][]uint64
	// Summary is the load generator's report.
	Summary *loadgen.Summary
	// PatchStart and PatchDone bracket the change of the tenants Secret,
	// measured from the start of the load.
	PatchStart, PatchDone time.Duration
	// Moved is when the shares first moved to the new weights (see
	// MovedAfter), or -1 if they never did.
	Moved time.Duration
	// ReplicaLoaded is when each data-plane replica reported the new config
	// hash, or -1 if it never did.
	ReplicaLoaded []time.Duration
	// DataPlanes are the replicas' counters, scraped after the load.
	DataPlanes []DataPlaneCounts
	// ShutdownErr reports processes that did not exit cleanly.
	ShutdownErr error
	// OpenPorts lists loopback addresses still accepting connections after
	// shutdown.
	OpenPorts []string
	// WorkDir is where the logs were, if kept.
	WorkDir string

	// The fleet scenario's measurements, second by second.

	// Redis describes the server the fleet shared.
	Redis string
	// ReplicaAdmitted[t][r][s] counts tenant t's admissions on replica r in
	// second s.
	ReplicaAdmitted [][FleetReplicas][]int
	// Unavailable[s] counts 503 answers in second s.
	Unavailable []int
	// OutageStart and OutageEnd are the outage's offsets; negative if none.
	OutageStart, OutageEnd time.Duration
	// PerModel is the limit the fleet shared, per second.
	PerModel int

	// The bands scenario's measurements.

	// Bands is whether the policy had priority bands (false: the negative
	// control); Capacity, the model limit of all replicas, per second.
	Bands    bool
	Capacity float64
	// BandWindows are the stretches compared: chat alone, batch flooding.
	BandWindows []BandWindow
}

// Shares returns each tenant's share of the answers admitted in [from, to).
func (r *Result) Shares(from, to time.Duration) []float64 {
	return sharesOf(r.Admitted, from, to)
}

// TokenShares returns each tenant's share of the tokens settled in [from, to).
func (r *Result) TokenShares(from, to time.Duration) []float64 {
	return sharesOf(r.Tokens, from, to)
}

// sharesOf returns each tenant's share of series summed over [from, to).
func sharesOf(series [][]uint64, from, to time.Duration) []float64 {
	counts := make([]float64, len(series))
	for i, s := range series {
		for k := max(int(from/Tick), 0); k < int(to/Tick) && k < len(s); k++ {
			counts[i] += float64(s[k])
		}
	}
	return normalize(counts)
}

// normalize turns counts into shares of their sum, in place; NaN shares when
// the sum is 0.
func normalize(counts []float64) []float64 {
	total := 0.0
	for _, c := range counts {
		total += c
	}
	for i := range counts {
		if total == 0 {
			counts[i] = nan
		} else {
			counts[i] /= total
		}
	}
	return counts
}

// movedWindow is the sliding window in which shares are compared to tell
// when they moved.
const movedWindow = 5 * Tick

// MovedAfter returns the end of the first sliding window, starting at or
// after from and ending by until, in which every tenant whose weighted share
// changed is closer to its new weighted share than to its old one; -1 when
// there is none.
func MovedAfter(admitted [][]uint64, from, until time.Duration) time.Duration {
	r := Result{Admitted: admitted}
	before, after := testutil.WeightedShares(WeightsBefore), testutil.WeightedShares(WeightsAfter)
	n := 0
	for _, s := range admitted {
		n = max(n, len(s))
	}
	for end := from + movedWindow; end <= min(time.Duration(n)*Tick, until); end += Tick {
		shares := r.Shares(end-movedWindow, end)
		moved := true
		for i, s := range shares {
			if before[i] != after[i] && !(math.Abs(s-after[i]) < math.Abs(s-before[i])) {
				moved = false
			}
		}
		if moved {
			return end
		}
	}
	return -1
}

// plane is the data planes a run drives load through, however they were
// configured: by the operator through a control plane, or from files.
type plane struct {
	// targets are the replicas' traffic base URLs; metricsURLs their
	// /metrics URLs, in the same order.
	targets, metricsURLs []string
	// addrs are loopback addresses that must be closed after shutdown.
	addrs []string
	// initialHash is the config hash the replicas run before the change.
	initialHash string
	// change applies the scenario's weight change.
	change weightChange
}

// weightChange is how a run changes the weights midway.
type weightChange struct {
	// what says what apply does, for the progress lines.
	what string
	// apply changes the weights.
	apply func(ctx context.Context) error
	// status, if set, returns the policy's status once the replicas run the
	// new config, for the progress lines.
	status func(ctx context.Context, replicas int) (string, error)
}

// Run runs the scenario and returns what it measured. It returns an error
// when the scenario could not run at all; what it measured is for the caller
// to judge. Every process it started is stopped before it returns.
func Run(ctx context.Context, o Options) (res *Result, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Scenario == ScenarioFleet {
		return runFleet(ctx, o)
	}
	p := &progress{out: o.Out}
	work := o.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "fairqueue-demo-"); err != nil {
			return nil, err
		}
	}
	sc := o.scenario()
	res = &Result{Scenario: o.Scenario, Tenants: sc.tenants, Duration: o.Duration, Moved: -1, PatchStart: -1, PatchDone: -1, WorkDir: work}
	if sc.tokens {
		res.Cost = o.Cost
	}
	if sc.bands {
		res.Bands, res.Capacity = !o.NoBands, sc.capacity
	}
	defer func() {
		if err != nil || o.KeepWorkDir {
			p.printf("Logs and files kept in %s\n", work)
			return
		}
		if rmErr := os.RemoveAll(work); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		res.WorkDir = ""
	}()

	if o.Build {
		what, pkgs := "the operator, data plane, fake upstream and local control plane", []string{"./cmd/manager", "./cmd/dataplane", "./cmd/fakeupstream", "./hack/localcp"}
		if o.Standalone {
			what, pkgs = "the data plane and the fake upstream", []string{"./cmd/dataplane", "./cmd/fakeupstream"}
		}
		if err := p.step("Building "+what+" into "+o.BinDir, func() error {
			return gobuild.Build(ctx, o.RepoDir, o.BinDir+string(filepath.Separator), nil, pkgs...)
		}); err != nil {
			return res, err
		}
	}

	sup := proc.NewSupervisor(work, 15*time.Second)
	stopped := false
	defer func() {
		if !stopped {
			_ = sup.StopAll()
		}
	}()
	start := startKube
	if o.Standalone {
		start = startStandalone
	}
	pl, err := start(ctx, o, sc, p, sup, work)
	if pl != nil {
		defer func() {
			for _, a := range pl.addrs {
				if !portClosed(a) {
					res.OpenPorts = append(res.OpenPorts, a)
				}
			}
		}()
	}
	if err != nil {
		return res, err
	}

	// The load.
	loadRes, err := runLoad(ctx, o, sc, p, pl)
	if loadRes != nil {
		res.Admitted, res.Tokens, res.Summary = loadRes.admitted, loadRes.tokens, loadRes.summary
		res.PatchStart, res.PatchDone, res.ReplicaLoaded = loadRes.patchStart, loadRes.patchDone, loadRes.loaded
		if sc.weightsAfter != nil {
			res.Moved = MovedAfter(res.Admitted, res.PatchStart, o.Duration)
		}
		res.BandWindows = loadRes.bandWindows
	}
	if err != nil {
		return res, err
	}
	httpc := &http.Client{Timeout: 5 * time.Second}
	for _, u := range pl.metricsURLs {
		c, err := scrape(ctx, httpc, u)
		if err != nil {
			return res, err
		}
		res.DataPlanes = append(res.DataPlanes, *c)
	}
	httpc.CloseIdleConnections()

	// Shutdown: the data planes first (they drain), the rest after them.
	_ = p.step("Stopping every process the demo started", func() error {
		stopped = true
		res.ShutdownErr = sup.StopAll()
		return res.ShutdownErr
	})
	return res, nil
}

// startUpstream starts the fake upstream and returns its address.
func startUpstream(ctx context.Context, o Options, sc scenario, p *progress, sup *proc.Supervisor) (string, error) {
	return p.startServer(ctx, sup, "fakeupstream", func(addr string) []string {
		return append([]string{filepath.Join(o.BinDir, "fakeupstream"), "--listen", addr, "--latency", "5ms", "--models", loadgen.DefaultModel}, sc.upstreamArgs...)
	}, "")
}

// startDataPlane starts one data-plane replica called name with args (besides
// its listen addresses) and waits until it is ready; it returns the traffic
// and metrics addresses.
func startDataPlane(ctx context.Context, o Options, p *progress, sup *proc.Supervisor, name string, args ...string) (traffic, metrics string, err error) {
	if metrics, err = proc.FreeAddr(); err != nil {
		return "", "", fmt.Errorf("the metrics address of %s: %w", name, err)
	}
	traffic, err = p.startServer(ctx, sup, name, func(addr string) []string {
		return append(append([]string{filepath.Join(o.BinDir, "dataplane")}, args...),
			"--listen", addr, "--metrics-listen", metrics, "--shutdown-grace", "5s")
	}, "")
	if err != nil {
		return "", "", err
	}
	if err := waitHTTP(ctx, "http://"+metrics+"/readyz", 30*time.Second); err != nil {
		return "", "", fmt.Errorf("%s never became ready: %w", name, err)
	}
	return traffic, metrics, nil
}

// startKube starts a local control plane, the operator, the fake upstream
// and the data planes, which watch the ConfigMap the operator renders from
// the policy the demo applies with kubectl.
func startKube(ctx context.Context, o Options, sc scenario, p *progress, sup *proc.Supervisor, work string) (*plane, error) {
	kubectlPath, err := findKubectl(o.BinDir)
	if err != nil {
		return nil, err
	}
	pl := &plane{}

	// The control plane.
	kubeconfig := filepath.Join(work, "kubeconfig")
	var cp *proc.Process
	if err := p.step("Starting etcd and kube-apiserver (hack/localcp)", func() error {
		cp, err = sup.Start(ctx, "localcp", filepath.Join(o.BinDir, "localcp"),
			"--dir", filepath.Join(work, "controlplane"), "--kubeconfig", kubeconfig,
			"--assets", filepath.Join(o.BinDir, "k8s"), "--crds", filepath.Join(o.RepoDir, "config", "crd", "bases"))
		if err != nil {
			return err
		}
		p.printf("    log: %s\n", cp.LogPath())
		return waitForLine(ctx, cp, "ready", 3*time.Minute)
	}); err != nil {
		return pl, err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return pl, fmt.Errorf("reading the kubeconfig localcp wrote: %w", err)
	}
	if u, err := url.Parse(restCfg.Host); err == nil {
		pl.addrs = append(pl.addrs, u.Host)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return pl, err
	}
	kc := kubectl{path: kubectlPath, kubeconfig: kubeconfig}

	// The fake upstream and the operator.
	upstreamAddr, err := startUpstream(ctx, o, sc, p, sup)
	if err != nil {
		return pl, err
	}
	pl.addrs = append(pl.addrs, upstreamAddr)
	probeAddr, err := p.startServer(ctx, sup, "manager", func(addr string) []string {
		return []string{filepath.Join(o.BinDir, "manager"), "--kubeconfig", kubeconfig, "--leader-elect=false",
			"--metrics-bind-address", "0", "--health-probe-bind-address", addr}
	}, "/readyz")
	if err != nil {
		return pl, err
	}
	pl.addrs = append(pl.addrs, probeAddr)

	// The policy.
	manifestPath := filepath.Join(work, "demo.yaml")
	manifest, objects := manifests(Tenants[priorityBefore].APIKey, "http://"+upstreamAddr, o.PerModel), fmt.Sprintf("Secret %s, FairQueuePolicy %s", TenantsSecret, PolicyName)
	switch {
	case sc.tokens:
		manifest, objects = tokenManifests("http://"+upstreamAddr, o.TokensPerPeriod, o.Cost), "FairQueuePolicy "+PolicyName
	case sc.bands:
		manifest = append(append(tenantsSecret(ChatVar, sc.tenants[0].APIKey), "---\n"...), bandsPolicy("http://"+upstreamAddr, o.PerModel, !o.NoBands)...)
	}
	if err := os.WriteFile(manifestPath, manifest, 0o600); err != nil {
		return pl, err
	}
	var rend *rendered
	if err := p.step(fmt.Sprintf("kubectl apply -f %s (%s) and wait for the operator to render it", manifestPath, objects), func() error {
		out, err := kc.run(ctx, nil, "apply", "-f", manifestPath)
		if err != nil {
			if sc.tokens && strings.Contains(err.Error(), "deferredAdmission") {
				err = fmt.Errorf("%w\nthe token scenario needs a FairQueuePolicy CRD with spec.deferredAdmission and fairQueuing.cost (issue #13): rebuild with those API types and run `make manifests`", err)
			}
			if sc.bands && strings.Contains(err.Error(), "priorityBands") {
				err = fmt.Errorf("%w\nthe bands scenario needs a FairQueuePolicy CRD with fairQueuing.priorityBands (issue #21): rebuild with those API types and run `make manifests`", err)
			}
			return err
		}
		p.printf("    %s\n", strings.ReplaceAll(out, "\n", "\n    "))
		rend, err = waitRendered(ctx, kube, time.Minute)
		return err
	}); err != nil {
		return pl, err
	}
	p.printf("    ConfigMap %s/%s rendered, config hash %s\n", Namespace, configMapName, rend.hash)
	if status, err := kc.run(ctx, nil, "get", "fqp", PolicyName, "-n", Namespace, "-o", statusColumns); err == nil {
		p.printf("    kubectl get fqp %s:\n        %s\n", PolicyName, strings.ReplaceAll(status, "\n", "\n        "))
	}
	pl.initialHash = rend.hash
	pl.change = weightChange{
		what: "kubectl patch secret " + TenantsSecret,
		apply: func(ctx context.Context) error {
			patch := fmt.Sprintf(`{"stringData":{%q:%q}}`, PriorityVar, Tenants[priorityAfter].APIKey)
			_, err := kc.run(ctx, nil, "patch", "secret", TenantsSecret, "-n", Namespace, "--type", "merge", "-p", patch)
			return err
		},
		status: func(ctx context.Context, replicas int) (string, error) { return waitStatus(ctx, kc, replicas) },
	}

	// The data planes watch the rendered ConfigMap and read the hash-key
	// Secret through the API server, as in a cluster.
	for i := range Replicas {
		name := fmt.Sprintf("dataplane-%d", i+1)
		traffic, metrics, err := startDataPlane(ctx, o, p, sup, name, "--config-source", "kubernetes",
			"--configmap", Namespace+"/"+configMapName, "--kubeconfig", kubeconfig, "--pod-name", name)
		if err != nil {
			return pl, err
		}
		pl.addrs = append(pl.addrs, traffic, metrics)
		pl.targets = append(pl.targets, "http://"+traffic)
		pl.metricsURLs = append(pl.metricsURLs, "http://"+metrics+"/metrics")
	}
	return pl, nil
}

// startServer starts a process listening on a free loopback port, given by
// args(addr), and waits until it accepts connections (and, with readyPath,
// answers 200 there). It returns the address.
func (p *progress) startServer(ctx context.Context, sup *proc.Supervisor, name string, args func(addr string) []string, readyPath string) (string, error) {
	var addr string
	err := p.step("Starting "+name, func() error {
		var err error
		if addr, err = proc.FreeAddr(); err != nil {
			return err
		}
		argv := args(addr)
		child, err := sup.Start(ctx, name, argv[0], argv[1:]...)
		if err != nil {
			return err
		}
		p.printf("    %s on %s, log: %s\n", name, addr, child.LogPath())
		deadline := time.Now().Add(time.Minute)
		for {
			if child.Exited() {
				return fmt.Errorf("%s exited at start (%w): see %s", name, child.ExitReason(), child.LogPath())
			}
			if readyPath == "" {
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					_ = c.Close() // a probe: nothing was sent
					return nil
				}
			} else if waitHTTP(ctx, "http://"+addr+readyPath, 200*time.Millisecond) == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not listen on %s within a minute: see %s", name, addr, child.LogPath())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return addr, err
}

// waitHTTP polls url until it answers 200 or timeout passes.
func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close() // only the status matters
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200 within %v: %w", url, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portClosed reports whether nothing accepts connections on addr any more.
func portClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return true
	}
	_ = c.Close() // a probe: nothing was sent
	return false
}

// waitForLine waits until the process's log holds line on a line by itself.
func waitForLine(ctx context.Context, child *proc.Process, line string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(child.LogPath())
		if err == nil && strings.Contains("\n"+string(data), "\n"+line+"\n") {
			return nil
		}
		if child.Exited() {
			return fmt.Errorf("%s exited before printing %q (%w): see %s", child.Name(), line, child.ExitReason(), child.LogPath())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not print %q within %v: see %s", child.Name(), line, timeout, child.LogPath())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// progress prints what the demo is doing and for how long.
type progress struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, format, args...) // progress only: the demo's outcome does not depend on it
}

// step prints what, runs f, and prints how long it took; while f runs, it
// prints a line every 5 seconds so a slow step is never silent.
func (p *progress) step(what string, f func() error) error {
	start := time.Now()
	p.printf("==> %s\n", what)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.printf("    ... still at it (%s)\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	err := f()
	close(done)
	wg.Wait()
	if err != nil {
		p.printf("    FAILED after %s: %v\n", time.Since(start).Round(100*time.Millisecond), err)
		return err
	}
	p.printf("    done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// clk is the clock of the load and the observer.
var clk clock.Clock = clock.RealClock{}
