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
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func lease(name, policy string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{leasePolicyLabel: policy, leaseComponentLabel: leaseComponentValue}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To(int32(30))},
	}
}

func TestLeaseReplicasCountsUnexpiredLeasesOfThePolicy(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		leases []*coordinationv1.Lease
		want   int
	}{
		{name: "no Lease yet counts this replica", want: 1},
		{name: "three live replicas", want: 3, leases: []*coordinationv1.Lease{
			lease("a", "llm", now), lease("b", "llm", now.Add(-10*time.Second)), lease("c", "llm", now.Add(-29*time.Second))}},
		{name: "expired Leases and other policies do not count", want: 2, leases: []*coordinationv1.Lease{
			lease("a", "llm", now), lease("b", "llm", now), lease("gone", "llm", now.Add(-31*time.Second)), lease("x", "other", now)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			for _, l := range tc.leases {
				if _, err := c.CoordinationV1().Leases("ns").Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var reported int
			r := NewLeaseReplicas(c, "ns", "llm", LeaseReplicasOptions{Clock: clocktesting.NewFakeClock(now), Report: func(n int) { reported = n }})
			r.poll(context.Background())
			if r.Live() != tc.want || reported != tc.want {
				t.Fatalf("Live() = %d, reported %d, want %d", r.Live(), reported, tc.want)
			}
		})
	}
}
