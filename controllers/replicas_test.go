package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// report returns a data-plane Lease for policy, renewed at renewed with a
// duration of seconds, reporting hash.
func report(ns, policy, pod, hash string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: policy + "-dataplane-" + pod,
			Labels:      map[string]string{config.PolicyLabel: policy, DataPlaneComponentLabel: DataPlaneComponentValue},
			Annotations: map[string]string{config.ConfigHashAnnotation: hash},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(pod),
			RenewTime:            ptr.To(metav1.NewMicroTime(renewed)),
			LeaseDurationSeconds: ptr.To(seconds),
		},
	}
}

func TestCountReplicas(t *testing.T) {
	tests := []struct {
		name   string
		leases []*coordinationv1.Lease
		want   replicaCount
	}{
		{name: "none", want: replicaCount{}},
		{
			name: "fresh, stale hash and expired",
			leases: []*coordinationv1.Lease{
				report("ns", "p", "a", "h1", epoch.Add(-10*time.Second), 30),
				report("ns", "p", "b", "h0", epoch.Add(-25*time.Second), 30),
				report("ns", "p", "c", "h1", epoch.Add(-31*time.Second), 30),
			},
			want: replicaCount{replicas: 2, updated: 1, nextExpiry: 5 * time.Second},
		},
		{
			name:   "expiring exactly now no longer counts",
			leases: []*coordinationv1.Lease{report("ns", "p", "a", "h1", epoch.Add(-30*time.Second), 30)},
			want:   replicaCount{},
		},
		{
			name: "a Lease without renewal or duration is ignored",
			leases: []*coordinationv1.Lease{
				{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30)}},
				{Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(epoch))}},
			},
			want: replicaCount{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var leases []coordinationv1.Lease
			for _, l := range tt.leases {
				leases = append(leases, *l)
			}
			if got := countReplicas(leases, "h1", epoch); got != tt.want {
				t.Errorf("countReplicas = %+v, want %+v", got, tt.want)
			}
		})
	}
	// Before any render there is no hash, and no replica runs "it".
	got := countReplicas([]coordinationv1.Lease{*report("ns", "p", "a", "", epoch, 30)}, "", epoch)
	if got.replicas != 1 || got.updated != 0 {
		t.Errorf("countReplicas with no hash = %+v, want 1 replica, 0 updated", got)
	}
}

func TestLeaseReportChanged(t *testing.T) {
	g := NewWithT(t)
	old := report("ns", "p", "a", "h1", epoch, 30)
	renewed := report("ns", "p", "a", "h1", epoch.Add(10*time.Second), 30)
	reloaded := report("ns", "p", "a", "h2", epoch.Add(10*time.Second), 30)
	pred := leaseReportChanged()
	g.Expect(pred.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: renewed})).To(BeFalse(), "a renewal alone changes no count")
	g.Expect(pred.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: reloaded})).To(BeTrue())
	g.Expect(pred.Create(event.CreateEvent{Object: old})).To(BeTrue())
	g.Expect(pred.Delete(event.DeleteEvent{Object: old})).To(BeTrue())

	key, ok := policyForLease(old)
	g.Expect(ok).To(BeTrue())
	g.Expect(key).To(Equal(client.ObjectKey{Namespace: "ns", Name: "p"}))
}

// TestLeaseContractMatchesDataPlane pins the operator's reading of report
// Leases to what the data plane writes.
func TestLeaseContractMatchesDataPlane(t *testing.T) {
	g := NewWithT(t)
	g.Expect(DataPlaneComponentLabel).To(Equal(reload.LeaseComponentLabel))
	g.Expect(DataPlaneComponentValue).To(Equal(reload.LeaseComponentValue))
	g.Expect(config.PolicyLabel).To(Equal(reload.LeasePolicyLabel))
	g.Expect(config.ConfigHashAnnotation).To(Equal(reload.LeaseConfigHashAnnotation))
}

func TestDataPlaneReplicasCounted(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	hash := getPolicy(t, p).Status.ConfigHash
	now := time.Now()
	leases := []*coordinationv1.Lease{
		report(p.Namespace, p.Name, "a", hash, now, 3600),
		report(p.Namespace, p.Name, "b", "0000000000000000", now, 3600),
		report(p.Namespace, p.Name, "c", hash, now.Add(-2*time.Hour), 30), // expired
		report(p.Namespace, "other-policy", "d", hash, now, 3600),
	}
	for _, l := range leases {
		g.Expect(k8s.Create(ctx(t), l)).To(Succeed())
	}
	waitReplicas := func(replicas, updated int32) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			got := getPolicy(t, p).Status
			g.Expect(got.DataPlaneReplicas).To(Equal(replicas))
			g.Expect(got.UpdatedReplicas).To(Equal(updated))
		}).Should(Succeed())
	}
	waitReplicas(2, 1)

	// Replica b reloads the current config.
	b := leases[1]
	b.Annotations[config.ConfigHashAnnotation] = hash
	g.Expect(k8s.Update(ctx(t), b)).To(Succeed())
	waitReplicas(2, 2)

	// Replica a shuts down and deletes its Lease.
	g.Expect(k8s.Delete(context.Background(), leases[0])).To(Succeed())
	waitReplicas(1, 1)
}
