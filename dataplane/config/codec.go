package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	kjson "sigs.k8s.io/json"

	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// fingerprintMessage is the fixed message whose keyed hash fingerprints a hash
// key. Knowing the fingerprint reveals nothing about the key.
const fingerprintMessage = "fairqueue.dev/hash-key-fingerprint"

// Parse decodes and validates a rendered config. It is strict: unknown fields,
// trailing data, a wrong apiVersion or kind and any value Validate rejects are
// errors naming the JSON field. The returned config has its lists sorted as
// Marshal writes them.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("config is %d bytes, larger than the %d bytes a ConfigMap can hold", len(data), MaxSize)
	}
	// sigs.k8s.io/json matches field names case-sensitively (encoding/json
	// would take "maxinflight" for "maxInFlight") and reports unknown and
	// duplicate fields with their full path. Like encoding/json it rejects
	// anything after the document.
	var c Config
	strict, err := kjson.UnmarshalStrict(data, &c)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decoding %s: %w", Kind, errors.Join(strict...))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.normalize()
	return &c, nil
}

// Marshal validates c and returns its canonical encoding: lists sorted,
// fields in declaration order, two-space indentation and a trailing newline.
// Equal configs give equal bytes, so the operator can compare bytes to decide
// whether to write. c itself is not modified.
func Marshal(c *Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	n := c.DeepCopy()
	n.normalize()
	data, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", Kind, err)
	}
	return append(data, '\n'), nil
}

// Hash returns the content hash of rendered config bytes: the first 16 hex
// digits of their SHA-256. The operator records it in the policy status and on
// the ConfigMap; the data plane reports the hash of what it loaded.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// KeyFingerprint returns a short, non-secret fingerprint of an HMAC hash key,
// for HashKeySecret.Fingerprint.
func KeyFingerprint(key []byte) string {
	return identity.Hash(key, fingerprintMessage)[:16]
}

// normalize sorts every keyed list and turns empty lists into nil, so that two
// configs that mean the same thing are equal and encode to the same bytes.
// Backends keep the policy's order: it is meaningful to backend selection.
func (c *Config) normalize() {
	c.Identity.APIKeyHeaders = nilIfEmpty(c.Identity.APIKeyHeaders)
	if r := c.Identity.KeyRegistry; r != nil {
		slices.SortFunc(r.Entries, func(a, b KeyRegistryEntry) int { return strings.Compare(a.APIKeyHash, b.APIKeyHash) })
		r.Entries = nilIfEmpty(r.Entries)
	}
	c.eachModelLimits(func(_, _ string, m *ModelLimits) { m.normalize() })
	slices.SortFunc(c.FairQueuing.Weights, func(a, b Weight) int { return strings.Compare(a.TenantHash, b.TenantHash) })
	c.FairQueuing.Weights = nilIfEmpty(c.FairQueuing.Weights)
	slices.SortFunc(c.Timeouts.Models, func(a, b ModelTimeout) int { return strings.Compare(a.Model, b.Model) })
	c.Timeouts.Models = nilIfEmpty(c.Timeouts.Models)
	c.Backends = nilIfEmpty(c.Backends)
	c.Capacity.normalize()
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
