package reload

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = configtest.Key

// render returns the bytes of a valid config whose generation and alice's
// weight are as given, so each pair yields a distinct hash.
func render(t testing.TB, generation int64, aliceWeight int32) []byte {
	t.Helper()
	c := configtest.Valid(testKey, "http://127.0.0.1:1")
	c.Policy.Namespace, c.HashKeySecret.Namespace = "team-a", "team-a"
	c.Policy.Generation = generation
	c.FairQueuing.Enabled, c.FairQueuing.TenantDimension = true, identity.DimensionAPIKey
	c.FairQueuing.Weights = []config.Weight{{TenantHash: identity.Hash(testKey, "alice"), Weight: aliceWeight}}
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatalf("rendering test config: %v", err)
	}
	return data
}

// recordingSink records what a Source delivers, for source tests.
type recordingSink struct {
	mu       sync.Mutex
	updates  [][]byte
	rejects  []error
	notified chan struct{}
}

func newRecordingSink() *recordingSink { return &recordingSink{notified: make(chan struct{}, 64)} }

func (s *recordingSink) Update(_ string, data []byte) error {
	s.mu.Lock()
	s.updates = append(s.updates, append([]byte(nil), data...))
	s.mu.Unlock()
	s.notified <- struct{}{}
	return nil
}

func (s *recordingSink) Reject(_ string, err error) {
	s.mu.Lock()
	s.rejects = append(s.rejects, err)
	s.mu.Unlock()
	s.notified <- struct{}{}
}

func (s *recordingSink) snapshot() (updates [][]byte, rejects []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.updates...), append([]error(nil), s.rejects...)
}

// testLogger logs through t, so output shows only for failing tests.
func testLogger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{Verbosity: 2})
}

// waitNotified waits for the sink's next delivery, failing the test after
// 10 s so a lost delivery fails fast instead of hanging.
func waitNotified(t *testing.T, sink *recordingSink, what string) {
	t.Helper()
	select {
	case <-sink.notified:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// runSource runs src with a new recordingSink until the test ends, then
// cancels it and checks that Run returned nil.
func runSource(t *testing.T, src Source) *recordingSink {
	t.Helper()
	sink := newRecordingSink()
	runSourceInto(t, src, sink)
	return sink
}

// runSourceInto runs src delivering to sink until the test ends.
func runSourceInto(t *testing.T, src Source, sink Sink) {
	t.Helper()
	runUntilEnd(t, func(ctx context.Context) error { return src.Run(ctx, sink) })
}

// runUntilEnd runs run in a goroutine until the test ends, then cancels its
// context and checks that it returned nil.
func runUntilEnd(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		waitRun(t, done)
	})
}

// failLists makes client's lists of resource fail while the returned down is
// set (it starts set), counting the failed lists in failures: an API server
// outage as a source or watcher sees it.
func failLists(client *fake.Clientset, resource string) (down *atomic.Bool, failures *atomic.Int32) {
	down, failures = new(atomic.Bool), new(atomic.Int32)
	down.Store(true)
	client.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			failures.Add(1)
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	return down, failures
}

// waitRun waits for a source's Run to return after its context was
// cancelled, and checks it returned nil.
func waitRun(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10 s of the cancel")
	}
}
