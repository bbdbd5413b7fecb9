package main

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestRulesFileIsGeneratedFromThePrometheusRule keeps config/prometheus/rules.yaml
// equal to what `make manifests` writes from the PrometheusRule, byte for
// byte, and equal in content to the PrometheusRule's spec.
func TestRulesFileIsGeneratedFromThePrometheusRule(t *testing.T) {
	src, err := os.ReadFile("../../" + source)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../" + target)
	if err != nil {
		t.Fatalf("%v: run `make manifests` to generate it from %s", err, source)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `make manifests` (or `go run ./hack/promrules`) and commit it", target)
	}
	var rule struct {
		Spec any `json:"spec"`
	}
	var file any
	if err := yaml.Unmarshal(src, &rule); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(got, &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rule.Spec, file) {
		t.Fatalf("%s differs in content from the spec of %s", target, source)
	}
}

func TestGenerateRefusesWhatIsNotARuleFile(t *testing.T) {
	for name, in := range map[string]string{
		"not YAML":         "kind: [",
		"another kind":     "kind: ServiceMonitor\nspec:\n  groups: []\n",
		"no groups":        "kind: PrometheusRule\nspec: {}\n",
		"extra spec field": "kind: PrometheusRule\nspec:\n  groups: []\n  other: 1\n",
		"two documents":    "kind: PrometheusRule\nspec:\n  groups: []\n---\nkind: PrometheusRule\n",
	} {
		if out, err := Generate([]byte(in)); err == nil {
			t.Errorf("%s: Generate(%q) = %q, want an error", name, in, out)
		}
	}
}
