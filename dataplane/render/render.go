// Package render turns a FairQueuePolicy and the Secrets it references into
// the data-plane config. The operator and the standalone data plane both use
// it, so a policy renders to the same bytes wherever it is rendered.
package render

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Error is a reason the policy cannot be rendered that only a change of the
// policy or of a Secret can fix. The operator turns it into a False condition
// and a Warning Event and does not retry it with backoff; the standalone data
// plane refuses the policy and keeps the last good one. Its message never
// holds a secret or raw identity value, only names.
type Error struct {
	// Reason is one of the fqv1alpha1.Reason* constants.
	Reason string
	// SecretsResolved is false when the error is a missing Secret, key or
	// variable, which sets the SecretsResolved condition False as well.
	SecretsResolved bool
	// Unwatched is true when the cause is an object no watch covers, so
	// the policy must be retried on a timer.
	Unwatched bool
	// Msg says what is wrong and what to do.
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// Unresolved returns an Error for a Secret, data key or variable that is
// missing: it also sets the SecretsResolved condition False.
func Unresolved(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Invalid returns an Error for inputs that are present but cannot be
// rendered.
func Invalid(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, SecretsResolved: true, Msg: fmt.Sprintf(format, args...)}
}

// Input is everything a policy renders from.
type Input struct {
	// Policy is the policy to render.
	Policy *fqv1alpha1.FairQueuePolicy
	// HashKey is the HMAC key; HashKeySecret names the Secret it came from.
	HashKey       []byte
	HashKeySecret string
	// Secrets holds the referenced weightsFrom and key registry Secrets by
	// name; a name that is absent was not found.
	Secrets map[string]*corev1.Secret
	// MissingSecretFix says what to do about a referenced Secret that
	// Secrets lacks; empty means the operator's "create it in the policy's
	// namespace". The standalone data plane names its --secrets flag.
	MissingSecretFix string
}

// missingSecretFix is in.MissingSecretFix or the operator's fix.
func (in *Input) missingSecretFix() string {
	if in.MissingSecretFix != "" {
		return in.MissingSecretFix
	}
	return "create it in the policy's namespace"
}

// Rendered is the result of a successful render.
type Rendered struct {
	// Data is the canonical JSON of the data-plane config.
	Data []byte
	// Hash is config.Hash(Data).
	Hash string
	// WeightedTenants is the number of weights entries of the policy (zero
	// while fair queuing is off), merged duplicates included: counting the
	// rendered entries would reveal that two values are equal.
	WeightedTenants int32
	// Merged names the weights entries left out because an earlier entry
	// resolves to the same identity, as "weights[j] = weights[i]", for the
	// operator's log only (see renderWeights).
	Merged []string
}

// Render turns a policy and its resolved Secrets into the canonical bytes of
// its data-plane config. It is deterministic: the same inputs always give the
// same bytes. Every failure is an *Error.
func Render(in Input) (*Rendered, error) {
	p := in.Policy
	spec := &p.Spec
	c := &config.Config{
		APIVersion: config.APIVersion,
		Kind:       config.Kind,
		Policy:     config.PolicyRef{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation},
		HashKeySecret: config.HashKeySecret{
			Namespace:   p.Namespace,
			Name:        in.HashKeySecret,
			Key:         fqv1alpha1.HashKeySecretKey,
			Fingerprint: config.KeyFingerprint(in.HashKey),
		},
		Identity: config.Identity{
			APIKeyHeaders: spec.Identity.APIKeyHeaders,
			UserHeader:    spec.Identity.UserHeader,
			TeamHeader:    spec.Identity.TeamHeader,
			NoTeamValue:   spec.Identity.NoTeamValue,
			TrustHeaders:  spec.Identity.TrustHeaders,
			ModelHeader:   spec.Identity.ModelHeader,
		},
		RateLimits: renderRateLimits(&spec.RateLimits),
		FairQueuing: config.FairQueuing{
			Enabled:         spec.FairQueuing.Enabled,
			TenantDimension: identity.Dimension(spec.FairQueuing.TenantDimension),
			DefaultWeight:   spec.FairQueuing.DefaultWeight,
			Bounds:          renderBounds(&spec.FairQueuing.Bounds),
		},
		Timeouts:          renderTimeouts(&spec.Timeouts.Request),
		Store:             renderStore(p.Namespace, &spec.Store),
		DeferredAdmission: renderDeferredAdmission(&spec.DeferredAdmission),
		Capacity:          renderCapacity(spec),
	}
	// The cost, like the weights, matters only while fair queuing is on, and
	// the default renders nothing so that existing configs keep their bytes.
	if spec.FairQueuing.Enabled && spec.FairQueuing.Cost == fqv1alpha1.FairQueuingCostTokens {
		c.FairQueuing.Cost = config.CostTokens
	}
	if len(c.Identity.APIKeyHeaders) == 0 {
		c.Identity.APIKeyHeaders = config.DefaultAPIKeyHeaders()
	}
	if c.FairQueuing.TenantDimension == "" {
		c.FairQueuing.TenantDimension = identity.DimensionUser
	}
	if c.FairQueuing.DefaultWeight == 0 {
		c.FairQueuing.DefaultWeight = config.DefaultWeight
	}
	for _, b := range spec.Backends {
		w := b.Weight
		if w == 0 {
			w = config.DefaultWeight
		}
		c.Backends = append(c.Backends, config.Backend{Name: b.Name, URL: b.URL, Weight: w})
	}

	if r := spec.Identity.KeyRegistry; r != nil {
		reg, err := renderKeyRegistry(r, in.HashKey, in.Secrets, in.missingSecretFix())
		if err != nil {
			return nil, err
		}
		c.Identity.KeyRegistry = reg
	}
	// Weights are accepted and ignored while fair queuing is off (the API
	// promises this, so they can be staged), so their Secrets are not needed.
	var merged []string
	if spec.FairQueuing.Enabled {
		weights, m, err := renderWeights(&spec.FairQueuing, in.HashKey, in.Secrets, in.missingSecretFix())
		if err != nil {
			return nil, err
		}
		c.FairQueuing.Weights, merged = weights, m
		renderBands(&spec.FairQueuing, &c.FairQueuing)
	}

	data, err := config.Marshal(c)
	if err != nil {
		// The API server's schema should make this unreachable; say what to
		// fix rather than failing silently.
		return nil, Invalid(fqv1alpha1.ReasonInvalid, "the policy renders an invalid data-plane config: %v", err)
	}
	out := &Rendered{Data: data, Hash: config.Hash(data), Merged: merged}
	if spec.FairQueuing.Enabled {
		out.WeightedTenants = int32(len(spec.FairQueuing.Weights))
	}
	return out, nil
}

// ReferencedSecrets returns the names of the Secrets, besides the hash key,
// that rendering p needs, in a stable order.
func ReferencedSecrets(p *fqv1alpha1.FairQueuePolicy) []string {
	var names []string
	if r := p.Spec.Identity.KeyRegistry; r != nil {
		names = append(names, r.SecretRef.Name)
	}
	if p.Spec.FairQueuing.Enabled {
		for _, src := range p.Spec.FairQueuing.WeightsFrom {
			names = append(names, src.SecretRef.Name)
		}
	}
	return names
}

// renderBands renders the priority bands, with the default band made
// explicit. Without bands it renders nothing, so that policies without them
// keep their bytes.
func renderBands(fq *fqv1alpha1.FairQueuing, out *config.FairQueuing) {
	if len(fq.PriorityBands) == 0 {
		return
	}
	for _, b := range fq.PriorityBands {
		out.Bands = append(out.Bands, config.Band{Name: b.Name, MinShare: b.MinShare})
	}
	out.DefaultBand = fq.EffectiveDefaultBand()
	out.RequestBandHeader = fq.RequestBandHeader
}

// maxBandMembers bounds the identities weightsFrom Secrets with a band put in
// bands, so that a large Secret cannot push the ConfigMap past its size
// limit (each renders to about 110 bytes).
const maxBandMembers = 4096

// SecretLookup resolves the ${VAR}s of weights entries (for
// fqv1alpha1.Expand) as rendering does: from the first of sources holding
// data key VAR, its value trimmed of white space. kubectl-fairqueue top
// --resolve names tenants with it, so that its names match the hashes the
// operator renders.
func SecretLookup(sources []*corev1.Secret) func(name string) (string, bool) {
	return func(name string) (string, bool) {
		for _, s := range sources {
			if v, ok := s.Data[name]; ok {
				// Values written with `kubectl create secret --from-file`
				// often end in a newline that is no part of the identity.
				return strings.TrimSpace(string(v)), true
			}
		}
		return "", false
	}
}

// renderWeights resolves and hashes every weights entry. Variables are looked
// up in the weightsFrom Secrets in order, the first holding the key winning.
// Then every value of a weightsFrom Secret with a band becomes a member of
// that band (see bandMembers).
//
// Entries that resolve to the same identity are merged, the first one
// winning, and named in merged; they are not refused. The API server already
// refuses two equal literal identities, so a duplicate involves a Secret
// value, and refusing it would let anyone who may create policies but not
// read Secrets confirm a guessed value (a literal next to ${VAR}).
func renderWeights(fq *fqv1alpha1.FairQueuing, key []byte, secrets map[string]*corev1.Secret, fix string) (weights []config.Weight, merged []string, err error) {
	var sources []*corev1.Secret
	for _, src := range fq.WeightsFrom {
		s, ok := secrets[src.SecretRef.Name]
		if !ok {
			return nil, nil, Unresolved(fqv1alpha1.ReasonSecretNotFound,
				"Secret %q named in spec.fairQueuing.weightsFrom does not exist; %s", src.SecretRef.Name, fix)
		}
		sources = append(sources, s)
	}
	lookup := SecretLookup(sources)

	weights = make([]config.Weight, 0, len(fq.Weights))
	byHash := make(map[string]int, len(fq.Weights))
	for i, w := range fq.Weights {
		id, err := fqv1alpha1.Expand(w.Identity, lookup)
		var uv *fqv1alpha1.UnresolvedVariableError
		switch {
		case errors.As(err, &uv):
			return nil, nil, Unresolved(fqv1alpha1.ReasonVariableUnresolved,
				"spec.fairQueuing.weights[%d]: variable %q is in none of the weightsFrom Secrets %s; add it as a data key of one of them",
				i, uv.Name, secretList(fq.WeightsFrom))
		case err != nil:
			return nil, nil, Invalid(fqv1alpha1.ReasonInvalid, "spec.fairQueuing.weights[%d].identity: %v", i, err)
		case id == "":
			return nil, nil, Invalid(fqv1alpha1.ReasonInvalid,
				"spec.fairQueuing.weights[%d] resolves to an empty identity; check the Secret values it references", i)
		}
		h := identity.Hash(key, id)
		if j, dup := byHash[h]; dup {
			merged = append(merged, fmt.Sprintf("weights[%d] %s = weights[%d] %s", i, describeEntry(w.Identity), j, describeEntry(fq.Weights[j].Identity)))
			continue
		}
		byHash[h] = i
		weights = append(weights, config.Weight{TenantHash: h, Weight: w.Weight, Band: w.Band})
	}
	weights, err = bandMembers(fq, sources, key, weights)
	if err != nil {
		return nil, nil, err
	}
	return weights, merged, nil
}

// bandMembers adds the identities of the weightsFrom Secrets with a band to
// weights. Each data value is one identity, at the policy's default weight,
// so that GitOps can keep band membership in Secrets. A weights entry for the same identity
// keeps its weight, and its band when it names one; the first Secret listed
// places an identity that several hold. Only hashes are kept, and errors
// name Secrets and data keys, never values.
func bandMembers(fq *fqv1alpha1.FairQueuing, sources []*corev1.Secret, key []byte, weights []config.Weight) ([]config.Weight, error) {
	if len(fq.PriorityBands) == 0 {
		return weights, nil
	}
	def := fq.DefaultWeight
	if def == 0 {
		def = config.DefaultWeight
	}
	// at indexes weights by hash; placed says whether an identity's band
	// is settled (named by its weights entry or by an earlier Secret).
	at := make(map[string]int, len(weights))
	placed := make(map[string]bool, len(weights))
	for j, w := range weights {
		at[w.TenantHash], placed[w.TenantHash] = j, w.Band != ""
	}
	members := 0
	for i, src := range fq.WeightsFrom {
		if src.Band == "" {
			continue
		}
		s := sources[i]
		for _, k := range slices.Sorted(maps.Keys(s.Data)) {
			id := strings.TrimSpace(string(s.Data[k]))
			if id == "" {
				return nil, Invalid(fqv1alpha1.ReasonInvalid,
					"Secret %q (spec.fairQueuing.weightsFrom[%d], band %q) key %q is empty: every value of a Secret with a band is one identity; fill it in or remove the key",
					s.Name, i, src.Band, k)
			}
			// No identity spans lines (header values cannot), so this is a
			// list pasted into one value, which would match nobody.
			if strings.ContainsAny(id, "\r\n") {
				return nil, Invalid(fqv1alpha1.ReasonInvalid,
					"Secret %q (spec.fairQueuing.weightsFrom[%d], band %q) key %q holds several lines: every value of a Secret with a band is one identity; give each identity a key of its own",
					s.Name, i, src.Band, k)
			}
			if members++; members > maxBandMembers {
				return nil, Invalid(fqv1alpha1.ReasonInvalid,
					"the weightsFrom Secrets with a band hold more than %d identities; place fewer identities in bands (for example bands of teams, with tenantDimension team) and leave the rest to defaultBand", maxBandMembers)
			}
			h := identity.Hash(key, id)
			if placed[h] {
				continue
			}
			placed[h] = true
			if j, ok := at[h]; ok {
				weights[j].Band = src.Band
				continue
			}
			weights = append(weights, config.Weight{TenantHash: h, Weight: def, Band: src.Band})
		}
	}
	return weights, nil
}

// describeEntry names a weights entry without its raw identity: by the
// variables it references, which are names, not values.
func describeEntry(tmpl string) string {
	refs := fqv1alpha1.VarRefs(tmpl)
	if len(refs) == 0 {
		return "(a literal identity)"
	}
	return "(from ${" + strings.Join(refs, "}, ${") + "})"
}

func secretList(srcs []fqv1alpha1.WeightsSource) string {
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = fmt.Sprintf("%q", s.SecretRef.Name)
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// registryEntry is one element of the key registry Secret's JSON array.
type registryEntry struct {
	APIKey string `json:"apiKey"`
	User   string `json:"user,omitempty"`
	Team   string `json:"team,omitempty"`
}

// maxRegistryEntries bounds the key registry so a huge Secret cannot make one
// ConfigMap exceed its size limit (each entry renders to ~220 bytes).
const maxRegistryEntries = 4000

// renderKeyRegistry parses the key registry Secret and hashes every value.
func renderKeyRegistry(r *fqv1alpha1.KeyRegistry, key []byte, secrets map[string]*corev1.Secret, fix string) (*config.KeyRegistry, error) {
	s, ok := secrets[r.SecretRef.Name]
	if !ok {
		return nil, Unresolved(fqv1alpha1.ReasonSecretNotFound,
			"key registry Secret %q named in spec.identity.keyRegistry.secretRef does not exist; %s", r.SecretRef.Name, fix)
	}
	dataKey := r.Key
	if dataKey == "" {
		dataKey = config.DefaultKeyRegistryKey
	}
	raw, ok := s.Data[dataKey]
	if !ok {
		return nil, Unresolved(fqv1alpha1.ReasonSecretKeyNotFound,
			"key registry Secret %q has no data key %q; add it, or set spec.identity.keyRegistry.key", s.Name, dataKey)
	}
	// Strict like the Rendered config: field names match case-sensitively,
	// unknown and duplicate fields are refused. The decoder's own errors can
	// quote the input, which holds API keys, so they are not passed on.
	var entries []registryEntry
	if strict, err := kjson.UnmarshalStrict(raw, &entries); err != nil || len(strict) > 0 {
		return nil, Invalid(fqv1alpha1.ReasonInvalid,
			"key registry Secret %q key %q is not a JSON array of {\"apiKey\", \"user\", \"team\"} objects", s.Name, dataKey)
	}
	if len(entries) > maxRegistryEntries {
		return nil, Invalid(fqv1alpha1.ReasonInvalid,
			"key registry Secret %q key %q has more than the %d entries supported", s.Name, dataKey, maxRegistryEntries)
	}
	reg := &config.KeyRegistry{Enforce: r.Enforce}
	byHash := make(map[string]int, len(entries))
	for i, e := range entries {
		if e.APIKey == "" {
			return nil, Invalid(fqv1alpha1.ReasonInvalid, "key registry Secret %q key %q: entry %d has no apiKey", s.Name, dataKey, i)
		}
		h := identity.Hash(key, e.APIKey)
		if j, dup := byHash[h]; dup {
			return nil, Invalid(fqv1alpha1.ReasonDuplicateIdentity,
				"key registry Secret %q key %q: entries %d and %d have the same apiKey; remove one of them", s.Name, dataKey, j, i)
		}
		byHash[h] = i
		entry := config.KeyRegistryEntry{APIKeyHash: h}
		if e.User != "" {
			entry.UserHash = identity.Hash(key, e.User)
		}
		if e.Team != "" {
			entry.TeamHash = identity.Hash(key, e.Team)
		}
		reg.Entries = append(reg.Entries, entry)
	}
	return reg, nil
}

// unit is what a limit counts: requests or model tokens. Everything else
// about a bucket is the same for both, so one function renders them.
type unit struct {
	tokens        bool
	defaultPeriod time.Duration
}

var (
	requestUnit = unit{defaultPeriod: config.DefaultRatePeriod}
	tokenUnit   = unit{tokens: true, defaultPeriod: config.DefaultTokenPeriod}
)

// limit renders a bucket of rate units per period holding burst. An unset
// period takes the unit's default and an unset burst the rate, as the data
// plane reads them.
func (u unit) limit(rate int64, period fqv1alpha1.Duration, burst int64) *config.Limit {
	l := &config.Limit{Period: config.Duration{Duration: u.defaultPeriod}, Burst: rate}
	if u.tokens {
		l.Tokens = rate
	} else {
		l.Requests = rate
	}
	setIfSet(&l.Period.Duration, period.Duration())
	setIfSet(&l.Burst, burst)
	return l
}

// modelLimits renders a per-model limit: its default bucket (absent when
// rate is unset: only overridden models are limited) and its overrides.
func (u unit) modelLimits(rate int64, period fqv1alpha1.Duration, burst int64, overrides []config.ModelOverride) *config.ModelLimits {
	ml := &config.ModelLimits{Overrides: overrides}
	if rate > 0 {
		ml.Default = u.limit(rate, period, burst)
	}
	return ml
}

func renderRateLimit(l *fqv1alpha1.RateLimit) *config.Limit {
	if l == nil {
		return nil
	}
	return requestUnit.limit(l.Requests, l.Period, l.Burst)
}

func renderRateLimits(rl *fqv1alpha1.RateLimits) config.RateLimits {
	out := config.RateLimits{
		Global:     renderRateLimit(rl.Global),
		PerClient:  renderRateLimit(rl.PerClient),
		PerAPIKey:  renderRateLimit(rl.PerAPIKey),
		PerUser:    renderRateLimit(rl.PerUser),
		PerTeam:    renderRateLimit(rl.PerTeam),
		PerBackend: renderRateLimit(rl.PerBackend),
	}
	if m := rl.PerModel; m != nil {
		var overrides []config.ModelOverride
		for _, o := range m.Overrides {
			overrides = append(overrides, config.ModelOverride{Model: o.Model, Limit: *requestUnit.limit(o.Requests, o.Period, o.Burst)})
		}
		out.PerModel = requestUnit.modelLimits(m.Requests, m.Period, m.Burst, overrides)
		if u := m.UnknownModel; u != nil && u.Action == fqv1alpha1.UnknownModelCharge {
			out.PerModel.UnknownModel = config.UnknownModel{Action: config.UnknownModelCharge, ChargeAs: u.ChargeAs}
		}
	}
	return out
}

// renderBounds renders the fair-queuing bounds, each unset one at its
// default.
func renderBounds(b *fqv1alpha1.FairQueuingBounds) config.Bounds {
	out := config.DefaultBounds()
	setIfSet(&out.MaxQueueDepthPerTenant, b.MaxQueueDepthPerTenant)
	setIfSet(&out.MaxTotalQueued, b.MaxTotalQueued)
	setIfSet(&out.MaxTenants, b.MaxTenants)
	setIfSet(&out.MaxInFlight, b.MaxInFlight)
	setIfSet(&out.MaxWait.Duration, b.MaxWait.Duration())
	return out
}

// setIfSet overwrites the default in *dst with v when v is set: positive,
// as the schema requires of every value it lets through.
func setIfSet[T int32 | int64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

func renderTimeouts(t *fqv1alpha1.RequestTimeouts) config.Timeouts {
	// The API server defaults the total; objects built elsewhere may lack it.
	out := config.Timeouts{RequestTotal: config.Duration{Duration: config.DefaultRequestTotalTimeout}, ClientDeadlineHeader: t.ClientDeadlineHeader}
	setIfSet(&out.RequestTotal.Duration, t.Default.Total.Duration())
	for _, m := range t.Models {
		out.Models = append(out.Models, config.ModelTimeout{Model: m.Model, Total: config.Duration{Duration: m.Total.Duration()}})
	}
	return out
}

// renderStore renders spec.store, filling the API's defaults for objects
// built without an API server. The memory default renders nothing, so
// policies that do not use a shared store keep their bytes. Only the
// Secret's name is rendered; the data plane reads its values itself.
func renderStore(namespace string, s *fqv1alpha1.Store) *config.Store {
	if s.Type != fqv1alpha1.StoreTypeRedis || s.Redis == nil {
		return nil
	}
	r := s.Redis
	out := &config.RedisStore{
		Addresses:          r.Addresses,
		Mode:               config.RedisMode(r.Mode),
		SentinelMasterName: r.SentinelMasterName,
		DB:                 r.DB,
		TLS:                r.TLS,
		Timeout:            config.Duration{Duration: r.Timeout.Duration()},
		FailureMode:        config.FailureMode(r.FailureMode),
	}
	if out.Mode == "" {
		out.Mode = config.RedisStandalone
	}
	if out.Timeout.Duration == 0 {
		out.Timeout.Duration = config.DefaultStoreTimeout
	}
	if out.FailureMode == "" {
		out.FailureMode = config.FailClosed
	}
	if r.SecretRef != nil {
		out.Secret = &config.SecretRef{Namespace: namespace, Name: r.SecretRef.Name}
	}
	return &config.Store{Type: config.StoreRedis, Redis: out}
}

// renderDeferredAdmission renders spec.deferredAdmission, filling the API's
// defaults for objects built without an API server. It renders nothing while
// the mode is off, so policies that do not use it keep their bytes.
func renderDeferredAdmission(d *fqv1alpha1.DeferredAdmission) *config.DeferredAdmission {
	if !d.Enabled {
		return nil
	}
	tl := &d.TokenLimits
	out := &config.DeferredAdmission{
		TokenLimits: config.TokenLimits{
			PerAPIKey: renderTokenLimit(tl.PerAPIKey),
			PerUser:   renderTokenLimit(tl.PerUser),
			PerTeam:   renderTokenLimit(tl.PerTeam),
		},
		Estimation: config.DefaultTokenEstimation(),
		Bounds:     config.DefaultDeferredBounds(),
	}
	if m := tl.PerModel; m != nil {
		var overrides []config.ModelOverride
		for _, o := range m.Overrides {
			overrides = append(overrides, config.ModelOverride{Model: o.Model, Limit: *tokenUnit.limit(o.Tokens, o.Period, o.Burst)})
		}
		out.TokenLimits.PerModel = tokenUnit.modelLimits(m.Tokens, m.Period, m.Burst, overrides)
	}
	setIfSet(&out.Estimation.DefaultMaxTokens, d.Estimation.DefaultMaxTokens)
	if d.Estimation.IncludeUsage != nil {
		out.Estimation.IncludeUsage = *d.Estimation.IncludeUsage
	}
	b := &d.Bounds
	setIfSet(&out.Bounds.MaxHeld, b.MaxHeld)
	setIfSet(&out.Bounds.MaxHeldPerTenant, b.MaxHeldPerTenant)
	setIfSet(&out.Bounds.MaxWait.Duration, b.MaxWait.Duration())
	return out
}

func renderTokenLimit(l *fqv1alpha1.TokenLimit) *config.Limit {
	if l == nil {
		return nil
	}
	return tokenUnit.limit(l.Tokens, l.Period, l.Burst)
}
