// Package controllers holds the fairqueue operator: the reconciler that turns
// each FairQueuePolicy, with the Secrets it references, into the rendered
// data-plane ConfigMap, and reports the outcome in the policy's status.
//
// Behaviour worth knowing:
//   - Every identity (weights entries after ${VAR} expansion, key registry
//     API keys, users and teams) is hashed with identity.Hash under the
//     policy's hash key; the ConfigMap, status, Events and logs hold only
//     hashes and names. Variable values are trimmed of surrounding
//     whitespace (a trailing newline from --from-file is no part of a key).
//   - Weights and weightsFrom are ignored while fair queuing is disabled, as
//     the API promises, so their Secrets are not required then.
//   - A failure (missing Secret, key or variable, duplicate identity, invalid
//     registry, foreign ConfigMap) sets Ready=False with a reason, emits one
//     Warning Event, and leaves the last good ConfigMap untouched.
//   - The ConfigMap <policy>-dataplane is written only when its bytes change
//     and is repaired when edited, relabelled or deleted.
//   - The default hash key Secret <policy>-hash-key is created with 32 random
//     bytes and is not owned by the policy; deleting it rotates the key. A key
//     generated for a policy that was already rendered is announced with a
//     Warning Event and the HashKeyRotated condition: every hash changes.
//     The condition turns False once every data plane reporting on the
//     policy runs a config rendered with the new key.
//   - A policy annotated fairqueue.dev/paused: "true" is still rendered into
//     status, but its ConfigMap is never written (no update, no repair) and
//     no hash key is created until the annotation is removed.
//   - Status and Events never let a policy author who cannot read Secrets
//     confirm a guessed Secret value: weights entries that resolve to the
//     same identity are merged (the first wins) instead of being refused.
package controllers

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

const (
	// ControllerName names the controller in logs, metrics and as the
	// reporting controller of its Events.
	ControllerName = "fairqueuepolicy"

	// SecretRefsIndex is the FairQueuePolicy field index listing the names of
	// every Secret a policy reads (hash key, key registry, weightsFrom, Redis
	// store), used to find the policies to re-render when a Secret changes.
	SecretRefsIndex = "fairqueue.dev/secret-refs"

	// LeaderElectionID names the Lease, in the operator's namespace, that
	// operator replicas compete for; the RBAC markers grant get and update
	// on it alone.
	LeaderElectionID = "fairqueue-operator.fairqueue.dev"
)

// ConfigMapName returns the name of the ConfigMap rendered for the policy
// named policyName, in the policy's namespace.
func ConfigMapName(policyName string) string { return policyName + "-dataplane" }

// The hash key Secret (fqv1alpha1.FairQueuePolicy.HashKeySecretName) that the
// operator creates is deliberately not owned by the policy: deleting and
// re-creating a policy (a GitOps prune, a restore) keeps its identities'
// hashes, and so the data plane's limiter and queue state. It carries the
// PolicyLabel so it can be found and deleted with the policy by hand.

// RBAC, least privilege. Policies are read-only except status; ConfigMaps are
// never deleted (the garbage collector does that through the owner
// reference); Secrets are only created (the default hash key), never changed.
// finalizers/update lets the owner reference block owner deletion. The
// ClusterRole is meant to be bound per watched namespace with RoleBindings
// when --namespaces is set. Data-plane report Leases are only read. Leader
// election writes are confined to the operator's namespace: creating a Lease
// (create cannot be restricted by name), reading and renewing only the one
// named LeaderElectionID, plus the core Events the elector records. Data
// planes must run in another namespace (config/default: fairqueue-dataplane),
// since their own Lease grant cannot be restricted by name.
//
// +kubebuilder:rbac:groups=fairqueue.dev,resources=fairqueuepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=fairqueue.dev,resources=fairqueuepolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=fairqueue.dev,resources=fairqueuepolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=fairqueue-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,resourceNames=fairqueue-operator.fairqueue.dev,namespace=fairqueue-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=fairqueue-system

// FairQueuePolicyReconciler renders every FairQueuePolicy into its data-plane
// ConfigMap. It writes the ConfigMap only when its bytes change, never writes a
// partial render (a failure leaves the last good ConfigMap in force), and
// writes status only when it changes.
type FairQueuePolicyReconciler struct {
	// Client reads policies and ConfigMaps (from the manager's cache) and
	// writes every object.
	Client client.Client
	// APIReader reads Secrets, and ConfigMaps the cache cannot see, straight
	// from the API server, so that no Secret data is ever cached. Defaults to
	// the manager's API reader.
	APIReader client.Reader
	// Recorder emits Events on policies. Defaults to the manager's recorder.
	Recorder events.EventRecorder
	// Rand is the source of new hash keys. Defaults to crypto/rand.
	Rand io.Reader
	// UnwatchedRetry is how often a policy blocked by an object the operator
	// does not watch (a foreign ConfigMap under the rendered name) is
	// retried. Defaults to DefaultUnwatchedRetry.
	UnwatchedRetry time.Duration
	// Clock tells data-plane Leases' expiry. Defaults to the real clock.
	Clock clock.PassiveClock
}

// DefaultUnwatchedRetry is the default of UnwatchedRetry.
const DefaultUnwatchedRetry = 30 * time.Second

// staleStatusRetry is how soon a policy whose status patch was refused as
// stale is reconciled again, once the cache has caught up.
const staleStatusRetry = 200 * time.Millisecond

// CacheOptions returns the manager cache settings the reconciler is designed
// for: the given namespaces only (all when empty), and of ConfigMaps only those
// the operator manages and of Leases only data-plane reports, so the cache
// stays small. Secrets are watched as
// metadata only and read through the API reader; pair with ClientOptions.
func CacheOptions(namespaces []string) cache.Options {
	opts := cache.Options{
		// A cached read of a type nothing watches fails instead of quietly
		// starting a cluster-wide informer (for Secrets, caching their data).
		ReaderFailOnMissingInformer: true,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:     {Label: labels.SelectorFromSet(labels.Set{config.ManagedByLabel: config.ManagedByValue})},
			&coordinationv1.Lease{}: {Label: labels.SelectorFromSet(labels.Set{DataPlaneComponentLabel: DataPlaneComponentValue})},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// ClientOptions returns the manager client settings the reconciler is
// designed for: Secrets are never read through (and so never fill) the cache.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// SetupWithManager registers the Secret field index and the controller: it
// watches policies (spec changes only), the ConfigMaps they own, the metadata
// of Secrets, mapped back to the policies that reference them, and the
// data-plane report Leases, mapped to the policy they report on.
func (r *FairQueuePolicyReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts controller.Options) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("fairqueue-operator")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &fqv1alpha1.FairQueuePolicy{}, SecretRefsIndex, secretRefs); err != nil {
		return fmt.Errorf("indexing FairQueuePolicy by referenced Secret: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&fqv1alpha1.FairQueuePolicy{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, pausedChanged()))).
		Owns(&corev1.ConfigMap{}).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.policiesForSecret)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, l client.Object) []reconcile.Request {
			if key, ok := policyForLease(l); ok {
				return []reconcile.Request{{NamespacedName: key}}
			}
			return nil
		}), builder.WithPredicates(leaseReportChanged())).
		WithOptions(opts).
		Complete(r)
}

// secretRefs is the SecretRefsIndex function.
func secretRefs(obj client.Object) []string {
	p, ok := obj.(*fqv1alpha1.FairQueuePolicy)
	if !ok {
		return nil
	}
	names := append(render.ReferencedSecrets(p), p.HashKeySecretName())
	if name := storeSecret(p); name != "" {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// policiesForSecret maps a Secret to the policies in its namespace that
// reference it.
func (r *FairQueuePolicyReconciler) policiesForSecret(ctx context.Context, s client.Object) []reconcile.Request {
	var list fqv1alpha1.FairQueuePolicyList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.GetNamespace()), client.MatchingFields{SecretRefsIndex: s.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "Listing policies that reference a Secret; they re-render on their next event",
			"secret", klog.KRef(s.GetNamespace(), s.GetName()))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile renders one policy. Missing or invalid inputs are reported in
// status and Events and wait for the next change of the policy or a Secret;
// API errors are returned so the request is retried with backoff.
func (r *FairQueuePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	policy := &fqv1alpha1.FairQueuePolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !policy.DeletionTimestamp.IsZero() {
		// The ConfigMap is garbage-collected through its owner reference.
		return ctrl.Result{}, nil
	}
	orig := policy.DeepCopy()
	paused := isPaused(policy)

	out, err := r.renderPolicy(ctx, policy, !paused)
	var rerr *render.Error
	if err != nil && !errors.As(err, &rerr) {
		return ctrl.Result{}, r.notReadyYet(ctx, orig, err)
	}
	if out != nil && len(out.Merged) > 0 {
		// Only the operator's log says so: telling the policy's author would
		// confirm that two values, one possibly guessed, are equal.
		log.Info("Weights entries resolve to the same identity; the first of each is used", "entries", out.Merged)
	}
	inForce := false
	if rerr == nil && paused {
		inForce, err = r.configMapHolds(ctx, policy, out.Hash)
		if err != nil {
			return ctrl.Result{}, r.notReadyYet(ctx, orig, err)
		}
	}
	if rerr == nil && !paused {
		changed, err := r.applyConfigMap(ctx, policy, out.Rendered)
		switch {
		case errors.As(err, &rerr):
		case err != nil:
			return ctrl.Result{}, r.notReadyYet(ctx, orig, err)
		case changed:
			log.Info("Rendered data-plane ConfigMap", "configMap", ConfigMapName(policy.Name), "configHash", out.Hash,
				"generation", policy.Generation, "weightedTenants", out.WeightedTenants)
			r.Recorder.Eventf(policy, nil, corev1.EventTypeNormal, fqv1alpha1.ReasonRendered, "Render",
				"Rendered ConfigMap %s with config hash %s", ConfigMapName(policy.Name), out.Hash)
		}
	}
	if rerr != nil {
		log.Info("Policy not rendered; the last good ConfigMap stays in force", "reason", rerr.Reason, "message", rerr.Msg)
		// One Warning per new failure: timed requeues (Lease expiry, a
		// foreign ConfigMap) must not repeat it while nothing changed.
		if !sameFailure(meta.FindStatusCondition(orig.Status.Conditions, fqv1alpha1.ConditionReady), policy.Generation, rerr) {
			r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, rerr.Reason, "Render", "%s", rerr.Msg)
		}
		out = nil
	}

	var result ctrl.Result
	if rerr != nil && rerr.Unwatched {
		// No watch event will tell us when this is fixed.
		result.RequeueAfter = cmp.Or(r.UnwatchedRetry, DefaultUnwatchedRetry)
	}
	var rendered *render.Rendered
	if out != nil && (!paused || inForce) {
		// A paused policy's new render is not in its ConfigMap, so the
		// status keeps describing the config in force.
		rendered = out.Rendered
	}
	setStatus(policy, rendered, rerr)
	if paused {
		setPaused(policy, rerr, inForce)
	} else {
		meta.RemoveStatusCondition(&policy.Status.Conditions, fqv1alpha1.ConditionPaused)
	}
	if out != nil && out.KeyGenerated && orig.Status.ConfigHash != "" {
		msg := fmt.Sprintf("Hash key Secret %s was missing and a new key was generated for this already rendered policy: every identity hash changed, "+
			"so data-plane limits and queues start afresh. Restore the old key from a backup to undo; back up the new one", policy.HashKeySecretName())
		r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, fqv1alpha1.ReasonHashKeyGenerated, "Render", "%s", msg)
		meta.SetStatusCondition(&policy.Status.Conditions, metav1.Condition{
			Type: fqv1alpha1.ConditionHashKeyRotated, Status: metav1.ConditionTrue, ObservedGeneration: policy.Generation,
			Reason: fqv1alpha1.ReasonHashKeyGenerated, Message: msg,
		})
	}
	recount, err := r.setReplicaStatus(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	settleKeyRotation(policy)
	if recount > 0 && (result.RequeueAfter == 0 || recount < result.RequeueAfter) {
		result.RequeueAfter = recount
	}
	if equality.Semantic.DeepEqual(orig.Status, policy.Status) {
		// The cached policy may not show yet a status written a moment ago
		// (a Secret deleted and created again in quick succession: the
		// second reconcile computes the status the cache still shows, while
		// the stored one says the Secret is missing). Skip the write only
		// when the stored status agrees.
		live := &fqv1alpha1.FairQueuePolicy{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if live.ResourceVersion == orig.ResourceVersion || equality.Semantic.DeepEqual(live.Status, policy.Status) {
			return result, nil
		}
		if live.Generation != orig.Generation {
			// The spec changed too: its own event renders it again.
			return result, nil
		}
		orig = live
		status := policy.Status
		policy = live.DeepCopy()
		policy.Status = status
	}
	// The optimistic lock refuses a patch computed from a stale cached policy
	// (another reconcile's status write not seen yet), which would otherwise
	// rewrite the status with new condition timestamps; the retry reads the
	// fresh copy and usually finds nothing to write.
	if err := r.Client.Status().Patch(ctx, policy, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: staleStatusRetry}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return result, nil
}

// setReplicaStatus counts p's data-plane replicas from their report Leases
// into p.Status and returns when to count again (zero for never): when the
// first Lease would expire unrenewed, since expiry produces no watch event.
func (r *FairQueuePolicyReconciler) setReplicaStatus(ctx context.Context, p *fqv1alpha1.FairQueuePolicy) (time.Duration, error) {
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(p.Namespace),
		client.MatchingLabels{DataPlaneComponentLabel: DataPlaneComponentValue, config.PolicyLabel: p.Name}); err != nil {
		return 0, fmt.Errorf("listing data-plane Leases of %s/%s: %w", p.Namespace, p.Name, err)
	}
	n := countReplicas(leases.Items, p.Status.ConfigHash, r.clock().Now())
	p.Status.DataPlaneReplicas, p.Status.UpdatedReplicas = n.replicas, n.updated
	if n.nextExpiry == 0 {
		return 0, nil
	}
	// A second of slack lets a renewal due at expiry land first.
	return n.nextExpiry + time.Second, nil
}

func (r *FairQueuePolicyReconciler) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// settleKeyRotation sets HashKeyRotated False once the rotation it reports
// is over: every data plane reporting on p runs the config in status, which
// was rendered with the new key (status.configHash changes only with a
// render, and every render since the rotation used the new key or started a
// new rotation). Until then some replica still hashes identities with the
// old key, or none has reported yet, and the condition stays True.
// setReplicaStatus has run before it.
func settleKeyRotation(p *fqv1alpha1.FairQueuePolicy) {
	rotated := meta.FindStatusCondition(p.Status.Conditions, fqv1alpha1.ConditionHashKeyRotated)
	if rotated == nil || rotated.Status != metav1.ConditionTrue ||
		p.Status.DataPlaneReplicas == 0 || p.Status.UpdatedReplicas != p.Status.DataPlaneReplicas {
		return
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: fqv1alpha1.ConditionHashKeyRotated, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation,
		Reason: fqv1alpha1.ReasonHashKeyFollowed,
		Message: fmt.Sprintf("Every reporting data plane (%d) runs config %s, rendered with the generated hash key",
			p.Status.DataPlaneReplicas, p.Status.ConfigHash),
	})
}

// renderPolicy reads the hash key and referenced Secrets and renders p,
// creating the default hash key when mayCreate. It returns a *render.Error
// for inputs only a user can fix and any other error for API failures worth
// retrying.
func (r *FairQueuePolicyReconciler) renderPolicy(ctx context.Context, p *fqv1alpha1.FairQueuePolicy, mayCreate bool) (*renderOutput, error) {
	key, generated, err := r.hashKey(ctx, p, mayCreate)
	if err != nil {
		return nil, err
	}
	in := render.Input{Policy: p, HashKey: key, HashKeySecret: p.HashKeySecretName(), Secrets: map[string]*corev1.Secret{}}
	for _, name := range render.ReferencedSecrets(p) {
		if _, done := in.Secrets[name]; done {
			continue
		}
		s := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, s); {
		case apierrors.IsNotFound(err):
			// render names the field that references the missing Secret.
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s/%s: %w", p.Namespace, name, err)
		default:
			in.Secrets[name] = s
		}
	}
	if err := r.checkStoreSecret(ctx, p); err != nil {
		return nil, err
	}
	out, err := render.Render(in)
	if err != nil {
		return nil, err
	}
	return &renderOutput{Rendered: out, KeyGenerated: generated}, nil
}

// storeSecret returns the name of the Secret spec.store.redis.secretRef
// names, or "" when it names none.
func storeSecret(p *fqv1alpha1.FairQueuePolicy) string {
	if p.Spec.Store.Type != fqv1alpha1.StoreTypeRedis || p.Spec.Store.Redis == nil || p.Spec.Store.Redis.SecretRef == nil {
		return ""
	}
	return p.Spec.Store.Redis.SecretRef.Name
}

// checkStoreSecret checks that the Redis credentials Secret p names exists.
// Only its name is rendered (the data plane reads it itself), but a data
// plane given a config naming a missing Secret cannot reach the store, so
// the render waits for it like for any other missing Secret. Its data is
// not inspected: every data key is optional.
func (r *FairQueuePolicyReconciler) checkStoreSecret(ctx context.Context, p *fqv1alpha1.FairQueuePolicy) error {
	name := storeSecret(p)
	if name == "" {
		return nil
	}
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, s); {
	case apierrors.IsNotFound(err):
		return render.Unresolved(fqv1alpha1.ReasonSecretNotFound,
			"Redis Secret %q named in spec.store.redis.secretRef does not exist; create it in the policy's namespace with the data keys %q and %q (or %q alone for requirepass) and, for TLS, %q",
			name, fqv1alpha1.RedisSecretUsernameKey, fqv1alpha1.RedisSecretPasswordKey, fqv1alpha1.RedisSecretPasswordKey, fqv1alpha1.RedisSecretCAKey)
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", p.Namespace, name, err)
	}
	return nil
}

// renderOutput is a successful render and whether its hash key was just
// generated.
type renderOutput struct {
	*render.Rendered
	// KeyGenerated is true when this reconcile created the hash key.
	KeyGenerated bool
}

// hashKey returns p's HMAC key, creating the default hash key Secret with a
// random key when it does not exist and mayCreate; generated reports that it
// did.
func (r *FairQueuePolicyReconciler) hashKey(ctx context.Context, p *fqv1alpha1.FairQueuePolicy, mayCreate bool) (key []byte, generated bool, err error) {
	name := p.HashKeySecretName()
	s := &corev1.Secret{}
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, s)
	switch {
	case apierrors.IsNotFound(err) && p.Spec.HashKeySecretRef != nil:
		return nil, false, render.Unresolved(fqv1alpha1.ReasonSecretNotFound,
			"hash key Secret %q named in spec.hashKeySecretRef does not exist; create it with data key %q holding at least %d random bytes, or unset hashKeySecretRef to let the operator create one",
			name, fqv1alpha1.HashKeySecretKey, identity.HashKeyLen)
	case apierrors.IsNotFound(err) && !mayCreate:
		rerr := render.Unresolved(fqv1alpha1.ReasonPaused,
			"hash key Secret %q does not exist and the policy is paused, so none is created; remove the %s annotation to resume",
			name, fqv1alpha1.PausedAnnotation)
		return nil, false, rerr
	case apierrors.IsNotFound(err):
		key, err := r.createHashKey(ctx, p, name)
		return key, err == nil, err
	case err != nil:
		return nil, false, fmt.Errorf("reading hash key Secret %s/%s: %w", p.Namespace, name, err)
	}
	key, ok := s.Data[fqv1alpha1.HashKeySecretKey]
	if !ok {
		return nil, false, render.Unresolved(fqv1alpha1.ReasonSecretKeyNotFound,
			"hash key Secret %q has no data key %q; add one holding at least %d random bytes", name, fqv1alpha1.HashKeySecretKey, identity.HashKeyLen)
	}
	if len(key) < identity.HashKeyLen {
		// The length is not quoted: the Secret may be one the policy's
		// author cannot read.
		return nil, false, render.Invalid(fqv1alpha1.ReasonInvalid,
			"hash key Secret %q data key %q is too short; it needs at least %d random bytes", name, fqv1alpha1.HashKeySecretKey, identity.HashKeyLen)
	}
	return key, false, nil
}

func (r *FairQueuePolicyReconciler) createHashKey(ctx context.Context, p *fqv1alpha1.FairQueuePolicy, name string) ([]byte, error) {
	src := r.Rand
	if src == nil {
		src = rand.Reader
	}
	key := make([]byte, identity.HashKeyLen)
	if _, err := io.ReadFull(src, key); err != nil {
		return nil, fmt.Errorf("generating a hash key: %w", err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: name, Labels: managedLabels(p.Name)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{fqv1alpha1.HashKeySecretKey: key},
	}
	if err := r.Client.Create(ctx, s); err != nil {
		// AlreadyExists included: another writer won the race, and the next
		// attempt reads its key.
		return nil, fmt.Errorf("creating hash key Secret %s/%s: %w", p.Namespace, name, err)
	}
	logf.FromContext(ctx).Info("Created hash key Secret", "secret", klog.KRef(p.Namespace, name), "fingerprint", config.KeyFingerprint(key))
	return key, nil
}

// applyConfigMap makes p's ConfigMap hold out, creating it or repairing it,
// and reports whether it wrote. Labels and annotations others add are kept.
func (r *FairQueuePolicyReconciler) applyConfigMap(ctx context.Context, p *fqv1alpha1.FairQueuePolicy, out *render.Rendered) (bool, error) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: ConfigMapName(p.Name)}
	if errs := validation.IsDNS1123Subdomain(key.Name); len(errs) > 0 {
		return false, render.Invalid(fqv1alpha1.ReasonInvalid, "the ConfigMap name %q derived from the policy name is invalid: %v; use a shorter policy name", key.Name, errs)
	}
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := r.desiredConfigMap(p, cm, out); err != nil {
			return false, err
		}
		err = r.Client.Create(ctx, cm)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating ConfigMap %s: %w", key, err)
		}
		// It exists but the cache, which holds only ConfigMaps carrying
		// the managed-by label, cannot see it: someone removed the label.
		cm = &corev1.ConfigMap{}
		err = r.APIReader.Get(ctx, key, cm)
	}
	if err != nil {
		return false, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	if !metav1.IsControlledBy(cm, p) && cm.Labels[config.ManagedByLabel] != config.ManagedByValue {
		// Never overwrite a ConfigMap someone else created under our name.
		rerr := render.Invalid(fqv1alpha1.ReasonInvalid,
			"ConfigMap %q already exists and is not managed by fairqueue; delete or rename it so the policy can be rendered", key.Name)
		rerr.Unwatched = true
		return false, rerr
	}
	before := cm.DeepCopy()
	if err := r.desiredConfigMap(p, cm, out); err != nil {
		return false, err
	}
	if equality.Semantic.DeepEqual(before, cm) {
		return false, nil
	}
	// Update carries the resourceVersion read above: a concurrent writer
	// makes it fail with a conflict, and the retry starts from fresh state.
	if err := r.Client.Update(ctx, cm); err != nil {
		return false, fmt.Errorf("updating ConfigMap %s: %w", key, err)
	}
	return true, nil
}

// desiredConfigMap sets on cm everything the operator owns: its data, labels,
// hash annotation and controller reference.
func (r *FairQueuePolicyReconciler) desiredConfigMap(p *fqv1alpha1.FairQueuePolicy, cm *corev1.ConfigMap, out *render.Rendered) error {
	if err := controllerutil.SetControllerReference(p, cm, r.Client.Scheme()); err != nil {
		var owned *controllerutil.AlreadyOwnedError
		if errors.As(err, &owned) {
			return render.Invalid(fqv1alpha1.ReasonInvalid, "ConfigMap %q is controlled by %s %q, not by this policy; delete it or rename the policy",
				cm.Name, owned.Owner.Kind, owned.Owner.Name)
		}
		return fmt.Errorf("setting the owner of ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	for k, v := range managedLabels(p.Name) {
		cm.Labels[k] = v
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[config.ConfigHashAnnotation] = out.Hash
	cm.Data = map[string]string{config.ConfigMapKey: string(out.Data)}
	cm.BinaryData = nil
	return nil
}

// managedLabels are the labels of every object the operator creates for the
// policy named policy.
func managedLabels(policy string) map[string]string {
	l := map[string]string{config.ManagedByLabel: config.ManagedByValue}
	if len(validation.IsValidLabelValue(policy)) == 0 {
		l[config.PolicyLabel] = policy
	}
	return l
}

// sameFailure reports whether ready, the Ready condition before this
// reconcile, already records rerr for generation gen.
func sameFailure(ready *metav1.Condition, gen int64, rerr *render.Error) bool {
	return ready != nil && ready.Status == metav1.ConditionFalse && ready.ObservedGeneration == gen &&
		ready.Reason == rerr.Reason && ready.Message == readyFailureMessage(rerr)
}

func readyFailureMessage(rerr *render.Error) string {
	return rerr.Msg + "; the last good ConfigMap stays in force"
}

// setStatus records the outcome of one reconcile in p.Status. On failure the
// ConfigMap name and hash keep describing the last good render, which is the
// one in force. With neither out nor rerr (a paused policy whose render is
// not in its ConfigMap) it leaves the Ready condition to setPaused.
func setStatus(p *fqv1alpha1.FairQueuePolicy, out *render.Rendered, rerr *render.Error) {
	gen := p.Generation
	p.Status.ObservedGeneration = gen
	resolved := metav1.Condition{
		Type: fqv1alpha1.ConditionSecretsResolved, Status: metav1.ConditionTrue, ObservedGeneration: gen,
		Reason: fqv1alpha1.ReasonResolved, Message: "Every referenced Secret, key and variable was found",
	}
	ready := metav1.Condition{Type: fqv1alpha1.ConditionReady, ObservedGeneration: gen}
	if rerr == nil && out == nil {
		meta.SetStatusCondition(&p.Status.Conditions, resolved)
		return
	}
	if rerr != nil {
		if !rerr.SecretsResolved {
			resolved.Status, resolved.Reason, resolved.Message = metav1.ConditionFalse, rerr.Reason, rerr.Msg
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, rerr.Reason
		ready.Message = readyFailureMessage(rerr)
	} else {
		p.Status.ConfigMapName = ConfigMapName(p.Name)
		p.Status.ConfigHash = out.Hash
		p.Status.WeightedTenants = out.WeightedTenants
		ready.Status, ready.Reason = metav1.ConditionTrue, fqv1alpha1.ReasonRendered
		ready.Message = fmt.Sprintf("Generation %d is rendered into ConfigMap %s", gen, p.Status.ConfigMapName)
	}
	meta.SetStatusCondition(&p.Status.Conditions, resolved)
	meta.SetStatusCondition(&p.Status.Conditions, ready)
}

// isPaused reports whether p carries PausedAnnotation set to "true".
func isPaused(p *fqv1alpha1.FairQueuePolicy) bool {
	return p.Annotations[fqv1alpha1.PausedAnnotation] == "true"
}

// pausedChanged passes policy updates that set, change or remove
// PausedAnnotation, which GenerationChangedPredicate filters out.
func pausedChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[fqv1alpha1.PausedAnnotation] != e.ObjectNew.GetAnnotations()[fqv1alpha1.PausedAnnotation]
		},
	}
}

// configMapHolds reports whether p's ConfigMap already holds the config whose
// hash is hash, read from the cache.
func (r *FairQueuePolicyReconciler) configMapHolds(ctx context.Context, p *fqv1alpha1.FairQueuePolicy, hash string) (bool, error) {
	cm := &corev1.ConfigMap{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ConfigMapName(p.Name)}, cm); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading ConfigMap %s/%s: %w", p.Namespace, ConfigMapName(p.Name), err)
	}
	return metav1.IsControlledBy(cm, p) && cm.Annotations[config.ConfigHashAnnotation] == hash, nil
}

// setPaused records in p.Status that p is paused: the Paused condition, and a
// Ready condition that is True only when the ConfigMap already holds what the
// current generation renders to (inForce). setStatus has run before it.
func setPaused(p *fqv1alpha1.FairQueuePolicy, rerr *render.Error, inForce bool) {
	gen := p.Generation
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: fqv1alpha1.ConditionPaused, Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: fqv1alpha1.ReasonPaused,
		Message: fmt.Sprintf("Annotation %s is \"true\": the operator does not write ConfigMap %s; remove the annotation to resume",
			fqv1alpha1.PausedAnnotation, ConfigMapName(p.Name)),
	})
	if rerr != nil || inForce {
		return
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: fqv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: gen, Reason: fqv1alpha1.ReasonPaused,
		Message: fmt.Sprintf("Generation %d is not in ConfigMap %s because the policy is paused; the ConfigMap keeps what it holds until annotation %s is removed",
			gen, ConfigMapName(p.Name), fqv1alpha1.PausedAnnotation),
	})
}

// notReadyYet handles an API error (retried with backoff) while rendering a
// generation newer than the one Ready describes: a Ready=True left from the
// older generation would claim the new spec is in force, so Ready becomes
// Unknown (reason Reconciling) until a render settles it. It returns err.
func (r *FairQueuePolicyReconciler) notReadyYet(ctx context.Context, orig *fqv1alpha1.FairQueuePolicy, err error) error {
	ready := meta.FindStatusCondition(orig.Status.Conditions, fqv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration >= orig.Generation {
		return err
	}
	p := orig.DeepCopy()
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: fqv1alpha1.ConditionReady, Status: metav1.ConditionUnknown, ObservedGeneration: p.Generation,
		Reason: fqv1alpha1.ReasonReconciling,
		Message: fmt.Sprintf("Generation %d is not rendered yet; generation %d stays in ConfigMap %s while the operator retries: %v",
			p.Generation, ready.ObservedGeneration, ConfigMapName(p.Name), err),
	})
	if perr := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); perr != nil {
		logf.FromContext(ctx).V(1).Info("Could not mark Ready Unknown; retrying the render anyway", "error", perr.Error())
	}
	return err
}
