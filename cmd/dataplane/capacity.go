package main

import (
	"os"

	"github.com/go-logr/logr"

	"github.com/fairqueue/fairqueue/dataplane/capacity/redisslots"
)

// newCapacityLeases makes capacity mode's in-flight counts fleet-wide while
// the policy's store is Redis (SPEC 6b): each slot is also a lease there,
// which comes back by expiry if this replica dies holding it. While Redis
// is unreachable the slots follow the store's failureMode, Open dividing
// maxInFlight by the same live-replica count as the rate limits. With the
// memory store the leases are not used and the local count decides. The
// caller closes the result to stop its heartbeat.
func newCapacityLeases(o *options, stores *storeWiring, log logr.Logger) (*redisslots.Leases, error) {
	replica := o.podName
	if replica == "" {
		// Outside Kubernetes: the host's name, else a fixed one; the
		// leases' random incarnation keeps replicas apart either way.
		if h, err := os.Hostname(); err == nil && h != "" {
			replica = h
		} else {
			replica = "dataplane"
		}
	}
	return redisslots.New(redisslots.Options{
		Store:    stores.sw.Redis,
		Replica:  replica,
		Replicas: stores.count,
		Logger:   log.WithName("capacity-leases"),
	})
}
