package reload

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// fakeTarget records applied configs and can be told to refuse.
type fakeTarget struct {
	applied []string // hashes, in order
	refuse  error
}

func (f *fakeTarget) apply(_ *config.Config, hash string) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.applied = append(f.applied, hash)
	return nil
}

// logSink captures log lines for assertions.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

type step struct {
	data      []byte
	refuse    error // the target refuses this one
	reject    error // deliver through Reject instead of Update
	wantErr   string
	wantHash  string // config in force afterwards
	wantOK    float64
	wantSucc  float64
	wantFail  float64
	wantLog   []string
	wantReady bool
}

func TestReloaderKeepsLastGoodConfig(t *testing.T) {
	v1, v2 := render(t, 1, 2), render(t, 2, 5)
	h1, h2 := config.Hash(v1), config.Hash(v2)
	badWeight := []byte(strings.Replace(string(v2), `"weight": 5`, `"weight": 5000`, 1))
	tests := []struct {
		name  string
		steps []step
	}{
		{"first valid config makes it ready", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true, wantLog: []string{`"msg"="Config loaded"`, h1}},
		}},
		{"not ready while only bad configs arrived", []step{
			{data: []byte(`{"apiVersion":`), wantErr: "no config (not ready)", wantFail: 1},
		}},
		{"new config replaces the old", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: v2, wantHash: h2, wantOK: 1, wantSucc: 2, wantReady: true},
		}},
		{"invalid value is refused with its field, old stays", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: badWeight, wantErr: "fairQueuing.weights[0].weight: must be in [1, 1000], got 5000", wantHash: h1, wantOK: 0, wantSucc: 1, wantFail: 1, wantReady: true,
				wantLog: []string{`"msg"="Config refused"`, `"fields"=["fairQueuing.weights[0].weight"]`, "keeping config " + h1}},
		}},
		{"unparsable bytes are refused, old stays", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: []byte("not json"), wantErr: "decoding DataPlaneConfig", wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true},
		}},
		{"the same bad bytes again count once", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: badWeight, wantErr: "weight", wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true},
			{data: badWeight, wantErr: "weight", wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true},
		}},
		{"a config the target refuses is counted and the old stays", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: v2, refuse: errors.New("hashKeySecret.fingerprint: does not match the mounted key"), wantErr: "fingerprint",
				wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true, wantLog: []string{`"fields"=["hashKeySecret.fingerprint"]`}},
		}},
		{"recovery after a refusal sets successful again", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: []byte("{}"), wantErr: "apiVersion", wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true},
			{data: v2, wantHash: h2, wantOK: 1, wantSucc: 2, wantFail: 1, wantReady: true},
		}},
		{"reverting to the config in force after a refusal is a success", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: badWeight, wantErr: "weight", wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true},
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 2, wantFail: 1, wantReady: true, wantLog: []string{"reverted"}},
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 2, wantFail: 1, wantReady: true},
		}},
		{"unchanged bytes are a no-op", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
		}},
		{"a source without a config is a counted failure", []step{
			{data: v1, wantHash: h1, wantOK: 1, wantSucc: 1, wantReady: true},
			{reject: errors.New(`the ConfigMap has no "config.json" key`), wantHash: h1, wantSucc: 1, wantFail: 1, wantReady: true,
				wantLog: []string{"config.json"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			logs := &logSink{}
			target := &fakeTarget{}
			clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
			var loaded []string
			r, err := New(target.apply, Options{
				Registerer: reg, Clock: clk, Logger: funcr.New(logs.write, funcr.Options{}),
				OnLoaded: func(l Loaded) { loaded = append(loaded, l.Hash) },
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				target.refuse = s.refuse
				var err error
				if s.reject != nil {
					r.Reject("test", s.reject)
				} else {
					err = r.Update("test", s.data)
				}
				switch {
				case s.wantErr == "" && err != nil:
					t.Fatalf("step %d: Update() = %v, want nil", i, err)
				case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
					t.Fatalf("step %d: Update() = %v, want an error containing %q", i, err, s.wantErr)
				}
				if got := r.Hash(); got != s.wantHash {
					t.Errorf("step %d: Hash() = %q, want %q", i, got, s.wantHash)
				}
				if got := r.Ready(); got != s.wantReady {
					t.Errorf("step %d: Ready() = %v, want %v", i, got, s.wantReady)
				}
				if got := testutil.ToFloat64(r.lastOK); got != s.wantOK {
					t.Errorf("step %d: %s = %v, want %v", i, LastReloadSuccessfulName, got, s.wantOK)
				}
				if got := testutil.ToFloat64(r.reloads.WithLabelValues("success")); got != s.wantSucc {
					t.Errorf("step %d: reloads{success} = %v, want %v", i, got, s.wantSucc)
				}
				if got := testutil.ToFloat64(r.reloads.WithLabelValues("failure")); got != s.wantFail {
					t.Errorf("step %d: reloads{failure} = %v, want %v", i, got, s.wantFail)
				}
				for _, want := range s.wantLog {
					if !strings.Contains(logs.all(), want) {
						t.Errorf("step %d: logs lack %q:\n%s", i, want, logs.all())
					}
				}
			}
			// The target saw exactly the successful loads, in order, and so
			// did OnLoaded.
			if strings.Join(target.applied, ",") != strings.Join(loaded, ",") {
				t.Errorf("applied %v but OnLoaded saw %v", target.applied, loaded)
			}
		})
	}
}

func TestReloaderMetricsExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 500_000_000))
	r, err := New((&fakeTarget{}).apply, Options{Registerer: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := render(t, 1, 2), render(t, 2, 3)
	if err := r.Update("test", v1); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if err := r.Update("test", v2); err != nil {
		t.Fatal(err)
	}
	_ = r.Update("test", []byte("bad"))
	want := `
# HELP fairqueue_config_info Always 1, labelled with the hash of the configuration in force; absent before the first valid config.
# TYPE fairqueue_config_info gauge
fairqueue_config_info{hash="` + config.Hash(v2) + `"} 1
# HELP fairqueue_config_last_reload_success_timestamp_seconds Timestamp of the last successful configuration reload, in seconds since the epoch.
# TYPE fairqueue_config_last_reload_success_timestamp_seconds gauge
fairqueue_config_last_reload_success_timestamp_seconds 1.7000000605e+09
# HELP fairqueue_config_last_reload_successful Whether the last configuration reload attempt was successful (1) or refused (0).
# TYPE fairqueue_config_last_reload_successful gauge
fairqueue_config_last_reload_successful 0
# HELP fairqueue_config_reloads_total Configuration reload attempts by result (success or failure).
# TYPE fairqueue_config_reloads_total counter
fairqueue_config_reloads_total{result="failure"} 1
fairqueue_config_reloads_total{result="success"} 2
# HELP fairqueue_config_source_errors_total Failed reads or watches of the config source; each is retried with a backoff capped at one second.
# TYPE fairqueue_config_source_errors_total counter
fairqueue_config_source_errors_total 0
# HELP fairqueue_config_source_up Whether the config source (the ConfigMap watch) currently reads successfully (1) or fails (0); the last good config stays in force either way.
# TYPE fairqueue_config_source_up gauge
fairqueue_config_source_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// Registering twice on one registry is an error, not a panic.
	if _, err := New((&fakeTarget{}).apply, Options{Registerer: reg}); err == nil {
		t.Error("New() registered the same metrics twice without an error")
	}
}

func TestFieldsAtFault(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"joined field errors through wrapping", wrap(errors.Join(errors.New("kind: must be x"), errors.New("fairQueuing.weights[1].weight: bad"))),
			[]string{"kind", "fairQueuing.weights[1].weight"}},
		{"wrapped once with a field prefix", wrap(errors.New("rateLimits: limiter: bad")), []string{"rateLimits"}},
		{"no field", errors.New("decoding DataPlaneConfig: invalid character"), nil},
		{"unknown field from strict decoding", wrap(fmt.Errorf("decoding DataPlaneConfig: %w", errors.Join(errors.New(`json: unknown field "fairQueuing.weight"`)))),
			[]string{"fairQueuing.weight"}},
		{"message without separator", errors.New("boom"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FieldsAtFault(tc.err)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("FieldsAtFault() = %q, want %q", got, tc.want)
			}
		})
	}
}

func wrap(err error) error { return errors.Join(nil, &wrapped{err}) }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "config from x refused, keeping y: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
