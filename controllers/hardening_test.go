package controllers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

// eventsFor lists the Events regarding p with the given reason.
func eventsFor(g Gomega, t *testing.T, p *fqv1alpha1.FairQueuePolicy, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(ctx(t), &list, client.InNamespace(p.Namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == p.Name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func annotatePaused(t *testing.T, p *fqv1alpha1.FairQueuePolicy, value string) {
	t.Helper()
	// A metadata-only merge patch, so the spec (and the generation) stays.
	var patch string
	if value == "" {
		patch = `{"metadata":{"annotations":{"` + fqv1alpha1.PausedAnnotation + `":null}}}`
	} else {
		patch = `{"metadata":{"annotations":{"` + fqv1alpha1.PausedAnnotation + `":"` + value + `"}}}`
	}
	NewWithT(t).Expect(k8s.Patch(ctx(t), p.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

func setWeight(t *testing.T, p *fqv1alpha1.FairQueuePolicy, weight int32) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		cur := getPolicy(t, p)
		cur.Spec.FairQueuing.Weights[0].Weight = weight
		return k8s.Update(ctx(t), cur)
	}).Should(Succeed())
}

// TestPausedPolicyIsNotWritten checks the incident-response pause: with the
// annotation, spec changes, ConfigMap edits and deletion leave the ConfigMap
// alone; status says so and Ready is False for a generation that is not in
// force; removing the annotation renders the current generation.
func TestPausedPolicyIsNotWritten(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, cm := setup(t)

	annotatePaused(t, p, "true")
	paused := waitCondition(t, p, fqv1alpha1.ConditionPaused, metav1.ConditionTrue, fqv1alpha1.ReasonPaused)
	// Nothing changed yet: the ConfigMap holds the current generation.
	g.Expect(meta.IsStatusConditionTrue(paused.Status.Conditions, fqv1alpha1.ConditionReady)).To(BeTrue(), "%+v", paused.Status.Conditions)

	setWeight(t, p, 9)
	got := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonPaused)
	g.Expect(got.Status.ConfigHash).To(Equal(cm.Annotations[config.ConfigHashAnnotation]), "status must describe the ConfigMap in force")
	g.Consistently(func() string { return getConfigMap(t, p).ResourceVersion }).Should(Equal(cm.ResourceVersion))

	// Not even a repair while paused.
	g.Expect(k8s.Delete(ctx(t), cm)).To(Succeed())
	g.Consistently(func() error {
		return k8s.Get(ctx(t), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	}).ShouldNot(Succeed())

	annotatePaused(t, p, "")
	resumed := waitReady(t, p)
	g.Expect(meta.FindStatusCondition(resumed.Status.Conditions, fqv1alpha1.ConditionPaused)).To(BeNil())
	g.Expect(parseConfigMap(t, getConfigMap(t, p)).Policy.Generation).To(Equal(resumed.Generation))
}

// TestReadyFollowsTheGeneration checks that Ready is never True for a
// generation the ConfigMap does not hold: every Ready condition carries the
// generation it describes, and after a spec change the operator reports on
// the new generation.
func TestReadyFollowsTheGeneration(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	annotatePaused(t, p, "true")
	waitCondition(t, p, fqv1alpha1.ConditionPaused, metav1.ConditionTrue, fqv1alpha1.ReasonPaused)
	for w := int32(4); w <= 6; w++ {
		setWeight(t, p, w)
		got := waitCondition(t, p, fqv1alpha1.ConditionReady, metav1.ConditionFalse, fqv1alpha1.ReasonPaused)
		ready := meta.FindStatusCondition(got.Status.Conditions, fqv1alpha1.ConditionReady)
		g.Expect(ready.ObservedGeneration).To(Equal(got.Generation))
	}
	annotatePaused(t, p, "")
	got := waitReady(t, p)
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, fqv1alpha1.ConditionReady).ObservedGeneration).To(Equal(got.Generation))
}

// TestNoOracleOnGuessedSecretValue plays a policy author who may create
// policies but not read Secrets: a literal guess next to ${ACME_KEY} must
// give the same reason, message shape, count and Events whether it is right.
func TestNoOracleOnGuessedSecretValue(t *testing.T) {
	needAPIServer(t)
	type view struct {
		Reasons  map[string]string
		Weighted int32
		Events   []string
	}
	observe := func(guess string) view {
		g := NewWithT(t)
		ns := newNamespace(t)
		for _, s := range newSecrets(ns) {
			g.Expect(k8s.Create(ctx(t), s)).To(Succeed())
		}
		p := newPolicy(ns)
		p.Spec.FairQueuing.Weights = append(p.Spec.FairQueuing.Weights, fqv1alpha1.TenantWeight{Identity: guess, Weight: 5})
		g.Expect(k8s.Create(ctx(t), p)).To(Succeed())
		var v view
		g.Eventually(func(g Gomega) {
			got := getPolicy(t, p)
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			v = view{Reasons: map[string]string{}, Weighted: got.Status.WeightedTenants}
			for _, c := range got.Status.Conditions {
				v.Reasons[c.Type] = string(c.Status) + "/" + c.Reason
			}
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx(t), &list, client.InNamespace(ns))).To(Succeed())
			v.Events = nil
			for _, e := range list.Items {
				v.Events = append(v.Events, e.Type+"/"+e.Reason)
			}
			g.Expect(v.Events).NotTo(BeEmpty())
			statusJSON, err := json.Marshal(got.Status)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(statusJSON)).NotTo(ContainSubstring(rawAcmeKey))
		}).Should(Succeed())
		return v
	}
	wrong := observe("sk-acme-wrong-guess")
	right := observe(rawAcmeKey)
	NewWithT(t).Expect(right).To(Equal(wrong))
	NewWithT(t).Expect(right.Reasons[fqv1alpha1.ConditionReady]).To(Equal("True/" + fqv1alpha1.ReasonRendered))
}

// TestGeneratedKeyForRenderedPolicyWarns checks that losing the hash-key
// Secret of a rendered policy is not silent: the new key comes with a
// Warning Event and the HashKeyRotated condition.
func TestGeneratedKeyForRenderedPolicyWarns(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	g.Expect(meta.FindStatusCondition(getPolicy(t, p).Status.Conditions, fqv1alpha1.ConditionHashKeyRotated)).To(BeNil(),
		"the first key of a new policy is no rotation")
	g.Expect(eventsFor(g, t, p, fqv1alpha1.ReasonHashKeyGenerated)).To(BeEmpty())

	old := hashKeyOf(t, p)
	g.Expect(k8s.Delete(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.HashKeySecretName()}})).To(Succeed())
	got := waitCondition(t, p, fqv1alpha1.ConditionHashKeyRotated, metav1.ConditionTrue, fqv1alpha1.ReasonHashKeyGenerated)
	g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, fqv1alpha1.ConditionReady)).To(BeTrue())
	g.Expect(hashKeyOf(t, p)).NotTo(Equal(old))
	g.Eventually(func(g Gomega) {
		evs := eventsFor(g, t, p, fqv1alpha1.ReasonHashKeyGenerated)
		g.Expect(evs).To(HaveLen(1))
		g.Expect(evs[0].Type).To(Equal(corev1.EventTypeWarning))
	}).Should(Succeed())
}

// TestReadyUnknownWhileANewGenerationCannotRender checks that an API error
// while rendering a new generation does not leave Ready=True from the older
// one: Ready becomes Unknown (Reconciling) for the new generation until a
// render succeeds.
func TestReadyUnknownWhileANewGenerationCannotRender(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ensureFaultNamespace(t)
	p := newFaultPolicy(t, 20)
	key := client.ObjectKeyFromObject(p)
	reconcileUntilDone(t, newFaultReconciler(t, interceptor.Funcs{}), key, 0)
	g.Expect(meta.IsStatusConditionTrue(getPolicy(t, p).Status.Conditions, fqv1alpha1.ConditionReady)).To(BeTrue())

	setWeight(t, p, 8)
	failing := newFaultReconciler(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			return apierrors.NewServiceUnavailable("etcd is slow")
		}
		return c.Get(ctx, k, obj, opts...)
	}})
	_, err := failing.Reconcile(ctx(t), reconcile.Request{NamespacedName: key})
	g.Expect(err).To(HaveOccurred())
	got := getPolicy(t, p)
	ready := meta.FindStatusCondition(got.Status.Conditions, fqv1alpha1.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(ready.Reason).To(Equal(fqv1alpha1.ReasonReconciling))
	g.Expect(ready.ObservedGeneration).To(Equal(got.Generation))

	reconcileUntilDone(t, newFaultReconciler(t, interceptor.Funcs{}), key, 0)
	got = getPolicy(t, p)
	g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, fqv1alpha1.ConditionReady)).To(BeTrue())
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, fqv1alpha1.ConditionReady).ObservedGeneration).To(Equal(got.Generation))
}

// TestHashKeyRotatedClearedWhenDataPlanesFollow checks that HashKeyRotated
// reports a rotation in progress, not one long over: it stays True while a
// data plane still runs the config of the old key and turns False once every
// reporting data plane runs the new key's config.
func TestHashKeyRotatedClearedWhenDataPlanesFollow(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	p, _ := setup(t)
	oldHash := getPolicy(t, p).Status.ConfigHash
	now := time.Now()
	a := report(p.Namespace, p.Name, "a", oldHash, now, 3600)
	b := report(p.Namespace, p.Name, "b", oldHash, now, 3600)
	g.Expect(k8s.Create(ctx(t), a)).To(Succeed())
	g.Expect(k8s.Create(ctx(t), b)).To(Succeed())
	g.Eventually(func() int32 { return getPolicy(t, p).Status.UpdatedReplicas }).Should(Equal(int32(2)))

	g.Expect(k8s.Delete(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.HashKeySecretName()}})).To(Succeed())
	rotated := waitCondition(t, p, fqv1alpha1.ConditionHashKeyRotated, metav1.ConditionTrue, fqv1alpha1.ReasonHashKeyGenerated)
	newHash := rotated.Status.ConfigHash
	g.Expect(newHash).NotTo(Equal(oldHash))

	setHash := func(l *coordinationv1.Lease, hash string) {
		t.Helper()
		g.Eventually(func() error {
			cur := &coordinationv1.Lease{}
			if err := k8s.Get(ctx(t), client.ObjectKeyFromObject(l), cur); err != nil {
				return err
			}
			cur.Annotations[config.ConfigHashAnnotation] = hash
			return k8s.Update(ctx(t), cur)
		}).Should(Succeed())
	}
	// One replica follows; the other still hashes with the old key.
	setHash(a, newHash)
	g.Eventually(func(g Gomega) {
		got := getPolicy(t, p).Status
		g.Expect(got.DataPlaneReplicas).To(Equal(int32(2)))
		g.Expect(got.UpdatedReplicas).To(Equal(int32(1)))
	}).Should(Succeed())
	g.Expect(meta.IsStatusConditionTrue(getPolicy(t, p).Status.Conditions, fqv1alpha1.ConditionHashKeyRotated)).To(BeTrue(),
		"a replica still runs the old key")

	setHash(b, newHash)
	done := waitCondition(t, p, fqv1alpha1.ConditionHashKeyRotated, metav1.ConditionFalse, fqv1alpha1.ReasonHashKeyFollowed)
	g.Expect(meta.FindStatusCondition(done.Status.Conditions, fqv1alpha1.ConditionHashKeyRotated).Message).To(ContainSubstring(newHash))
	g.Expect(meta.IsStatusConditionTrue(done.Status.Conditions, fqv1alpha1.ConditionReady)).To(BeTrue())
}
