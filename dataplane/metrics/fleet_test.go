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

package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairqueue/fairqueue/dataplane/fleet"
)

func TestFleetGaugesAreBoundedAndUseHashPrefixes(t *testing.T) {
	f, _ := register(t, NewFleet)
	shares := make([]fleet.Share, 25)
	for i := range shares {
		shares[i] = fleet.Share{Tenant: fmt.Sprintf("%02d%s", i, strings.Repeat("f", 62)), Fleet: float64(i) / 300, Gate: 1}
	}
	f.Synced("m", 3, true, shares)
	if n := testutil.CollectAndCount(f.share); n != MaxFleetTenants {
		t.Fatalf("%d fleet share series for 25 tenants, want the top %d", n, MaxFleetTenants)
	}
	// The largest share is exported under its 12-character hash prefix.
	top := shares[24].Tenant[:12]
	if got := testutil.ToFloat64(f.share.WithLabelValues("m", top)); got != shares[24].Fleet {
		t.Fatalf("share of %s = %v, want %v", top, got, shares[24].Fleet)
	}
	if got := testutil.ToFloat64(f.replicas.WithLabelValues("m")); got != 3 {
		t.Fatalf("replicas = %v, want 3", got)
	}

	// The next round replaces the model's tenants.
	f.Synced("m", 2, false, shares[:2])
	if n := testutil.CollectAndCount(f.share); n != 2 {
		t.Fatalf("%d fleet share series after a round with 2 tenants, want 2", n)
	}
	if got := testutil.ToFloat64(f.contended.WithLabelValues("m")); got != 0 {
		t.Fatalf("contended = %v, want 0", got)
	}
	f.ExchangeFailed("m", nil)
	if got := testutil.ToFloat64(f.exchangeErrors.WithLabelValues("m")); got != 1 {
		t.Fatalf("exchange errors = %v, want 1", got)
	}
}

func TestFleetHashKeyMismatchGauge(t *testing.T) {
	f, err := NewFleet(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var live int
	f.OnLive = func(n int) { live = n }
	if got := testutil.ToFloat64(f.keyMismatch); got != 0 {
		t.Fatalf("%s = %v before any round, want 0", FleetHashKeyMismatchName, got)
	}
	f.Members(3, true)
	if got := testutil.ToFloat64(f.keyMismatch); got != 1 || live != 3 {
		t.Fatalf("%s = %v, live %d after a round with different keys on 3 replicas, want 1 and 3", FleetHashKeyMismatchName, got, live)
	}
	f.Members(2, false)
	if got := testutil.ToFloat64(f.keyMismatch); got != 0 || live != 2 {
		t.Fatalf("%s = %v, live %d after the keys agree on 2 replicas, want 0 and 2", FleetHashKeyMismatchName, got, live)
	}
}
