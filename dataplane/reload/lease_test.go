package reload

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestLeaseName(t *testing.T) {
	tests := []struct {
		policy, pod string
		want        string
	}{
		{"llm", "dp-7c9f-abcde", "llm-dataplane-dp-7c9f-abcde"},
		{strings.Repeat("p", 63), strings.Repeat("x", 253), ""},
	}
	for _, tc := range tests {
		got := LeaseName(tc.policy, tc.pod)
		if tc.want != "" && got != tc.want {
			t.Errorf("LeaseName(%q, %q) = %q, want %q", tc.policy, tc.pod, got, tc.want)
		}
		if len(got) > 253 {
			t.Errorf("LeaseName(%q, %q) has %d characters, more than an object name may", tc.policy, tc.pod, len(got))
		}
	}
	if a, b := LeaseName("p", strings.Repeat("x", 300)), LeaseName("p", strings.Repeat("x", 301)); a == b {
		t.Errorf("two long pod names share Lease %q", a)
	}
}

func TestNewLeaseReporterValidates(t *testing.T) {
	client := fake.NewClientset()
	for name, opts := range map[string]LeaseOptions{
		"no pod name":                {},
		"renewal not under duration": {PodName: "p", Duration: 10 * time.Second, Renew: 10 * time.Second},
	} {
		if _, err := NewLeaseReporter(client, opts); err == nil {
			t.Errorf("%s: NewLeaseReporter() = nil error, want one", name)
		}
	}
}

func TestLeaseReporterReportsRenewsAndDeletes(t *testing.T) {
	client := fake.NewClientset()
	leases := client.CoordinationV1().Leases("team-a")
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC))
	rep, err := NewLeaseReporter(client, LeaseOptions{PodName: "dp-0", PodUID: "uid-0", Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rep.Run(ctx) }()

	name := LeaseName("llm", "dp-0")
	get := func() *coordinationv1.Lease {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return l
	}
	loaded := func(gen int64) Loaded {
		data := render(t, gen, 1)
		cfg, err := config.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		return Loaded{Config: cfg, Hash: config.Hash(data)}
	}

	l1 := loaded(1)
	rep.OnLoaded(l1)
	testutil.Eventually(t, "the Lease to be created", func() bool { return get() != nil })
	got := get()
	if h := got.Annotations[LeaseConfigHashAnnotation]; h != l1.Hash {
		t.Errorf("config hash annotation = %q, want %q", h, l1.Hash)
	}
	if got.Labels[LeasePolicyLabel] != "llm" || got.Labels[LeaseComponentLabel] != LeaseComponentValue {
		t.Errorf("labels = %v, want the policy and component labels the operator selects on", got.Labels)
	}
	if *got.Spec.HolderIdentity != "dp-0" || *got.Spec.LeaseDurationSeconds != 30 {
		t.Errorf("holder %q duration %d, want dp-0 and 30", *got.Spec.HolderIdentity, *got.Spec.LeaseDurationSeconds)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "uid-0" || got.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("owner references = %v, want the Pod", got.OwnerReferences)
	}
	firstRenew := got.Spec.RenewTime.Time

	// A new config is reported at once, without waiting for a renewal.
	l2 := loaded(2)
	rep.OnLoaded(l2)
	testutil.Eventually(t, "the new hash", func() bool { return get().Annotations[LeaseConfigHashAnnotation] == l2.Hash })

	// The renewal period moves renewTime forward.
	clk.Step(DefaultLeaseRenew)
	testutil.Eventually(t, "a renewal", func() bool { return get().Spec.RenewTime.After(firstRenew) })

	// A Lease deleted behind the reporter's back is recreated at the next renewal.
	if err := leases.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the recreation", func() bool {
		clk.Step(DefaultLeaseRenew)
		return get() != nil
	})

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	if _, err := leases.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after shutdown Get() = %v, want NotFound: the replica would keep counting until expiry", err)
	}
}
