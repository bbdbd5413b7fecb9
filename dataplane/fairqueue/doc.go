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
// Scheduling is weighted fair queuing in virtual time: every tenant whose head
// waiter is ready carries a virtual finish tag (its start tag plus 1/weight),
// and the ready tenant with the smallest tag goes next. Tenants live in two
// min-heaps, one of ready tenants keyed by finish tag and one of tenants whose
// head is still waiting out its Retry-After keyed by ready time, so a grant
// costs O(log tenants) without allocating, and the interleaving is as smooth
// as smooth weighted round-robin (each tenant's lag stays within about one
// grant). A tenant is charged only for attempts that are admitted, so a
// refused retry never costs it its turn. Deadlines are kept in an O(1) list
// for the common case of equal budgets, with a heap for the rest. The
// goroutine sleeps on an injected clock until the earliest ready time or
// deadline, or until an event arrives; it never polls.
//
// Position and estimate: the k-th waiter of a tenant of weight w, while the
// tracked tenants weigh W in total, has position ceil(k*W/w) (the grants
// expected up to and including it), and its estimate at enqueue is its
// Retry-After plus (k*W/w - 1) times the measured spacing between grants (an
// EWMA taken while the queue is backlogged; before the first grant, the
// contended bucket's refill interval, Request.Interval), and never 0. A
// request refused by a bound learns when that queue or table is expected to
// have room (Result.RetryAfter).
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
// The package is pure Go: no net/http, client-go or apimachinery. Time comes
// from k8s.io/utils/clock so tests drive it with a fake clock.
package fairqueue
