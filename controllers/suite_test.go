package controllers

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fairqueue/fairqueue/internal/testenv"
)

// faultNamespace and rbacNamespace are hidden from the shared manager, so
// that the fault-injection and RBAC tests run their own reconcilers there
// without the shared one racing them.
const (
	faultNamespace = "faults"
	rbacNamespace  = "rbac"
)

var (
	env *testenv.Env
	// k8s is a direct (uncached) client for test setup and assertions.
	k8s client.Client
	// nsCounter numbers the per-test namespaces.
	nsCounter atomic.Int32
)

// TestMain starts one API server and one manager running the reconciler for
// every test; each test works in its own namespace.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(testLogger())
	var err error
	if env, err = testenv.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stopEnv := func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	k8s = env.Client

	cacheOpts := CacheOptions(nil)
	cacheOpts.DefaultFieldSelector = fields.AndSelectors(
		fields.OneTermNotEqualSelector("metadata.namespace", faultNamespace),
		fields.OneTermNotEqualSelector("metadata.namespace", rbacNamespace),
	)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cacheOpts,
		Client:                 ClientOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating manager:", err)
		stopEnv()
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&FairQueuePolicyReconciler{UnwatchedRetry: time.Second}).SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, "setting up reconciler:", err)
		stopEnv()
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyDuration(time.Second)
	SetDefaultConsistentlyPollingInterval(100 * time.Millisecond)

	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		code = 1
	}
	stopEnv()
	if code == 0 {
		// The manager's goroutines must all end with it. One exception:
		// controller-runtime wraps metadata-only watches (the Secret watch)
		// in watch.Filter, whose goroutine can stay blocked sending an event
		// the stopped reflector never reads (informers.go newGVKFixupWatcher).
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	return code
}

// testLogger discards logs unless TEST_VERBOSE_LOGS is set: injected faults
// and expected conflicts are logged as reconciler errors.
func testLogger() logr.Logger {
	if os.Getenv("TEST_VERBOSE_LOGS") == "" {
		return logr.Discard()
	}
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(4), textlogger.Output(os.Stderr)))
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("test-%d", nsCounter.Add(1))}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// reconcileCount returns how many times the shared manager has reconciled a
// policy, from controller-runtime's own metric.
func reconcileCount(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == ControllerName {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
