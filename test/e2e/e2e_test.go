//go:build e2e

// Package e2e runs the demo's scenario headless through the whole stack (a
// local control plane, the operator, a fake upstream and two data-plane
// replicas as real processes) and asserts what a user relies on: weighted
// shares, a weight change that takes effect quickly, no lost request and a
// clean shutdown. Run it with `make test-e2e`; it needs bin/k8s (`make
// envtest`) and builds the binaries itself.
package e2e

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/internal/demo"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Scenario timing: long enough for steady windows on both sides of the
// change, short enough for CI.
const (
	duration = 36 * time.Second
	changeAt = 18 * time.Second
	// tolerance is the largest relative deviation of a share from its
	// weighted share in a steady window.
	tolerance = 0.10
	// changeDeadline is how soon after the kubectl patch the shares must move.
	changeDeadline = 2 * time.Second
	// scenarioBudget bounds one scenario, the build of its four binaries
	// included: a cold build on two busy cores took over four minutes.
	scenarioBudget = 9 * time.Minute
)

// logWriter sends the demo's progress lines to the test log.
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runScenario runs the demo headless with opts, building the binaries, and
// returns its result after writing the report to the test log.
func runScenario(t *testing.T, opts demo.Options) *demo.Result {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(repo, "bin", "k8s", "kube-apiserver")); err != nil {
		t.Fatalf("bin/k8s has no kube-apiserver: run `make envtest` first (make test-e2e does): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioBudget)
	defer cancel()
	out := &logWriter{t: t}
	opts.RepoDir, opts.Build, opts.Out, opts.Live = repo, true, out, testing.Verbose()
	res, err := demo.Run(ctx, opts)
	if err != nil {
		t.Fatalf("the %s scenario did not run: %v", cmp.Or(opts.Scenario, demo.ScenarioShares), err)
	}
	res.WriteReport(out)
	return res
}

func TestDemoScenario(t *testing.T) {
	res := runScenario(t, demo.Options{Duration: duration, ChangeAt: changeAt})

	t.Run("shares within 10% of the weighted shares", func(t *testing.T) {
		before, after := res.SteadyWindows()
		for _, w := range []struct {
			name     string
			window   [2]time.Duration
			weighted []float64
		}{
			{"before the change", before, testutil.WeightedShares(demo.WeightsBefore)},
			{"after the change", after, testutil.WeightedShares(demo.WeightsAfter)},
		} {
			got := res.Shares(w.window[0], w.window[1])
			for i, tenant := range demo.Tenants {
				if e := demo.MaxRelativeError(got[i:i+1], w.weighted[i:i+1]); e > tolerance {
					t.Errorf("%s (%v to %v): %s got %.1f%% of the admitted requests, weighted share %.1f%% (off by %.0f%%, at most %.0f%% allowed)",
						w.name, w.window[0], w.window[1], tenant.Name, 100*got[i], 100*w.weighted[i], 100*e, 100*tolerance)
				}
			}
		}
	})

	t.Run("weight change effective within 2s of the patch", func(t *testing.T) {
		if res.PatchStart < 0 {
			t.Fatal("the Secret was never patched")
		}
		for i, at := range res.ReplicaLoaded {
			if at < 0 {
				t.Errorf("dataplane-%d never reported the new config hash in fairqueue_config_info: does cmd/dataplane follow changes of its --config file?", i+1)
			}
		}
		if res.Moved < 0 {
			t.Fatalf("the shares never moved to the new weights after the patch at %v", res.PatchStart)
		}
		if took := res.Moved - res.PatchStart; took > changeDeadline {
			t.Errorf("the shares moved %v after the kubectl patch, want within %v", took, changeDeadline)
		}
	})

	t.Run("no request lost", func(t *testing.T) {
		if res.Summary == nil {
			t.Fatal("no load summary")
		}
		for _, s := range res.Summary.Tenants {
			if s.DroppedClientSide > 0 || s.Sent != s.Offered {
				t.Errorf("%s: %d offered but %d sent (%d dropped client side): the load generator could not keep up", s.Name, s.Offered, s.Sent, s.DroppedClientSide)
			}
			if s.Completed != s.Sent || len(s.Errors) > 0 {
				t.Errorf("%s: %d sent but %d answered, errors %v: every request must get an answer", s.Name, s.Sent, s.Completed, s.Errors)
			}
			if s.Admitted+s.Refused != s.Completed {
				t.Errorf("%s: %d answered but %d admitted + %d refused; statuses %v", s.Name, s.Completed, s.Admitted, s.Refused, s.Status)
			}
		}
		_, _, admitted, _ := res.Answered()
		if dp := res.DataPlaneAdmitted(); float64(admitted) != dp {
			t.Errorf("the load generator got %d admitted answers but the data planes counted %.0f admissions (rate_limit_decisions_total{dimension=\"model\",outcome=\"allowed\"})", admitted, dp)
		}
	})

	t.Run("clean shutdown", func(t *testing.T) {
		if res.ShutdownErr != nil {
			t.Errorf("a process did not exit cleanly on SIGTERM: %v", res.ShutdownErr)
		}
		if len(res.OpenPorts) > 0 {
			t.Errorf("ports still accept connections after shutdown: %v", res.OpenPorts)
		}
	})
}

// TestTokenScenario runs the demo's token-budget scenario headless: three
// equal-weight tenants on one model token budget, acme sending prompts ten
// times larger, with fairQueuing.cost Tokens. In the steady window each
// tenant's share of the settled tokens must be within 5% of a third, acme's
// share of the requests far below it (its requests are ~7x larger), and the
// tokens the answers reported must equal the tokens the data planes settled.
func TestTokenScenario(t *testing.T) {
	// Long enough that one of acme's ~1050-token requests is under 2% of its tokens.
	const run = 50 * time.Second
	res := runScenario(t, demo.Options{Scenario: demo.ScenarioTokens, Cost: demo.CostTokens, Duration: run})

	tokens := res.TokenShares(demo.Settle, run)
	requests := res.Shares(demo.Settle, run)
	equal := make([]float64, len(res.Tenants))
	for i := range equal {
		equal[i] = 1 / float64(len(equal))
	}
	for i, tenant := range res.Tenants {
		if e := demo.MaxRelativeError(tokens[i:i+1], equal[i:i+1]); e > 0.05 {
			t.Errorf("%s settled %.1f%% of the tokens, want %.1f%% within 5%% (off by %.1f%%)", tenant.Name, 100*tokens[i], 100*equal[i], 100*e)
		}
	}
	for i, tenant := range res.Tenants {
		if tenant.Name == "acme" && requests[i] > equal[i]/2 {
			t.Errorf("acme, sending ten times larger prompts, got %.1f%% of the requests: with cost Tokens it should get far fewer than a third", 100*requests[i])
		}
	}
	var settled float64
	for _, dp := range res.DataPlanes {
		settled += dp.TokensSettled
	}
	var reported uint64
	for _, s := range res.Tokens {
		for _, n := range s {
			reported += n
		}
	}
	if settled != float64(reported) {
		t.Errorf("the answers reported %d tokens but the data planes settled %.0f", reported, settled)
	}
	if res.ShutdownErr != nil {
		t.Errorf("a process did not exit cleanly on SIGTERM: %v", res.ShutdownErr)
	}
}
