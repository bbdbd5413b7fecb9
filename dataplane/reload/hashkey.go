package reload

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Hash-key rotation without an outage. The operator renders every config with
// one hash key and names its fingerprint (hashKeySecret.fingerprint); when
// the key changes (the Secret is deleted and regenerated, or replaced) the
// ConfigMap and the Secret change in either order. A data plane therefore
// keeps every key it has seen, by fingerprint (HashKeys), watches the
// policy's hash-key Secret by name (HashKeyWatcher), loads a config only with
// the key whose fingerprint it names, and re-offers a config it had to refuse
// for want of its key as soon as that key arrives (RetrySink). Until then the
// previous config stays in force with its own key, so no request is refused
// and no restart is needed.

// MaxHashKeys bounds how many hash keys HashKeys remembers; the oldest is
// forgotten first. A config naming a forgotten key waits for it again.
const MaxHashKeys = 4

// HashKeys is a bounded set of hash keys by fingerprint. It is safe for
// concurrent use.
type HashKeys struct {
	mu    sync.RWMutex
	keys  map[string][]byte
	order []string // fingerprints, oldest first
}

// NewHashKeys returns a set holding the given keys.
func NewHashKeys(keys ...[]byte) *HashKeys {
	k := &HashKeys{keys: map[string][]byte{}}
	for _, key := range keys {
		k.Add(key)
	}
	return k
}

// Add remembers a copy of key and returns its fingerprint and whether it was
// new.
func (k *HashKeys) Add(key []byte) (fingerprint string, added bool) {
	fp := config.KeyFingerprint(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.keys[fp]; ok {
		return fp, false
	}
	if len(k.order) == MaxHashKeys {
		delete(k.keys, k.order[0])
		k.order = k.order[1:]
	}
	k.keys[fp] = append([]byte(nil), key...)
	k.order = append(k.order, fp)
	return fp, true
}

// Lookup returns the key whose fingerprint is fingerprint.
func (k *HashKeys) Lookup(fingerprint string) ([]byte, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	key, ok := k.keys[fingerprint]
	return key, ok
}

// RetrySink passes everything to its Sink and remembers the last config
// offered, so Retry can offer it again once what it lacked (its hash key)
// has arrived. Updates and retries are serialized, so a retry never applies
// an older config over a newer one.
type RetrySink struct {
	sink Sink

	mu         sync.Mutex
	lastSource string
	lastData   []byte
}

var (
	_ Sink       = (*RetrySink)(nil)
	_ HealthSink = (*RetrySink)(nil)
)

// NewRetrySink returns a RetrySink in front of sink.
func NewRetrySink(sink Sink) *RetrySink { return &RetrySink{sink: sink} }

// Update implements Sink.
func (s *RetrySink) Update(source string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSource, s.lastData = source, data
	return s.sink.Update(source, data)
}

// Reject implements Sink.
func (s *RetrySink) Reject(source string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSource, s.lastData = "", nil
	s.sink.Reject(source, err)
}

// Retry offers the last config again; the sink ignores it when it is the
// one in force.
func (s *RetrySink) Retry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastData != nil {
		_ = s.sink.Update(s.lastSource, s.lastData) // the sink logs and counts refusals
	}
}

// SourceError implements HealthSink: it passes the report on when its Sink
// is a HealthSink, so a Source in front of a RetrySink still reports.
func (s *RetrySink) SourceError(source string, err error) {
	if h, ok := s.sink.(HealthSink); ok {
		h.SourceError(source, err)
	}
}

// SourceOK implements HealthSink like SourceError.
func (s *RetrySink) SourceOK(source string) {
	if h, ok := s.sink.(HealthSink); ok {
		h.SourceOK(source)
	}
}

// HashKeyWatcher watches one hash-key Secret by name (a list and watch with a
// metadata.name field selector, which RBAC resourceNames can grant) and adds
// every key it holds to a HashKeys; after a new key it calls OnNewKey. Like
// ConfigMapSource it retries failed lists and watches with a backoff capped
// at MaxWatchBackoff and reports them to HashKeyWatcherOptions.Health.
type HashKeyWatcher struct {
	client          kubernetes.Interface
	namespace, name string
	dataKey         string
	minLen          int
	keys            *HashKeys
	onNewKey        func()
	health          HealthSink
	log             logr.Logger
	backoff         wait.Backoff
}

// HashKeyWatcherOptions configures a HashKeyWatcher.
type HashKeyWatcherOptions struct {
	// DataKey is the Secret's data key holding the key; "key" when empty.
	DataKey string
	// MinLen is the shortest key accepted; shorter ones are logged and
	// ignored.
	MinLen int
	// OnNewKey is called, from the watcher's goroutine, after a key not
	// seen before is added; typically RetrySink.Retry.
	OnNewKey func()
	// Health, when set, receives every failed and successful list or watch
	// of the Secret; typically the Reloader.
	Health HealthSink
	// Logger receives the watcher's logs; never a key, only fingerprints.
	Logger logr.Logger
}

// NewHashKeyWatcher returns a watcher of Secret namespace/name feeding keys.
func NewHashKeyWatcher(c kubernetes.Interface, namespace, name string, keys *HashKeys, opts HashKeyWatcherOptions) *HashKeyWatcher {
	if opts.DataKey == "" {
		opts.DataKey = "key"
	}
	return &HashKeyWatcher{
		client: c, namespace: namespace, name: name, dataKey: opts.DataKey, minLen: opts.MinLen,
		keys: keys, onNewKey: opts.OnNewKey, health: opts.Health, log: opts.Logger, backoff: watchBackoff,
	}
}

// Run watches until ctx ends. A deleted Secret keeps every key already seen:
// the config in force still needs its own.
func (w *HashKeyWatcher) Run(ctx context.Context) error {
	secrets := w.client.CoreV1().Secrets(w.namespace)
	nw := &namedWatch[*corev1.SecretList]{
		client: w.client, name: w.name, desc: "Secret " + w.namespace + "/" + w.name,
		list: secrets.List, watch: secrets.Watch, object: &corev1.Secret{},
		store:  &secretStore{w: w},
		health: w.health, log: w.log, backoff: w.backoff,
	}
	nw.run(ctx) // returns once ctx ends
	return nil
}

// deliver adds the key obj holds, if it is the watched Secret's.
func (w *HashKeyWatcher) deliver(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok || s.Name != w.name {
		return
	}
	key := s.Data[w.dataKey]
	if len(key) < w.minLen || len(key) == 0 {
		w.log.Info("Hash key Secret holds no usable key; keeping the keys already known",
			"secret", w.namespace+"/"+w.name, "dataKey", w.dataKey, "minBytes", w.minLen)
		return
	}
	fp, added := w.keys.Add(key)
	if !added {
		return
	}
	w.log.Info("New hash key", "secret", w.namespace+"/"+w.name, "fingerprint", fp)
	if w.onNewKey != nil {
		w.onNewKey()
	}
}

// secretStore receives the reflector's view of the one Secret and adds its
// key. It keeps no objects.
type secretStore struct{ w *HashKeyWatcher }

var _ cache.ReflectorStore = (*secretStore)(nil)

// Add implements cache.ReflectorStore.
func (st *secretStore) Add(obj any) error { st.w.deliver(obj); return nil }

// Update implements cache.ReflectorStore.
func (st *secretStore) Update(obj any) error { st.w.deliver(obj); return nil }

// Delete implements cache.ReflectorStore.
func (st *secretStore) Delete(any) error {
	st.w.log.Info("Hash key Secret deleted; keeping the keys already known until a new one appears", "secret", st.w.namespace+"/"+st.w.name)
	return nil
}

// Replace implements cache.ReflectorStore: a (re)list. A key already known
// is not added again.
func (st *secretStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		if s, ok := obj.(*corev1.Secret); ok && s.Name == st.w.name {
			st.w.deliver(obj)
			return nil
		}
	}
	st.w.log.V(1).Info("Hash key Secret absent from the list; keeping the keys already known", "secret", st.w.namespace+"/"+st.w.name)
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (st *secretStore) Resync() error { return nil }
