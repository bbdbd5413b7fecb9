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
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func lim(requests int64, period time.Duration, burst int64) *Limit {
	return &Limit{Requests: requests, Period: period, Burst: burst}
}

func mustNew(t testing.TB, cfg Config, opts Options) *Limiter {
	t.Helper()
	l, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// step is one call at an offset from t0 and what it must decide.
type step struct {
	at        time.Duration
	keys      Keys
	allowed   bool
	limitType Dimension
	retry     time.Duration
}

func TestTakeIdentity(t *testing.T) {
	alice := Keys{APIKey: "k1", User: "alice", Team: "red", Model: "m"}
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{{
		name: "burst defaults to requests, then refuses until one token refills",
		cfg:  Config{User: lim(2, time.Second, 0)},
		steps: []step{
			{keys: alice, allowed: true},
			{keys: alice, allowed: true},
			{keys: alice, limitType: DimensionUser, retry: 500 * time.Millisecond},
			{at: 499 * time.Millisecond, keys: alice, limitType: DimensionUser, retry: time.Millisecond},
			{at: 500 * time.Millisecond, keys: alice, allowed: true},
		},
	}, {
		name: "burst above requests",
		cfg:  Config{Team: lim(1, time.Second, 3)},
		steps: []step{
			{keys: alice, allowed: true}, {keys: alice, allowed: true}, {keys: alice, allowed: true},
			{keys: alice, limitType: DimensionTeam, retry: time.Second},
		},
	}, {
		name: "each key has its own bucket",
		cfg:  Config{APIKey: lim(1, time.Minute, 0)},
		steps: []step{
			{keys: Keys{APIKey: "a"}, allowed: true},
			{keys: Keys{APIKey: "b"}, allowed: true},
			{keys: Keys{APIKey: "a"}, limitType: DimensionAPIKey, retry: time.Minute},
		},
	}, {
		name: "absent identity skips its dimension",
		cfg:  Config{User: lim(1, time.Minute, 0)},
		steps: []step{
			{keys: Keys{Model: "m"}, allowed: true},
			{keys: Keys{Model: "m"}, allowed: true},
		},
	}, {
		name: "model override replaces the model limit for that model only",
		cfg:  Config{Model: lim(1, time.Minute, 0), ModelOverrides: map[string]Limit{"big": *lim(3, time.Minute, 0)}},
		steps: []step{
			{keys: Keys{Model: "big"}, allowed: true}, {keys: Keys{Model: "big"}, allowed: true}, {keys: Keys{Model: "big"}, allowed: true},
			{keys: Keys{Model: "big"}, limitType: DimensionModel, retry: 20 * time.Second},
			{keys: Keys{Model: "small"}, allowed: true},
			{keys: Keys{Model: "small"}, limitType: DimensionModel, retry: time.Minute},
		},
	}, {
		name: "model override applies without a model default",
		cfg:  Config{ModelOverrides: map[string]Limit{"big": *lim(1, time.Minute, 0)}},
		steps: []step{
			{keys: Keys{Model: "big"}, allowed: true},
			{keys: Keys{Model: "big"}, limitType: DimensionModel, retry: time.Minute},
			{keys: Keys{Model: "other"}, allowed: true},
			{keys: Keys{Model: "other"}, allowed: true},
		},
	}, {
		name: "retry-after is the longest wait and limit_type its dimension",
		cfg:  Config{User: lim(1, time.Second, 0), Team: lim(1, 10*time.Second, 0), Model: lim(1, 5*time.Second, 0)},
		steps: []step{
			{keys: alice, allowed: true},
			{keys: alice, limitType: DimensionTeam, retry: 10 * time.Second},
			{at: 6 * time.Second, keys: alice, limitType: DimensionTeam, retry: 4 * time.Second},
			{at: 10 * time.Second, keys: alice, allowed: true},
		},
	}, {
		name: "no dimension configured allows everything",
		cfg:  Config{},
		steps: []step{
			{keys: alice, allowed: true}, {keys: alice, allowed: true},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.cfg, Options{})
			for i, s := range tc.steps {
				d, err := l.TakeIdentity(t0.Add(s.at), s.keys)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != s.allowed {
					t.Fatalf("step %d: allowed = %v, want %v (decision %+v)", i, d.Allowed, s.allowed, d)
				}
				if !s.allowed && (d.LimitType != s.limitType || d.RetryAfter != s.retry) {
					t.Fatalf("step %d: refused by %s after %s, want %s after %s", i, d.LimitType, d.RetryAfter, s.limitType, s.retry)
				}
				if s.allowed && d.RetryAfter != 0 {
					t.Fatalf("step %d: allowed with RetryAfter %s", i, d.RetryAfter)
				}
			}
		})
	}
}

func TestIdentityDimensionsAreChargedAtomically(t *testing.T) {
	l := mustNew(t, Config{APIKey: lim(5, time.Minute, 0), User: lim(1, time.Minute, 0), Model: lim(5, time.Minute, 0)}, Options{})
	keys := Keys{APIKey: "k", User: "u", Model: "m"}
	if d, _ := l.TakeIdentity(t0, keys); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	// The user bucket is empty: these must not drain the api key or model buckets.
	for i := 0; i < 10; i++ {
		d, _ := l.TakeIdentity(t0, keys)
		if d.Allowed || !d.RefusedBy.Has(DimensionUser) || d.RefusedBy.Has(DimensionAPIKey) || d.RefusedBy.Has(DimensionModel) {
			t.Fatalf("refusal %d: %+v, want refused by user only", i, d)
		}
	}
	for _, k := range []Keys{{APIKey: "k"}, {Model: "m"}} {
		d, _ := l.PeekIdentity(t0, k)
		if !d.Allowed || d.Tightest.Remaining != 4 {
			t.Fatalf("%+v: remaining %d after refusals, want 4 (nothing charged)", k, d.Tightest.Remaining)
		}
	}
}

func TestTightestQuota(t *testing.T) {
	l := mustNew(t, Config{APIKey: lim(10, time.Minute, 0), User: lim(3, 3*time.Second, 0)}, Options{})
	keys := Keys{APIKey: "k", User: "u"}
	want := []Quota{
		{Dimension: DimensionUser, Limit: 3, Remaining: 2, Reset: time.Second},
		{Dimension: DimensionUser, Limit: 3, Remaining: 1, Reset: 2 * time.Second},
		{Dimension: DimensionUser, Limit: 3, Remaining: 0, Reset: 3 * time.Second},
		{Dimension: DimensionUser, Limit: 3, Remaining: 0, Reset: 3 * time.Second}, // refused
	}
	for i, w := range want {
		d, _ := l.TakeIdentity(t0, keys)
		if !d.HasQuota || d.Tightest != w {
			t.Fatalf("call %d: quota %+v (has %v), want %+v", i, d.Tightest, d.HasQuota, w)
		}
	}
}

func TestTakePreAuth(t *testing.T) {
	const ok = Dimension(NumDimensions)
	cases := []struct {
		name    string
		cfg     Config
		clients []string
		want    []Dimension // ok means allowed
	}{{
		name:    "global is shared by every client",
		cfg:     Config{Global: lim(2, time.Second, 0)},
		clients: []string{"a", "b", "c"},
		want:    []Dimension{ok, ok, DimensionGlobal},
	}, {
		name:    "per client is keyed by address",
		cfg:     Config{Client: lim(1, time.Second, 0)},
		clients: []string{"a", "b", "a"},
		want:    []Dimension{ok, ok, DimensionClient},
	}, {
		name:    "a client refusal does not spend a global token",
		cfg:     Config{Global: lim(2, time.Second, 0), Client: lim(1, time.Second, 0)},
		clients: []string{"a", "a", "a", "b", "c"},
		want:    []Dimension{ok, DimensionClient, DimensionClient, ok, DimensionGlobal},
	}, {
		name:    "empty client address skips the per-client bucket",
		cfg:     Config{Client: lim(1, time.Second, 0)},
		clients: []string{"", "", ""},
		want:    []Dimension{ok, ok, ok},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.cfg, Options{})
			for i, c := range tc.clients {
				d, err := l.TakePreAuth(t0, c)
				if err != nil {
					t.Fatal(err)
				}
				if w := tc.want[i]; d.Allowed != (w == ok) || (!d.Allowed && d.LimitType != w) {
					t.Fatalf("call %d (%q): %+v, want %v", i, c, d, w)
				}
			}
		})
	}
}

func TestBackend(t *testing.T) {
	l := mustNew(t, Config{Backend: lim(1, time.Second, 0)}, Options{})
	for i := 0; i < 3; i++ { // peeking never charges
		if ok, err := l.HasBackendToken(t0, "a"); !ok || err != nil {
			t.Fatalf("HasBackendToken before dispatch = %v, %v", ok, err)
		}
	}
	if d, _ := l.TakeBackend(t0, "a"); !d.Allowed {
		t.Fatalf("first dispatch refused: %+v", d)
	}
	if ok, _ := l.HasBackendToken(t0, "a"); ok {
		t.Fatal("exhausted backend reports a token")
	}
	if d, _ := l.TakeBackend(t0, "a"); d.Allowed || d.LimitType != DimensionBackend || d.RetryAfter != time.Second {
		t.Fatalf("second dispatch: %+v, want refused by backend for 1s", d)
	}
	if ok, _ := l.HasBackendToken(t0, "b"); !ok {
		t.Fatal("another backend is exhausted too")
	}
	if ok, _ := l.HasBackendToken(t0.Add(time.Second), "a"); !ok {
		t.Fatal("backend did not refill")
	}
}

func TestSetConfig(t *testing.T) {
	keys := Keys{User: "u"}
	cases := []struct {
		name string
		next Config
		// at is when the remaining tokens are probed after two requests at t0.
		at            time.Duration
		wantRemaining int64
		wantErr       bool
	}{
		{name: "unchanged limit keeps the bucket", next: Config{User: lim(4, 4*time.Second, 0)}, wantRemaining: 2},
		{name: "adding another dimension keeps the bucket", next: Config{User: lim(4, 4*time.Second, 0), Team: lim(1, time.Second, 0)}, wantRemaining: 2},
		{name: "doubled capacity keeps the fraction used", next: Config{User: lim(8, 8*time.Second, 0)}, wantRemaining: 4},
		{name: "removed dimension stops limiting", next: Config{}, wantRemaining: -1},
		{name: "invalid config keeps the previous one", next: Config{User: lim(0, time.Second, 0)}, wantErr: true, wantRemaining: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, Config{User: lim(4, 4*time.Second, 0)}, Options{})
			for range 2 {
				if _, err := l.TakeIdentity(t0, keys); err != nil {
					t.Fatalf("TakeIdentity: %v", err)
				}
			}
			err := l.SetConfig(tc.next)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SetConfig error = %v, want error %v", err, tc.wantErr)
			}
			d, _ := l.PeekIdentity(t0.Add(tc.at), keys)
			got := int64(-1)
			if d.HasQuota {
				got = d.Tightest.Remaining
			}
			if got != tc.wantRemaining {
				t.Fatalf("remaining = %d, want %d", got, tc.wantRemaining)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Global: lim(0, time.Second, 0)}, "limit global: requests must be positive"},
		{Config{Client: lim(1, 0, 0)}, "limit client: period must be positive"},
		{Config{Team: lim(1, time.Second, -1)}, "limit team: burst must be zero"},
		{Config{ModelOverrides: map[string]Limit{"m": {Requests: 1}}}, `limit model override "m": period`},
		{Config{Global: lim(1, time.Second, 0), ModelOverrides: map[string]Limit{"m": *lim(1, time.Hour, 5)}}, ""},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want containing %q", err, tc.want)
		}
	}
	if _, err := New(Config{User: lim(1, -time.Second, 0)}, Options{}); err == nil {
		t.Error("New accepted an invalid config")
	}
}

func TestDimensionAndOutcomeStrings(t *testing.T) {
	want := map[Dimension]string{DimensionGlobal: "global", DimensionClient: "client", DimensionAPIKey: "api_key",
		DimensionUser: "user", DimensionTeam: "team", DimensionModel: "model", DimensionBackend: "backend"}
	for d, s := range want {
		if d.String() != s {
			t.Errorf("%d.String() = %q, want %q", d, d.String(), s)
		}
		if q := d == DimensionAPIKey || d == DimensionUser || d == DimensionTeam || d == DimensionModel; d.Queueable() != q {
			t.Errorf("%s.Queueable() = %v, want %v", d, d.Queueable(), q)
		}
	}
	for o, s := range map[Outcome]string{OutcomeAllowed: "allowed", OutcomeRefused: "refused", OutcomeUnavailable: "unavailable"} {
		if o.String() != s {
			t.Errorf("%d.String() = %q, want %q", o, o.String(), s)
		}
	}
}

type recorder map[string]int

func (r recorder) ObserveDecision(d Dimension, o Outcome) { r[d.String()+"/"+o.String()]++ }

type downStore struct{}

func (downStore) Take(time.Time, Batch) (Decision, error) {
	return Decision{Allowed: true}, ErrStoreUnavailable
}
func (downStore) Peek(time.Time, Batch) (Decision, error) {
	return Decision{Allowed: true}, ErrStoreUnavailable
}

func (downStore) Refund(time.Time, Batch) error { return ErrStoreUnavailable }
func (downStore) Adjust(time.Time, Batch) error { return ErrStoreUnavailable }

func TestObserverAndUnavailableStore(t *testing.T) {
	cfg := Config{User: lim(1, time.Minute, 0), Model: lim(5, time.Minute, 0)}
	rec := recorder{}
	l := mustNew(t, cfg, Options{Observer: rec})
	keys := Keys{User: "u", Model: "m"}
	for range 2 { // the second is refused by the user bucket
		if _, err := l.TakeIdentity(t0, keys); err != nil {
			t.Fatalf("TakeIdentity: %v", err)
		}
	}
	want := recorder{"user/allowed": 1, "model/allowed": 1, "user/refused": 1}
	if fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}

	rec = recorder{}
	l = mustNew(t, cfg, Options{Observer: rec, Store: downStore{}})
	d, err := l.TakeIdentity(t0, keys)
	if !errors.Is(err, ErrStoreUnavailable) || d.Allowed {
		t.Fatalf("TakeIdentity with a down store = %+v, %v; want refused with ErrStoreUnavailable", d, err)
	}
	if want := (recorder{"user/unavailable": 1, "model/unavailable": 1}); fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}
}

func TestRefundIdentityGivesBackWhatTakeIdentityCharged(t *testing.T) {
	cfg := Config{APIKey: lim(1, time.Minute, 0), User: lim(1, time.Minute, 0), Model: lim(1, time.Minute, 0)}
	l := mustNew(t, cfg, Options{})
	keys := Keys{APIKey: "k", User: "u", Model: "m"}
	if d, _ := l.TakeIdentity(t0, keys); !d.Allowed {
		t.Fatal("first take refused")
	}
	if d, _ := l.TakeIdentity(t0, keys); d.Allowed {
		t.Fatal("second take within the minute allowed")
	}
	if err := l.RefundIdentity(t0, keys); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TakeIdentity(t0, keys); !d.Allowed {
		t.Fatalf("take after refund refused by %s: the tokens were lost", d.LimitType)
	}
	if err := l.RefundIdentity(t0, Keys{}); err != nil {
		t.Fatalf("refund of an empty batch: %v", err)
	}
	if err := mustNew(t, cfg, Options{Store: downStore{}}).RefundIdentity(t0, keys); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("refund on a down store = %v, want ErrStoreUnavailable", err)
	}
}

func TestObserverCountsTableFull(t *testing.T) {
	rec := recorder{}
	l := mustNew(t, Config{APIKey: lim(1, time.Hour, 0)}, Options{Observer: rec, MaxKeysPerDimension: 1})
	for _, k := range []string{"a", "b"} {
		if _, err := l.TakeIdentity(t0, Keys{APIKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	if want := (recorder{"api_key/allowed": 1, "api_key/table_full": 1}); fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}
}

// viaInterface hides a MemoryStore behind the Store interface, so a Limiter
// takes the path of every other store.
type viaInterface struct{ Store }

// TestTakeAdmissionIsTakePreAuthThenTakeIdentity checks that the one-trip
// TakeAdmission decides, charges and reports exactly as TakePreAuth followed,
// when it admits, by TakeIdentity: a pre-auth refusal charges no identity
// bucket, an identity refusal keeps the pre-auth charge. It runs with the
// in-memory store's one trip and through the Store interface.
func TestTakeAdmissionIsTakePreAuthThenTakeIdentity(t *testing.T) {
	cfg := Config{Global: lim(6, time.Second, 0), Client: lim(3, time.Second, 0), User: lim(2, time.Second, 0), Model: lim(4, time.Second, 0)}
	type call struct {
		at     time.Duration
		client string
		keys   Keys
	}
	var calls []call
	for i := range 40 {
		calls = append(calls, call{
			at:     time.Duration(i) * 70 * time.Millisecond,
			client: []string{"a", "b", ""}[i%3],
			keys:   []Keys{{User: "u", Model: "m"}, {User: "v", Model: "m"}, {Model: "m"}, {}}[i%4],
		})
	}
	for _, tc := range []struct {
		name  string
		store func() Store
	}{
		{"memory store", func() Store { return NewMemoryStore(0) }},
		{"through the Store interface", func() Store { return viaInterface{NewMemoryStore(0)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oneRec, twoRec := recorder{}, recorder{}
			one := mustNew(t, cfg, Options{Store: tc.store(), Observer: oneRec})
			two := mustNew(t, cfg, Options{Store: tc.store(), Observer: twoRec})
			var refusedPre, refusedID int
			for i, c := range calls {
				now := t0.Add(c.at)
				pre, id, err := one.TakeAdmission(now, c.client, c.keys)
				if err != nil {
					t.Fatal(err)
				}
				wantPre, err := two.TakePreAuth(now, c.client)
				if err != nil {
					t.Fatal(err)
				}
				var wantID Decision
				if wantPre.Allowed {
					if wantID, err = two.TakeIdentity(now, c.keys); err != nil {
						t.Fatal(err)
					}
				}
				if pre != wantPre || id != wantID {
					t.Fatalf("call %d: TakeAdmission = %+v, %+v; want %+v, %+v", i, pre, id, wantPre, wantID)
				}
				switch {
				case !pre.Allowed:
					refusedPre++
				case !id.Allowed:
					refusedID++
				}
			}
			if refusedPre == 0 || refusedID == 0 {
				t.Fatalf("%d pre-auth and %d identity refusals: the calls must exercise both", refusedPre, refusedID)
			}
			if fmt.Sprint(oneRec) != fmt.Sprint(twoRec) {
				t.Fatalf("TakeAdmission observed %v, the two calls %v", oneRec, twoRec)
			}
		})
	}

	rec := recorder{}
	down := mustNew(t, cfg, Options{Store: downStore{}, Observer: rec})
	if pre, _, err := down.TakeAdmission(t0, "a", Keys{User: "u"}); pre.Allowed || !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("TakeAdmission with a down store = %+v, %v; want refused with ErrStoreUnavailable", pre, err)
	}
	if want := (recorder{"global/unavailable": 1, "client/unavailable": 1}); fmt.Sprint(rec) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", rec, want)
	}
}
