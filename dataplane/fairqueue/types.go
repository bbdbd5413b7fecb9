package fairqueue

import (
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Reason says why a request left the queue without being admitted. The first
// five are the refusal reasons of the product specification and appear in the
// HTTP error body and the refused_total metric.
type Reason string

const (
	// ReasonQueueFull means the replica already holds MaxTotalQueued requests.
	ReasonQueueFull Reason = "queue_full"
	// ReasonTenantQueueFull means the tenant already has MaxQueueDepthPerTenant
	// requests queued.
	ReasonTenantQueueFull Reason = "tenant_queue_full"
	// ReasonTenantTableFull means MaxTenants tenant queues are tracked already
	// and the request's tenant has none.
	ReasonTenantTableFull Reason = "tenant_table_full"
	// ReasonWaitExceedsBudget means the request's expected grant time (at
	// enqueue: the Retry-After, or Request.FirstGrant when larger, plus the
	// waiters ahead of it by its tenant's share; after a refused re-check:
	// the Retry-After) does not fit in its remaining budget.
	ReasonWaitExceedsBudget Reason = "wait_exceeds_budget"
	// ReasonDeadlineExceeded means the request's budget ran out while it was
	// queued.
	ReasonDeadlineExceeded Reason = "deadline_exceeded"
	// ReasonDisabled means fair queuing was turned off (Queue.Disable) while
	// the request was queued or before it arrived; the caller answers with the
	// limiter's ordinary 429.
	ReasonDisabled Reason = "disabled"
	// ReasonShutdown means the Queue was closed; the caller answers 503 or 429.
	ReasonShutdown Reason = "shutdown"
	// ReasonNoIdentity means the request has no identity of the tenant
	// dimension, so it could not wait in the queue: the queue never gives
	// it, a caller reports it with Queue.Refuse.
	ReasonNoIdentity Reason = "no_identity"
)

// Default bounds from the product specification, whose one home is the
// data-plane config.
const (
	// DefaultMaxQueueDepthPerTenant is the default Bounds.MaxQueueDepthPerTenant.
	DefaultMaxQueueDepthPerTenant = config.DefaultMaxQueueDepthPerTenant
	// DefaultMaxTotalQueued is the default Bounds.MaxTotalQueued.
	DefaultMaxTotalQueued = config.DefaultMaxTotalQueued
	// DefaultMaxTenants is the default Bounds.MaxTenants.
	DefaultMaxTenants = config.DefaultMaxTenants
	// DefaultMaxInFlight is the default Bounds.MaxInFlight.
	DefaultMaxInFlight = config.DefaultMaxInFlight
	// DefaultMaxWait is the default Bounds.MaxWait.
	DefaultMaxWait = config.DefaultMaxWait
)

// Bounds limits the memory and time the queue may spend. A zero field means
// the specification's default for that field.
type Bounds struct {
	// MaxQueueDepthPerTenant bounds the requests queued for one tenant.
	MaxQueueDepthPerTenant int
	// MaxTotalQueued bounds the requests queued across all tenants.
	MaxTotalQueued int
	// MaxTenants bounds the tenant queues tracked at once.
	MaxTenants int
	// MaxInFlight bounds the admission attempts running at once.
	MaxInFlight int
	// MaxWait bounds the time one request may spend queued.
	MaxWait time.Duration
}

// withDefaults fills zero or negative fields with the defaults.
func (b Bounds) withDefaults() Bounds {
	b.MaxQueueDepthPerTenant = orDefault(b.MaxQueueDepthPerTenant, DefaultMaxQueueDepthPerTenant)
	b.MaxTotalQueued = orDefault(b.MaxTotalQueued, DefaultMaxTotalQueued)
	b.MaxTenants = orDefault(b.MaxTenants, DefaultMaxTenants)
	b.MaxInFlight = orDefault(b.MaxInFlight, DefaultMaxInFlight)
	b.MaxWait = orDefault(b.MaxWait, DefaultMaxWait)
	return b
}

// orDefault returns v, or def when v is zero or negative.
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Weights gives each tenant its relative share of admissions while
// backlogged, and its priority band.
type Weights struct {
	// Default applies to every tenant without an entry in ByTenant; values
	// below 1 mean 1, values above MaxWeight mean MaxWeight.
	Default int
	// ByTenant maps a tenant key (an identity hash) to its weight, clamped like
	// Default. The map is copied by New and SetWeights.
	ByTenant map[string]int
	// Bands are the priority bands, highest first. Empty means one unnamed
	// band: every tenant competes in it, exactly as without bands.
	Bands []Band
	// DefaultBand is the index in Bands of every tenant without an entry in
	// TenantBand.
	DefaultBand int
	// TenantBand maps a tenant key to its band's index in Bands. The map is
	// copied by New and SetWeights.
	TenantBand map[string]int
}

// Band is one priority band of the scheduler.
type Band struct {
	// Name labels the band in results, headers and metrics.
	Name string
	// MinShare is the fraction of grants, in [0, 1), the band receives while
	// backlogged, taken from the bands above it; 0 means strict priority.
	MinShare float64
}

// MaxBands is the largest number of priority bands.
const MaxBands = 8

// BandOf returns the index of tenant's band: its TenantBand entry, else
// DefaultBand, within [0, len(Bands)) (0 without bands).
func (w Weights) BandOf(tenant string) int {
	if len(w.Bands) == 0 {
		return 0
	}
	b, ok := w.TenantBand[tenant]
	if !ok {
		b = w.DefaultBand
	}
	return min(max(b, 0), len(w.Bands)-1)
}

// BandName returns the name of band i, or "" without bands.
func (w Weights) BandName(i int) string {
	if i < 0 || i >= len(w.Bands) {
		return ""
	}
	return w.Bands[i].Name
}

// BandIndex returns the index of the band named name, or false when there is
// none.
func (w Weights) BandIndex(name string) (int, bool) {
	for i, b := range w.Bands {
		if b.Name == name {
			return i, true
		}
	}
	return 0, false
}

// MaxWeight is the largest weight the scheduler distinguishes; larger weights
// count as MaxWeight.
const MaxWeight = 1 << 20

// Of returns the effective weight of tenant: its entry in ByTenant, or
// Default, clamped to [1, MaxWeight].
func (w Weights) Of(tenant string) int {
	v, ok := w.ByTenant[tenant]
	if !ok {
		v = w.Default
	}
	return min(max(v, 1), MaxWeight)
}

// Clone returns a copy that does not alias w's maps or bands.
func (w Weights) Clone() Weights {
	c := Weights{Default: w.Default, ByTenant: make(map[string]int, len(w.ByTenant)), DefaultBand: w.DefaultBand}
	for k, v := range w.ByTenant {
		c.ByTenant[k] = v
	}
	if len(w.Bands) > 0 {
		c.Bands = append([]Band(nil), w.Bands...)
	}
	if w.TenantBand != nil {
		c.TenantBand = make(map[string]int, len(w.TenantBand))
		for k, v := range w.TenantBand {
			c.TenantBand[k] = v
		}
	}
	return c
}

// Attempt re-checks the rate limiter for a granted waiter. It returns ok when
// every limit passed (the tokens are taken), or the Retry-After of the refusal.
// A non-nil error (for example an unavailable shared store) ends the wait and
// is returned by Queue.Wait. Attempt must not block for long and must not call
// back into the Queue.
type Attempt func() (ok bool, retryAfter time.Duration, err error)

// LimitKey names one limiter bucket a request needs: the bucket's key within
// a key space (Kind, the limiter dimension), so equal key strings of
// different dimensions (a user id equal to a team id) are different keys.
type LimitKey struct {
	// Kind is the key space, typically the limiter dimension.
	Kind uint8
	// Key is the bucket key within Kind.
	Key string
}

// Request describes one request that a limit refused (or that must not barge
// past existing waiters).
type Request struct {
	// Tenant is the tenant key (an identity hash); it selects the queue and
	// the weight.
	Tenant string
	// Dimension is the tenant_dimension label (user, apiKey, team) passed to
	// the Observer.
	Dimension string
	// LimitType is the limit_type label passed to the Observer: what the
	// request waits for (a limiter dimension's limit type, or "capacity" for
	// a backend slot). It tells an operator a capacity wait from a rate
	// limit's; it does not change scheduling.
	LimitType string
	// LimitKeys are the limiter keys the request needs. They feed HasWaiters
	// (no barging) and serialize attempts that compete for the same tokens.
	LimitKeys []LimitKey
	// Deadline is the absolute end of the request's admission budget; the zero
	// time means none. The Queue also applies Bounds.MaxWait from enqueue and
	// the deadline of the context passed to Wait, whichever is earliest.
	Deadline time.Time
	// RetryAfter is the Retry-After of the refusal that sent the request here;
	// for a request queued only to avoid barging, the time until the limiter
	// would have a token for it (0 when it has one now). The request is
	// ready for its first attempt after it.
	RetryAfter time.Duration
	// FirstGrant is the expected time until the limit has room for one
	// request, for a limit whose room is announced by Queue.Wake rather
	// than timed by RetryAfter (a backend slot coming free, SPEC 6b: its
	// RetryAfter is 0 so that a Wake grants the request at once). The
	// estimate, the arrival budget check and the Retry-After of a refusal
	// count from the larger of it and RetryAfter; the time the request is
	// ready is RetryAfter alone. 0 means RetryAfter.
	FirstGrant time.Duration
	// Interval is the time the bucket the request contends for needs to
	// refill what the request takes (one refill interval for a request-count
	// bucket, Size tokens' worth for a bucket charged by size). Until the
	// Queue has measured the spacing between grants, it estimates waits as if
	// every grant ahead were like this one and took this long; it also caps
	// how long a request of Size above 1 holds its keys. 0 means unknown.
	Interval time.Duration
	// Attempt re-checks the limiter when the request's turn comes; required.
	Attempt Attempt
	// Cost is what a grant charges the tenant in virtual time, in units of
	// one request at weight 1 (for token-weighted fairness, the tokens the
	// request reserves). 0 or less means 1; values above MaxCost count as
	// MaxCost. Correct it after the fact with Queue.Adjust.
	Cost int64
	// Size is what Attempt takes from the limit the request waits for, in
	// that limit's units (on a token bucket, the tokens it reserves); 0 or
	// less means Cost, values above MaxCost count as MaxCost. A request of
	// Size above 1 refused by the limit holds its LimitKeys against requests
	// behind it in the fair order until its Retry-After (for at most twice
	// its Interval or its measured grant time), so smaller requests cannot
	// drain the tokens it waits for and starve it. Set it when Cost is 1 (fair
	// in requests) but the limit is charged by size.
	Size int64
	// Band is the index of the band the request asks to be scheduled in. It
	// takes effect only when it is below its tenant's band (a larger index:
	// a batch job from an interactive tenant), never above it, and then the
	// request waits in a queue of its own for that tenant and band, so it
	// never delays the tenant's requests in its own band. 0 (or any index
	// at or above the tenant's band) means the tenant's band.
	Band int
}

// MaxCost is the largest Request.Cost the scheduler distinguishes; larger
// costs count as MaxCost, and Queue.Adjust moves a tenant by at most MaxCost
// per call.
const MaxCost = 1 << 24

// Result is the outcome of Queue.Wait, carrying what the HTTP layer needs for
// the x-fair-queue-* headers and the error body.
type Result struct {
	// Admitted is true when an attempt passed the limiter.
	Admitted bool
	// Reason says why the request was not admitted; empty when admitted, when
	// the context ended or when Attempt failed with an error.
	Reason Reason
	// Position is the 1-based place the request had (or would have had) in
	// the overall service order when it arrived: the grants expected before
	// it, plus its own. With unit costs that is its place in its tenant queue
	// scaled by its tenant's share, ceil(k * sumActiveWeights / weight); with
	// costs, its predecessors in its tenant queue plus the other tenants'
	// share of the cost, in grants of their mean cost, plus one.
	Position int
	// Waited is the time spent in the queue.
	Waited time.Duration
	// Estimate is the wait predicted at enqueue: the Retry-After (or
	// FirstGrant, when larger) plus the time the grants expected ahead of
	// the request take, measured per grant and per unit of their cost.
	Estimate time.Duration
	// RetryAfter is a hint for the client when the request was refused. For a
	// refusal by a bound (tenant_queue_full, queue_full, tenant_table_full)
	// it is the expected time until that queue or table has room, never less
	// than the request's own Retry-After and never more than its remaining
	// budget; refusals close together for one queue are told successive
	// places. For wait_exceeds_budget at arrival it is when the place the
	// request would have had is expected to be granted (successive too); for
	// a request refused after waiting (wait_exceeds_budget, deadline_exceeded)
	// when its own place would be granted. Otherwise it is the last
	// Retry-After the limiter gave for it.
	RetryAfter time.Duration
	// Band is the index of the band the request was scheduled in (0
	// without bands); Weights.BandName names it.
	Band int
}

// Observer receives queue events, typically to update Prometheus metrics.
// Methods are called with the Queue's lock held: they must be fast, must not
// block and must not call back into the Queue. A band argument is the name
// of the band the request was scheduled in (Result.Band's name), "" without
// bands; band names are bounded by MaxBands per configuration.
type Observer interface {
	// QueueChanged reports the requests queued and the tenant queues tracked
	// after a change.
	QueueChanged(depth, tenants int)
	// BandQueueChanged reports the requests queued in one band after its
	// depth changed. It is called only while there are bands. When
	// SetWeights changes the bands, every band of the new set is reported,
	// and every band of the old set that is gone is reported once with depth
	// 0, so a gauge per band never keeps a stale value.
	BandQueueChanged(band string, depth int)
	// Granted reports a request admitted from the queue (its attempt passed
	// the limiter), the Request's Dimension and LimitType, its band and the
	// time it spent queued.
	Granted(dimension, limitType, band string, waited time.Duration)
	// Refused reports a request refused at enqueue or after waiting, with the
	// band it was (or would have been) scheduled in, or refused without
	// queuing (Queue.Refuse). Besides the five specification reasons, reason
	// may be ReasonDisabled, ReasonShutdown or ReasonNoIdentity;
	// cancellations and Attempt errors are not reported.
	Refused(dimension, limitType, band string, reason Reason)
}

// NopObserver is an Observer that ignores every event.
type NopObserver struct{}

// QueueChanged implements Observer.
func (NopObserver) QueueChanged(int, int) {}

// BandQueueChanged implements Observer.
func (NopObserver) BandQueueChanged(string, int) {}

// Granted implements Observer.
func (NopObserver) Granted(string, string, string, time.Duration) {}

// Refused implements Observer.
func (NopObserver) Refused(string, string, string, Reason) {}
