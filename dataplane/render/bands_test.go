package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// everySectionPolicy is unitPolicy with every section that existed before
// priority bands set: testdata/without-bands.json is what the renderer of
// that release wrote for it.
func everySectionPolicy() *fqv1alpha1.FairQueuePolicy {
	p := unitPolicy()
	p.Spec.FairQueuing.DefaultWeight = 2
	p.Spec.FairQueuing.TenantDimension = fqv1alpha1.TenantDimensionAPIKey
	p.Spec.FairQueuing.Cost = fqv1alpha1.FairQueuingCostTokens
	p.Spec.FairQueuing.Bounds = fqv1alpha1.FairQueuingBounds{MaxInFlight: 4, MaxWait: "2s"}
	p.Spec.DeferredAdmission = fqv1alpha1.DeferredAdmission{Enabled: true, TokenLimits: fqv1alpha1.TokenLimits{PerAPIKey: &fqv1alpha1.TokenLimit{Tokens: 20000}}}
	p.Spec.Timeouts.Request.ClientDeadlineHeader = "x-deadline"
	p.Spec.Store = fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{Addresses: []string{"redis:6379"}}}
	p.Spec.RateLimits.Global = &fqv1alpha1.RateLimit{Requests: 1000, RequestBucket: fqv1alpha1.RequestBucket{Burst: 2000}}
	return p
}

// TestRenderWithoutBandsKeepsTheBytes checks issue #21's promise: a policy
// without priorityBands renders byte for byte what the renderer wrote before
// bands existed, so every existing ConfigMap keeps its bytes and hash, and
// bands staged while fair queuing is off change nothing either.
func TestRenderWithoutBandsKeepsTheBytes(t *testing.T) {
	golden, err := os.ReadFile("testdata/without-bands.json")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := renderParsed(t, everySectionPolicy())
	if !bytes.Equal(out.Data, golden) {
		t.Errorf("a policy without bands renders differently from the release before bands:\n%s", out.Data)
	}

	off, staged := unitPolicy(), unitPolicy()
	off.Spec.FairQueuing.Enabled, staged.Spec.FairQueuing.Enabled = false, false
	staged.Spec.FairQueuing.PriorityBands = []fqv1alpha1.PriorityBand{{Name: "gold"}, {Name: "free", MinShare: 0.1}}
	staged.Spec.FairQueuing.DefaultBand, staged.Spec.FairQueuing.RequestBandHeader = "free", "x-fair-queue-band"
	staged.Spec.FairQueuing.Weights[0].Band = "gold"
	staged.Spec.FairQueuing.WeightsFrom[1].Band = "gold"
	before, _ := renderParsed(t, off)
	after, _ := renderParsed(t, staged)
	if !bytes.Equal(before.Data, after.Data) {
		t.Errorf("bands staged while fair queuing is off changed the rendered bytes:\n%s", after.Data)
	}
}

// bandPolicy is unitPolicy with three bands, a weights entry in one, and
// the Secrets premium-keys (band interactive) and batch-keys (band batch).
func bandPolicy() (*fqv1alpha1.FairQueuePolicy, map[string]*corev1.Secret) {
	p := unitPolicy()
	fq := &p.Spec.FairQueuing
	fq.DefaultWeight = 2
	fq.PriorityBands = []fqv1alpha1.PriorityBand{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", MinShare: 0.05}}
	fq.RequestBandHeader = "x-fair-queue-band"
	fq.Weights[1].Band = "batch" // team-research
	fq.WeightsFrom = append(fq.WeightsFrom,
		fqv1alpha1.WeightsSource{SecretRef: fqv1alpha1.LocalSecretReference{Name: "premium-keys"}, Band: "interactive"},
		fqv1alpha1.WeightsSource{SecretRef: fqv1alpha1.LocalSecretReference{Name: "batch-keys"}, Band: "batch"},
	)
	s := unitSecrets()
	// sk-acme-123 has a weights entry without a band; team-research one
	// with a band; sk-both is in both band Secrets.
	s["premium-keys"] = secret("premium-keys", map[string]string{"ACME": "sk-acme-123", "RESEARCH": "team-research", "GOLD": " sk-gold\n", "BOTH": "sk-both"})
	s["batch-keys"] = secret("batch-keys", map[string]string{"NIGHTLY": "sk-nightly", "BOTH": "sk-both"})
	return p, s
}

func TestRenderBands(t *testing.T) {
	g := NewWithT(t)
	p, s := bandPolicy()
	out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
	g.Expect(err).NotTo(HaveOccurred())
	c, err := config.Parse(out.Data)
	g.Expect(err).NotTo(HaveOccurred())

	fq := c.FairQueuing
	g.Expect(fq.Bands).To(Equal([]config.Band{{Name: "interactive"}, {Name: "standard"}, {Name: "batch", MinShare: 0.05}}), "highest first, as listed")
	g.Expect(fq.DefaultBand).To(Equal("batch"), "without defaultBand, tenants nobody placed are in the lowest band")
	g.Expect(fq.RequestBandHeader).To(Equal("x-fair-queue-band"))
	hash := func(id string) string { return identity.Hash(unitKey, id) }
	g.Expect(fq.Weights).To(ConsistOf(
		// A weights entry keeps its weight and takes the band of the Secret
		// holding it when it names none.
		config.Weight{TenantHash: hash("sk-acme-123"), Weight: 3, Band: "interactive"},
		// A weights entry's own band wins over a Secret's.
		config.Weight{TenantHash: hash("team-research"), Weight: 2, Band: "batch"},
		config.Weight{TenantHash: hash("cost$center"), Weight: 5},
		// Secret members, trimmed, at defaultWeight; the first Secret
		// listed places an identity both hold.
		config.Weight{TenantHash: hash("sk-gold"), Weight: 2, Band: "interactive"},
		config.Weight{TenantHash: hash("sk-both"), Weight: 2, Band: "interactive"},
		config.Weight{TenantHash: hash("sk-nightly"), Weight: 2, Band: "batch"},
	))
	g.Expect(out.WeightedTenants).To(BeEquivalentTo(3), "status counts weights entries, not Secret members")
	for _, raw := range []string{"sk-gold", "sk-both", "sk-nightly", "sk-acme-123", "team-research"} {
		g.Expect(string(out.Data)).NotTo(ContainSubstring(raw), "the rendered config holds a raw identity")
	}

	// An explicit defaultBand renders as written.
	p.Spec.FairQueuing.DefaultBand = "standard"
	out, err = Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out.Data)).To(ContainSubstring(`"defaultBand": "standard"`))
}

// TestRenderBandsJSONShape pins the rendered shape the data plane reads.
func TestRenderBandsJSONShape(t *testing.T) {
	g := NewWithT(t)
	p, s := bandPolicy()
	out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
	g.Expect(err).NotTo(HaveOccurred())
	var doc struct {
		FairQueuing map[string]json.RawMessage `json:"fairQueuing"`
	}
	g.Expect(json.Unmarshal(out.Data, &doc)).To(Succeed())
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		g.Expect(json.Compact(&b, raw)).To(Succeed())
		return b.String()
	}
	g.Expect(compact(doc.FairQueuing["bands"])).To(Equal(`[{"name":"interactive"},{"name":"standard"},{"name":"batch","minShare":0.05}]`))
	g.Expect(compact(doc.FairQueuing["defaultBand"])).To(Equal(`"batch"`))
	g.Expect(compact(doc.FairQueuing["requestBandHeader"])).To(Equal(`"x-fair-queue-band"`))
	g.Expect(compact(doc.FairQueuing["weights"])).To(ContainSubstring(fmt.Sprintf(`{"tenantHash":%q,"weight":2,"band":"batch"}`, identity.Hash(unitKey, "sk-nightly"))))
}

func TestRenderBandFailures(t *testing.T) {
	many := map[string]string{}
	for i := range maxBandMembers + 1 {
		many[fmt.Sprintf("K%d", i)] = fmt.Sprintf("sk-secret-value-%d", i)
	}
	tests := []struct {
		name string
		data map[string]string
		want string
	}{
		{"an empty value", map[string]string{"GOLD": "sk-secret-value", "EMPTY": " \n"},
			`Secret "premium-keys" (spec.fairQueuing.weightsFrom[2], band "interactive") key "EMPTY" is empty`},
		{"a list in one value", map[string]string{"KEYS": "sk-secret-value-1\nsk-secret-value-2\n"},
			`Secret "premium-keys" (spec.fairQueuing.weightsFrom[2], band "interactive") key "KEYS" holds several lines`},
		{"more identities than a ConfigMap holds", many,
			"the weightsFrom Secrets with a band hold more than 4096 identities"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, s := bandPolicy()
			s["premium-keys"] = secret("premium-keys", tt.data)
			out, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
			g.Expect(out).To(BeNil())
			var rerr *Error
			g.Expect(errors.As(err, &rerr)).To(BeTrue(), "want a *Error, got %v", err)
			g.Expect(rerr.Reason).To(Equal(fqv1alpha1.ReasonInvalid))
			g.Expect(rerr.Msg).To(ContainSubstring(tt.want))
			g.Expect(rerr.Msg).NotTo(ContainSubstring("sk-secret-value"), "message leaks a Secret value")
		})
	}

	t.Run("a missing band Secret is unresolved", func(t *testing.T) {
		g := NewWithT(t)
		p, s := bandPolicy()
		delete(s, "batch-keys")
		_, err := Render(Input{Policy: p, HashKey: unitKey, HashKeySecret: "k", Secrets: s})
		var rerr *Error
		g.Expect(errors.As(err, &rerr)).To(BeTrue())
		g.Expect(rerr.Reason).To(Equal(fqv1alpha1.ReasonSecretNotFound))
		g.Expect(ReferencedSecrets(p)).To(ContainElement("batch-keys"), "the operator watches band Secrets like any weightsFrom Secret")
	})
}
