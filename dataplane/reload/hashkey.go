package reload

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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

var _ Sink = (*RetrySink)(nil)

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

// HashKeyWatcher watches one hash-key Secret by name (a list and watch with a
// metadata.name field selector, which RBAC resourceNames can grant) and adds
// every key it holds to a HashKeys; after a new key it calls OnNewKey.
type HashKeyWatcher struct {
	client          kubernetes.Interface
	namespace, name string
	dataKey         string
	minLen          int
	keys            *HashKeys
	onNewKey        func()
	log             logr.Logger
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
		keys: keys, onNewKey: opts.OnNewKey, log: opts.Logger,
	}
}

// Run watches until ctx ends. A deleted Secret keeps every key already seen:
// the config in force still needs its own.
func (w *HashKeyWatcher) Run(ctx context.Context) error {
	selector := fields.OneTermEqualSelector("metadata.name", w.name).String()
	secrets := w.client.CoreV1().Secrets(w.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return secrets.Watch(ctx, o)
		},
	}
	deliver := func(obj any) {
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
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &w.log,
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, w.client),
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    deliver,
			UpdateFunc: func(_, obj any) { deliver(obj) },
			DeleteFunc: func(any) {
				w.log.Info("Hash key Secret deleted; keeping the keys already known until a new one appears", "secret", w.namespace+"/"+w.name)
			},
		},
	})
	ctrl.RunWithContext(ctx)
	return nil
}

// String names the watched Secret for logs.
func (w *HashKeyWatcher) String() string {
	return fmt.Sprintf("hash key Secret %s/%s", w.namespace, w.name)
}
