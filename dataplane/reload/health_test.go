package reload

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestSourceHealthIsLoggedRateLimitedAndExported(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
	logs := &logSink{}
	reg := prometheus.NewRegistry()
	r, err := New((&fakeTarget{}).apply, Options{Registerer: reg, Clock: clk, Logger: funcr.New(logs.write, funcr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	up := func() float64 { return promtestutil.ToFloat64(r.health.up) }
	if up() != 1 || r.SourceHealth() != nil {
		t.Fatalf("before any failure: up %v, health %v; want 1 and nil", up(), r.SourceHealth())
	}
	refused := errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	// A 100 s outage retried every second: the first failure and then one
	// line per SourceLogInterval, not one per retry.
	for range 100 {
		r.SourceError("ConfigMap ns/cm", refused)
		clk.SetTime(clk.Now().Add(time.Second))
	}
	if got := strings.Count(logs.all(), "Config source"); got != 4 {
		t.Errorf("100 failures over 100 s logged %d lines, want 4 (at 0, 30, 60 and 90 s):\n%s", got, logs.all())
	}
	if !strings.Contains(logs.all(), "connection refused") || !strings.Contains(logs.all(), `"for"="1m30s"`) {
		t.Errorf("the failure log lacks the error or the outage length:\n%s", logs.all())
	}
	if up() != 0 || promtestutil.ToFloat64(r.health.errors) != 100 {
		t.Errorf("during the outage up = %v, errors = %v; want 0 and 100", up(), promtestutil.ToFloat64(r.health.errors))
	}
	if err := r.SourceHealth(); err == nil || !errors.Is(err, refused) || !strings.Contains(err.Error(), "failing for 1m40s") {
		t.Errorf("SourceHealth() = %v, want the last error and the outage length", err)
	}

	r.SourceOK("ConfigMap ns/cm")
	r.SourceOK("ConfigMap ns/cm") // a healthy source says so on every watch: logged once
	if got := strings.Count(logs.all(), "Config source reachable again"); got != 1 || up() != 1 || r.SourceHealth() != nil {
		t.Errorf("after recovery: %d recovery lines, up %v, health %v; want 1, 1, nil", got, up(), r.SourceHealth())
	}
}

func TestWatchBackoffIsCapped(t *testing.T) {
	b := watchBackoff
	var longest time.Duration
	for range 1000 {
		longest = max(longest, b.Step())
	}
	if longest > MaxWatchBackoff || longest < MaxWatchBackoff/2 {
		t.Errorf("longest wait between watch attempts = %s, want at most MaxWatchBackoff (%s) and near it", longest, MaxWatchBackoff)
	}
}

func TestConfigMapSourceRecoversFromAnOutage(t *testing.T) {
	v1 := render(t, 1, 1)
	client := fake.NewClientset(configMap("llm-dataplane", map[string]string{config.ConfigMapKey: string(v1)}))
	down, failures := failLists(client, "configmaps")
	target := &fakeTarget{}
	logs := &logSink{}
	rl, err := New(target.apply, Options{Logger: funcr.New(logs.write, funcr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	src := NewConfigMapSource(client, "team-a", "llm-dataplane", testLogger(t))
	// Real time drives client-go's retries; a fast schedule keeps the test short.
	src.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 5 * time.Millisecond}
	runSourceInto(t, src, rl)

	testutil.Eventually(t, "20 failed lists", func() bool { return failures.Load() >= 20 })
	if err := rl.SourceHealth(); err == nil || rl.Ready() {
		t.Fatalf("during the outage: health %v, ready %v; want an error and not ready", err, rl.Ready())
	}
	down.Store(false)
	testutil.Eventually(t, "the config after the outage", rl.Ready)
	if err := rl.SourceHealth(); err != nil {
		t.Errorf("after the outage SourceHealth() = %v, want nil", err)
	}
	for _, want := range []string{"Config source failing", "connection refused", "Config source reachable again"} {
		if !strings.Contains(logs.all(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.all())
		}
	}
	if n := strings.Count(logs.all(), "Config source failing"); n != 1 {
		t.Errorf("%d failures logged %d lines within the log interval, want 1", failures.Load(), n)
	}
}
