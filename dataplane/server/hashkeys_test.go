package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// TestLoadUsesTheKeyItsConfigNames checks the rotation hook: with
// Options.HashKeys a config is loaded with the key whose fingerprint it
// names, refused (keeping the config in force) while that key is unknown,
// and a refused load leaves the previous key hashing requests.
func TestLoadUsesTheKeyItsConfigNames(t *testing.T) {
	newKey := bytes.Repeat([]byte{'n'}, 32)
	known := map[string][]byte{config.KeyFingerprint(testKey): testKey}
	srv, err := New(Options{HashKey: testKey, HashKeys: func(fp string) ([]byte, bool) { k, ok := known[fp]; return k, ok }})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(baseConfig("http://127.0.0.1:1"), "h1"); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.rt.Load().close() }()
	hashesWith := func(key []byte) bool {
		return srv.rt.Load().resolver.Hasher().Sum("alice") == identity.Hash(key, "alice")
	}

	rotated := baseConfig("http://127.0.0.1:1")
	rotated.HashKeySecret.Fingerprint = config.KeyFingerprint(newKey)
	err = srv.Load(rotated, "h2")
	if err == nil || !strings.Contains(err.Error(), "has not held yet") {
		t.Fatalf("Load(config naming an unseen key) = %v, want a refusal saying the key has not been seen", err)
	}
	if srv.ConfigHash() != "h1" || !hashesWith(testKey) {
		t.Fatalf("a refused config changed what is in force: hash %q", srv.ConfigHash())
	}

	known[config.KeyFingerprint(newKey)] = newKey
	if err := srv.Load(rotated, "h2"); err != nil {
		t.Fatalf("Load after the key arrived = %v", err)
	}
	if srv.ConfigHash() != "h2" || !hashesWith(newKey) {
		t.Errorf("the rotated config is not in force with the new key")
	}
	// And back: the old key is still known.
	if err := srv.Load(baseConfig("http://127.0.0.1:1"), "h3"); err != nil || !hashesWith(testKey) {
		t.Errorf("Load back to the first key = %v", err)
	}
}
