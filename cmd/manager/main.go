// Command manager runs the fairqueue operator: it renders every
// FairQueuePolicy, with the Secrets it references, into the ConfigMap the data
// plane loads, and reports the outcome in the policy's status.
//
// Usage:
//
//	manager [flags]
//
// Flags:
//
//	--kubeconfig string
//	    Path to a kubeconfig. Only needed out of cluster; in a Pod the service
//	    account is used.
//	--namespaces string
//	    Comma-separated namespaces to watch. Empty (the default) watches all
//	    namespaces. Setting it lets the operator run with RoleBindings in just
//	    those namespaces instead of a ClusterRoleBinding.
//	--metrics-bind-address string
//	    Address of the Prometheus metrics endpoint, plain HTTP (default
//	    ":8080"); "0" disables it.
//	--health-probe-bind-address string
//	    Address serving /healthz and /readyz (default ":8081").
//	--leader-elect
//	    Elect a leader through a Lease so only one replica reconciles
//	    (default true). Disable only when running a single replica.
//	--leader-election-namespace string
//	    Namespace of the leader-election Lease. Defaults to the namespace the
//	    Pod runs in; required out of cluster with --leader-elect.
//	--max-concurrent-reconciles int
//	    Policies reconciled in parallel (default 2).
//	--kube-api-qps float
//	    Requests per second the manager may send to the API server (default
//	    50), however the connection is configured (--kubeconfig, KUBECONFIG
//	    or in cluster). client-go's own default, 5, delays every render
//	    behind a few Secret rotations.
//	--kube-api-burst int
//	    Requests the manager may send at once above --kube-api-qps (default
//	    100).
//	-v int
//	    Log verbosity (default 0); logs are structured key/value text and
//	    never contain a Secret value or raw identity. Levels above 5 act as
//	    5: client-go logs request and response bodies (Secret data among
//	    them) from level 6 on, so those levels are never enabled.
//
// On SIGTERM the manager stops reconciling, releases leadership and then
// waits (up to 10s) until every Event it queued is written, so the Events of
// a leader's last reconciles survive a handover.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/version"
)

// options are the command-line settings of the manager.
type options struct {
	kubeconfig              string
	namespaces              []string
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	maxConcurrentReconciles int
	kubeAPIQPS              float64
	kubeAPIBurst            int
}

// Defaults of --kube-api-qps and --kube-api-burst. Each reconcile sends a
// handful of requests (Secret reads, ConfigMap write, status patch, Event),
// so client-go's default of 5/s and a burst of 10 would queue renders behind
// each other after a couple of Secret rotations.
const (
	defaultKubeAPIQPS   = 50
	defaultKubeAPIBurst = 100
)

// parseFlags registers the manager's flags on fs, parses args and validates
// the result.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	var o options
	var namespaces string
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; only needed out of cluster (KUBECONFIG also works).")
	fs.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `Address of the Prometheus metrics endpoint (plain HTTP); "0" disables it.`)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the Pod's namespace.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 2, "Policies reconciled in parallel.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS, "Requests per second the manager may send to the API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst, "Requests the manager may send at once above --kube-api-qps.")
	version.AddFlag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: the manager takes flags only", fs.Args())
	}
	var err error
	if o.namespaces, err = parseNamespaces(namespaces); err != nil {
		return o, err
	}
	if o.maxConcurrentReconciles < 1 || o.maxConcurrentReconciles > 64 {
		return o, fmt.Errorf("--max-concurrent-reconciles must be in [1, 64], got %d", o.maxConcurrentReconciles)
	}
	// NaN fails both comparisons, so it is refused too.
	if !(o.kubeAPIQPS >= 1 && o.kubeAPIQPS <= 10000) {
		return o, fmt.Errorf("--kube-api-qps must be in [1, 10000], got %v", o.kubeAPIQPS)
	}
	if o.kubeAPIBurst < 1 || o.kubeAPIBurst > 10000 {
		return o, fmt.Errorf("--kube-api-burst must be in [1, 10000], got %d", o.kubeAPIBurst)
	}
	return o, nil
}

// parseNamespaces splits a comma-separated namespace list, dropping blanks
// and rejecting names that cannot be namespaces.
func parseNamespaces(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, ns := range strings.Split(s, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" || seen[ns] {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		seen[ns] = true
		out = append(out, ns)
	}
	return out, nil
}

func main() {
	if version.PrintIfRequested(os.Stdout, "manager", os.Args[1:]) {
		return
	}
	cli.Exit("manager", run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr))
}

// maxVerbosity is the highest log level ever enabled. client-go logs request
// URLs from level 6 and request and response bodies, Secret data included,
// from level 8, through the logger of the request's context, which is ours.
const maxVerbosity = 5

// eventFlushTimeout bounds how long a stopping manager waits for its queued
// Events to be written.
const eventFlushTimeout = 10 * time.Second

// run runs the manager with the given arguments, logging to logOut, until
// ctx ends.
func run(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(logOut)
	logConfig := textlogger.NewConfig(textlogger.Output(logOut))
	logConfig.AddFlags(fs)
	o, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	logger := capVerbosity(textlogger.NewLogger(logConfig), maxVerbosity)
	ctrl.SetLogger(logger)
	log := logger.WithName("setup")

	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fqv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	restConfig, err := restConfig(o.kubeconfig, o.kubeAPIQPS, o.kubeAPIBurst)
	if err != nil {
		return fmt.Errorf("finding the API server (set --kubeconfig when out of cluster): %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Logger:                        logger,
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(o.namespaces),
		Client:                        controllers.ClientOptions(),
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              controllers.LeaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true, // run returns right after the manager stops
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	// Events are written by our own queue, flushed after the manager stops
	// (see EventWriter), and outlive it by at most eventFlushTimeout.
	instance, _ := os.Hostname()
	recorder := controllers.NewEventWriter(mgr.GetClient(), "fairqueue-operator", instance, 0, logger.WithName("events"))
	eventsCtx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	eventsDone := make(chan struct{})
	go func() {
		defer close(eventsDone)
		recorder.Run(eventsCtx)
	}()
	defer func() {
		flushCtx, cancel := context.WithTimeout(eventsCtx, eventFlushTimeout)
		if err := recorder.Flush(flushCtx); err != nil {
			log.Error(err, "Some Events were not written before exit")
		}
		cancel()
		stopEvents()
		<-eventsDone
	}()

	r := &controllers.FairQueuePolicyReconciler{Recorder: recorder}
	if err := r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.maxConcurrentReconciles}); err != nil {
		return fmt.Errorf("setting up the FairQueuePolicy controller: %w", err)
	}
	// fairqueue_policy_ready feeds the PolicyNotRendered alert. The registry
	// is process-wide, so a second run in one process (tests) reuses the
	// collector registered by the first.
	if err := ctrlmetrics.Registry.Register(controllers.NewPolicyCollector(mgr.GetClient())); err != nil &&
		!errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return fmt.Errorf("registering the policy metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	log.Info("Starting the operator", "namespaces", o.namespaces, "leaderElection", o.leaderElect)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// restConfig connects to the API server of kubeconfig, or else as
// ctrl.GetConfig does (KUBECONFIG, then the in-cluster service account),
// with the client-side rate limit qps and burst either way:
// clientcmd.BuildConfigFromFlags leaves client-go's 5/s and ctrl.GetConfig
// sets its own 20/s.
func restConfig(kubeconfig string, qps float64, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.RateLimiter = nil // a limiter set here would override QPS and Burst
	return cfg, nil
}

// capVerbosity returns l with every level above maxLevel disabled, whatever
// the configured verbosity.
func capVerbosity(l logr.Logger, maxLevel int) logr.Logger {
	return logr.New(cappedSink{sink: l.GetSink(), max: maxLevel})
}

// cappedSink is a logr.LogSink that enables no level above max.
type cappedSink struct {
	sink logr.LogSink
	max  int
}

func (s cappedSink) Init(info logr.RuntimeInfo) {
	// One frame more: this wrapper sits between logr and the real sink.
	info.CallDepth++
	s.sink.Init(info)
}
func (s cappedSink) Enabled(level int) bool { return level <= s.max && s.sink.Enabled(level) }
func (s cappedSink) Info(level int, msg string, kv ...any) {
	if level <= s.max {
		s.sink.Info(level, msg, kv...)
	}
}
func (s cappedSink) Error(err error, msg string, kv ...any) { s.sink.Error(err, msg, kv...) }
func (s cappedSink) WithValues(kv ...any) logr.LogSink {
	return cappedSink{sink: s.sink.WithValues(kv...), max: s.max}
}
func (s cappedSink) WithName(name string) logr.LogSink {
	return cappedSink{sink: s.sink.WithName(name), max: s.max}
}
