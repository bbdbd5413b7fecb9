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

package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// Data keys of the Redis Secret (store.redis.secretRef).
const (
	// SecretUsernameKey holds the ACL user name.
	SecretUsernameKey = "username"
	// SecretPasswordKey holds the password.
	SecretPasswordKey = "password"
	// SecretCAKey holds PEM CA certificates trusted for TLS.
	SecretCAKey = "ca.crt"
)

// SecretGetter returns the data of the named Secret.
type SecretGetter func(ctx context.Context, namespace, name string) (map[string][]byte, error)

// SwitchOptions configures a Switch.
type SwitchOptions struct {
	// Secrets reads the Redis Secret; nil refuses a config naming one.
	Secrets SecretGetter
	// Replicas counts live replicas for the fail-open fallback.
	Replicas Replicas
	// Observer receives the Redis store's measurements.
	Observer Observer
	// Logger receives store transitions.
	Logger logr.Logger
	// MaxKeysPerDimension caps the in-memory store; 0 means the default.
	MaxKeysPerDimension int
}

// Switch is the limiter.Store a data plane holds for its whole life: it
// delegates to the store its loaded config selects, the per-replica memory
// store or a Redis Store, and changes between them on reload. Bucket state
// does not move between stores: switching to Redis starts from Redis's
// buckets, switching back starts from this replica's memory.
type Switch struct {
	opts   SwitchOptions
	memory *limiter.MemoryStore

	mu  sync.Mutex // serialises Prepare and Commit
	cur atomic.Pointer[active]
}

// active is the store in force and the config section it was built from.
type active struct {
	store   limiter.Store
	redis   *Store // nil for memory
	section *config.Store
}

var _ limiter.Store = (*Switch)(nil)

// NewSwitch returns a Switch on the memory store until a config says
// otherwise.
func NewSwitch(o SwitchOptions) *Switch {
	s := &Switch{opts: o, memory: limiter.NewMemoryStore(o.MaxKeysPerDimension)}
	s.cur.Store(&active{store: s.memory})
	return s
}

// Take implements limiter.Store.
func (s *Switch) Take(now time.Time, b limiter.Batch) (limiter.Decision, error) {
	return s.cur.Load().store.Take(now, b)
}

// Peek implements limiter.Store.
func (s *Switch) Peek(now time.Time, b limiter.Batch) (limiter.Decision, error) {
	return s.cur.Load().store.Peek(now, b)
}

// Refund gives one token back to each bucket of b, if the store in force
// can.
func (s *Switch) Refund(now time.Time, b limiter.Batch) error {
	if r, ok := s.cur.Load().store.(interface {
		Refund(time.Time, limiter.Batch) error
	}); ok {
		return r.Refund(now, b)
	}
	return nil
}

// Adjust implements limiter.Store: it settles token buckets in the store in
// force (see limiter.Store.Adjust).
func (s *Switch) Adjust(now time.Time, b limiter.Batch) error {
	return s.cur.Load().store.Adjust(now, b)
}

// Redis returns the Redis Store in force, or nil on the memory store.
func (s *Switch) Redis() *Store { return s.cur.Load().redis }

// Pending is a store built for a config not yet in force.
type Pending struct {
	s    *Switch
	next *active // nil: the store in force stays
}

// Prepare builds the store cfg selects without putting it in force: it
// reads the Redis Secret and checks the settings, so a config that cannot
// be applied is refused before anything changes, and runs a new Redis
// store's health check (Store.Check), bounded by ctx, so a store that does
// not apply charges (unreachable, out of memory, a wrong mode or master
// name) is marked down, logged and reported from the moment it is in force.
// An unchanged store section keeps the store in force, with its connections
// and state.
func (s *Switch) Prepare(ctx context.Context, cfg *config.Config) (*Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	want := cfg.Store
	if !want.IsRedis() {
		want = nil
	}
	if reflect.DeepEqual(cur.section, want) {
		return &Pending{s: s}, nil
	}
	if want == nil {
		return &Pending{s: s, next: &active{store: s.memory}}, nil
	}
	o, err := s.options(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store.redis: %w", err)
	}
	st, err := New(o)
	if err != nil {
		return nil, fmt.Errorf("store.redis: %w", err)
	}
	_ = st.Check(ctx) // a failure is logged, reported and probed by st
	return &Pending{s: s, next: &active{store: st, redis: st, section: want}}, nil
}

// Health returns nil on the memory store or while the Redis store in force
// applies charges, else why it does not (see Store.Health).
func (s *Switch) Health() error {
	if r := s.Redis(); r != nil {
		return r.Health()
	}
	return nil
}

// Commit puts the prepared store in force and closes the one it replaces.
// Calls in flight on the old Redis store may fail as unavailable.
func (p *Pending) Commit() {
	if p.next == nil {
		return
	}
	p.s.mu.Lock()
	old := p.s.cur.Swap(p.next)
	p.s.mu.Unlock()
	p.next = nil
	if old.redis != nil {
		_ = old.redis.Close()
	}
	section := "Memory"
	if r := p.s.Redis(); r != nil {
		section = "Redis"
	}
	p.s.opts.Logger.Info("Rate-limit store changed", "store", section)
}

// Discard drops a prepared store that will not be used.
func (p *Pending) Discard() {
	if p.next != nil && p.next.redis != nil {
		_ = p.next.redis.Close()
	}
	p.next = nil
}

// Close closes the Redis store in force, if any.
func (s *Switch) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.cur.Load().redis; r != nil {
		return r.Close()
	}
	return nil
}

// options turns the rendered section into Options, reading the Secret.
func (s *Switch) options(ctx context.Context, cfg *config.Config) (Options, error) {
	r := cfg.Store.Redis
	o := Options{
		Addresses: r.Addresses, Mode: Mode(r.Mode), SentinelMasterName: r.SentinelMasterName, DB: int(r.DB),
		Timeout: r.Timeout.Duration, FailureMode: FailureMode(r.FailureMode),
		Namespace: cfg.Policy.Namespace, Policy: cfg.Policy.Name,
		Replicas: s.opts.Replicas, Observer: s.opts.Observer, Logger: s.opts.Logger,
	}
	var ca []byte
	if ref := r.Secret; ref != nil {
		if s.opts.Secrets == nil {
			return o, fmt.Errorf("the config names Secret %s/%s but this data plane cannot read Secrets; run it with --configmap, or with --store-secret-dir holding the Secret's files",
				ref.Namespace, ref.Name)
		}
		data, err := s.opts.Secrets(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return o, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		o.Username, o.Password = string(data[SecretUsernameKey]), string(data[SecretPasswordKey])
		ca = data[SecretCAKey]
		if len(ca) > 0 && !r.TLS {
			return o, fmt.Errorf("the Secret %s/%s holds %s but tls is false; set store.redis.tls to true or remove the key", ref.Namespace, ref.Name, SecretCAKey)
		}
	}
	if r.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(ca) > 0 {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(ca) {
				return o, errors.New("the Secret's ca.crt holds no PEM certificate")
			}
			tc.RootCAs = pool
		}
		o.TLS = tc
	}
	return o, o.Validate()
}

// FleetClient returns the client of the Redis store in force and the key
// prefix for fleet-wide scheduling state, which carries the policy's hash tag
// so it shares the Cluster slot of the policy's buckets; the client is nil
// while the memory store is in force. It is a fleet.RedisSource.
func (s *Switch) FleetClient() (redis.UniversalClient, string) {
	st := s.Redis()
	if st == nil {
		return nil, ""
	}
	return st.Client(), "fq:" + st.HashTag() + ":fleet:"
}
