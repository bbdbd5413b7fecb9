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
	"sort"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
)

// sharesObserver records the shares of the last round.
type sharesObserver struct{ shares []Share }

func (o *sharesObserver) Synced(_ string, _ int, _ bool, s []Share) { o.shares = s }
func (o *sharesObserver) ExchangeFailed(string, error)              {}

// TestSharesNameTheirBand: the Observer is told each (tenant, band) share
// with its band's name, for the metrics' band label, and which gates the
// bands above close.
func TestSharesNameTheirBand(t *testing.T) {
	clk := testingclock.NewFakeClock(simT0)
	var obs sharesObserver
	p := newTestPacer(t, clk, NewMemoryExchange(clk), "r1", Options{Observer: &obs})
	w := twoBands(0)
	w.TenantBand = map[string]int{"L": 1}
	p.SetWeights(*w)
	backlog(p, "H", "L")
	p.ArriveBand("H", 1, "m") // H lowered a request to batch
	p.DoneBand("H", 1, "m", false)
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	type got struct {
		tenant, band string
		closed       bool
	}
	var shares []got
	for _, s := range obs.shares {
		shares = append(shares, got{s.Tenant, s.BandName, s.Closed})
	}
	sort.Slice(shares, func(i, j int) bool {
		if shares[i].tenant != shares[j].tenant {
			return shares[i].tenant < shares[j].tenant
		}
		return shares[i].band < shares[j].band
	})
	want := []got{{"H", "batch", true}, {"H", "interactive", false}, {"L", "batch", true}}
	if len(shares) != len(want) {
		t.Fatalf("shares %+v, want %+v", shares, want)
	}
	for i := range want {
		if shares[i] != want[i] {
			t.Errorf("share %d = %+v, want %+v", i, shares[i], want[i])
		}
	}
}
