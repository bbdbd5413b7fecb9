package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

// bandedConfig renders simPolicyWith a 30/s perModel limit and puts acme in
// band interactive, leaving globex and initech in the default band batch,
// with a request band header.
func bandedConfig(t *testing.T) (*config.Config, []byte) {
	t.Helper()
	key := []byte("0123456789abcdef0123456789abcdef")
	r, err := reload.NewPolicySource(writeFile(t, "p.yaml", simPolicyWith("    perModel: {requests: 30, period: 1s}")), reload.PolicyOptions{HashKey: key}).Render()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	fq := &cfg.FairQueuing
	fq.Bands = []config.Band{{Name: "interactive"}, {Name: "batch", MinShare: 0.1}}
	fq.DefaultBand, fq.RequestBandHeader = "batch", "x-priority-band"
	acme, _ := tenantHash(cfg, key, loadgen.Tenant{APIKey: "sk-acme"})
	fq.Weights[weightEntry(cfg, acme)].Band = "interactive"
	return cfg, key
}

func TestBandOf(t *testing.T) {
	cfg, key := bandedConfig(t)
	for _, tc := range []struct {
		name   string
		tenant loadgen.Tenant
		want   string
	}{
		{"weights entry's band", loadgen.Tenant{APIKey: "sk-acme"}, "interactive"},
		{"default band", loadgen.Tenant{APIKey: "sk-globex"}, "batch"},
		{"no entry: default band", loadgen.Tenant{APIKey: "sk-new"}, "batch"},
		{"header lowers", loadgen.Tenant{APIKey: "sk-acme", Headers: map[string]string{"X-Priority-Band": "batch"}}, "batch"},
		{"header never raises", loadgen.Tenant{APIKey: "sk-globex", Headers: map[string]string{"x-priority-band": "interactive"}}, "batch"},
		{"unknown band in the header is ignored", loadgen.Tenant{APIKey: "sk-acme", Headers: map[string]string{"x-priority-band": "gold"}}, "interactive"},
		{"not queued: no band", loadgen.Tenant{User: "alice"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bandOf(cfg, key, tc.tenant); got != tc.want {
				t.Errorf("bandOf = %q, want %q", got, tc.want)
			}
		})
	}
	noBands, _ := bandedConfig(t)
	noBands.FairQueuing.Bands, noBands.FairQueuing.DefaultBand = nil, ""
	if got := bandOf(noBands, key, loadgen.Tenant{APIKey: "sk-acme"}); got != "" {
		t.Errorf("without bands bandOf = %q, want empty", got)
	}
}

func TestMoveTenants(t *testing.T) {
	cfg, key := bandedConfig(t)
	load := &Load{Duration: metav1.Duration{Duration: 10 * time.Second}, Model: "m", Tenants: []LoadTenant{
		{Name: "acme", Rate: 30, APIKey: "sk-acme"}, {Name: "globex", Rate: 30, APIKey: "sk-globex"},
		{Name: "newco", Rate: 5, APIKey: "sk-newco"}, {Name: "anon", Rate: 5, User: "alice"},
	}}
	for _, tc := range []struct {
		name  string
		flags []string
		// want maps tenants to their band after the move; err, the error's text.
		want map[string]string
		err  string
	}{
		{"down", []string{"acme=batch"}, map[string]string{"acme": "batch", "globex": "batch"}, ""},
		{"up", []string{"globex=interactive"}, map[string]string{"acme": "interactive", "globex": "interactive"}, ""},
		{"without a weights entry", []string{"newco=interactive"}, map[string]string{"newco": "interactive", "globex": "batch"}, ""},
		{"two at once", []string{"acme=batch", "globex=interactive"}, map[string]string{"acme": "batch", "globex": "interactive"}, ""},
		{"unknown band", []string{"acme=gold"}, nil, `no band "gold"; its bands are interactive, batch`},
		{"unknown tenant", []string{"initech=batch"}, nil, `no tenant "initech"; its tenants are acme, globex, newco, anon`},
		{"not queued", []string{"anon=batch"}, nil, "anon is not queued"},
		{"no =", []string{"acme"}, nil, "give NAME=BAND"},
		{"twice", []string{"acme=batch", "acme=interactive"}, nil, `moves tenant "acme" twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moves, err := parseMoves(tc.flags)
			var moved *config.Config
			if err == nil {
				moved, err = moveTenants(cfg, key, load, moves)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lc := load.LoadgenConfig("http://sim")
			for _, lt := range lc.Tenants {
				if want, ok := tc.want[lt.Name]; ok {
					if got := bandOf(moved, key, lt); got != want {
						t.Errorf("%s: band %q after the move, want %q", lt.Name, got, want)
					}
					if got, was := weightOf(moved, key, lt), weightOf(cfg, key, lt); got != was {
						t.Errorf("%s: weight %d after the move, %d before: a move changes only the band", lt.Name, got, was)
					}
				}
			}
			if got := bandOf(cfg, key, lc.Tenants[0]); got != "interactive" {
				t.Errorf("the original config changed: acme in %q", got)
			}
		})
	}
	noBands, _ := bandedConfig(t)
	noBands.FairQueuing.Bands, noBands.FairQueuing.DefaultBand = nil, ""
	if _, err := moveTenants(noBands, key, load, []bandMove{{"acme", "batch"}}); err == nil || !strings.Contains(err.Error(), "no fairQueuing.priorityBands") {
		t.Errorf("moving without bands: %v, want an error saying the policy has none", err)
	}
}

// TestSimulationOutputByBand checks the per-band sums and shares and the
// table a banded simulation prints, on a made-up result.
func TestSimulationOutputByBand(t *testing.T) {
	cfg, _ := bandedConfig(t)
	load := &Load{Duration: metav1.Duration{Duration: 11 * time.Second}}
	queued := map[string]int{"wait_exceeds_budget": 10}
	res := &SimResult{From: time.Second, To: 11 * time.Second, Tenants: []TenantResult{
		{Name: "acme", Weight: 3, Band: "interactive", Steady: Counts{Offered: 200, Admitted: 200, Refused: map[string]int{}},
			Waits: []time.Duration{time.Millisecond, 2 * time.Millisecond}},
		{Name: "globex", Weight: 1, Band: "batch", Steady: Counts{Offered: 300, Admitted: 60, Refused: queued},
			Waits: []time.Duration{time.Second}},
		{Name: "initech", Weight: 1, Band: "batch", Steady: Counts{Offered: 300, Admitted: 40, Refused: queued},
			Waits: []time.Duration{2 * time.Second}},
	}}
	o := simulationOutput(cfg, load, res)
	if len(o.Bands) != 2 {
		t.Fatalf("bands %+v, want interactive and batch", o.Bands)
	}
	in, batch := o.Bands[0], o.Bands[1]
	if in.Name != "interactive" || in.Default || in.Tenants != 1 || in.AdmittedPerSecond != 20 || in.Share != 200./300 || in.WaitP99Seconds != 0.002 {
		t.Errorf("interactive %+v", in)
	}
	if batch.Name != "batch" || !batch.Default || batch.MinShare != 0.1 || batch.Tenants != 2 || batch.AdmittedPerSecond != 10 ||
		batch.OfferedPerSecond != 60 || batch.RefusedPerSecond != 2 || batch.WaitP99Seconds != 2 {
		t.Errorf("batch %+v", batch)
	}
	// Weighted shares are within the band: globex and initech split batch
	// 1:1, and acme, which got all it asked, competes with no one.
	g := o.Tenants[1]
	if g.Band != "batch" || g.WeightedShare == nil || *g.WeightedShare != 0.5 || g.BandShare == nil || *g.BandShare != 0.6 || o.Tenants[0].WeightedShare != nil {
		t.Errorf("tenants %+v", o.Tenants)
	}
	var out bytes.Buffer
	if err := printSimulation(&out, cfg, load, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"BAND             MIN SHARE  TENANTS  OFFERED/S  ADMITTED/S  SHARE  WAIT P50  WAIT P99  REFUSED/S",
		"interactive      -          1        20.0       20.0        66.7%  2ms       2ms       0.0",
		"batch (default)  10%        2        60.0       10.0        33.3%  2s        2s        2.0",
		"TENANT   BAND         WEIGHT  OFFERED/S  ADMITTED/S  SHARE  BAND SHARE  WEIGHTED SHARE",
		"globex   batch        1       30.0       6.0         20.0%  60.0%       50.0%",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}
