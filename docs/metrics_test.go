package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// metricConst matches a metric name constant as the code declares them:
// QueueDepthName = "rate_limit_fair_queue_depth".
var metricConst = regexp.MustCompile(`\b\w+Name\s*=\s*"((?:rate_limit|fairqueue)_[a-z0-9_]+)"`)

// subsystems are the words after each prefix that reference.md's naming rule
// allows; a metric outside them needs the rule, and this list, extended.
var subsystems = map[string][]string{
	"rate_limit_": {"fair_queue_", "decisions_", "deferred_", "tokens_", "store_", "live_replicas", "fleet_"},
	"fairqueue_":  {"config_", "request_body_", "upstream_", "policy_", "backend_"},
}

// definedMetrics returns every metric name constant of the data plane and
// the operator.
func definedMetrics(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, dir := range []string{"dataplane", "controllers", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricConst.FindAllStringSubmatch(string(src), -1) {
				seen[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 30 {
		t.Fatalf("found only %d metric name constants: %v; did the declarations change form?", len(names), names)
	}
	return names
}

var seriesRow = regexp.MustCompile("^\\| `((?:rate_limit|fairqueue)_[a-z0-9_]+)` \\|")

// TestReferenceListsEveryMetric keeps the metrics table of reference.md and
// the code in step, and every name under the naming rule it states.
func TestReferenceListsEveryMetric(t *testing.T) {
	ref := readDoc(t, "reference.md")
	documented := map[string]bool{}
	for _, line := range ref.lines {
		if m := seriesRow.FindStringSubmatch(line); m != nil {
			documented[m[1]] = true
		}
	}
	defined := definedMetrics(t)
	for _, name := range defined {
		if !documented[name] {
			t.Errorf("metric %s is defined in the code but has no row in docs/reference.md's metrics table", name)
		}
		if !followsRule(name) {
			t.Errorf("metric %s breaks the naming rule of docs/reference.md (allowed: %v): rename it or extend the rule", name, subsystems)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("docs/reference.md documents metric %s, which the code does not define", name)
	}
}

func followsRule(name string) bool {
	for prefix, words := range subsystems {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		for _, w := range words {
			if strings.HasPrefix(rest, w) {
				return true
			}
		}
	}
	return false
}
