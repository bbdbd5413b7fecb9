// Package fairqueue holds requests refused by an identity-bearing rate limit in
// bounded per-tenant FIFO queues and grants their retries across tenants by
// weight.
//
// A Queue owns one scheduling goroutine. Callers block in Queue.Wait; when a
// waiter's turn comes the Queue grants it an admission attempt, the caller
// re-checks the limiter through Request.Attempt, and the waiter is either
// admitted or re-queued at the head of its tenant queue, keeping its place,
// until its Retry-After has passed again.
//
// Scheduling is weighted fair queuing in virtual time, charged by cost. A
// grant of cost c (Request.Cost: 1 by default, the tokens a request reserves
// for token-weighted fairness, the Virtual Token Counter of "Fairness in
// Serving Large Language Models", OSDI 2024) to a tenant of weight w advances
// that tenant's virtual finish tag by c/w. Every tenant whose head waiter is
// ready carries the finish tag its head's grant would give it (its start tag
// plus the head's cost/weight), and the ready tenant with the smallest tag
// goes next. Tenants live in two min-heaps, one of ready tenants keyed by
// finish tag and one of tenants whose head is still waiting out its
// Retry-After keyed by ready time, so a grant costs O(log tenants) without
// allocating. A tenant is charged only for attempts that are admitted, so a
// refused retry never costs it its turn. Deadlines are kept in an O(1) list
// for the common case of equal budgets, with a heap for the rest. The
// goroutine sleeps on an injected clock until the earliest ready time or
// deadline, or until an event arrives; it never polls.
//
// Fairness bound. Let F_i be the finish tag of tenant i's last grant and C_i
// the largest cost of its grants. A tenant j is granted only when its tag
// F_j + c_j/w_j is the smallest, so right after the grant F_j <= F_i +
// c_i/w_i for every other ready tenant i; until j's next grant F_j stays put
// while F_i only grows. Hence while i and j stay backlogged (their heads
// ready), F_j - F_i <= C_i/w_i and F_i - F_j <= C_j/w_j at all times. The
// cost S_i served to i over an interval, divided by its weight, is the
// growth of F_i, so over any interval in which both stay backlogged
//
//	|S_i/w_i - S_j/w_j| <= C_i/w_i + C_j/w_j,
//
// the lag of each tenant against its weighted share stays within one
// maximum-cost grant (with unit costs, within about one grant: smooth
// weighted round-robin). A tenant entering the ready heap starts at its last
// finish tag but never more than its head's grant behind the virtual time
// (the start tag of the latest grant), so a tenant that lost a race for a
// token keeps its turn while one held back for long (by its own limit, or
// idle) cannot bank credit for a burst later; the bound holds from its
// return. Queue.Adjust settles a grant's reserved cost against its actual
// cost by moving the finish tag by the difference, so the bound holds for
// actual cost up to the reservation error of grants not yet settled; a
// refund never moves the tag more than one grant of the tenant's last cost
// behind the virtual time, the same allowance.
//
// Large and small requests on one bucket charged by size: a request of size
// above 1 (Request.Size, by default its Cost) refused for want of tokens
// holds its limit keys against tenants behind it in the fair order until its
// Retry-After, for at most twice the time a grant of its size takes, so
// smaller requests cannot drain the tokens it waits to accumulate and starve
// it. Virtual times are uint64
// compared with wrap-around arithmetic; the scale (2^36 per unit of cost at
// weight 1), the caps (MaxCost per grant or correction, MaxWeight) and a
// periodic sweep of tenants outside the ready heap keep every comparison
// exact (see strideScale).
//
// Position and estimate: while the k-th waiter of a tenant of weight w, with
// cost U queued up to and including it, is served, the tracked tenants (of
// total weight W) are served U*(W-w)/w besides, in grants of their own mean
// size. Its position is the grants expected before it (its k-1 predecessors
// and the others' share in grants) plus one: ceil(k*W/w) with unit costs.
// Its estimate at enqueue is its Retry-After (or, for room a Wake announces,
// Request.FirstGrant: the expected time until the first grant, when larger)
// plus the time those grants take, alpha per grant plus beta per unit of
// cost, fitted by least squares to the measured grants while the queue is
// backlogged (a limit counting requests spaces grants evenly whatever their
// size; one charged by cost spaces them by size; with equal costs alpha is
// the measured spacing between grants). Before the first measurement every
// grant is taken to be like the waiter's and to take Request.Interval. The
// estimate is never 0. A request whose estimate does not fit its budget is
// refused at arrival (ReasonWaitExceedsBudget) instead of being held until
// the budget runs out.
//
// Retry-After of a refusal (Result.RetryAfter): a request refused by a bound
// learns when that queue or table is expected to have room, one refused for
// its budget when its place would be granted, and one refused after waiting
// when its own place would be granted (from its place in its tenant queue
// and its tenant's share). Each queue remembers the latest grant time it
// promised a refused request, and the next refusal is promised the place one
// grant of its tenant's share later, so refusals issued close together are
// told successive times and clients that obey them come back one place at a
// time instead of all at once to find room for one.
//
// Tenant table: at most Bounds.MaxTenants tenants, each keeping its slot
// while it has waiters and for MaxWait after its queue empties (so a client
// pausing between requests keeps its finish tag and its queue), then evicted
// least recently active first. With every slot taken, a new tenant shares
// one of 16 overflow queues chosen by shuffle sharding (its key deals it two,
// it joins the shorter); it is refused ReasonTenantTableFull only when both
// are full.
//
// No barging: while a limit key has waiters (Queue.HasWaiters), a fresh request
// needing that key must queue behind them. A LimitKey carries its key space
// (the limiter dimension), so equal strings of different dimensions never
// meet. Attempts that share a limit key are
// run one at a time, in scheduling order, so the order in which attempts reach
// the limiter is the fair order.
//
// Priority bands (Weights.Bands, highest first): each band is one fair order
// with its own virtual time, and a tenant competes in its band's (its
// TenantBand entry, else DefaultBand). Freed capacity goes to the highest
// band with a ready tenant, and within the band by the fair order above, so
// the fairness bound holds among a band's tenants. Without bands there is one
// band and nothing changes. A request may lower its band (Request.Band, a
// larger index), never raise it; a lowered request waits in a queue of its
// own for its tenant and band, counted against MaxTenants like a tenant, so
// it never delays its tenant's own-band requests (Queue.AdjustIn settles its
// cost there). A key held by a large request (see above) is held against
// every lower band and no higher one. SetWeights with other bands moves
// each queue, waiters in order, to its new band (a band keeps its virtual
// time by name; a tenant or lowered band that is gone goes to DefaultBand),
// and resets the credits below.
//
// Without a minShare a lower band is granted nothing while a higher band has
// a ready tenant. A band b with minShare m_b > 0 carries a credit: while it
// holds waiters (queued, waiting out a Retry-After, or in an attempt) it
// earns m_b*c for every admitted grant of cost c in any band, and it loses
// its credit when it has none. A grant to band b reserves min(credit, c)
// from it, refunded when the attempt is not admitted; a band whose credit
// covers its next head's cost goes before strict priority (the highest such
// band first). Over an interval in which b holds waiters, with T the cost
// admitted in all bands and S_b b's, the credit's book gives
//
//	S_b >= m_b*T - X_b,
//
// X_b being b's credit and open reservations at the end. Let n_s be the
// number of bands with a minShare (their sum M < 1), I = MaxInFlight and
// c_max the largest cost admitted. Call the bands saturated when, at every
// grant that is admitted, every band holding waiters has a ready one (as on
// a shared limit, where refused attempts all wait out the same Retry-After).
// A grant by credit lowers the sum K of the credits by its cost at once and
// its admission raises K by at most M times that cost, so K grows only by
// grants made by priority; at such a grant no band is covered, so under
// saturation each band's credit is below c_max and K < n_s*c_max, and at
// most I attempts granted up to then are admitted later. Hence every credit
// stays below (n_s+I)*c_max (the cap the code applies, which therefore never
// binds while saturated), b's open reservations below I*c_max, and
//
//	S_b >= m_b*T - (n_s + 2I)*c_max,
//
// with unit costs and one attempt at a time, at most n_s+2 grants short of
// its share. Conversely a band is served by credit at most m_b*T plus its
// credit at the start, so the bands above lose at most M*T plus the caps.
// Without saturation a band whose waiters all wait out their own Retry-After
// keeps earning, up to the cap: it may then be served up to (n_s+I)*c_max
// ahead of its share, the most minShare can bank.
//
// With bands, a request's position and estimate count, besides its band's
// grants ahead of it, the demand queued in the bands above it now (their
// waiters and cost), which strict priority serves first; with a minShare m
// its band is served at least m of the cost, so at most (1-m)/m of its
// band's cost ahead of it is counted from above. Arrivals to higher bands
// while it waits are not foreseen, so under a steady higher-band stream the
// estimate is short by that stream's share. Refusal Retry-After times follow
// from these estimates; the step between successive promised places is its
// tenant's share of its own band only.
//
// The package is pure Go: no net/http, client-go or apimachinery. Time comes
// from k8s.io/utils/clock so tests drive it with a fake clock.
package fairqueue
