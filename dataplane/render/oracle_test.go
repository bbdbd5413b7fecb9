package render

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// TestNoOracleOnSecretValues plays a policy author who may not read Secrets
// but writes a literal guess next to a ${VAR} from a Secret: whether the
// guess is right must not show in what the author sees of the outcome (an
// error and its reason, the weighted-tenant count). Equal identities are
// merged, the first entry winning, and named for the operator's log only.
func TestNoOracleOnSecretValues(t *testing.T) {
	const secretValue = "sk-acme-123" // ACME_KEY in ids-a, trimmed
	outcome := func(guess string) (*Rendered, error) {
		p := unitPolicy()
		p.Spec.FairQueuing.Weights = append(p.Spec.FairQueuing.Weights, fqv1alpha1.TenantWeight{Identity: guess, Weight: 9})
		return Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: unitSecrets()})
	}
	tests := []struct {
		name, guess string
		wantMerged  bool
	}{
		{"wrong guess", "sk-acme-124", false},
		{"right guess", secretValue, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			out, err := outcome(tt.guess)
			g.Expect(err).NotTo(HaveOccurred(), "the outcome must not depend on the guess")
			g.Expect(out.WeightedTenants).To(BeEquivalentTo(4), "the count shown in status must not depend on the guess")
			g.Expect(out.Merged != nil).To(Equal(tt.wantMerged))
			c, err := config.Parse(out.Data)
			g.Expect(err).NotTo(HaveOccurred())
			// The first entry wins: the Secret-backed one keeps weight 3.
			g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(unitKey, secretValue), Weight: 3}))
			for _, m := range out.Merged {
				g.Expect(m).NotTo(ContainSubstring(secretValue))
			}
		})
	}
}

// TestRegistryMessagesLeakNoSize checks that a refusal about a Secret the
// author may not read says what is wrong without the Secret's size.
func TestRegistryMessagesLeakNoSize(t *testing.T) {
	g := NewWithT(t)
	big := "["
	for i := range maxRegistryEntries + 1 {
		if i > 0 {
			big += ","
		}
		big += `{"apiKey":"k` + string(rune('a'+i%26)) + `"}`
	}
	big += "]"
	s := unitSecrets()
	s["registry"] = &corev1.Secret{Data: map[string][]byte{"keys.json": []byte(big)}}
	s["registry"].Name = "registry"
	_, err := Render(Input{Policy: unitPolicy(), HashKey: unitKey, HashKeySecret: "k", Secrets: s})
	var rerr *Error
	g.Expect(errors.As(err, &rerr)).To(BeTrue())
	g.Expect(rerr.Msg).To(ContainSubstring("more than the 4000 entries supported"))
	g.Expect(rerr.Msg).NotTo(ContainSubstring("4001"))
}
