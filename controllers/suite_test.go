package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
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
	// env and k8s are set by needAPIServer.
	env *testenv.Env
	// k8s is a direct (uncached) client for test setup and assertions.
	k8s client.Client
	// nsCounter numbers the per-test namespaces.
	nsCounter atomic.Int32
)

// The shared API server and manager, started by the first test that needs
// them and stopped by TestMain.
var (
	suiteOnce sync.Once
	errSuite  error
	stopSuite func() error
)

// TestMain runs the tests, then stops the API server and manager if a test
// started them. The unit tests of this package need neither: only the tests
// that call needAPIServer start them.
func TestMain(m *testing.M) {
	ctrl.SetLogger(testLogger())
	SetDefaultEventuallyTimeout(15 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyDuration(time.Second)
	SetDefaultConsistentlyPollingInterval(100 * time.Millisecond)

	code := m.Run()
	if stopSuite != nil {
		if err := stopSuite(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
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
	os.Exit(code)
}

// needAPIServer starts, on first use, one API server and one manager running
// the reconciler, shared by every test that calls it; each test works in its
// own namespace. Without the envtest binaries it skips the test when run by
// hand (KUBEBUILDER_ASSETS and CI unset, so `go test ./controllers/` runs the
// unit tests on a fresh clone) and fails it otherwise: `make test` and CI set
// KUBEBUILDER_ASSETS and must run every test.
func needAPIServer(t *testing.T) {
	t.Helper()
	suiteOnce.Do(func() { errSuite = startSuite() })
	if errSuite == nil {
		return
	}
	if errors.Is(errSuite, testenv.ErrMissingBinaries) && os.Getenv("KUBEBUILDER_ASSETS") == "" && os.Getenv("CI") == "" {
		t.Skipf("needs the envtest API server: %v", errSuite)
	}
	t.Fatal(errSuite)
}

// startSuite starts the API server and the shared manager and sets env, k8s
// and stopSuite.
func startSuite() error {
	e, err := testenv.New()
	if err != nil {
		return err
	}
	cacheOpts := CacheOptions(nil)
	cacheOpts.DefaultFieldSelector = fields.AndSelectors(
		fields.OneTermNotEqualSelector("metadata.namespace", faultNamespace),
		fields.OneTermNotEqualSelector("metadata.namespace", rbacNamespace),
	)
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Cache:                  cacheOpts,
		Client:                 ClientOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return errors.Join(fmt.Errorf("creating the manager: %w", err), e.Stop())
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&FairQueuePolicyReconciler{UnwatchedRetry: time.Second}).SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("setting up the reconciler: %w", err), e.Stop())
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	env, k8s = e, e.Client
	stopSuite = func() error {
		cancel()
		var errs []error
		if err := <-done; err != nil {
			errs = append(errs, fmt.Errorf("manager: %w", err))
		}
		if err := e.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
		}
		return errors.Join(errs...)
	}
	return nil
}

// testScheme holds the built-in Kubernetes types and the fairqueue API, for
// the unit tests' fake clients.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := fqv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
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
	needAPIServer(t)
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
