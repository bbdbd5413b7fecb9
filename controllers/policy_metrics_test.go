package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

func TestPolicyCollectorReportsReady(t *testing.T) {
	scheme := testScheme(t)
	policy := func(ns, name string, conds ...metav1.Condition) *fqv1alpha1.FairQueuePolicy {
		return &fqv1alpha1.FairQueuePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: fqv1alpha1.FairQueuePolicyStatus{Conditions: conds}}
	}
	ready := func(s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: fqv1alpha1.ConditionReady, Status: s, Reason: reason}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		policy("team-a", "llm", ready(metav1.ConditionTrue, fqv1alpha1.ReasonRendered)),
		policy("team-b", "chat", ready(metav1.ConditionFalse, fqv1alpha1.ReasonSecretNotFound)),
		policy("team-c", "new"),
	).Build()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPolicyCollector(c))
	want := `# HELP fairqueue_policy_ready Whether the FairQueuePolicy is rendered (1) or cannot be rendered (0), by the Ready condition's reason.
# TYPE fairqueue_policy_ready gauge
fairqueue_policy_ready{namespace="team-a",policy="llm",reason="Rendered"} 1
fairqueue_policy_ready{namespace="team-b",policy="chat",reason="SecretNotFound"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), PolicyReadyMetricName); err != nil {
		t.Error(err)
	}
}
