// Package config defines the rendered data-plane configuration: the one
// versioned document the operator writes into a policy's ConfigMap and the data
// plane loads. It holds hashed identities and weights, limits, queue bounds,
// timeouts, backends and identity header settings, but never a raw identity or
// the hash key itself.
//
// The package is plain Go (no Kubernetes client libraries) so the data-plane
// loader stays light. Parse is strict: unknown fields, trailing data and bad
// values are errors that name the offending JSON path. Marshal is
// deterministic, so equal configs always produce equal bytes and an equal Hash.
// DeepCopy is generated (zz_generated.deepcopy.go, `make generate`), so a
// copy cannot leave out a field.
//
// +kubebuilder:object:generate=true
package config

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/identity"
)

const (
	// APIVersion is the only apiVersion this package reads and writes.
	APIVersion = "fairqueue.dev/v1alpha1"
	// Kind is the kind of the rendered document.
	Kind = "DataPlaneConfig"

	// ConfigMapKey is the ConfigMap data key that holds the rendered JSON.
	ConfigMapKey = "config.json"
	// PolicyLabel is set on every rendered ConfigMap to the name of the
	// FairQueuePolicy it was rendered from.
	PolicyLabel = "fairqueue.dev/policy"
	// ManagedByLabel marks objects the operator manages; its value is
	// ManagedByValue.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel on operator-managed objects.
	ManagedByValue = "fairqueue-operator"
	// ComponentLabel marks the data plane's report Leases; its value is
	// DataPlaneComponent. The operator selects the Leases by it.
	ComponentLabel = "app.kubernetes.io/component"
	// DataPlaneComponent is the value of ComponentLabel on data-plane
	// report Leases.
	DataPlaneComponent = "fairqueue-dataplane"
	// ConfigHashAnnotation is set on the rendered ConfigMap to Hash of its
	// ConfigMapKey data, so the loaded version is visible without parsing.
	ConfigHashAnnotation = "fairqueue.dev/config-hash"

	// MaxSize is the largest document Parse accepts, the size limit of a
	// ConfigMap.
	MaxSize = 1 << 20
)

// Defaults, in their one Go home: render fills them into a policy that did
// not pass through the API server (whose +kubebuilder:default markers hold the
// same values; test/api checks that they agree), and the data plane and the
// fair queue read them.
const (
	// DefaultWeight is the weight of a tenant without an explicit entry when
	// the policy does not set one.
	DefaultWeight = 1
	// MaxWeight is the largest weight a tenant can have.
	MaxWeight = 1000
	// MaxBands is the most priority bands a config may list; it equals
	// fairqueue.MaxBands, which this package cannot import (test/api checks
	// both against the CRD's maxItems).
	MaxBands = 8

	// DefaultMaxQueueDepthPerTenant is the default bound on requests queued
	// for one tenant.
	DefaultMaxQueueDepthPerTenant = 32
	// DefaultMaxTotalQueued is the default bound on requests queued across a
	// replica.
	DefaultMaxTotalQueued = 4096
	// DefaultMaxTenants is the default bound on tenant queues tracked at once.
	DefaultMaxTenants = 1024
	// DefaultMaxInFlight is the default bound on admission attempts running at
	// once.
	DefaultMaxInFlight = 8
	// DefaultMaxWait is the default longest time a request may spend queued.
	DefaultMaxWait = 5 * time.Second
	// DefaultRatePeriod is the default Period of a request limit.
	DefaultRatePeriod = time.Second
	// DefaultRequestTotalTimeout is the default Timeouts.RequestTotal.
	DefaultRequestTotalTimeout = 60 * time.Second
	// DefaultKeyRegistryKey is the data key of the key registry Secret a
	// policy reads when it names none.
	DefaultKeyRegistryKey = "keys.json"
	// DefaultClientDeadlineMargin is how long before a client's own deadline
	// (X-Stainless-Timeout, X-Envoy-Expected-Rq-Timeout-Ms or the policy's
	// clientDeadlineHeader) a request that cannot be admitted in time is
	// answered, so the client reads the 429 rather than timing out itself.
	DefaultClientDeadlineMargin = 250 * time.Millisecond
)

// DefaultAPIKeyHeaders returns the default Identity.APIKeyHeaders, as a new
// slice the caller may modify.
func DefaultAPIKeyHeaders() []string { return []string{"Authorization", "x-api-key"} }

// Config is the rendered data-plane configuration, version APIVersion.
type Config struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind must be Kind.
	Kind string `json:"kind"`
	// Policy names the FairQueuePolicy this document was rendered from.
	Policy PolicyRef `json:"policy"`
	// HashKeySecret says where the data plane finds the HMAC key it hashes
	// incoming identities with. The key itself is never in the config.
	HashKeySecret HashKeySecret `json:"hashKeySecret"`
	// Identity says how a request's identities are found.
	Identity Identity `json:"identity"`
	// RateLimits are the token buckets, each optional.
	RateLimits RateLimits `json:"rateLimits"`
	// FairQueuing configures the per-tenant queues and the scheduler.
	FairQueuing FairQueuing `json:"fairQueuing"`
	// Timeouts bound a request's total time, queueing included.
	Timeouts Timeouts `json:"timeouts"`
	// Backends are the upstream servers, in the policy's order.
	Backends []Backend `json:"backends,omitempty"`
	// Store says where bucket state lives; nil means each replica's memory.
	Store *Store `json:"store,omitempty"`
	// DeferredAdmission configures token budgets with deferred admission;
	// nil means the mode is off.
	DeferredAdmission *DeferredAdmission `json:"deferredAdmission,omitempty"`
	// Capacity configures admission against what the backends can take;
	// nil means the mode is off.
	Capacity *Capacity `json:"capacity,omitempty"`
}

// PolicyRef identifies the FairQueuePolicy a config was rendered from.
type PolicyRef struct {
	// Namespace of the policy.
	Namespace string `json:"namespace"`
	// Name of the policy.
	Name string `json:"name"`
	// Generation of the policy spec that was rendered.
	Generation int64 `json:"generation"`
}

// HashKeySecret locates the per-policy HMAC key.
type HashKeySecret struct {
	// Namespace of the Secret.
	Namespace string `json:"namespace"`
	// Name of the Secret.
	Name string `json:"name"`
	// Key is the Secret data key holding the raw key bytes.
	Key string `json:"key"`
	// Fingerprint is KeyFingerprint of the key the hashes in this document
	// were computed with, so a data plane can tell whether the key it holds
	// matches (for example while a rotation propagates).
	Fingerprint string `json:"fingerprint"`
}

// Identity says where a request's API key, user, team and model come from.
type Identity struct {
	// APIKeyHeaders are the headers searched, in order, for the API key.
	// "Authorization" is read as "Bearer <key>".
	APIKeyHeaders []string `json:"apiKeyHeaders"`
	// UserHeader carries the user id set by a trusted proxy in front.
	UserHeader string `json:"userHeader,omitempty"`
	// TeamHeader carries the team id set by a trusted proxy in front.
	TeamHeader string `json:"teamHeader,omitempty"`
	// NoTeamValue is a placeholder team value that is not an identity.
	NoTeamValue string `json:"noTeamValue,omitempty"`
	// TrustHeaders says whether UserHeader and TeamHeader are honoured.
	TrustHeaders bool `json:"trustHeaders"`
	// ModelHeader, if set, names the header carrying the model; otherwise the
	// model is read from the JSON body.
	ModelHeader string `json:"modelHeader,omitempty"`
	// KeyRegistry maps hashed API keys to hashed users and teams.
	KeyRegistry *KeyRegistry `json:"keyRegistry,omitempty"`
}

// KeyRegistry maps hashed API keys to the hashed user and team they belong to.
type KeyRegistry struct {
	// Enforce refuses API keys that are not in Entries.
	Enforce bool `json:"enforce"`
	// Entries are sorted by APIKeyHash.
	Entries []KeyRegistryEntry `json:"entries,omitempty"`
}

// KeyRegistryEntry is one registered API key, as hashes.
type KeyRegistryEntry struct {
	// APIKeyHash is the hashed API key.
	APIKeyHash string `json:"apiKeyHash"`
	// UserHash is the hashed user id, or empty.
	UserHash string `json:"userHash,omitempty"`
	// TeamHash is the hashed team id, or empty.
	TeamHash string `json:"teamHash,omitempty"`
}

// Limit is a token bucket: Requests (or Tokens) per Period, holding at most
// Burst. Request limits and token limits share it; exactly one of Requests
// and Tokens is set, which also keeps each limit's JSON key ("requests" or
// "tokens") what earlier releases wrote and read.
type Limit struct {
	// Requests is the number of requests added per Period of a request
	// limit (RateLimits); zero in a token limit.
	Requests int64 `json:"requests,omitempty"`
	// Tokens is the number of model tokens added per Period of a token
	// limit (TokenLimits); zero in a request limit.
	Tokens int64 `json:"tokens,omitempty"`
	// Period is the refill interval.
	Period Duration `json:"period"`
	// Burst is the bucket capacity, in the limit's unit.
	Burst int64 `json:"burst"`
}

// Rate is the number of units (requests or tokens) l adds per Period.
func (l *Limit) Rate() int64 { return l.Requests + l.Tokens }

// RateLimits holds the optional token buckets, one per dimension.
type RateLimits struct {
	// Global is one bucket for all requests, checked before authentication.
	Global *Limit `json:"global,omitempty"`
	// PerClient is one bucket per client address.
	PerClient *Limit `json:"perClient,omitempty"`
	// PerAPIKey is one bucket per hashed API key.
	PerAPIKey *Limit `json:"perAPIKey,omitempty"`
	// PerUser is one bucket per hashed user id.
	PerUser *Limit `json:"perUser,omitempty"`
	// PerTeam is one bucket per hashed team id.
	PerTeam *Limit `json:"perTeam,omitempty"`
	// PerModel is one bucket per model name.
	PerModel *ModelLimits `json:"perModel,omitempty"`
	// PerBackend is one bucket per backend name.
	PerBackend *Limit `json:"perBackend,omitempty"`
}

// ModelLimits is the per-model limit with per-model overrides, of requests
// or of tokens.
type ModelLimits struct {
	// Default applies to models without an override; nil means such models
	// are not limited.
	Default *Limit `json:"default,omitempty"`
	// Overrides are sorted by Model.
	Overrides []ModelOverride `json:"overrides,omitempty"`
	// UnknownModel is what happens to a request with a body whose model
	// cannot be read (not a JSON object encoding/json accepts, or without a
	// non-empty string "model"); the zero value refuses it. Only request
	// limits set it.
	UnknownModel UnknownModel `json:"unknownModel,omitzero"`
}

// UnknownModelAction is what happens to a request whose model cannot be read.
type UnknownModelAction string

// Unknown-model actions.
const (
	// UnknownModelRefuse answers 400 model_not_determined. It is the default.
	UnknownModelRefuse UnknownModelAction = "Refuse"
	// UnknownModelCharge charges the bucket of UnknownModel.ChargeAs.
	UnknownModelCharge UnknownModelAction = "Charge"
)

// UnknownModel says how per-model limits apply to a request whose model
// cannot be read, so that they are never skipped.
type UnknownModel struct {
	// Action is UnknownModelRefuse (also when empty) or UnknownModelCharge.
	Action UnknownModelAction `json:"action,omitempty"`
	// ChargeAs is the model whose bucket is charged; set exactly when Action
	// is UnknownModelCharge.
	ChargeAs string `json:"chargeAs,omitempty"`
}

// ModelOverride is the limit for one model.
type ModelOverride struct {
	// Model is the model name as sent by clients.
	Model string `json:"model"`
	// Limit replaces ModelLimits.Default for Model.
	Limit Limit `json:"limit"`
}

// FairQueuing configures the tenant queues and the weighted scheduler.
type FairQueuing struct {
	// Enabled turns queuing on; when false every refusal is an immediate 429.
	Enabled bool `json:"enabled"`
	// TenantDimension is the identity requests are queued under.
	TenantDimension identity.Dimension `json:"tenantDimension"`
	// DefaultWeight is the weight of tenants not in Weights.
	DefaultWeight int32 `json:"defaultWeight"`
	// Weights are sorted by TenantHash.
	Weights []Weight `json:"weights,omitempty"`
	// Bounds limit every queue.
	Bounds Bounds `json:"bounds"`
	// Cost is what a granted request charges its tenant: CostRequests (also
	// when empty) or CostTokens.
	Cost Cost `json:"cost,omitempty"`
	// Bands are the priority bands, highest first; empty means one band and
	// today's behaviour.
	Bands []Band `json:"bands,omitempty"`
	// DefaultBand names the band of tenants whose Weight names none; empty
	// without Bands.
	DefaultBand string `json:"defaultBand,omitempty"`
	// RequestBandHeader names the header with which a request may lower its
	// band (never raise it); empty means requests cannot.
	RequestBandHeader string `json:"requestBandHeader,omitempty"`
}

// Band is one priority band.
type Band struct {
	// Name labels the band in headers, metrics and weights.
	Name string `json:"name"`
	// MinShare is the fraction of grants, in [0, 1), the band receives while
	// it is backlogged, taken from the bands above it.
	MinShare float64 `json:"minShare,omitempty"`
}

// Weight is the relative share of one hashed tenant.
type Weight struct {
	// TenantHash is the tenant's hashed identity.
	TenantHash string `json:"tenantHash"`
	// Weight is in [1, MaxWeight].
	Weight int32 `json:"weight"`
	// Band names the tenant's priority band; empty means DefaultBand.
	Band string `json:"band,omitempty"`
}

// Bounds are the queue limits of one data-plane replica.
type Bounds struct {
	// MaxQueueDepthPerTenant bounds the requests queued for one tenant.
	MaxQueueDepthPerTenant int32 `json:"maxQueueDepthPerTenant"`
	// MaxTotalQueued bounds the requests queued across the replica.
	MaxTotalQueued int32 `json:"maxTotalQueued"`
	// MaxTenants bounds the tenant queues tracked at once.
	MaxTenants int32 `json:"maxTenants"`
	// MaxInFlight bounds the admission attempts running at once.
	MaxInFlight int32 `json:"maxInFlight"`
	// MaxWait bounds the time one request may spend queued.
	MaxWait Duration `json:"maxWait"`
}

// DefaultBounds returns the bounds the spec prescribes when a policy sets none.
func DefaultBounds() Bounds {
	return Bounds{
		MaxQueueDepthPerTenant: DefaultMaxQueueDepthPerTenant,
		MaxTotalQueued:         DefaultMaxTotalQueued,
		MaxTenants:             DefaultMaxTenants,
		MaxInFlight:            DefaultMaxInFlight,
		MaxWait:                Duration{DefaultMaxWait},
	}
}

// Timeouts bound a request's total time.
type Timeouts struct {
	// RequestTotal is the default total timeout; zero means none.
	RequestTotal Duration `json:"requestTotal,omitzero"`
	// Models are per-model total timeouts, sorted by Model.
	Models []ModelTimeout `json:"models,omitempty"`
	// ClientDeadlineHeader names a request header carrying the client's own
	// timeout (seconds, or a Go duration) that bounds its queueing budget,
	// besides X-Stainless-Timeout and X-Envoy-Expected-Rq-Timeout-Ms; empty
	// means none.
	ClientDeadlineHeader string `json:"clientDeadlineHeader,omitempty"`
}

// ModelTimeout is the total timeout of requests for one model.
type ModelTimeout struct {
	// Model is the model name as sent by clients.
	Model string `json:"model"`
	// Total replaces Timeouts.RequestTotal for Model.
	Total Duration `json:"total"`
}

// Backend is one upstream server.
type Backend struct {
	// Name is a DNS label, unique within the config.
	Name string `json:"name"`
	// URL is the http or https base URL.
	URL string `json:"url"`
	// Weight is the backend's relative share of requests, in [1, MaxWeight].
	Weight int32 `json:"weight"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("1.5s").
type Duration struct {
	time.Duration
}

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a duration string such as "500ms" or "1m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"1s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: use a Go duration such as \"500ms\" or \"1m\"", s)
	}
	d.Duration = v
	return nil
}

// IsZero reports whether d is zero, so omitempty-style encoders can skip it.
func (d Duration) IsZero() bool { return d.Duration == 0 }
