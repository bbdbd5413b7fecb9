package render

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

var unitKey = bytes.Repeat([]byte{7}, identity.HashKeyLen)

func unitPolicy() *fqv1alpha1.FairQueuePolicy {
	return &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llm", Generation: 2},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Identity: fqv1alpha1.IdentitySpec{
				KeyRegistry: &fqv1alpha1.KeyRegistry{SecretRef: fqv1alpha1.LocalSecretReference{Name: "registry"}, Enforce: true},
			},
			RateLimits: fqv1alpha1.RateLimits{
				PerUser:  &fqv1alpha1.RateLimit{Requests: 10},
				PerModel: &fqv1alpha1.ModelRateLimit{Overrides: []fqv1alpha1.ModelRateLimitOverride{{Model: "big", RateLimit: fqv1alpha1.RateLimit{Requests: 2, RequestBucket: fqv1alpha1.RequestBucket{Burst: 4}}}}},
			},
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled: true,
				Weights: []fqv1alpha1.TenantWeight{
					{Identity: "${ACME_KEY}", Weight: 3},
					{Identity: "team-$TEAM", Weight: 2},
					{Identity: "cost$$center", Weight: 5},
				},
				WeightsFrom: []fqv1alpha1.WeightsSource{
					{SecretRef: fqv1alpha1.LocalSecretReference{Name: "ids-a"}},
					{SecretRef: fqv1alpha1.LocalSecretReference{Name: "ids-b"}},
				},
			},
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func unitSecrets() map[string]*corev1.Secret {
	return map[string]*corev1.Secret{
		"ids-a":    secret("ids-a", map[string]string{"ACME_KEY": "sk-acme-123\n", "TEAM": "research"}),
		"ids-b":    secret("ids-b", map[string]string{"ACME_KEY": "sk-shadowed", "OTHER": "x"}),
		"registry": secret("registry", map[string]string{"keys.json": `[{"apiKey":"sk-acme-123","user":"alice","team":"research"},{"apiKey":"sk-bob"}]`}),
	}
}

func TestRenderResolvesAndHashesIdentities(t *testing.T) {
	g := NewWithT(t)
	out, err := Render(Input{Policy: unitPolicy(), HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
	g.Expect(err).NotTo(HaveOccurred())
	c, err := config.Parse(out.Data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Hash).To(Equal(config.Hash(out.Data)))
	g.Expect(out.WeightedTenants).To(BeEquivalentTo(3))

	// Variables resolve from the first Secret holding them, trimmed; $$ is a
	// literal $.
	g.Expect(c.FairQueuing.Weights).To(ConsistOf(
		config.Weight{TenantHash: identity.Hash(unitKey, "sk-acme-123"), Weight: 3},
		config.Weight{TenantHash: identity.Hash(unitKey, "team-research"), Weight: 2},
		config.Weight{TenantHash: identity.Hash(unitKey, "cost$center"), Weight: 5},
	))
	g.Expect(c.Identity.KeyRegistry.Entries).To(ConsistOf(
		config.KeyRegistryEntry{APIKeyHash: identity.Hash(unitKey, "sk-acme-123"), UserHash: identity.Hash(unitKey, "alice"), TeamHash: identity.Hash(unitKey, "research")},
		config.KeyRegistryEntry{APIKeyHash: identity.Hash(unitKey, "sk-bob")},
	))
	g.Expect(c.Identity.KeyRegistry.Enforce).To(BeTrue())

	// Defaults the API server would fill are filled for objects that did not
	// pass through it.
	g.Expect(c.Identity.APIKeyHeaders).To(Equal(config.DefaultAPIKeyHeaders()))
	g.Expect(c.FairQueuing.TenantDimension).To(Equal(identity.DimensionUser))
	g.Expect(c.FairQueuing.DefaultWeight).To(BeEquivalentTo(1))
	g.Expect(c.FairQueuing.Bounds).To(Equal(config.DefaultBounds()))
	g.Expect(c.Timeouts.RequestTotal.Duration).To(Equal(60 * time.Second))
	g.Expect(*c.RateLimits.PerUser).To(Equal(config.Limit{Requests: 10, Period: config.Duration{Duration: time.Second}, Burst: 10}))
	g.Expect(c.RateLimits.PerModel.Default).To(BeNil(), "perModel with overrides only must not limit other models")
	g.Expect(c.RateLimits.PerModel.Overrides[0].Limit.Burst).To(BeEquivalentTo(4))
	g.Expect(c.RateLimits.PerModel.UnknownModel).To(BeZero(), "without unknownModel a body whose model cannot be read is refused")
	g.Expect(c.Backends).To(Equal([]config.Backend{{Name: "vllm", URL: "http://vllm:8000", Weight: 1}}))
	g.Expect(c.HashKeySecret).To(Equal(config.HashKeySecret{Namespace: "ns", Name: "llm-hash-key", Key: "key", Fingerprint: config.KeyFingerprint(unitKey)}))

	for _, raw := range []string{"sk-acme-123", "sk-bob", "alice", "research", "cost$center", string(unitKey)} {
		g.Expect(string(out.Data)).NotTo(ContainSubstring(raw), "raw value in the Rendered config")
	}

	again, err := Render(Input{Policy: unitPolicy(), HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Data).To(Equal(out.Data), "rendering must be deterministic")
}

func TestRenderDisabledIgnoresWeights(t *testing.T) {
	g := NewWithT(t)
	p := unitPolicy()
	p.Spec.FairQueuing.Enabled = false
	secrets := unitSecrets()
	delete(secrets, "ids-a") // not needed while disabled
	out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: secrets})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.WeightedTenants).To(BeZero())
	g.Expect(ReferencedSecrets(p)).To(Equal([]string{"registry"}))
}

func TestRenderFailures(t *testing.T) {
	tests := []struct {
		name         string
		mutate       func(p *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret)
		wantReason   string
		wantResolved bool
		wantMessage  []string
	}{
		{
			name:       "missing weightsFrom Secret",
			mutate:     func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) { delete(s, "ids-b") },
			wantReason: fqv1alpha1.ReasonSecretNotFound, wantMessage: []string{`Secret "ids-b" named in spec.fairQueuing.weightsFrom does not exist`},
		},
		{
			name:       "missing key registry Secret",
			mutate:     func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) { delete(s, "registry") },
			wantReason: fqv1alpha1.ReasonSecretNotFound, wantMessage: []string{`key registry Secret "registry"`},
		},
		{
			name: "missing key registry data key",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["registry"] = secret("registry", map[string]string{"other.json": "[]"})
			},
			wantReason: fqv1alpha1.ReasonSecretKeyNotFound, wantMessage: []string{`has no data key "keys.json"`},
		},
		{
			name:       "unresolved variable",
			mutate:     func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) { delete(s["ids-a"].Data, "TEAM") },
			wantReason: fqv1alpha1.ReasonVariableUnresolved, wantMessage: []string{`spec.fairQueuing.weights[1]: variable "TEAM" is in none of the weightsFrom Secrets ["ids-a", "ids-b"]`},
		},
		{
			name: "variable resolves to nothing",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["ids-a"].Data["ACME_KEY"] = []byte(" \n")
			},
			wantReason: fqv1alpha1.ReasonInvalid, wantResolved: true, wantMessage: []string{"spec.fairQueuing.weights[0] resolves to an empty identity"},
		},
		{
			name: "malformed key registry",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["registry"] = secret("registry", map[string]string{"keys.json": `[{"apiKey":"sk-secret-value","usr":"x"}]`})
			},
			wantReason: fqv1alpha1.ReasonInvalid, wantResolved: true, wantMessage: []string{`key registry Secret "registry" key "keys.json" is not a JSON array`},
		},
		{
			name: "key registry field names are case-sensitive",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["registry"] = secret("registry", map[string]string{"keys.json": `[{"apikey":"sk-secret-value"}]`})
			},
			wantReason: fqv1alpha1.ReasonInvalid, wantResolved: true, wantMessage: []string{`is not a JSON array`},
		},
		{
			name: "duplicate key registry entry",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["registry"] = secret("registry", map[string]string{"keys.json": `[{"apiKey":"sk-secret-value"},{"apiKey":"sk-secret-value","user":"u"}]`})
			},
			wantReason: fqv1alpha1.ReasonDuplicateIdentity, wantResolved: true, wantMessage: []string{"entries 0 and 1 have the same apiKey"},
		},
		{
			name: "key registry entry without a key",
			mutate: func(_ *fqv1alpha1.FairQueuePolicy, s map[string]*corev1.Secret) {
				s["registry"] = secret("registry", map[string]string{"keys.json": `[{"user":"u"}]`})
			},
			wantReason: fqv1alpha1.ReasonInvalid, wantResolved: true, wantMessage: []string{"entry 0 has no apiKey"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, s := unitPolicy(), unitSecrets()
			tt.mutate(p, s)
			out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
			g.Expect(out).To(BeNil(), "a failed render must produce nothing")
			var rerr *Error
			g.Expect(errors.As(err, &rerr)).To(BeTrue(), "want a *Error, got %v", err)
			g.Expect(rerr.Reason).To(Equal(tt.wantReason))
			g.Expect(rerr.SecretsResolved).To(Equal(tt.wantResolved))
			for _, m := range tt.wantMessage {
				g.Expect(rerr.Msg).To(ContainSubstring(m))
			}
			for _, raw := range []string{"sk-acme-123", "sk-secret-value", "research"} {
				g.Expect(rerr.Msg).NotTo(ContainSubstring(raw), "message leaks a secret value")
			}
		})
	}
}

// BenchmarkRender renders a policy at the API's limits: 1024 weights resolved
// from a Secret and a 1000-entry key registry.
func BenchmarkRender(b *testing.B) {
	p := unitPolicy()
	ids := map[string]string{}
	p.Spec.FairQueuing.Weights = nil
	for i := range 1024 {
		name := fmt.Sprintf("TENANT_%d", i)
		ids[name] = fmt.Sprintf("sk-tenant-%d", i)
		p.Spec.FairQueuing.Weights = append(p.Spec.FairQueuing.Weights, fqv1alpha1.TenantWeight{Identity: "${" + name + "}", Weight: int32(i%1000 + 1)})
	}
	var reg strings.Builder
	reg.WriteString("[")
	for i := range 1000 {
		if i > 0 {
			reg.WriteString(",")
		}
		fmt.Fprintf(&reg, `{"apiKey":"sk-reg-%d","user":"user-%d","team":"team-%d"}`, i, i, i%10)
	}
	reg.WriteString("]")
	secrets := map[string]*corev1.Secret{
		"ids-a":    secret("ids-a", ids),
		"ids-b":    secret("ids-b", nil),
		"registry": secret("registry", map[string]string{"keys.json": reg.String()}),
	}
	in := Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: secrets}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRenderUnknownModelPolicy(t *testing.T) {
	tests := []struct {
		name   string
		policy *fqv1alpha1.UnknownModelPolicy
		want   config.UnknownModel
	}{
		{name: "unset refuses", want: config.UnknownModel{}},
		{name: "explicit refuse", policy: &fqv1alpha1.UnknownModelPolicy{Action: fqv1alpha1.UnknownModelRefuse}, want: config.UnknownModel{}},
		{name: "charge", policy: &fqv1alpha1.UnknownModelPolicy{Action: fqv1alpha1.UnknownModelCharge, ChargeAs: "big"},
			want: config.UnknownModel{Action: config.UnknownModelCharge, ChargeAs: "big"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rl := renderRateLimits(&fqv1alpha1.RateLimits{PerModel: &fqv1alpha1.ModelRateLimit{
				Overrides:    []fqv1alpha1.ModelRateLimitOverride{{Model: "big", RateLimit: fqv1alpha1.RateLimit{Requests: 1}}},
				UnknownModel: tc.policy,
			}})
			if rl.PerModel.UnknownModel != tc.want {
				t.Fatalf("unknownModel rendered as %+v, want %+v", rl.PerModel.UnknownModel, tc.want)
			}
			// And in the bytes the operator writes into the ConfigMap and
			// the standalone data plane loads.
			p := unitPolicy()
			p.Spec.RateLimits.PerModel.UnknownModel = tc.policy
			out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "llm-hash-key", Secrets: unitSecrets()})
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Parse(out.Data)
			if err != nil {
				t.Fatal(err)
			}
			if c.RateLimits.PerModel.UnknownModel != tc.want {
				t.Fatalf("the rendered config has unknownModel %+v, want %+v", c.RateLimits.PerModel.UnknownModel, tc.want)
			}
		})
	}
}
