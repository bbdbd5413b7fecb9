package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fleet"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// newFleetPacer builds the fleet-wide fairness pacer (see dataplane/fleet).
// It exchanges demand through the Redis store in force; while the memory
// store is in force the exchange reports it is not shared and pacing is off.
// When the store's fail-open fallback counts replicas through the fleet
// exchange (outside Kubernetes, without --store-replicas), the pacer is the
// counter.
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
	if stores.fleet != nil {
		fm.OnLive = stores.metrics.LiveReplicas
	}
	p, err := fleet.New(clock.RealClock{}, fleet.Options{
		Replica:  replica,
		Exchange: fleet.NewRedisExchangeFrom(stores.sw.FleetClient),
		Observer: fm,
	}, log.WithName("fleet"))
	if err != nil {
		return nil, err
	}
	if stores.fleet != nil {
		stores.fleet.p.Store(p)
	}
	return p, nil
}

// fleetReplicas is the live-replica count of the fail-open fallback taken
// from the fleet exchange: the replicas whose membership reports were live
// in Redis at the last round (fleet.Pacer.Live). The store is built before
// the pacer, which needs the store's client, so the pacer is set later;
// until then, and without one, the count is 1.
type fleetReplicas struct{ p atomic.Pointer[fleet.Pacer] }

// Live implements redisstore.Replicas.
func (r *fleetReplicas) Live() int {
	if p := r.p.Load(); p != nil {
		return p.Live()
	}
	return 1
}

// whileAdmitting returns the context of the fleet pacer's exchange: it ends
// delay (--shutdown-delay) after ctx, when the server stops admitting and
// answers its queued requests 503, or when stop is called (the server
// returned, e.g. a second signal skipped the delay). The pacer then
// withdraws this replica's demand and membership at once. Withdrawing when
// shutdown starts instead let the draining replica admit its queued and
// arriving requests at its last gate rates for the whole delay while the
// other replicas had already taken over its share: the shared bucket was
// oversubscribed and its refusals fell on whichever tenants retried last.
func whileAdmitting(ctx context.Context, delay time.Duration) (pacerCtx context.Context, stop context.CancelFunc) {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pctx.Done():
		}
		cancel()
	})
	return pctx, func() {
		stopAfter()
		cancel()
	}
}

// fleetApply wraps load so the pacer publishes the fingerprint of the hash
// key each loaded config hashes with, for the fleet to check that every
// replica uses the same key.
func fleetApply(p *fleet.Pacer, load reload.ApplyFunc) reload.ApplyFunc {
	return func(cfg *config.Config, hash string) error {
		if err := load(cfg, hash); err != nil {
			return err
		}
		p.SetKeyFingerprint(cfg.HashKeySecret.Fingerprint)
		return nil
	}
}

// joinHealth returns a health function reporting every failure of fs (nil
// while all are healthy), for /readyz's body.
func joinHealth(fs ...func() error) func() error {
	return func() error {
		var errs []error
		for _, f := range fs {
			if err := f(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}
