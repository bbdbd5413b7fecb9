package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// bandsPolicy is simPolicyWith's 30/s perModel limit and weights 3:1:1,
// acme in band interactive, globex and initech in the default band batch
// (with minShare batchMin when it is not empty).
func simBandsPolicy(batchMin string) string {
	p := simPolicyWith("    perModel: {requests: 30, period: 1s}")
	bands := "    priorityBands:\n    - {name: interactive}\n    - {name: batch" + batchMin + "}\n    defaultBand: batch\n    weights:\n"
	p = strings.Replace(p, "    weights:\n", bands, 1)
	return strings.Replace(p, "{identity: sk-acme, weight: 3}", "{identity: sk-acme, weight: 3, band: interactive}", 1)
}

// TestSimulateBands checks the two-band targets through the real
// scheduler in process: the high band offered half the capacity gets all of
// it and the flooding low band the rest (within 1%); offered twice the
// capacity, the high band leaves the low band exactly its minShare (and
// nothing without one), and the low band's tenants split theirs by weight.
func TestSimulateBands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		minShare string
		acmeRate float64
		// want is the admitted rate of acme, globex and initech.
		want [3]float64
	}{
		{"high band at half the capacity", "", 15, [3]float64{15, 7.5, 7.5}},
		{"high band at twice the capacity, no minShare", "", 60, [3]float64{30, 0, 0}},
		{"high band at twice the capacity, minShare 0.1", ", minShare: 0.1", 60, [3]float64{27, 1.5, 1.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load := strings.Replace(threeTenants, "{name: acme, rate: 30", "{name: acme, rate: "+fmt.Sprint(tc.acmeRate), 1)
			o, raw := simulateJSON(t, simBandsPolicy(tc.minShare), load)
			t.Logf("%s", raw)
			for i, ten := range o.Tenants {
				if math.Abs(ten.AdmittedPerSecond-tc.want[i]) > 0.01*30 {
					t.Errorf("%s: admitted %.2f/s, want %.2f/s within 1%% of the capacity", ten.Name, ten.AdmittedPerSecond, tc.want[i])
				}
			}
			if len(o.Bands) != 2 || o.Bands[0].Name != "interactive" || o.Bands[1].Name != "batch" || !o.Bands[1].Default ||
				math.Abs(o.Bands[0].AdmittedPerSecond-tc.want[0]) > 0.3 {
				t.Errorf("bands %+v", o.Bands)
			}
			if o.Tenants[0].Band != "interactive" || o.Tenants[1].Band != "batch" {
				t.Errorf("tenants' bands %q %q, want interactive and batch", o.Tenants[0].Band, o.Tenants[1].Band)
			}
		})
	}
}

// TestSimulateMoveTenant checks --move-tenant: globex moved up into acme's
// band takes what acme leaves of the capacity and initech, alone below,
// gets nothing; the table shows both runs side by side.
func TestSimulateMoveTenant(t *testing.T) {
	policy, load := writeFile(t, "p.yaml", simBandsPolicy("")), writeFile(t, "load.yaml",
		strings.Replace(threeTenants, "{name: acme, rate: 30", "{name: acme, rate: 15", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"simulate", "--policy-file", policy, "-f", load, "--move-tenant", "globex=interactive", "-o", "json"}, &out, &errOut); err != nil {
		t.Fatalf("simulate --move-tenant: %v\n%s", err, errOut.String())
	}
	var c SimulationComparison
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Kind != "SimulationComparison" || len(c.Moves) != 1 || c.Moves[0] != (TenantMove{Tenant: "globex", From: "batch", To: "interactive"}) {
		t.Errorf("comparison %+v", c)
	}
	for i, want := range [][2]float64{{15, 15}, {7.5, 15}, {7.5, 0}} {
		before, after := c.Before.Tenants[i], c.After.Tenants[i]
		if math.Abs(before.AdmittedPerSecond-want[0]) > 0.3 || math.Abs(after.AdmittedPerSecond-want[1]) > 0.3 {
			t.Errorf("%s: admitted %.2f/s before, %.2f/s after the move; want %.1f and %.1f", before.Name,
				before.AdmittedPerSecond, after.AdmittedPerSecond, want[0], want[1])
		}
	}
	out.Reset()
	if err := run(ctx, []string{"simulate", "--policy-file", policy, "-f", load, "--move-tenant", "globex=interactive"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, want := range []string{
		"what if globex moves from band batch to band interactive",
		"BAND             ADMITTED/S BEFORE  AFTER  SHARE BEFORE  AFTER",
		"TENANT   BAND BEFORE  AFTER        OFFERED/S  ADMITTED/S BEFORE  AFTER",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q", want)
		}
	}
}
