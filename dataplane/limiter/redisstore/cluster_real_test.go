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
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
	"github.com/fairqueue/fairqueue/internal/redistest"
)

// upCounter counts a Store's transitions back to up.
type upCounter struct {
	nopObserver
	ups atomic.Int64
}

func (o *upCounter) StoreState(up, _ bool) {
	if up {
		o.ups.Add(1)
	}
}

// resumeAfterFailover is how soon after the cluster is healthy again (every
// node cluster_state:ok, the slot's new master agreed) admission must resume.
const resumeAfterFailover = 3 * time.Second

// TestRealClusterFailoverOfTheSlotOwner runs a real 3-master/3-replica Redis
// Cluster, kills the master that owns the policy's slot and measures how
// long after the cluster is healthy again the store admits: within a few
// seconds (the store health-checks the slot's owner and reloads the
// client's cluster state when it fails), without flapping up and down in
// between (a PING to any other node succeeding says nothing of the slot).
func TestRealClusterFailoverOfTheSlotOwner(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	obs := &upCounter{}
	policy := policyName(t)
	s, err := New(Options{Addresses: c.Addrs(), Mode: ModeCluster, Namespace: "ns", Policy: policy, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	l := lim(1_000_000, time.Second, 0)
	take := func() bool {
		d, err := s.Take(time.Now(), userBatch("u", l))
		return err == nil && d.Allowed
	}
	// admitsBy polls Take every 10 ms (the store talks to external
	// processes on the real clock) and returns when it first admitted.
	admitsBy := func(what string, deadline time.Time) time.Time {
		t.Helper()
		for !take() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no admission by %s", what, deadline.Format(time.StampMilli))
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Now()
	}
	admitsBy("before the failover", time.Now().Add(5*time.Second))

	key := s.Key(limiter.DimensionUser, "u")
	owner, err := redistest.Owner(ctx, c.Nodes[0], key)
	if err != nil {
		t.Fatal(err)
	}
	ups := obs.ups.Load()
	if err := c.Node(owner).Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// Keep calling as traffic would while the cluster fails over.
	stop := make(chan struct{})
	calls := make(chan struct{})
	go func() {
		defer close(calls)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				take()
			}
		}
	}()
	newOwner, err := c.WaitOwner(ctx, key, owner)
	close(stop)
	<-calls
	if err != nil {
		t.Fatal(err)
	}
	healthy := time.Now()
	resumed := admitsBy("after the failover", healthy.Add(resumeAfterFailover))
	t.Logf("slot owner %s killed; cluster healthy with owner %s after %s; admission resumed %s after that (%s after the kill); %d transitions to up",
		owner, newOwner, healthy.Sub(killed).Round(time.Millisecond), resumed.Sub(healthy).Round(time.Millisecond),
		resumed.Sub(killed).Round(time.Millisecond), obs.ups.Load()-ups)
	if flaps := obs.ups.Load() - ups; flaps > 1 {
		t.Errorf("the store went back up %d times during one failover, want at most once: its health check must reach the slot's owner", flaps)
	}
}
