package docs

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// runbookBase is where a runbook_url points: operations.md on the default
// branch, so an alert links to a page an on-call engineer can open.
const runbookBase = "https://github.com/fairqueue/fairqueue/blob/main/docs/"

// TestEveryAlertHasARunbook fails when an alert of the PrometheusRule lacks a
// runbook_url, or points at a file or heading the docs do not have.
func TestEveryAlertHasARunbook(t *testing.T) {
	raw, err := os.ReadFile(root + "/config/prometheus/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annotations["runbook_url"]
			page, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
				continue
			}
			file, anchor, _ := strings.Cut(page, "#")
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url anchor is #%s, want #%s (a heading named for the alert)", r.Alert, anchor, strings.ToLower(r.Alert))
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("alert %s: runbook_url names docs/%s, which does not exist", r.Alert, file)
				continue
			}
			if !readDoc(t, file).anchors[anchor] {
				t.Errorf("alert %s: docs/%s has no heading with anchor #%s", r.Alert, file, anchor)
			}
		}
	}
	if alerts < 5 {
		t.Fatalf("found %d alerts in the PrometheusRule; did its layout change?", alerts)
	}
}
