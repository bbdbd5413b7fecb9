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

package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// TenantReport is one replica's view of one tenant on one contended key over
// the last exchange period.
type TenantReport struct {
	// Tenant is the tenant key (an identity hash, never a raw identity).
	Tenant string `json:"t"`
	// Weight is the tenant's configured weight.
	Weight int `json:"w"`
	// Demand is the rate of requests arriving for the key, per second.
	Demand float64 `json:"d"`
	// Backlogged is true when a request of the tenant was held back (by the
	// pacing gate or by the shared bucket) during the period: the tenant
	// wants more than it got, whatever its arrival rate says.
	Backlogged bool `json:"b,omitempty"`
	// Admitted is the rate of requests admitted on the key, per second.
	Admitted float64 `json:"a"`
	// Band is the index of the priority band the demand is in (see
	// Report.BandShares), omitted for band 0. A tenant whose requests
	// lowered their band (fairqueue.Request.Band) has one entry per band.
	Band int `json:"p,omitempty"`
}

// Report is what one replica publishes for one contended key.
type Report struct {
	// Replica names the replica; unique within the fleet.
	Replica string `json:"r"`
	// Tenants lists every tenant the replica saw on the key recently.
	Tenants []TenantReport `json:"ts"`
	// Fingerprint is the fingerprint of the hash key the replica hashes
	// identities with (config.KeyFingerprint: a keyed digest of a fixed
	// message, which reveals nothing of the key). Replicas publish it in
	// their membership report (key MembersKey); empty elsewhere.
	Fingerprint string `json:"f,omitempty"`
	// BandShares is the minShare of each priority band of the replica's
	// configuration, highest band first. It is present exactly when the
	// replica has bands: a report without it comes from a replica that
	// does not know them (an older version, or one without bands
	// configured), and the reader places its tenants in the bands of its
	// own configuration. Without bands a report is byte for byte what it
	// was before bands existed.
	BandShares []float64 `json:"ps,omitempty"`
}

// MembersKey is the exchange key of the membership reports: every replica
// publishes one each round, with no tenants and its hash key's fingerprint,
// whatever its traffic, so the fleet counts its live replicas and checks
// that they hash identities alike. No limit key is empty: a request without
// a model is never paced.
const MembersKey = ""

// Exchange shares Reports between the replicas of a fleet. Implementations
// must be safe for concurrent use.
type Exchange interface {
	// Swap publishes r for key, valid for ttl, and returns the live reports
	// of every replica for key, r included.
	Swap(ctx context.Context, key string, r Report, ttl time.Duration) ([]Report, error)
	// Leave withdraws replica's report for key at once, so the others need
	// not wait for it to expire.
	Leave(ctx context.Context, key, replica string) error
}

// ErrNotShared is returned by an Exchange while the limiter's buckets are
// not shared (each replica has its own): fleet pacing is then off, every gate
// is open, and nothing is logged or counted as a failure.
var ErrNotShared = errors.New("the rate-limit store is not shared between replicas: fleet pacing is off")

// ErrExchangeClosed is returned by a closed MemoryExchange.
var ErrExchangeClosed = errors.New("fleet exchange closed")

// MemoryExchange is an in-process Exchange for tests and simulations of a
// fleet in one process. Expiry follows the injected clock.
type MemoryExchange struct {
	clk clock.PassiveClock

	mu      sync.Mutex
	down    bool
	reports map[string]map[string]memoryEntry
}

type memoryEntry struct {
	report  Report
	expires time.Time
}

// NewMemoryExchange returns an empty MemoryExchange reading time from clk.
func NewMemoryExchange(clk clock.PassiveClock) *MemoryExchange {
	return &MemoryExchange{clk: clk, reports: map[string]map[string]memoryEntry{}}
}

// SetDown makes every call fail while down is true, to simulate an outage.
func (m *MemoryExchange) SetDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

// Swap implements Exchange.
func (m *MemoryExchange) Swap(_ context.Context, key string, r Report, ttl time.Duration) ([]Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, ErrExchangeClosed
	}
	now := m.clk.Now()
	byReplica := m.reports[key]
	if byReplica == nil {
		byReplica = map[string]memoryEntry{}
		m.reports[key] = byReplica
	}
	byReplica[r.Replica] = memoryEntry{report: r, expires: now.Add(ttl)}
	out := make([]Report, 0, len(byReplica))
	for name, e := range byReplica {
		if now.After(e.expires) {
			delete(byReplica, name)
			continue
		}
		out = append(out, e.report)
	}
	return out, nil
}

// Leave implements Exchange.
func (m *MemoryExchange) Leave(_ context.Context, key, replica string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return ErrExchangeClosed
	}
	delete(m.reports[key], replica)
	if len(m.reports[key]) == 0 {
		delete(m.reports, key)
	}
	return nil
}
