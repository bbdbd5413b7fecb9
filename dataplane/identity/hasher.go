package identity

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Hasher computes Hash under one key on the request path: with pooled HMAC
// states, and remembering recent results so that a returning identity costs
// two seeded non-cryptographic hashes and a map lookup instead of an HMAC and
// an allocation.
//
// The cache is keyed by a 128-bit digest of the raw value (two 64-bit
// maphash sums under random per-process seeds), so raw identities are never
// kept; it holds at most maxHashCacheEntries results and is cleared when
// full, so a flood of fresh identities costs an HMAC each, as without it.
type Hasher struct {
	key          []byte
	pool         sync.Pool
	seed1, seed2 maphash.Seed
	cache        sync.Map // [2]uint64 -> string
	entries      atomic.Int64
}

// maxHashCacheEntries bounds the identity hash cache: about 2.5 MiB.
const maxHashCacheEntries = 16384

// hmacState is one pooled HMAC with scratch space that stays on the heap
// with it, so nothing escapes per call.
type hmacState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// NewHasher returns a Hasher for key, which it copies.
func NewHasher(key []byte) *Hasher {
	key = bytes.Clone(key)
	return &Hasher{
		key:   key,
		pool:  sync.Pool{New: func() any { return &hmacState{mac: hmac.New(sha256.New, key)} }},
		seed1: maphash.MakeSeed(),
		seed2: maphash.MakeSeed(),
	}
}

// Uses reports whether h hashes under key.
func (h *Hasher) Uses(key []byte) bool { return bytes.Equal(h.key, key) }

// Sum returns Hash(key, value); TestHasherMatchesHash keeps the two equal.
func (h *Hasher) Sum(value string) string {
	digest := [2]uint64{maphash.String(h.seed1, value), maphash.String(h.seed2, value)}
	if v, ok := h.cache.Load(digest); ok {
		return v.(string)
	}
	sum := h.hmac(value)
	if h.entries.Add(1) > maxHashCacheEntries {
		h.cache.Clear()
		h.entries.Store(1)
	}
	h.cache.Store(digest, sum)
	return sum
}

// hmac computes Hash(key, value) with a pooled HMAC state.
func (h *Hasher) hmac(value string) string {
	st := h.pool.Get().(*hmacState)
	st.mac.Reset()
	st.in = append(st.in[:0], value...)
	st.mac.Write(st.in)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], st.mac.Sum(st.sum[:0]))
	if cap(st.in) <= 4<<10 { // do not pin a rare huge identity
		h.pool.Put(st)
	}
	return string(hexSum[:])
}
