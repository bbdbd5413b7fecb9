package demo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/gobuild"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestStandaloneScenarioShares runs the standalone scenario (`make
// demo-standalone`: one data plane on --policy files, the fake upstream, the
// load generator, a weight change by rewriting the Secret's file) in a short
// run, and checks that the report it prints shows each tenant near its
// weighted share before and after the change.
func TestStandaloneScenarioShares(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the data plane for 16s")
	}
	res, report := runStandalone(t, Options{Duration: 16 * time.Second, ChangeAt: 8 * time.Second})

	// The shares printed for each steady window, against the weighted ones.
	const tolerance = 0.15
	before, after := res.SteadyWindows()
	for _, w := range []struct {
		window   [2]time.Duration
		weighted []float64
	}{{before, testutil.WeightedShares(WeightsBefore)}, {after, testutil.WeightedShares(WeightsAfter)}} {
		got := res.Shares(w.window[0], w.window[1])
		for i, tenant := range Tenants {
			printed := fmt.Sprintf("%s (weighted %4.1f%%)", percent(got[i]), 100*w.weighted[i])
			if !strings.Contains(report.String(), printed) {
				t.Errorf("the report does not print %s's share %q", tenant.Name, printed)
			}
			if e := MaxRelativeError(got[i:i+1], w.weighted[i:i+1]); e > tolerance {
				t.Errorf("%s-%s: %s got %.1f%%, weighted %.1f%% (off by %.0f%%, tolerance %.0f%%)",
					w.window[0], w.window[1], tenant.Name, 100*got[i], 100*w.weighted[i], 100*e, 100*tolerance)
			}
		}
	}
	if res.ReplicaLoaded[0] < 0 {
		t.Error("the data plane never loaded the rewritten Secret")
	}
	sent, _, _, lost := res.Answered()
	if sent == 0 || lost > 0 {
		t.Errorf("%d requests sent, %d without an answer; want some and none", sent, lost)
	}
}

// runStandalone builds the data plane and the fake upstream into a
// temporary directory and runs the standalone scenario o describes,
// checking that it ran and shut down cleanly; it returns the result and
// its report.
func runStandalone(t *testing.T, o Options) (*Result, *bytes.Buffer) {
	t.Helper()
	root, err := gobuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	o.RepoDir, o.BinDir, o.Build, o.Standalone, o.Out = root, t.TempDir(), true, true, &out
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("standalone run: %v\n%s", err, out.String())
	}
	if res.ShutdownErr != nil || len(res.OpenPorts) > 0 {
		t.Errorf("shutdown: %v, ports still open %v", res.ShutdownErr, res.OpenPorts)
	}
	var report bytes.Buffer
	res.WriteReport(&report)
	t.Logf("report:\n%s", report.String())
	return res, &report
}
