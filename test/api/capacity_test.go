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

package api_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/config"
)

// saturationYAML returns spec.capacity for backend vllm (backendYAML's)
// with maxInFlight 64 and the given saturation fields in flow style.
func saturationYAML(fields string) string {
	return "capacity: {backends: [{name: vllm, maxInFlight: 64, saturation: {" + fields + "}}]}"
}

// signalsYAML returns n distinct signals in flow style.
func signalsYAML(n int) string {
	entries := make([]string, n)
	for i := range entries {
		entries[i] = fmt.Sprintf("{metric: m%d, max: %d}", i, i)
	}
	return "[" + strings.Join(entries, ", ") + "]"
}

const waiting = "signals: [{metric: 'vllm:num_requests_waiting', max: 4}]"

// TestCapacityValidation checks the rules of spec.capacity on the API
// server and, through expectRejected and expectAccepted, that `dataplane
// --policy` refuses and accepts the same policies with the same field and
// message (SPEC 10).
func TestCapacityValidation(t *testing.T) {
	ns := newNamespace(t)
	rejects := []specCase{
		{name: "capacity without backends", spec: "capacity: {}",
			want: []string{"spec.capacity.backends", "Required value"}},
		{name: "empty backends", spec: "capacity: {backends: []}",
			want: []string{"spec.capacity.backends", "should have at least 1 items"}},
		{name: "backend not in spec.backends", spec: "capacity: {backends: [{name: vllm-b, maxInFlight: 8}]}",
			want: []string{"spec.capacity.backends", "capacity.backends names a backend that is not in spec.backends; each entry must name one of spec.backends"}},
		{name: "backend named twice", spec: "capacity: {backends: [{name: vllm, maxInFlight: 8}, {name: vllm, maxInFlight: 4}]}",
			want: []string{"spec.capacity.backends[1]", "Duplicate value"}},
		{name: "name not a DNS label", spec: "capacity: {backends: [{name: VLLM, maxInFlight: 8}]}",
			want: []string{"spec.capacity.backends[0].name", "should match"}},
		{name: "maxInFlight missing", spec: "capacity: {backends: [{name: vllm}]}",
			want: []string{"spec.capacity.backends[0].maxInFlight", "Required value"}},
		{name: "maxInFlight zero", spec: "capacity: {backends: [{name: vllm, maxInFlight: 0}]}",
			want: []string{"spec.capacity.backends[0].maxInFlight", "should be greater than or equal to 1"}},
		{name: "maxInFlight above 100000", spec: "capacity: {backends: [{name: vllm, maxInFlight: 100001}]}",
			want: []string{"spec.capacity.backends[0].maxInFlight", "should be less than or equal to 100000"}},
		{name: "saturation without signals", spec: saturationYAML("metricsPath: /metrics"),
			want: []string{"spec.capacity.backends[0].saturation.signals", "Required value"}},
		{name: "empty signals", spec: saturationYAML("signals: []"),
			want: []string{"spec.capacity.backends[0].saturation.signals", "should have at least 1 items"}},
		{name: "17 signals", spec: saturationYAML("signals: " + signalsYAML(17)),
			want: []string{"spec.capacity.backends[0].saturation.signals", "must have at most 16 items"}},
		{name: "metric name with a dash", spec: saturationYAML("signals: [{metric: vllm-waiting, max: 1}]"),
			want: []string{"spec.capacity.backends[0].saturation.signals[0].metric", "should match '^[a-zA-Z_:][a-zA-Z0-9_:]*$'"}},
		{name: "metric name starting with a digit", spec: saturationYAML("signals: [{metric: 9lives, max: 1}]"),
			want: []string{"spec.capacity.backends[0].saturation.signals[0].metric", "should match"}},
		{name: "signal without max", spec: saturationYAML("signals: [{metric: m}]"),
			want: []string{"spec.capacity.backends[0].saturation.signals[0].max", "Required value"}},
		{name: "negative max", spec: saturationYAML("signals: [{metric: m, max: -0.5}]"),
			want: []string{"spec.capacity.backends[0].saturation.signals[0].max", "should be greater than or equal to 0"}},
		{name: "max as a string", spec: saturationYAML("signals: [{metric: m, max: '0.9'}]"),
			want: []string{"spec.capacity.backends[0].saturation.signals[0].max", "must be of type number"}},
		{name: "relative metricsPath", spec: saturationYAML("metricsPath: metrics, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.metricsPath", "metricsPath must be an absolute path such as /metrics, without spaces, query (?...) or fragment (#...)"}},
		{name: "metricsPath with a query", spec: saturationYAML("metricsPath: '/metrics?name[]=x', " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.metricsPath", "metricsPath must be an absolute path"}},
		{name: "metricsURL not http", spec: saturationYAML("metricsURL: 'ftp://vllm:8000/metrics', " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.metricsURL", "metricsURL must be an absolute http or https URL, such as http://vllm-a.models.svc:8000/metrics"}},
		{name: "metricsURL relative", spec: saturationYAML("metricsURL: /metrics, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.metricsURL", "metricsURL must be an absolute http or https URL"}},
		{name: "metricsURL with credentials", spec: saturationYAML("metricsURL: 'http://u:hunter2@vllm:8000/metrics', " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.metricsURL", "metricsURL must not hold credentials (user:password@)"}},
		{name: "metricsPath and metricsURL", spec: saturationYAML("metricsPath: /metrics, metricsURL: 'http://vllm:9090/metrics', " + waiting),
			want: []string{"spec.capacity.backends[0].saturation", "set metricsPath or metricsURL, not both"}},
		{name: "interval below 50ms", spec: saturationYAML("interval: 49ms, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.interval", "interval must be a duration from 50ms to 1m, such as 250ms"}},
		{name: "interval above 1m", spec: saturationYAML("interval: 61s, staleAfter: 5m, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.interval", "interval must be a duration from 50ms to 1m"}},
		{name: "interval not a duration", spec: saturationYAML("interval: '250', " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.interval", ": must be a duration such as 5s"}},
		{name: "interval at the default staleAfter", spec: saturationYAML("interval: 1s, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.staleAfter", "staleAfter must be longer than interval (staleAfter defaults to 1s): metrics go stale only when polls fail; set staleAfter to about 4 times interval"}},
		{name: "staleAfter below interval", spec: saturationYAML("interval: 500ms, staleAfter: 400ms, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.staleAfter", "staleAfter must be longer than interval"}},
		{name: "staleAfter zero", spec: saturationYAML("staleAfter: 0s, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.staleAfter", "staleAfter must be a positive duration of at most 10m, such as 1s", "staleAfter must be longer than interval"}},
		{name: "staleAfter above 10m", spec: saturationYAML("staleAfter: 11m, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.staleAfter", "staleAfter must be a positive duration of at most 10m"}},
		{name: "timeout zero", spec: saturationYAML("timeout: 0s, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.timeout", "timeout must be a positive duration of at most 10s, such as 200ms"}},
		{name: "timeout above 10s", spec: saturationYAML("timeout: 10001ms, " + waiting),
			want: []string{"spec.capacity.backends[0].saturation.timeout", "timeout must be a positive duration of at most 10s"}},
	}
	expectRejected(t, ns, "capacity", rejects)

	accepts := []specCase{
		{name: "maxInFlight only", spec: "capacity: {backends: [{name: vllm, maxInFlight: 64}]}"},
		{name: "the SPEC's example", spec: saturationYAML("metricsPath: /metrics, interval: 250ms, " + waiting)},
		{name: "vLLM's two signals, a fraction and an integer", spec: saturationYAML("signals: [{metric: 'vllm:num_requests_waiting', max: 0}, {metric: 'vllm:kv_cache_usage_perc', max: 0.9}]")},
		{name: "metrics at another address", spec: saturationYAML("metricsURL: 'https://vllm-metrics.models.svc:9090/metrics', " + waiting)},
		{name: "a metricsPath of another server", spec: saturationYAML("metricsPath: /stats/prometheus, signals: [{metric: sglang:num_queue_reqs, max: 2}]")},
		{name: "smallest interval, timeout above it", spec: saturationYAML("interval: 50ms, staleAfter: 51ms, timeout: 10s, " + waiting)},
		{name: "largest interval and staleAfter", spec: saturationYAML("interval: 1m, staleAfter: 10m, " + waiting)},
		{name: "largest counts", spec: "capacity: {backends: [{name: vllm, maxInFlight: 100000, saturation: {signals: " + signalsYAML(16) + "}}]}"},
		{name: "largest max", spec: saturationYAML("signals: [{metric: tgi_queue_size, max: 1000000000000}]")},
	}
	expectAccepted(t, ns, "capacity", accepts)

	// The metrics location may hold a token: no refusal echoes it.
	t.Run("refusals do not echo the metrics location", func(t *testing.T) {
		for i, fields := range []string{
			"metricsURL: 'http://u:hunter2@vllm:8000/metrics', " + waiting,
			"metricsURL: 'ftp://vllm:8000/metrics?token=hunter2', " + waiting,
			"metricsPath: '/metrics?token=hunter2', " + waiting,
		} {
			obj := policyFromSpec(t, ns, fmt.Sprintf("capacity-echo-%d", i), saturationYAML(fields)+"\n"+backendYAML)
			err := env.Client.Create(testContext(t), obj)
			if err == nil || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("creating a policy with %s = %v, want a refusal that does not quote hunter2", fields, err)
			}
		}
	})

	t.Run("defaults", func(t *testing.T) {
		obj := policyFromSpec(t, ns, "capacity-defaults", saturationYAML("signals: [{metric: 'vllm:kv_cache_usage_perc', max: 0.9}]")+"\n"+backendYAML)
		if err := env.Client.Create(testContext(t), obj); err != nil {
			t.Fatal(err)
		}
		var got fqv1alpha1.FairQueuePolicy
		if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(obj), &got); err != nil {
			t.Fatal(err)
		}
		want := &fqv1alpha1.Capacity{Backends: []fqv1alpha1.BackendCapacity{{Name: "vllm", MaxInFlight: 64, Saturation: &fqv1alpha1.Saturation{
			Interval: "250ms", StaleAfter: "1s", Timeout: "200ms",
			Signals: []fqv1alpha1.SaturationSignal{{Metric: "vllm:kv_cache_usage_perc", Max: 0.9}},
		}}}}
		if !reflect.DeepEqual(got.Spec.Capacity, want) {
			t.Errorf("defaulted capacity =\n%+v\nwant\n%+v", got.Spec.Capacity.Backends[0].Saturation, want.Backends[0].Saturation)
		}
	})
}

// TestMetricsPathDefaultIsDocumented: metricsPath has no marker default
// (it would collide with metricsURL), so its default is stated in the
// description, and must be the one the renderer applies.
func TestMetricsPathDefaultIsDocumented(t *testing.T) {
	s := loadCRDSchema(t).Properties["spec"].Properties["capacity"].Properties["backends"].Items.Schema.
		Properties["saturation"].Properties["metricsPath"]
	if want := fmt.Sprintf("the path is %q", config.DefaultMetricsPath); !strings.Contains(s.Description, want) {
		t.Errorf("metricsPath's description does not say %s:\n%s", want, s.Description)
	}
}

// TestCapacityExplainShowsDefaults: kubectl explain teaches every default
// of saturation, the one without a marker included.
func TestCapacityExplainShowsDefaults(t *testing.T) {
	bin := kubectlPath(t)
	explain := kubectl(testContext(t), t, bin, "explain", "fqp.spec.capacity.backends.saturation")
	for _, s := range []string{`Defaults to "250ms".`, `Defaults to "1s".`, `Defaults to "200ms".`, `the path is "/metrics"`, "metricsURL", "signals"} {
		if !strings.Contains(explain, s) {
			t.Errorf("kubectl explain fqp.spec.capacity.backends.saturation lacks %q:\n%s", s, explain)
		}
	}
}
