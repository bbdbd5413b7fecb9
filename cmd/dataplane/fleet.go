package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/fleet"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
)

// newFleetPacer builds the fleet-wide fairness pacer (see dataplane/fleet).
// It exchanges demand through the Redis store in force; while the memory
// store is in force the exchange reports it is not shared and pacing is off.
func newFleetPacer(o *options, stores *storeWiring, reg prometheus.Registerer, log logr.Logger) (*fleet.Pacer, error) {
	fm, err := metrics.NewFleet(reg)
	if err != nil {
		return nil, fmt.Errorf("registering the fleet metrics: %w", err)
	}
	replica := o.podName
	if replica == "" {
		// Outside Kubernetes the host name is the best unique name at hand;
		// two replicas on one host need distinct --pod-name values.
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("the fleet pacer needs a replica name unique in the fleet: set --pod-name (the host name is unavailable: %w)", err)
		}
		replica = host
		replica = fmt.Sprintf("%s-%d", replica, os.Getpid())
	}
	return fleet.New(clock.RealClock{}, fleet.Options{
		Replica:  replica,
		Exchange: fleet.NewRedisExchangeFrom(stores.sw.FleetClient),
		Observer: fm,
	}, log.WithName("fleet"))
}
