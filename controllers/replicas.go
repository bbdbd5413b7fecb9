package controllers

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Each data-plane replica reports the config it has in force on a Lease in the
// policy's namespace, labelled with the policy and renewed periodically (see
// dataplane/reload.LeaseReporter). The operator counts the unexpired ones into
// status.dataPlaneReplicas, and those whose hash matches status.configHash
// into status.updatedReplicas.
const (
	// DataPlaneComponentLabel marks data-plane report Leases; its value is
	// DataPlaneComponentValue. The data plane writes the same values.
	DataPlaneComponentLabel = config.ComponentLabel
	// DataPlaneComponentValue is the value of DataPlaneComponentLabel on
	// data-plane report Leases.
	DataPlaneComponentValue = config.DataPlaneComponent
)

// replicaCount is what the data-plane Leases of one policy say.
type replicaCount struct {
	// replicas and updated are the unexpired Leases, and those among them
	// reporting the policy's config hash.
	replicas, updated int32
	// nextExpiry is the time until the first unexpired Lease expires if it
	// is not renewed, zero when none is unexpired. The counts are stale
	// after it, with no watch event to say so.
	nextExpiry time.Duration
}

// countReplicas counts the Leases unexpired at now, and those reporting hash.
func countReplicas(leases []coordinationv1.Lease, hash string, now time.Time) replicaCount {
	var c replicaCount
	for i := range leases {
		spec := &leases[i].Spec
		if spec.RenewTime == nil || spec.LeaseDurationSeconds == nil {
			continue
		}
		left := spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds) * time.Second).Sub(now)
		if left <= 0 {
			continue
		}
		c.replicas++
		if hash != "" && leases[i].Annotations[config.ConfigHashAnnotation] == hash {
			c.updated++
		}
		if c.nextExpiry == 0 || left < c.nextExpiry {
			c.nextExpiry = left
		}
	}
	return c
}

// leaseReportChanged passes Lease events that can change the counts at once:
// creation, deletion and a change of the reported hash. Plain renewals, every
// few seconds per replica, are filtered out; expiry is handled by a timer.
func leaseReportChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[config.ConfigHashAnnotation] != e.ObjectNew.GetAnnotations()[config.ConfigHashAnnotation] ||
				e.ObjectOld.GetLabels()[config.PolicyLabel] != e.ObjectNew.GetLabels()[config.PolicyLabel]
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// policyForLease maps a data-plane Lease to the policy named by its label.
func policyForLease(obj client.Object) (client.ObjectKey, bool) {
	name := obj.GetLabels()[config.PolicyLabel]
	return client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, name != ""
}
