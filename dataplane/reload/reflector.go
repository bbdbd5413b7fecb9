package reload

import (
	"context"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// namedWatch describes a watch of one object by name, shared by
// ConfigMapSource and HashKeyWatcher.
type namedWatch[L runtime.Object] struct {
	client  kubernetes.Interface
	name    string // the object's name, for the metadata.name field selector
	desc    string // "Kind namespace/name": the reflector's name and the source in health reports
	list    func(context.Context, metav1.ListOptions) (L, error)
	watch   func(context.Context, metav1.ListOptions) (watch.Interface, error)
	object  runtime.Object // the expected type, e.g. &corev1.ConfigMap{}
	store   cache.ReflectorStore
	health  HealthSink // nil: failures are not reported
	log     logr.Logger
	backoff wait.Backoff
}

// run lists and watches the one object with a metadata.name field selector
// (which RBAC resourceNames can grant) until ctx ends, feeding store from
// this goroutine, one event at a time, in order. Failed lists and watches
// are retried on w.backoff and reported to w.health; client-go's own log
// lines about them are passed on at debug verbosity only.
func (w *namedWatch[L]) run(ctx context.Context) {
	report := func(ctx context.Context, err error) {
		switch {
		case w.health == nil || ctx.Err() != nil: // stopping: not a failure
		case err != nil:
			w.health.SourceError(w.desc, err)
		default:
			w.health.SourceOK(w.desc)
		}
	}
	selector := fields.OneTermEqualSelector("metadata.name", w.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := w.list(ctx, o)
			report(ctx, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			wi, err := w.watch(ctx, o)
			report(ctx, err)
			return wi, err
		},
	}
	quiet := logr.Discard()
	if sink := w.log.GetSink(); sink != nil {
		quiet = logr.New(demoted{sink})
	}
	backoff := w.backoff
	r := cache.NewReflectorWithOptions(
		// Like generated informers, ask the client whether it streams the
		// initial list (fake clients in tests do not).
		cache.ToListWatcherWithWatchListSemantics(lw, w.client),
		w.object,
		w.store,
		cache.ReflectorOptions{Name: w.desc, Logger: &quiet, Backoff: &backoff},
	)
	r.RunWithContext(klog.NewContext(ctx, quiet))
}

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
