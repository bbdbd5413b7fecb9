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
//	-v int
//	    Log verbosity (default 0); logs are structured key/value text and
//	    never contain a Secret value or raw identity.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
)

// leaderElectionID names the Lease replicas of the operator compete for.
const leaderElectionID = "fairqueue-operator.fairqueue.dev"

// options are the command-line settings of the manager.
type options struct {
	namespaces              []string
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	maxConcurrentReconciles int
}

// parseFlags registers the manager's flags on fs, parses args and validates
// the result.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	var o options
	var namespaces string
	fs.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `Address of the Prometheus metrics endpoint (plain HTTP); "0" disables it.`)
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the Pod's namespace.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 2, "Policies reconciled in parallel.")
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

func run() error {
	logConfig := textlogger.NewConfig()
	logConfig.AddFlags(flag.CommandLine)
	// ctrl.GetConfig reads --kubeconfig, registered on flag.CommandLine by
	// controller-runtime.
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	ctrl.SetLogger(textlogger.NewLogger(logConfig))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), fqv1alpha1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("building the scheme: %w", err)
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("finding the API server (set --kubeconfig when out of cluster): %w", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controllers.CacheOptions(o.namespaces),
		Client:                        controllers.ClientOptions(),
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true, // run returns right after the manager stops
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	r := &controllers.FairQueuePolicyReconciler{}
	if err := r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.maxConcurrentReconciles}); err != nil {
		return fmt.Errorf("setting up the FairQueuePolicy controller: %w", err)
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
