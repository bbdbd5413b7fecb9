package reload

import (
	"context"
	"fmt"

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

// ConfigMapSource watches one ConfigMap through the Kubernetes API with an
// informer scoped to its namespace and name, so it needs only get, list and
// watch on that one ConfigMap (RBAC resourceNames). It delivers the
// config.ConfigMapKey entry on every change; a deleted ConfigMap keeps the
// config in force.
type ConfigMapSource struct {
	client          kubernetes.Interface
	namespace, name string
	log             logr.Logger
}

var _ Source = (*ConfigMapSource)(nil)

// NewConfigMapSource returns a Source watching ConfigMap namespace/name.
func NewConfigMapSource(c kubernetes.Interface, namespace, name string, log logr.Logger) *ConfigMapSource {
	return &ConfigMapSource{client: c, namespace: namespace, name: name, log: log}
}

// String implements Source.
func (s *ConfigMapSource) String() string { return "ConfigMap " + s.namespace + "/" + s.name }

// Run implements Source. The informer retries with backoff while the API
// server is unreachable or access is denied, logging each failure.
func (s *ConfigMapSource) Run(ctx context.Context, sink Sink) error {
	selector := fields.OneTermEqualSelector("metadata.name", s.name).String()
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return cms.Watch(ctx, o)
		},
	}
	deliver := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != s.name {
			return
		}
		data, ok := cm.Data[config.ConfigMapKey]
		if !ok {
			sink.Reject(s.String(), fmt.Errorf("the ConfigMap has no %q key; it should be the one the operator renders for the policy", config.ConfigMapKey))
			return
		}
		_ = sink.Update(s.String(), []byte(data)) // the sink logs and counts refusals
	}
	// Handlers of a non-shared informer run one at a time, in event order.
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		// List and watch failures (RBAC, connectivity) are logged here and
		// retried with backoff.
		Logger: &s.log,
		// Like generated informers, ask the client whether it streams the
		// initial list (fake clients in tests do not).
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    deliver,
			UpdateFunc: func(_, obj any) { deliver(obj) },
			DeleteFunc: func(any) {
				s.log.Info("Config ConfigMap deleted, keeping the config in force until it is recreated", "configMap", s.namespace+"/"+s.name)
			},
		},
	})
	ctrl.RunWithContext(ctx)
	return nil
}
