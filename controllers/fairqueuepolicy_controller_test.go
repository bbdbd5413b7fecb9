package controllers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Raw values that must never appear in a ConfigMap or a policy status.
const (
	rawAcmeKey    = "sk-acme-0123456789"
	rawRotatedKey = "sk-acme-rotated-987"
	rawBobKey     = "sk-bob-registry-555"
	rawUser       = "alice@example.com"
	rawTeam       = "team-research-x"
)

func newPolicy(ns string) *fqv1alpha1.FairQueuePolicy {
	return &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Identity: fqv1alpha1.IdentitySpec{
				KeyRegistry: &fqv1alpha1.KeyRegistry{SecretRef: fqv1alpha1.LocalSecretReference{Name: "registry"}},
			},
			RateLimits: fqv1alpha1.RateLimits{PerUser: &fqv1alpha1.RateLimit{Requests: 10}},
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled:     true,
				Weights:     []fqv1alpha1.TenantWeight{{Identity: "${ACME_KEY}", Weight: 3}, {Identity: "${TEAM}", Weight: 2}},
				WeightsFrom: []fqv1alpha1.WeightsSource{{SecretRef: fqv1alpha1.LocalSecretReference{Name: "tenant-ids"}}},
			},
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
}

func newSecrets(ns string) []*corev1.Secret {
	return []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-ids"},
			StringData: map[string]string{"ACME_KEY": rawAcmeKey, "TEAM": rawTeam},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"},
			StringData: map[string]string{"keys.json": `[{"apiKey":"` + rawBobKey + `","user":"` + rawUser + `","team":"` + rawTeam + `"}]`},
		},
	}
}

// setup creates the Secrets and the policy in a fresh namespace and waits
// until the policy is Ready.
func setup(t *testing.T) (*fqv1alpha1.FairQueuePolicy, *corev1.ConfigMap) {
	t.Helper()
	g := NewWithT(t)
	ns := newNamespace(t)
	for _, s := range newSecrets(ns) {
		g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
	}
	p := newPolicy(ns)
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	waitReady(t, p)
	return p, getConfigMap(t, p)
}

func ctx(t *testing.T) context.Context { return t.Context() }

func getPolicy(t *testing.T, p *fqv1alpha1.FairQueuePolicy) *fqv1alpha1.FairQueuePolicy {
	t.Helper()
	out := &fqv1alpha1.FairQueuePolicy{}
	NewWithT(t).Expect(k8s.Get(ctx(t), client.ObjectKeyFromObject(p), out)).To(Succeed())
	return out
}

func getConfigMap(t *testing.T, p *fqv1alpha1.FairQueuePolicy) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	NewWithT(t).Expect(k8s.Get(ctx(t), client.ObjectKey{Namespace: p.Namespace, Name: ConfigMapName(p.Name)}, cm)).To(Succeed())
	return cm
}

// waitReady waits until the policy's current generation is Ready and returns
// the policy as last read.
func waitReady(t *testing.T, p *fqv1alpha1.FairQueuePolicy) *fqv1alpha1.FairQueuePolicy {
	t.Helper()
	return waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionTrue, fqv1alpha1.ReasonRendered)
}

func waitCondition(t *testing.T, p *fqv1alpha1.FairQueuePolicy, condType string, status metav1.ConditionStatus, reason string) *fqv1alpha1.FairQueuePolicy {
	t.Helper()
	var got *fqv1alpha1.FairQueuePolicy
	NewWithT(t).Eventually(func(g Gomega) {
		got = &fqv1alpha1.FairQueuePolicy{}
		g.Expect(k8s.Get(ctx(t), client.ObjectKeyFromObject(p), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		c := meta.FindStatusCondition(got.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
	}).Should(Succeed())
	return got
}

func hashKeyOf(t *testing.T, p *fqv1alpha1.FairQueuePolicy) []byte {
	t.Helper()
	s := &corev1.Secret{}
	NewWithT(t).Expect(k8s.Get(ctx(t), client.ObjectKey{Namespace: p.Namespace, Name: p.HashKeySecretName()}, s)).To(Succeed())
	return s.Data[fqv1alpha1.HashKeySecretKey]
}

func parseConfigMap(t *testing.T, cm *corev1.ConfigMap) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(cm.Data[config.ConfigMapKey]))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

func updateSecret(t *testing.T, ns, name string, mutate func(s *corev1.Secret)) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		mutate(s)
		return k8s.Update(ctx(t), s)
	}).Should(Succeed())
}

func TestCreateRendersHashedConfigMap(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, cm := setup(t)
	p = getPolicy(t, p)

	// Status describes the current generation and the rendered ConfigMap.
	g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
	g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, fqv1alpha1.ConditionSecretsResolved)).To(BeTrue())
	g.Expect(p.Status.ConfigMapName).To(Equal("llm-dataplane"))
	g.Expect(p.Status.ConfigHash).To(Equal(config.Hash([]byte(cm.Data[config.ConfigMapKey]))))
	g.Expect(p.Status.WeightedTenants).To(BeEquivalentTo(2))

	// The ConfigMap is controlled by the policy, so the garbage collector
	// deletes it with the policy (envtest runs no GC: assert the reference).
	g.Expect(cm.OwnerReferences).To(HaveLen(1))
	owner := cm.OwnerReferences[0]
	g.Expect(owner.UID).To(Equal(p.UID))
	g.Expect(owner.Kind).To(Equal("FairQueuePolicy"))
	g.Expect(*owner.Controller).To(BeTrue())
	g.Expect(*owner.BlockOwnerDeletion).To(BeTrue())
	g.Expect(cm.Labels).To(HaveKeyWithValue(config.PolicyLabel, p.Name))
	g.Expect(cm.Labels).To(HaveKeyWithValue(config.ManagedByLabel, config.ManagedByValue))
	g.Expect(cm.Annotations).To(HaveKeyWithValue(config.ConfigHashAnnotation, p.Status.ConfigHash))
	g.Expect(cm.Data).To(HaveLen(1))

	// The operator created the hash key Secret: 32 random bytes, not owned by
	// the policy (re-creating a policy keeps its hashes).
	hk := &corev1.Secret{}
	g.Expect(k8s.Get(ctx(t), client.ObjectKey{Namespace: p.Namespace, Name: "llm-hash-key"}, hk)).To(Succeed())
	key := hk.Data[fqv1alpha1.HashKeySecretKey]
	g.Expect(key).To(HaveLen(identity.HashKeyLen))
	g.Expect(hk.OwnerReferences).To(BeEmpty())

	// The operator and the data plane hash with the same function: what the
	// data plane computes from a request's raw API key (identity.Hash under
	// the key it reads from the same Secret) is what the ConfigMap holds.
	c := parseConfigMap(t, cm)
	g.Expect(c.HashKeySecret.Fingerprint).To(Equal(config.KeyFingerprint(key)))
	g.Expect(c.FairQueuing.Weights).To(ConsistOf(
		config.Weight{TenantHash: identity.Hash(key, rawAcmeKey), Weight: 3},
		config.Weight{TenantHash: identity.Hash(key, rawTeam), Weight: 2},
	))
	g.Expect(c.Identity.KeyRegistry.Entries).To(ConsistOf(config.KeyRegistryEntry{
		APIKeyHash: identity.Hash(key, rawBobKey), UserHash: identity.Hash(key, rawUser), TeamHash: identity.Hash(key, rawTeam),
	}))

	// No raw identity, secret value or the key itself, anywhere.
	cmJSON, err := json.Marshal(cm)
	g.Expect(err).NotTo(HaveOccurred())
	statusJSON, err := json.Marshal(p.Status)
	g.Expect(err).NotTo(HaveOccurred())
	for _, raw := range []string{rawAcmeKey, rawBobKey, rawUser, rawTeam, string(key)} {
		g.Expect(string(cmJSON)).NotTo(ContainSubstring(raw))
		g.Expect(string(statusJSON)).NotTo(ContainSubstring(raw))
	}
}

func TestSecretRotationAndLoss(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	oldHash := getPolicy(t, p).Status.ConfigHash
	key := hashKeyOf(t, p)

	// Rotating a referenced Secret re-renders promptly, through the Secret
	// watch and its index (the resync period is hours).
	updateSecret(t, p.Namespace, "tenant-ids", func(s *corev1.Secret) { s.Data["ACME_KEY"] = []byte(rawRotatedKey) })
	g.Eventually(func(g Gomega) {
		c := parseConfigMap(t, getConfigMap(t, p))
		g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(key, rawRotatedKey), Weight: 3}))
	}).WithTimeout(5 * time.Second).Should(Succeed())
	rotated := waitReady(t, p)
	g.Expect(rotated.Status.ConfigHash).NotTo(Equal(oldHash))
	cm := getConfigMap(t, p)
	g.Expect(rotated.Status.ConfigHash).To(Equal(config.Hash([]byte(cm.Data[config.ConfigMapKey]))))

	// Deleting it: Ready=False with the reason, a Warning Event, and the last
	// good ConfigMap left exactly as it was.
	g.Expect(k8s.Delete(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "tenant-ids"}})).To(Succeed())
	failed := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonSecretNotFound)
	resolved := meta.FindStatusCondition(failed.Status.Conditions, fqv1alpha1.ConditionSecretsResolved)
	g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(resolved.Message).To(ContainSubstring(`Secret "tenant-ids"`))
	g.Expect(failed.Status.ConfigHash).To(Equal(rotated.Status.ConfigHash), "status must keep naming the config in force")
	g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion))
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(k8s.List(ctx(t), &list, client.InNamespace(p.Namespace))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(SatisfyAll(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", fqv1alpha1.ReasonSecretNotFound),
			HaveField("Regarding.Name", p.Name),
			HaveField("Note", ContainSubstring("tenant-ids")),
		)))
	}).Should(Succeed())

	// Restoring it makes the policy Ready again.
	g.Expect(k8s.Create(ctx(t), newSecrets(p.Namespace)[0])).To(Succeed())
	restored := waitReady(t, p)
	g.Expect(restored.Status.ConfigHash).To(Equal(oldHash), "the original identities render the original bytes")
}

func TestHashKeyRotationReRenders(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, cm := setup(t)
	before := parseConfigMap(t, cm)

	newKey := []byte(strings.Repeat("k", identity.HashKeyLen))
	updateSecret(t, p.Namespace, "llm-hash-key", func(s *corev1.Secret) { s.Data[fqv1alpha1.HashKeySecretKey] = newKey })
	g.Eventually(func(g Gomega) {
		c := parseConfigMap(t, getConfigMap(t, p))
		g.Expect(c.HashKeySecret.Fingerprint).To(Equal(config.KeyFingerprint(newKey)))
		g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(newKey, rawAcmeKey), Weight: 3}))
	}).Should(Succeed())
	g.Expect(parseConfigMap(t, getConfigMap(t, p)).FairQueuing.Weights).NotTo(ContainElements(before.FairQueuing.Weights))

	// Deleting the operator-created key Secret rotates the key: a new random
	// key is created and everything re-hashed with it.
	g.Expect(k8s.Delete(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "llm-hash-key"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &corev1.Secret{}
		g.Expect(k8s.Get(ctx(t), client.ObjectKey{Namespace: p.Namespace, Name: "llm-hash-key"}, s)).To(Succeed())
		fresh := s.Data[fqv1alpha1.HashKeySecretKey]
		g.Expect(fresh).To(HaveLen(identity.HashKeyLen))
		g.Expect(fresh).NotTo(Equal(newKey))
		g.Expect(parseConfigMap(t, getConfigMap(t, p)).HashKeySecret.Fingerprint).To(Equal(config.KeyFingerprint(fresh)))
	}).Should(Succeed())

	// A key too short to be safe is refused, keeping the last good config.
	cm = getConfigMap(t, p)
	updateSecret(t, p.Namespace, "llm-hash-key", func(s *corev1.Secret) { s.Data[fqv1alpha1.HashKeySecretKey] = []byte("short") })
	waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonInvalid)
	g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion))
}

func TestConfigMapRepaired(t *testing.T) {
	needAPIServer(t)
	tests := []struct {
		name   string
		tamper func(g Gomega, cm *corev1.ConfigMap)
	}{
		{"data edited", func(g Gomega, cm *corev1.ConfigMap) {
			cm.Data[config.ConfigMapKey] = `{"edited": true}`
			g.Expect(k8s.Update(context.Background(), cm)).To(Succeed())
		}},
		{"extra data key added", func(g Gomega, cm *corev1.ConfigMap) {
			cm.Data["extra.json"] = "{}"
			g.Expect(k8s.Update(context.Background(), cm)).To(Succeed())
		}},
		{"managed-by label removed", func(g Gomega, cm *corev1.ConfigMap) {
			delete(cm.Labels, config.ManagedByLabel)
			cm.Data[config.ConfigMapKey] = "{}"
			g.Expect(k8s.Update(context.Background(), cm)).To(Succeed())
		}},
		{"deleted", func(g Gomega, cm *corev1.ConfigMap) {
			g.Expect(k8s.Delete(context.Background(), cm)).To(Succeed())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, cm := setup(t)
			want := cm.Data[config.ConfigMapKey]
			tt.tamper(g, cm.DeepCopy())
			g.Eventually(func(g Gomega) {
				got := &corev1.ConfigMap{}
				g.Expect(k8s.Get(ctx(t), client.ObjectKeyFromObject(cm), got)).To(Succeed())
				g.Expect(got.Data).To(Equal(map[string]string{config.ConfigMapKey: want}))
				g.Expect(got.Labels).To(HaveKeyWithValue(config.ManagedByLabel, config.ManagedByValue))
				g.Expect(got.OwnerReferences).To(HaveLen(1))
			}).Should(Succeed())
			g.Expect(getPolicy(t, p).Status.ConfigHash).To(Equal(config.Hash([]byte(want))))
		})
	}
}

func TestUnchangedInputsWriteNothing(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, cm := setup(t)
	p = getPolicy(t, p)

	// Touch a referenced Secret without changing anything the policy reads:
	// the policy is reconciled (the Secret watch fires) but neither the
	// ConfigMap nor the status is written.
	start := reconcileCount(t)
	updateSecret(t, p.Namespace, "tenant-ids", func(s *corev1.Secret) { s.Data["UNUSED"] = []byte("x") })
	g.Eventually(func() float64 { return reconcileCount(t) }).Should(BeNumerically(">", start))
	g.Consistently(func(g Gomega) {
		g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion))
		g.Expect(getPolicy(t, p).ResourceVersion).To(Equal(p.ResourceVersion))
	}).Should(Succeed())

	// A metadata-only change of the policy (as `kubectl label` makes it)
	// does not change its generation, and writes nothing either.
	labelled := p.DeepCopy()
	labelled.Labels = map[string]string{"touched": "yes"}
	g.Expect(k8s.Patch(ctx(t), labelled, client.MergeFrom(p))).To(Succeed())
	g.Expect(labelled.Generation).To(Equal(p.Generation))
	g.Consistently(func(g Gomega) {
		g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion))
		g.Expect(getPolicy(t, p).ResourceVersion).To(Equal(labelled.ResourceVersion))
	}).Should(Succeed())
}

func TestSpecChangeReRendersWithGeneration(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	g.Eventually(func() error {
		cur := getPolicy(t, p)
		cur.Spec.FairQueuing.Weights[1].Weight = 7
		return k8s.Update(ctx(t), cur)
	}).Should(Succeed())
	ready := waitReady(t, p)
	g.Expect(ready.Generation).To(BeEquivalentTo(2))
	c := parseConfigMap(t, getConfigMap(t, p))
	g.Expect(c.Policy.Generation).To(Equal(ready.Generation))
	g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(hashKeyOf(t, p), rawTeam), Weight: 7}))
}

func TestRenderFailuresKeepLastGoodConfigMap(t *testing.T) {
	needAPIServer(t)
	tests := []struct {
		name        string
		breakPolicy func(t *testing.T, p *fqv1alpha1.FairQueuePolicy)
		wantReason  string
		wantInMsg   string
	}{
		{
			name: "two key registry entries with the same API key",
			breakPolicy: func(t *testing.T, p *fqv1alpha1.FairQueuePolicy) {
				updateSecret(t, p.Namespace, "registry", func(s *corev1.Secret) {
					s.Data["keys.json"] = []byte(`[{"apiKey":"` + rawBobKey + `"},{"apiKey":"` + rawBobKey + `","user":"` + rawUser + `"}]`)
				})
			},
			wantReason: fqv1alpha1.ReasonDuplicateIdentity,
			wantInMsg:  "entries 0 and 1 have the same apiKey",
		},
		{
			name: "variable removed from the Secret",
			breakPolicy: func(t *testing.T, p *fqv1alpha1.FairQueuePolicy) {
				updateSecret(t, p.Namespace, "tenant-ids", func(s *corev1.Secret) { delete(s.Data, "TEAM") })
			},
			wantReason: fqv1alpha1.ReasonVariableUnresolved,
			wantInMsg:  `variable "TEAM"`,
		},
		{
			name: "key registry data key removed",
			breakPolicy: func(t *testing.T, p *fqv1alpha1.FairQueuePolicy) {
				updateSecret(t, p.Namespace, "registry", func(s *corev1.Secret) { s.Data = map[string][]byte{"other": nil} })
			},
			wantReason: fqv1alpha1.ReasonSecretKeyNotFound,
			wantInMsg:  `has no data key "keys.json"`,
		},
		{
			name: "hash key Secret reference to a missing Secret",
			breakPolicy: func(t *testing.T, p *fqv1alpha1.FairQueuePolicy) {
				NewWithT(t).Eventually(func() error {
					cur := getPolicy(t, p)
					cur.Spec.HashKeySecretRef = &fqv1alpha1.LocalSecretReference{Name: "byo-key"}
					return k8s.Update(ctx(t), cur)
				}).Should(Succeed())
			},
			wantReason: fqv1alpha1.ReasonSecretNotFound,
			wantInMsg:  `hash key Secret "byo-key" named in spec.hashKeySecretRef does not exist`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, cm := setup(t)
			tt.breakPolicy(t, p)
			failed := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, tt.wantReason)
			g.Expect(meta.FindStatusCondition(failed.Status.Conditions, fqv1alpha1.ConditionReady).Message).To(ContainSubstring(tt.wantInMsg))
			g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion), "the last good ConfigMap must stay untouched")
			statusJSON, err := json.Marshal(failed.Status)
			g.Expect(err).NotTo(HaveOccurred())
			for _, raw := range []string{rawAcmeKey, rawTeam, rawBobKey, rawUser} {
				g.Expect(string(statusJSON)).NotTo(ContainSubstring(raw))
			}
		})
	}
}

func TestHashKeySecretRefUsedWhenItAppears(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	for _, s := range newSecrets(ns) {
		g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
	}
	p := newPolicy(ns)
	p.Spec.HashKeySecretRef = &fqv1alpha1.LocalSecretReference{Name: "byo-key"}
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonSecretNotFound)
	err := k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: ConfigMapName(p.Name)}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing is rendered without a key")
	err = k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: "llm-hash-key"}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the operator must not create a key when one is named")

	key := []byte(strings.Repeat("b", identity.HashKeyLen))
	g.Expect(k8s.Create(ctx(t), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "byo-key"},
		Data:       map[string][]byte{fqv1alpha1.HashKeySecretKey: key},
	})).To(Succeed())
	waitReady(t, p)
	c := parseConfigMap(t, getConfigMap(t, p))
	g.Expect(c.HashKeySecret.Name).To(Equal("byo-key"))
	g.Expect(c.FairQueuing.Weights).To(ContainElement(config.Weight{TenantHash: identity.Hash(key, rawAcmeKey), Weight: 3}))
}

func TestForeignConfigMapIsNotOverwritten(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ns := newNamespace(t)
	for _, s := range newSecrets(ns) {
		g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
	}
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName("llm")},
		Data:       map[string]string{"app.conf": "someone else's"},
	}
	g.Expect(k8s.Create(ctx(t), foreign)).To(Succeed())

	p := newPolicy(ns)
	g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
	failed := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonInvalid)
	g.Expect(meta.FindStatusCondition(failed.Status.Conditions, fqv1alpha1.ConditionReady).Message).
		To(ContainSubstring(`ConfigMap "llm-dataplane" already exists and is not managed by fairqueue`))
	got := getConfigMap(t, p)
	g.Expect(got.ResourceVersion).To(Equal(foreign.ResourceVersion))
	g.Expect(got.OwnerReferences).To(BeEmpty())

	// Once it is out of the way, the policy renders.
	g.Expect(k8s.Delete(ctx(t), foreign)).To(Succeed())
	waitReady(t, p)
}

// TestMissingRedisSecretIsReported checks that a store.redis.secretRef naming
// a missing Secret is treated like every other missing Secret: Ready and
// SecretsResolved False naming the field, one Warning Event, the last good
// ConfigMap kept, and a render as soon as the Secret appears. It used to be
// rendered as Ready, leaving data planes with a config whose store they
// could not log in to.
func TestMissingRedisSecretIsReported(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, cm := setup(t)
	g.Eventually(func() error {
		cur := getPolicy(t, p)
		cur.Spec.Store = fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{
			Addresses: []string{"redis.cache.svc:6379"},
			SecretRef: &fqv1alpha1.LocalSecretReference{Name: "redis-creds"},
		}}
		return k8s.Update(ctx(t), cur)
	}).Should(Succeed())

	failed := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonSecretNotFound)
	ready := meta.FindStatusCondition(failed.Status.Conditions, fqv1alpha1.ConditionReady)
	g.Expect(ready.Message).To(ContainSubstring(`Redis Secret "redis-creds" named in spec.store.redis.secretRef does not exist`))
	resolved := meta.FindStatusCondition(failed.Status.Conditions, fqv1alpha1.ConditionSecretsResolved)
	g.Expect(resolved.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(resolved.Reason).To(Equal(fqv1alpha1.ReasonSecretNotFound))
	g.Expect(getConfigMap(t, p).ResourceVersion).To(Equal(cm.ResourceVersion), "the last good ConfigMap must stay untouched")
	g.Eventually(func(g Gomega) {
		evs := eventsFor(g, t, p, fqv1alpha1.ReasonSecretNotFound)
		g.Expect(evs).To(HaveLen(1))
		g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
		g.Expect(evs[0].Note).To(ContainSubstring("spec.store.redis.secretRef"))
	}).Should(Succeed())

	g.Expect(k8s.Create(ctx(t), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "redis-creds"},
		StringData: map[string]string{fqv1alpha1.RedisSecretPasswordKey: "redis-password-never-rendered"},
	})).To(Succeed())
	done := waitReady(t, p)
	g.Expect(meta.IsStatusConditionTrue(done.Status.Conditions, fqv1alpha1.ConditionSecretsResolved)).To(BeTrue())
	rendered := getConfigMap(t, p)
	g.Expect(rendered.Data[config.ConfigMapKey]).NotTo(ContainSubstring("redis-password-never-rendered"))
	c := parseConfigMap(t, rendered)
	g.Expect(c.Store).NotTo(BeNil())
	g.Expect(c.Store.Redis.Secret).To(Equal(&config.SecretRef{Namespace: p.Namespace, Name: "redis-creds"}))
}
