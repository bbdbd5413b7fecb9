package controllers

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

// namesPolicy references two weights Secrets and a key registry.
func namesPolicy() *fqv1alpha1.FairQueuePolicy {
	return &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llm"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Identity: fqv1alpha1.IdentitySpec{
				KeyRegistry: &fqv1alpha1.KeyRegistry{SecretRef: fqv1alpha1.LocalSecretReference{Name: "registry"}},
			},
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled: true,
				WeightsFrom: []fqv1alpha1.WeightsSource{
					{SecretRef: fqv1alpha1.LocalSecretReference{Name: "ids-a"}},
					{SecretRef: fqv1alpha1.LocalSecretReference{Name: "ids-b"}},
				},
			},
		},
	}
}

func TestSecretRefsIndex(t *testing.T) {
	g := NewWithT(t)
	p := namesPolicy()
	g.Expect(secretRefs(p)).To(Equal([]string{"ids-a", "ids-b", "llm-hash-key", "registry"}))
	p.Spec.HashKeySecretRef = &fqv1alpha1.LocalSecretReference{Name: "ids-a"}
	g.Expect(secretRefs(p)).To(Equal([]string{"ids-a", "ids-b", "registry"}), "names are listed once")
	g.Expect(secretRefs(&corev1.Secret{})).To(BeNil())
}

func TestNames(t *testing.T) {
	g := NewWithT(t)
	p := namesPolicy()
	g.Expect(ConfigMapName(p.Name)).To(Equal("llm-dataplane"))
	g.Expect(p.HashKeySecretName()).To(Equal("llm-hash-key"))
	p.Spec.HashKeySecretRef = &fqv1alpha1.LocalSecretReference{Name: "shared-key"}
	g.Expect(p.HashKeySecretName()).To(Equal("shared-key"))
	g.Expect(managedLabels(strings.Repeat("a", 64))).NotTo(HaveKey(config.PolicyLabel), "an invalid label value is left out")
}
