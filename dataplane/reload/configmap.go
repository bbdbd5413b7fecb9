package reload

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// MaxWatchBackoff caps the wait between attempts to list or watch the
// ConfigMap (or the hash-key Secret) while the API server fails, so that a
// change made after an outage serves within about a second of the API
// server answering again. (client-go's default grows to 30-60 s, which
// delayed such a change by up to 84 s.) The cost is one request per second
// per replica during an outage.
const MaxWatchBackoff = time.Second

// watchBackoff is the retry schedule of the ConfigMap and hash-key Secret
// watches (namedWatch): 200 ms doubling to MaxWatchBackoff, with up to 25%
// jitter on each wait.
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
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	w := &namedWatch[*corev1.ConfigMapList]{
		client: s.client, name: s.name, desc: s.String(),
		list: cms.List, watch: cms.Watch, object: &corev1.ConfigMap{},
		store:  &configMapStore{src: s, sink: sink},
		health: health, log: s.log, backoff: s.backoff,
	}
	w.run(ctx) // returns once ctx ends
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
