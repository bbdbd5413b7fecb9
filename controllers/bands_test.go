package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// TestBandSecretMembershipFollowsTheSecret is the GitOps flow of issue #21:
// a key added to a weightsFrom Secret with a band joins that band in the
// ConfigMap, as a hash, without touching the policy.
func TestBandSecretMembershipFollowsTheSecret(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	const rawPremium, rawNewPremium = "sk-premium-0001", "sk-premium-0002"
	for _, s := range append(newSecrets(ns), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "premium-keys"},
		StringData: map[string]string{"A": rawPremium},
	}) {
		g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
	}
	p := newPolicy(ns)
	fq := &p.Spec.FairQueuing
	fq.PriorityBands = []fqv1alpha1.PriorityBand{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", MinShare: 0.05}}
	fq.DefaultBand = "standard"
	fq.WeightsFrom = append(fq.WeightsFrom, fqv1alpha1.WeightsSource{SecretRef: fqv1alpha1.LocalSecretReference{Name: "premium-keys"}, Band: "interactive"})
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	ready := waitReady(t, p)
	key := hashKeyOf(t, p)

	c := parseConfigMap(t, getConfigMap(t, p))
	g.Expect(c.FairQueuing.Bands).To(HaveLen(3))
	g.Expect(c.FairQueuing.DefaultBand).To(Equal("standard"))
	g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(key, rawPremium), Weight: 1, Band: "interactive"}))

	updateSecret(t, ns, "premium-keys", func(s *corev1.Secret) { s.Data["B"] = []byte(rawNewPremium) })
	g.Eventually(func(g Gomega) {
		c := parseConfigMap(t, getConfigMap(t, p))
		g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(key, rawNewPremium), Weight: 1, Band: "interactive"}))
	}).WithTimeout(5 * time.Second).Should(Succeed())
	// The status follows the ConfigMap write in a separate update: wait for
	// it rather than read it once.
	var after *fqv1alpha1.FairQueuePolicy
	g.Eventually(func(g Gomega) {
		after = &fqv1alpha1.FairQueuePolicy{}
		g.Expect(k8s.Get(ctx(t), client.ObjectKeyFromObject(p), after)).To(Succeed())
		g.Expect(after.Status.ConfigHash).NotTo(Equal(ready.Status.ConfigHash))
	}).WithTimeout(10 * time.Second).Should(Succeed())
	after = waitReady(t, p)
	g.Expect(after.Status.WeightedTenants).To(Equal(ready.Status.WeightedTenants), "status counts weights entries, never a Secret's size")
	data := getConfigMap(t, p).Data[config.ConfigMapKey]
	for _, raw := range []string{rawPremium, rawNewPremium} {
		g.Expect(data).NotTo(ContainSubstring(raw))
	}
}
