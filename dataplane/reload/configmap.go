package reload

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// MaxWatchBackoff caps the wait between attempts to list or watch the
// ConfigMap while the API server fails, so that a change made after an
// outage serves within about a second of the API server answering again.
// (client-go's default grows to 30-60 s, which delayed such a change by up
// to 84 s.) The cost is one request per second per replica during an outage.
const MaxWatchBackoff = time.Second

// watchBackoff is the retry schedule of the ConfigMap watch: 200 ms doubling
// to MaxWatchBackoff, with up to 25% jitter on each wait.
var watchBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.25, Steps: 1 << 30, Cap: MaxWatchBackoff * 4 / 5}

// ConfigMapSource watches one ConfigMap through the Kubernetes API with a
// reflector scoped to its namespace and name, so it needs only get, list and
// watch on that one ConfigMap (RBAC resourceNames). It delivers the
// config.ConfigMapKey entry on every change; a deleted ConfigMap keeps the
// config in force. Failed lists and watches are retried with a backoff
// capped at MaxWatchBackoff and reported to a Sink implementing HealthSink.
type ConfigMapSource struct {
	client          kubernetes.Interface
	namespace, name string
	log             logr.Logger
	backoff         wait.Backoff
}

var _ Source = (*ConfigMapSource)(nil)

// NewConfigMapSource returns a Source watching ConfigMap namespace/name.
func NewConfigMapSource(c kubernetes.Interface, namespace, name string, log logr.Logger) *ConfigMapSource {
	return &ConfigMapSource{client: c, namespace: namespace, name: name, log: log, backoff: watchBackoff}
}

// String implements Source.
func (s *ConfigMapSource) String() string { return "ConfigMap " + s.namespace + "/" + s.name }

// Run implements Source. While the API server is unreachable or access is
// denied it retries (at most MaxWatchBackoff apart) and reports each failure
// to sink when sink is a HealthSink, which logs and counts them; client-go's
// own log lines about it are passed on at debug verbosity only.
func (s *ConfigMapSource) Run(ctx context.Context, sink Sink) error {
	health, _ := sink.(HealthSink)
	report := func(ctx context.Context, err error) {
		switch {
		case health == nil || ctx.Err() != nil: // stopping: not a failure
		case err != nil:
			health.SourceError(s.String(), err)
		default:
			health.SourceOK(s.String())
		}
	}
	selector := fields.OneTermEqualSelector("metadata.name", s.name).String()
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := cms.List(ctx, o)
			report(ctx, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := cms.Watch(ctx, o)
			report(ctx, err)
			return w, err
		},
	}
	quiet := logr.Discard()
	if sink := s.log.GetSink(); sink != nil {
		quiet = logr.New(demoted{sink})
	}
	backoff := s.backoff
	r := cache.NewReflectorWithOptions(
		// Like generated informers, ask the client whether it streams the
		// initial list (fake clients in tests do not).
		cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		&corev1.ConfigMap{},
		&configMapStore{src: s, sink: sink},
		cache.ReflectorOptions{Name: s.String(), Logger: &quiet, Backoff: &backoff},
	)
	// The reflector calls the store from this goroutine, one event at a
	// time, in order, and returns once ctx ends.
	r.RunWithContext(klog.NewContext(ctx, quiet))
	return nil
}

// configMapStore receives the reflector's view of the one ConfigMap and
// hands its config to the sink. It keeps no objects.
type configMapStore struct {
	src  *ConfigMapSource
	sink Sink
}

var _ cache.ReflectorStore = (*configMapStore)(nil)

// deliver hands obj's config to the sink.
func (st *configMapStore) deliver(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != st.src.name {
		return
	}
	data, ok := cm.Data[config.ConfigMapKey]
	if !ok {
		st.sink.Reject(st.src.String(), fmt.Errorf("the ConfigMap has no %q key; it should be the one the operator renders for the policy", config.ConfigMapKey))
		return
	}
	_ = st.sink.Update(st.src.String(), []byte(data)) // the sink logs and counts refusals
}

func (st *configMapStore) gone() {
	st.src.log.Info("Config ConfigMap deleted, keeping the config in force until it is recreated", "configMap", st.src.namespace+"/"+st.src.name)
}

// Add implements cache.ReflectorStore.
func (st *configMapStore) Add(obj any) error { st.deliver(obj); return nil }

// Update implements cache.ReflectorStore.
func (st *configMapStore) Update(obj any) error { st.deliver(obj); return nil }

// Delete implements cache.ReflectorStore.
func (st *configMapStore) Delete(any) error { st.gone(); return nil }

// Replace implements cache.ReflectorStore: a (re)list. The ConfigMap's
// config is delivered again (the sink ignores unchanged bytes).
func (st *configMapStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == st.src.name {
			st.deliver(obj)
			return nil
		}
	}
	st.src.log.V(1).Info("Config ConfigMap absent from the list, keeping the config in force", "configMap", st.src.namespace+"/"+st.src.name)
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (st *configMapStore) Resync() error { return nil }

// demoted passes client-go's log lines on one verbosity level lower and
// its errors as debug lines: the source reports failures itself, once and
// rate-limited, instead of once per retry.
type demoted struct{ logr.LogSink }

// Enabled implements logr.LogSink.
func (d demoted) Enabled(level int) bool { return d.LogSink.Enabled(level + 1) }

// Info implements logr.LogSink.
func (d demoted) Info(level int, msg string, kv ...any) { d.LogSink.Info(level+1, msg, kv...) }

// Error implements logr.LogSink.
func (d demoted) Error(err error, msg string, kv ...any) {
	if d.LogSink.Enabled(1) {
		d.LogSink.Info(1, msg, append(kv, "error", err)...)
	}
}

// WithValues implements logr.LogSink.
func (d demoted) WithValues(kv ...any) logr.LogSink { return demoted{d.LogSink.WithValues(kv...)} }

// WithName implements logr.LogSink.
func (d demoted) WithName(name string) logr.LogSink { return demoted{d.LogSink.WithName(name)} }
