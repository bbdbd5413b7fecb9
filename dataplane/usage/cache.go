package usage

import (
	"hash/maphash"
	"sync"
)

const (
	// cacheMinBytes is the shortest text whose count is cached: roles,
	// names and ids are cheap to tokenise and would only churn the cache.
	// A hit costs about a tenth of a microsecond, tokenising about one
	// microsecond per token.
	cacheMinBytes = 16
	// cacheGeneration bounds the entries of one generation of the cache;
	// with two generations the cache holds at most 2 x 32768 counts (about
	// 3 MiB).
	cacheGeneration = 32768
)

// countCache remembers the token counts of the long texts an Estimator
// counted, so that a conversation's history, which the client resends with
// every turn, is tokenised once rather than on every request. It keeps two
// generations: a full current one becomes the previous one and the oldest
// is dropped, so recently used counts survive and memory stays bounded. It
// is safe for concurrent use.
type countCache struct {
	seed maphash.Seed

	mu        sync.Mutex
	cur, prev map[uint64]int64
}

func newCountCache() *countCache {
	return &countCache{seed: maphash.MakeSeed()}
}

// key hashes s in encoding enc. A 64-bit collision, which at this size is
// vanishingly rare, would only misestimate a reservation that settling
// corrects.
func (c *countCache) key(enc encoding, s string) uint64 {
	return maphash.String(c.seed, s) ^ uint64(enc)
}

func (c *countCache) get(k uint64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.cur[k]; ok {
		return n, true
	}
	n, ok := c.prev[k]
	if ok {
		c.putLocked(k, n) // keep it through the next rotation
	}
	return n, ok
}

func (c *countCache) put(k uint64, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, n)
}

func (c *countCache) putLocked(k uint64, n int64) {
	if len(c.cur) >= cacheGeneration {
		c.prev, c.cur = c.cur, nil
	}
	if c.cur == nil {
		c.cur = make(map[uint64]int64)
	}
	c.cur[k] = n
}
