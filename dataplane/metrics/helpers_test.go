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
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// register creates collectors with create on a new registry and checks that
// creating them a second time there fails, as they must be once per registry.
func register[T any](t *testing.T, create func(prometheus.Registerer) (T, error)) (T, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := create(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create(reg); err == nil || !strings.Contains(err.Error(), "once per registry") {
		t.Fatalf("created twice on one registry: err = %v, want one saying once per registry", err)
	}
	return c, reg
}

// series returns the series of the metric family name in reg, failing the
// test when reg cannot be gathered.
func series(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	var out []*dto.Metric
	eachFamily(t, reg, func(mf *dto.MetricFamily) {
		if mf.GetName() == name {
			out = append(out, mf.GetMetric()...)
		}
	})
	return out
}

// eachLabel calls f with every label of every series in reg, for the checks
// that no identity reaches a label.
func eachLabel(t *testing.T, reg prometheus.Gatherer, f func(family string, l *dto.LabelPair)) {
	t.Helper()
	eachFamily(t, reg, func(mf *dto.MetricFamily) {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				f(mf.GetName(), l)
			}
		}
	})
}

// eachFamily calls f with every metric family gathered from reg.
func eachFamily(t *testing.T, reg prometheus.Gatherer, f func(*dto.MetricFamily)) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		f(mf)
	}
}
