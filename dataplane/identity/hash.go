// Package identity turns raw tenant identities (API keys, user ids, team ids)
// into the keyed hashes that the rest of fairqueue uses, and chooses the tenant
// a request is queued under. The operator and the data plane share this package
// so that one identity always hashes to the same key on both sides.
package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// HashKeyLen is the length in bytes of the per-policy hash key that the operator
// generates and stores in a Secret.
const HashKeyLen = 32

// Hash returns the lowercase hex HMAC-SHA256 of value under key. It is the one
// function that turns a raw identity into the form stored in ConfigMaps, used
// as a queue key, and written in logs.
func Hash(key []byte, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(value))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0]))
}

// Short returns the first 12 hex digits of a hash, for metric labels and logs
// where the full hash would only add noise.
func Short(hash string) string {
	if len(hash) <= 12 {
		return hash
	}
	return hash[:12]
}
