package reload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Defaults for LeaseOptions fields left zero.
const (
	// DefaultLeaseDuration is how long a replica's report counts after its
	// last renewal.
	DefaultLeaseDuration = 30 * time.Second
	// DefaultLeaseRenew is how often a replica renews its report.
	DefaultLeaseRenew = 10 * time.Second
)

// Labels and annotations on data-plane Leases, read by the operator.
const (
	// LeasePolicyLabel is set on every data-plane Lease to the name of the
	// FairQueuePolicy whose config the replica loads.
	LeasePolicyLabel = config.PolicyLabel
	// LeaseComponentLabel marks data-plane Leases; its value is
	// LeaseComponentValue.
	LeaseComponentLabel = config.ComponentLabel
	// LeaseComponentValue is the value of LeaseComponentLabel.
	LeaseComponentValue = config.DataPlaneComponent
	// LeaseConfigHashAnnotation holds the hash of the config the replica
	// has in force, comparable with the policy's status.configHash.
	LeaseConfigHashAnnotation = config.ConfigHashAnnotation
)

// maxNameLen is the longest object name the API server accepts.
const maxNameLen = 253

// LeaseName returns the name of the Lease replica pod reports on for policy:
// <policy>-dataplane-<pod>, shortened with a hash suffix if that is too long.
func LeaseName(policy, pod string) string {
	n := policy + "-dataplane-" + pod
	if len(n) <= maxNameLen {
		return n
	}
	suffix := "-" + config.Hash([]byte(n))
	return n[:maxNameLen-len(suffix)] + suffix
}

// LeaseOptions configures a LeaseReporter.
type LeaseOptions struct {
	// PodName is the replica's Pod name, the Lease's holder identity. Required.
	PodName string
	// PodUID, if set, makes the Pod the Lease's owner, so the Lease is
	// garbage-collected with the Pod.
	PodUID types.UID
	// Duration is how long a report counts after its renewal; zero means
	// DefaultLeaseDuration.
	Duration time.Duration
	// Renew is the renewal period; zero means DefaultLeaseRenew. It must be
	// shorter than Duration.
	Renew time.Duration
	// Clock drives renewals and timestamps; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives write failures; a zero Logger discards them.
	Logger logr.Logger
}

// LeaseReporter publishes the hash of the config a replica has in force on a
// coordination.k8s.io Lease named LeaseName(policy, pod) in the policy's
// namespace, renewed periodically and rewritten at once after each reload.
// The operator counts unexpired Leases whose hash matches the policy's.
type LeaseReporter struct {
	client   kubernetes.Interface
	pod      string
	podUID   types.UID
	duration time.Duration
	renew    time.Duration
	clk      clock.WithTicker
	log      logr.Logger

	// latest is the newest load, handed from OnLoaded to Run through a
	// one-slot channel so OnLoaded never blocks and Run sees the last one.
	latest chan Loaded
	lease  *coordinationv1.Lease // last written, nil until written
}

// NewLeaseReporter returns a reporter writing through c.
func NewLeaseReporter(c kubernetes.Interface, opts LeaseOptions) (*LeaseReporter, error) {
	if opts.PodName == "" {
		return nil, errors.New("reload: the Pod name is required to report the loaded config; set --pod-name or POD_NAME from the downward API")
	}
	r := &LeaseReporter{
		client: c, pod: opts.PodName, podUID: opts.PodUID, duration: opts.Duration, renew: opts.Renew,
		clk: opts.Clock, log: opts.Logger, latest: make(chan Loaded, 1),
	}
	if r.duration <= 0 {
		r.duration = DefaultLeaseDuration
	}
	if r.renew <= 0 {
		r.renew = DefaultLeaseRenew
	}
	if r.renew >= r.duration {
		return nil, fmt.Errorf("reload: lease renewal period %s must be shorter than the lease duration %s", r.renew, r.duration)
	}
	if r.clk == nil {
		r.clk = clock.RealClock{}
	}
	return r, nil
}

// OnLoaded records a newly loaded config for Run to report. It never blocks
// and fits Options.OnLoaded.
func (r *LeaseReporter) OnLoaded(l Loaded) {
	for {
		select {
		case r.latest <- l:
			return
		default:
		}
		select { // replace a load Run has not picked up yet
		case <-r.latest:
		default:
		}
	}
}

// Run writes the Lease after each load and renews it until ctx ends, then
// deletes it so the replica stops counting at once. Write failures are logged
// and retried at the next renewal.
func (r *LeaseReporter) Run(ctx context.Context) error {
	ticker := r.clk.NewTicker(r.renew)
	defer ticker.Stop()
	var cur *Loaded
	for {
		select {
		case <-ctx.Done():
			if r.lease != nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				err := r.client.CoordinationV1().Leases(r.lease.Namespace).Delete(dctx, r.lease.Name, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					r.log.Error(err, "Deleting the config report Lease; it expires on its own", "lease", r.lease.Namespace+"/"+r.lease.Name)
				}
			}
			return nil
		case l := <-r.latest:
			cur = &l
		case <-ticker.C():
		}
		if cur == nil {
			continue
		}
		if err := r.write(ctx, cur); err != nil && ctx.Err() == nil {
			r.log.Error(err, "Reporting the loaded config on a Lease; retrying at the next renewal", "configHash", cur.Hash, "retryIn", r.renew)
		}
	}
}

// write creates or renews the Lease for l.
func (r *LeaseReporter) write(ctx context.Context, l *Loaded) error {
	ns, policy := l.Config.Policy.Namespace, l.Config.Policy.Name
	name := LeaseName(policy, r.pod)
	leases := r.client.CoordinationV1().Leases(ns)
	now := metav1.NewMicroTime(r.clk.Now())
	if r.lease == nil || r.lease.Namespace != ns || r.lease.Name != name {
		got, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, r.desired(ns, name, policy, l.Hash, now), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating Lease %s/%s: %w", ns, name, err)
			}
			r.lease = created
			r.log.V(1).Info("Reported the loaded config", "lease", ns+"/"+name, "configHash", l.Hash)
			return nil
		case err != nil:
			return fmt.Errorf("reading Lease %s/%s: %w", ns, name, err)
		}
		r.lease = got
	}
	next := r.desired(ns, name, policy, l.Hash, now)
	next.ResourceVersion = r.lease.ResourceVersion
	next.Spec.AcquireTime = r.lease.Spec.AcquireTime
	updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		r.lease = nil // re-read next time: it may be gone or changed
		return fmt.Errorf("renewing Lease %s/%s: %w", ns, name, err)
	}
	r.lease = updated
	return nil
}

// desired returns the Lease reporting hash at now.
func (r *LeaseReporter) desired(ns, name, policy, hash string, now metav1.MicroTime) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        name,
			Labels:      map[string]string{LeasePolicyLabel: policy, LeaseComponentLabel: LeaseComponentValue},
			Annotations: map[string]string{LeaseConfigHashAnnotation: hash},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(r.pod),
			LeaseDurationSeconds: ptr.To(int32(r.duration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	if r.podUID != "" {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: r.pod, UID: r.podUID}}
	}
	return l
}
