package identity

import "testing"

func TestHashIsKeyedAndStable(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	// RFC 4231-style check against an independently computed value:
	// printf 'alice' | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
	const want = "433deb45467e4e53dbaba594c88bc3a200f705a2150788c3d11e6040e63e8510"
	if got := Hash(key, "alice"); got != want {
		t.Fatalf("Hash(alice) = %s, want %s", got, want)
	}
	if Hash(key, "alice") == Hash([]byte("another key"), "alice") {
		t.Fatal("hashes under different keys must differ")
	}
	if Hash(key, "alice") == Hash(key, "bob") {
		t.Fatal("hashes of different identities must differ")
	}
}

func TestShort(t *testing.T) {
	if got := Short("0123456789abcdef"); got != "0123456789ab" {
		t.Fatalf("Short = %q", got)
	}
	if got := Short("abc"); got != "abc" {
		t.Fatalf("Short of a short string = %q", got)
	}
}
