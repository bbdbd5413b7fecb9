package reload

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestHashKeysAreBounded(t *testing.T) {
	keys := NewHashKeys(testKey)
	if fp, added := keys.Add(testKey); added || fp != config.KeyFingerprint(testKey) {
		t.Errorf("Add(known key) = %q, %v; want its fingerprint, false", fp, added)
	}
	var fps []string
	for i := range MaxHashKeys {
		fp, added := keys.Add(bytes.Repeat([]byte{byte('a' + i)}, 32))
		if !added {
			t.Fatalf("key %d not added", i)
		}
		fps = append(fps, fp)
	}
	if _, ok := keys.Lookup(config.KeyFingerprint(testKey)); ok {
		t.Errorf("the oldest key is still known after %d newer ones; the set is unbounded", MaxHashKeys)
	}
	for _, fp := range fps {
		if k, ok := keys.Lookup(fp); !ok || config.KeyFingerprint(k) != fp {
			t.Errorf("Lookup(%s) = %v, %v", fp, k, ok)
		}
	}
}

// keyedSink accepts a config only when its key's fingerprint is known, like
// the server with Options.HashKeys.
type keyedSink struct {
	keys    *HashKeys
	applied [][]byte
}

func (s *keyedSink) Update(_ string, data []byte) error {
	c, err := config.Parse(data)
	if err != nil {
		return err
	}
	if _, ok := s.keys.Lookup(c.HashKeySecret.Fingerprint); !ok {
		return errors.New("unknown key")
	}
	s.applied = append(s.applied, data)
	return nil
}

func (s *keyedSink) Reject(string, error) {}

// renderWithKey is render with another hash key.
func renderWithKey(t *testing.T, generation int64, key []byte) []byte {
	t.Helper()
	c, err := config.Parse(render(t, generation, 1))
	if err != nil {
		t.Fatal(err)
	}
	c.HashKeySecret.Fingerprint = config.KeyFingerprint(key)
	data, err := config.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRetrySinkOffersTheRefusedConfigAgain(t *testing.T) {
	newKey := bytes.Repeat([]byte{'n'}, 32)
	keys := NewHashKeys(testKey)
	inner := &keyedSink{keys: keys}
	sink := NewRetrySink(inner)

	sink.Retry() // nothing offered yet: a no-op
	if err := sink.Update("cm", render(t, 1, 1)); err != nil {
		t.Fatal(err)
	}
	rotated := renderWithKey(t, 2, newKey)
	if err := sink.Update("cm", rotated); err == nil {
		t.Fatal("a config naming an unknown key was applied")
	}
	keys.Add(newKey)
	sink.Retry()
	if got := inner.applied[len(inner.applied)-1]; !bytes.Equal(got, rotated) {
		t.Errorf("after the key arrived the retried config was not applied")
	}
	// A rejection forgets the last config: nothing stale is retried.
	sink.Reject("cm", errors.New("no key"))
	n := len(inner.applied)
	sink.Retry()
	if len(inner.applied) != n {
		t.Errorf("Retry after Reject re-applied an old config")
	}
}

func TestHashKeyWatcherFollowsTheSecret(t *testing.T) {
	secret := func(name string, key []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Data: map[string][]byte{"key": key}}
	}
	client := fake.NewClientset(secret("llm-hash-key", testKey))
	keys := NewHashKeys()
	newKeys := make(chan struct{}, 8)
	w := NewHashKeyWatcher(client, "team-a", "llm-hash-key", keys, HashKeyWatcherOptions{
		MinLen: 16, Logger: testLogger(t), OnNewKey: func() { newKeys <- struct{}{} },
	})
	runUntilEnd(t, w.Run)
	ctx := t.Context()
	wait := func(what string) {
		t.Helper()
		select {
		case <-newKeys:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait("the initial key")
	secrets := client.CoreV1().Secrets("team-a")
	// Another Secret, a too-short key and a deletion add nothing.
	if _, err := secrets.Create(ctx, secret("other", bytes.Repeat([]byte{'o'}, 32)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Update(ctx, secret("llm-hash-key", []byte("short")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, "llm-hash-key", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := bytes.Repeat([]byte{'r'}, 32)
	if _, err := secrets.Create(ctx, secret("llm-hash-key", rotated), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the rotated key")
	for name, key := range map[string][]byte{"initial": testKey, "rotated": rotated} {
		if _, ok := keys.Lookup(config.KeyFingerprint(key)); !ok {
			t.Errorf("the %s key is not known", name)
		}
	}
	if _, ok := keys.Lookup(config.KeyFingerprint(bytes.Repeat([]byte{'o'}, 32))); ok {
		t.Error("another Secret's key was taken")
	}
	select {
	case <-newKeys:
		t.Error("OnNewKey was called for something that is no new key")
	default:
	}
}

// healthRecorder counts a source's health reports.
type healthRecorder struct {
	errors, oks atomic.Int32
	mu          sync.Mutex
	sources     map[string]bool
}

func (h *healthRecorder) record(source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sources == nil {
		h.sources = map[string]bool{}
	}
	h.sources[source] = true
}

func (h *healthRecorder) SourceError(source string, _ error) { h.record(source); h.errors.Add(1) }
func (h *healthRecorder) SourceOK(source string)             { h.record(source); h.oks.Add(1) }

func TestHashKeyWatcherRetriesOnTheCappedBackoffAndReportsHealth(t *testing.T) {
	if w := NewHashKeyWatcher(fake.NewClientset(), "team-a", "llm-hash-key", NewHashKeys(), HashKeyWatcherOptions{}); w.backoff != watchBackoff {
		t.Errorf("the watcher retries on %+v, want watchBackoff (capped at MaxWatchBackoff)", w.backoff)
	}
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm-hash-key"},
		Data:       map[string][]byte{"key": testKey},
	})
	down, failures := failLists(client, "secrets")
	health := &healthRecorder{}
	keys := NewHashKeys()
	w := NewHashKeyWatcher(client, "team-a", "llm-hash-key", keys, HashKeyWatcherOptions{Health: health, Logger: testLogger(t)})
	// 20 failures within waitFor's limit show the watcher's own schedule
	// drives the retries: client-go's default starts at 800 ms and doubles.
	w.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 5 * time.Millisecond}
	runUntilEnd(t, w.Run)

	testutil.Eventually(t, "20 failed lists", func() bool { return failures.Load() >= 20 })
	if got := health.errors.Load(); got < 20 {
		t.Errorf("%d failed lists reported %d errors to the HealthSink, want each", failures.Load(), got)
	}
	down.Store(false)
	testutil.Eventually(t, "the key after the outage", func() bool {
		_, ok := keys.Lookup(config.KeyFingerprint(testKey))
		return ok
	})
	testutil.Eventually(t, "the recovery report", func() bool { return health.oks.Load() > 0 })
	health.mu.Lock()
	defer health.mu.Unlock()
	if !health.sources["Secret team-a/llm-hash-key"] || len(health.sources) != 1 {
		t.Errorf("reports named %v, want only the Secret", health.sources)
	}
}

func TestRetrySinkPassesHealthOn(t *testing.T) {
	health := &struct {
		healthRecorder
		keyedSink
	}{}
	sink := NewRetrySink(health)
	sink.SourceError("ConfigMap ns/cm", errors.New("refused"))
	sink.SourceOK("ConfigMap ns/cm")
	if health.errors.Load() != 1 || health.oks.Load() != 1 {
		t.Errorf("through a RetrySink the HealthSink got %d errors and %d oks, want 1 and 1", health.errors.Load(), health.oks.Load())
	}
	NewRetrySink(&keyedSink{}).SourceOK("ConfigMap ns/cm") // a Sink without health: a no-op
}
