package reload

import (
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = []byte("0123456789abcdef0123456789abcdef")

// render returns the bytes of a valid config whose generation and alice's
// weight are as given, so each pair yields a distinct hash.
func render(t testing.TB, generation int64, aliceWeight int32) []byte {
	t.Helper()
	c := &config.Config{
		APIVersion: config.APIVersion,
		Kind:       config.Kind,
		Policy:     config.PolicyRef{Namespace: "team-a", Name: "llm", Generation: generation},
		HashKeySecret: config.HashKeySecret{Namespace: "team-a", Name: "llm-hash-key", Key: "key",
			Fingerprint: config.KeyFingerprint(testKey)},
		Identity: config.Identity{APIKeyHeaders: []string{"Authorization"}},
		FairQueuing: config.FairQueuing{Enabled: true, TenantDimension: identity.DimensionAPIKey, DefaultWeight: 1,
			Weights: []config.Weight{{TenantHash: identity.Hash(testKey, "alice"), Weight: aliceWeight}},
			Bounds:  config.DefaultBounds()},
	}
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
