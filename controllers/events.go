package controllers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultEventQueue is the default capacity of an EventWriter's queue.
const DefaultEventQueue = 256

// maxEventNote is the longest note the API server accepts on an Event.
const maxEventNote = 1024

// EventWriter is an events.EventRecorder whose Events can be flushed: Eventf
// queues the Event (dropping it, with a log line, when the bounded queue is
// full, so a slow API server never blocks a reconcile) and Run writes the
// queue in order. Flush waits until nothing is queued or being written.
//
// The manager's own recorder drops Events still queued when it stops, so the
// last Events of a leader that hands over (SIGTERM during a rollout) can be
// lost; cmd/manager flushes an EventWriter after the manager stops instead.
type EventWriter struct {
	client     client.Client
	scheme     *runtime.Scheme
	controller string
	instance   string
	log        logr.Logger
	clock      clock.PassiveClock

	queue chan *eventsv1.Event
	// mu guards pending and idle: pending counts Events queued or being
	// written, and idle is closed when pending drops to zero.
	mu      sync.Mutex
	pending int
	idle    chan struct{}
}

var _ events.EventRecorder = (*EventWriter)(nil)

// NewEventWriter returns an EventWriter creating events.k8s.io Events with c,
// reporting as controller (ReportingController) from instance (for example
// the Pod name), with room for capacity queued Events (DefaultEventQueue when
// zero or less).
func NewEventWriter(c client.Client, controller, instance string, capacity int, log logr.Logger) *EventWriter {
	if capacity <= 0 {
		capacity = DefaultEventQueue
	}
	idle := make(chan struct{})
	close(idle)
	return &EventWriter{
		client: c, scheme: c.Scheme(), controller: controller, instance: instance, log: log, clock: clock.RealClock{},
		queue: make(chan *eventsv1.Event, capacity), idle: idle,
	}
}

// Eventf implements events.EventRecorder: it queues an Event about regarding.
func (w *EventWriter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		w.log.Error(err, "Not recording an Event about an object without a reference", "reason", reason)
		return
	}
	now := w.clock.Now()
	msg := fmt.Sprintf(note, args...)
	if len(msg) > maxEventNote {
		msg = msg[:maxEventNote-3] + "..."
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ref.Namespace,
			Name:      ref.Name + "." + strconv.FormatInt(now.UnixNano(), 16),
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.controller,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Note:                msg,
		Type:                eventtype,
	}
	if ev.Namespace == "" {
		ev.Namespace = metav1.NamespaceDefault
	}
	if related != nil {
		if rel, err := reference.GetReference(w.scheme, related); err == nil {
			ev.Related = rel
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.queue <- ev:
		if w.pending == 0 {
			w.idle = make(chan struct{})
		}
		w.pending++
	default:
		w.log.Info("Event queue full, dropping an Event", "reason", reason, "regarding", klogRef(ref))
	}
}

func klogRef(ref *corev1.ObjectReference) string { return ref.Namespace + "/" + ref.Name }

// Run writes queued Events until ctx ends; an Event that cannot be written is
// logged and dropped after one retry. Run it for as long as Eventf may be
// called and stop it after Flush.
func (w *EventWriter) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.queue:
			w.write(ctx, ev)
			w.mu.Lock()
			w.pending--
			if w.pending == 0 {
				close(w.idle)
			}
			w.mu.Unlock()
		}
	}
}

func (w *EventWriter) write(ctx context.Context, ev *eventsv1.Event) {
	var err error
	for attempt := range 2 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = w.client.Create(wctx, ev.DeepCopy())
		cancel()
		if err == nil {
			return
		}
	}
	w.log.Error(err, "Dropping an Event the API server refused", "reason", ev.Reason, "regarding", klogRef(&ev.Regarding))
}

// Flush waits until no Event is queued or being written (each written or
// dropped), or ctx ends. Run must be running; call Flush once nothing emits
// Events any more, such as after the manager stopped.
func (w *EventWriter) Flush(ctx context.Context) error {
	w.mu.Lock()
	idle := w.idle
	w.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flushing Events: %w", context.Cause(ctx))
	}
}
