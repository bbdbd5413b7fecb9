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

package demo

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// TestRunShowsFleetSharesAndTheOutage runs a short demo on the embedded
// Redis: before the outage the fleet shares are the weighted ones at the
// limit, during it the closed store answers 503, and after it admissions
// resume.
func TestFleetShowsFleetSharesAndTheOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 9s of real time")
	}
	var out strings.Builder
	res, err := Run(context.Background(), Options{Scenario: ScenarioFleet,
		Duration: 9 * time.Second, PerModel: 90, OutageAt: 5 * time.Second, Outage: 2 * time.Second,
		FailureMode: redisstore.FailClosed, RedisServer: "-", Out: &out,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	shares, total := res.FleetShares(2, 5)
	want := testutil.WeightedShares(FleetWeights)
	for i, s := range shares {
		if math.Abs(s-want[i]) > 0.05*want[i] {
			t.Errorf("before the outage tenant %s had fleet share %.3f, want within 5%% of %.1f\n%s", FleetTenants[i].Name, s, want[i], out.String())
		}
	}
	if math.Abs(total-90) > 0.03*90 {
		t.Errorf("before the outage the fleet admitted %.1f/s, want within 3%% of 90/s", total)
	}
	if res.OutageStart < 0 || res.OutageEnd < 0 {
		t.Fatalf("the outage did not happen: start %v end %v", res.OutageStart, res.OutageEnd)
	}
	u := 0
	for _, v := range res.Unavailable {
		u += v
	}
	if u == 0 {
		t.Error("no 503 while Redis was down with failure mode Closed")
	}
	if _, after := res.FleetShares(len(res.Unavailable)-1, len(res.Unavailable)); after == 0 {
		t.Errorf("nothing admitted in the last second, after Redis came back\n%s", out.String())
	}
	var report strings.Builder
	res.WriteReport(&report)
	if !strings.Contains(report.String(), "Redis down from") {
		t.Errorf("the report does not mention the outage:\n%s", report.String())
	}
	if err := res.Chart().Validate(); err != nil {
		t.Errorf("chart: %v", err)
	}
}
