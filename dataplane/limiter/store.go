/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package limiter

import (
	"errors"
	"time"
)

// ErrStoreUnavailable is returned (possibly wrapped) by a Store that cannot
// reach its backing state. The caller answers 503 at once and never queues
// the request: the refusal is not the caller's quota.
var ErrStoreUnavailable = errors.New("rate-limit store unavailable")

// MaxBatch is the most buckets one Store call checks together: the four
// identity dimensions api_key, user, team and model, or their four token
// dimensions.
const MaxBatch = 4

// Request names one bucket to check: its dimension, key and current limit.
// The store keeps bucket state; the limit travels with every request so a
// changed limit takes effect on the next call without a separate sync.
type Request struct {
	// Dimension selects the bucket table.
	Dimension Dimension
	// Key names the bucket within the dimension ("" for global).
	Key string
	// Limit is the bucket's current shape.
	Limit Limit
	// Cost is the number of bucket tokens the request needs. For Take and
	// Peek, 1 or less means one token (a request-count bucket); a larger Cost
	// needs that many tokens at once, and a Cost above the bucket's capacity
	// waits for a full bucket and is then charged in full, leaving debt. For
	// Adjust it is signed: positive charges, negative refunds, 0 does nothing.
	Cost int64

	// interval and window cache Limit's GCRA shape (see shapeOf), set by
	// Batch.Add, so the in-memory store need not divide on every request.
	interval, window int64
}

// Batch is a fixed-capacity list of up to MaxBatch requests, at most one per
// dimension. It is passed by value so a call through the Store interface does
// not allocate.
type Batch struct {
	n    int
	reqs [MaxBatch]Request
}

// Add appends a request for one token. It panics when the batch is full, a
// programming error.
func (b *Batch) Add(d Dimension, key string, l Limit) {
	s := shapeOf(l)
	b.add(d, key, &s, 0)
}

// AddCost appends a request for cost tokens (see Request.Cost). It panics
// when the batch is full, a programming error.
func (b *Batch) AddCost(d Dimension, key string, l Limit, cost int64) {
	s := shapeOf(l)
	b.add(d, key, &s, cost)
}

func (b *Batch) add(d Dimension, key string, s *shaped, cost int64) {
	r := &b.reqs[b.n] // written field by field: no temporary Request to copy
	r.Dimension, r.Key, r.Limit, r.Cost, r.interval, r.window = d, key, s.Limit, cost, s.interval, s.window
	b.n++
}

// Len returns the number of requests in b.
func (b *Batch) Len() int { return b.n }

// At returns the i-th request of b.
func (b *Batch) At(i int) Request { return b.reqs[i] }

// DimensionSet is a set of dimensions, as a bit mask.
type DimensionSet uint16

// Add returns s with d added.
func (s DimensionSet) Add(d Dimension) DimensionSet { return s | 1<<d }

// Has reports whether d is in s.
func (s DimensionSet) Has(d Dimension) bool { return s&(1<<d) != 0 }

// Quota describes one bucket for the x-ratelimit-* response headers.
type Quota struct {
	// Dimension is the bucket's dimension.
	Dimension Dimension
	// Limit is the bucket capacity (the limit's burst).
	Limit int64
	// Remaining is the number of whole tokens left after this decision (LLM
	// tokens for a token dimension); never negative, 0 while in debt.
	Remaining int64
	// Reset is the time until the bucket is full again.
	Reset time.Duration
}

// Decision is the outcome of checking a batch of buckets.
type Decision struct {
	// Allowed is true when every bucket held the request's cost (and, for
	// Take, each was charged it).
	Allowed bool
	// LimitType is the refusing dimension with the longest RetryAfter; meaningful only when !Allowed.
	LimitType Dimension
	// RefusedBy holds every refusing dimension.
	RefusedBy DimensionSet
	// RetryAfter is the time until every refusing bucket holds the request's
	// cost (a full bucket for a cost above capacity); 0 when allowed.
	RetryAfter time.Duration
	// Tightest is the applied bucket with the fewest remaining tokens; valid when HasQuota.
	Tightest Quota
	// HasQuota is false when no bucket applied.
	HasQuota bool
	// TableFull holds the dimensions whose key table had no room for a new
	// key because every bucket in it still holds debt. Such a refusal is not
	// the caller's quota running out, so it is never queued; RetryAfter is
	// the time until the first tracked bucket can have refilled.
	TableFull DimensionSet
}

// Store holds token-bucket state. Implementations must be safe for concurrent
// use and, for the in-memory default, allocation-free for known keys.
type Store interface {
	// Take checks every request in b and, only if every bucket holds the
	// request's Cost, charges each its Cost: all or none. A refusal charges
	// nothing.
	Take(now time.Time, b Batch) (Decision, error)
	// Peek reports what Take would decide without charging or storing anything.
	Peek(now time.Time, b Batch) (Decision, error)
	// Refund gives back one token to each bucket named in b, never raising a
	// bucket above its capacity; a bucket the store does not hold is left
	// alone. It undoes a Take whose request was then refused by a later
	// stage (every backend exhausted), so no token is lost.
	Refund(now time.Time, b Batch) error
	// Adjust settles token buckets after the fact: each request's Cost is
	// signed. A positive Cost charges that many tokens unconditionally, which
	// may leave the bucket in debt (bounded, see MaxAdjustDebt), and creates
	// an unknown bucket; a negative Cost gives tokens back, never above the
	// bucket's capacity, and leaves an unknown bucket alone. It never refuses.
	Adjust(now time.Time, b Batch) error
}
