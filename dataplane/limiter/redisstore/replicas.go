/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Labels of the data-plane report Leases (see package reload), taken from
// package config so the store does not depend on the reload package.
const (
	leasePolicyLabel    = config.PolicyLabel
	leaseComponentLabel = config.ComponentLabel
	leaseComponentValue = config.DataPlaneComponent
)

// DefaultReplicaPoll is how often LeaseReplicas recounts the Leases.
const DefaultReplicaPoll = 5 * time.Second

// LeaseReplicas counts a policy's live data-plane replicas from their report
// Leases (one per replica, renewed every 10s, expiring after 30s), the same
// Leases the operator counts into status.dataPlaneReplicas. It polls with
// one List call per period; between polls, and when a poll fails, it keeps
// the last count. It never reports fewer than 1 (this replica).
type LeaseReplicas struct {
	client    kubernetes.Interface
	namespace string
	selector  string
	clock     clock.WithTicker
	every     time.Duration
	log       logr.Logger
	report    func(int)
	n         atomic.Int64
	warned    atomic.Bool
}

// LeaseReplicasOptions tunes LeaseReplicas.
type LeaseReplicasOptions struct {
	// Poll is the recount period; zero means DefaultReplicaPoll.
	Poll time.Duration
	// Clock drives polling and expiry; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives failed polls at verbosity 1.
	Logger logr.Logger
	// Report, if set, is told every count (for the live-replicas gauge).
	Report func(int)
}

// NewLeaseReplicas counts the replicas of policy in namespace through c.
func NewLeaseReplicas(c kubernetes.Interface, namespace, policy string, o LeaseReplicasOptions) *LeaseReplicas {
	r := &LeaseReplicas{
		client: c, namespace: namespace, clock: o.Clock, every: o.Poll, log: o.Logger, report: o.Report,
		selector: labels.SelectorFromSet(labels.Set{leasePolicyLabel: policy, leaseComponentLabel: leaseComponentValue}).String(),
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.every <= 0 {
		r.every = DefaultReplicaPoll
	}
	r.n.Store(1)
	return r
}

// Live implements Replicas.
func (r *LeaseReplicas) Live() int { return int(r.n.Load()) }

// Run counts at once and then every poll period until ctx ends.
func (r *LeaseReplicas) Run(ctx context.Context) {
	t := r.clock.NewTicker(r.every)
	defer t.Stop()
	for {
		r.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// poll lists the Leases and stores the number unexpired now.
func (r *LeaseReplicas) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.every)
	defer cancel()
	list, err := r.client.CoordinationV1().Leases(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: r.selector})
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		log := r.log.V(1)
		if !r.warned.Swap(true) {
			log = r.log // the first failure is worth seeing: it may be RBAC
		}
		log.Info("Counting live replicas from their report Leases failed; keeping the last count, which the fail-open fallback divides limits by. "+
			"The data plane needs list on coordination.k8s.io leases in its namespace",
			"error", err.Error(), "count", r.Live())
		return
	}
	now := r.clock.Now()
	n := 0
	for i := range list.Items {
		spec := &list.Items[i].Spec
		if spec.RenewTime == nil || spec.LeaseDurationSeconds == nil {
			continue
		}
		if spec.RenewTime.Add(time.Duration(*spec.LeaseDurationSeconds) * time.Second).After(now) {
			n++
		}
	}
	n = max(n, 1)
	r.n.Store(int64(n))
	if r.report != nil {
		r.report(n)
	}
}
