package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// TestEventWriterFlush checks what a leader handing over relies on: Flush
// returns only once every queued Event is stored, a full queue drops instead
// of blocking the reconcile, and Flush gives up when its context ends.
func TestEventWriterFlush(t *testing.T) {
	release := make(chan struct{})
	writing := make(chan struct{}, 16)
	var created atomic.Int32
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writing <- struct{}{}
			select {
			case <-release: // a slow API server
			case <-ctx.Done():
				return ctx.Err()
			}
			created.Add(1)
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	w := NewEventWriter(c, "fairqueue-operator", "pod-a", 3, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	p := &fqv1alpha1.FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llm", UID: "u"}}
	p.SetGroupVersionKind(fqv1alpha1.GroupVersion.WithKind("FairQueuePolicy"))
	start := time.Now()
	w.Eventf(p, nil, corev1.EventTypeNormal, fqv1alpha1.ReasonRendered, "Render", "render 0")
	select {
	case <-writing: // the first Event is being written, the queue is empty
	case <-time.After(10 * time.Second):
		t.Fatal("the first Event was never written")
	}
	for i := 1; i < 10; i++ {
		w.Eventf(p, nil, corev1.EventTypeNormal, fqv1alpha1.ReasonRendered, "Render", "render %d", i)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Eventf blocked for %v behind a slow API server", d)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush with writes pending = %v, want the context's deadline", err)
	}

	close(release)
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelFlush()
	if err := w.Flush(flushCtx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	// One Event was being written when the queue (3) filled: 4 kept.
	if n := len(list.Items); n != 4 || created.Load() != 4 {
		t.Errorf("after Flush %d Events are stored (%d created), want the 4 the bounded queue kept", n, created.Load())
	}
	for _, e := range list.Items {
		if e.Regarding.Name != "llm" || e.Reason != fqv1alpha1.ReasonRendered || e.ReportingController != "fairqueue-operator" || e.ReportingInstance != "pod-a" {
			t.Errorf("stored Event %+v does not describe the policy's render", e)
		}
	}
}
