package identity

import (
	"strconv"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestHasherMatchesHash(t *testing.T) {
	hs := NewHasher(testKey)
	for range 2 { // the second round is served from the cache
		for _, v := range []string{"", "alice", "alicf", "sk-" + strings.Repeat("x", 200)} {
			if got, want := hs.Sum(v), Hash(testKey, v); got != want {
				t.Errorf("Sum(%q) = %s, want Hash = %s", v, got, want)
			}
		}
	}
	if !hs.Uses(testKey) || hs.Uses([]byte("another key")) {
		t.Error("Uses does not tell the hasher's key")
	}
}

// TestHasherCacheIsBounded: a flood of fresh identities never grows the
// cache past its bound, and every result stays exact.
func TestHasherCacheIsBounded(t *testing.T) {
	hs := NewHasher(testKey)
	for i := range 3 * maxHashCacheEntries {
		v := "key-" + strconv.Itoa(i)
		if got := hs.Sum(v); i%4099 == 0 && got != Hash(testKey, v) {
			t.Fatalf("Sum(%q) = %s, want Hash", v, got)
		}
		if n := hs.entries.Load(); n > maxHashCacheEntries {
			t.Fatalf("cache holds %d entries, bound %d", n, maxHashCacheEntries)
		}
	}
	n := 0
	hs.cache.Range(func(any, any) bool { n++; return true })
	if n > maxHashCacheEntries {
		t.Fatalf("cache holds %d entries, bound %d", n, maxHashCacheEntries)
	}
}

func BenchmarkHasher(b *testing.B) {
	hs := NewHasher(testKey)
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = hs.Sum("sk-bench-key")
		}
	})
	b.Run("hmac", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = hs.hmac("sk-bench-key")
		}
	})
}
