// Package monitoring tests the alerting and dashboard kit in config/prometheus
// and config/grafana, and the PromQL cheat sheet of docs/operations.md: the rules pass
// their promtool unit tests, and every PromQL expression parses with
// Prometheus' own parser and names only metrics that exist.
package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/server"
)

const (
	promDir       = "../../config/prometheus"
	ruleFile      = promDir + "/prometheusrule.yaml"
	ruleTestFile  = promDir + "/rules_test.yaml"
	dashboardsDir = "../../config/grafana"
	cheatSheetDoc = "../../docs/operations.md"
)

// externalMetrics are series the kit uses that the data plane does not
// export, with where they come from.
var externalMetrics = map[string]string{
	"controller_runtime_reconcile_errors_total": "the operator (controller-runtime)",
	controllers.PolicyReadyMetricName:           "the operator: controllers.NewPolicyCollector",
	"rate_limit_store_errors_total":             "the data plane's shared limiter store (Redis), by kind",
	"up":                                        "Prometheus itself",
}

// prometheusRule is the part of a PrometheusRule the tests read.
type prometheusRule struct {
	Kind string `json:"kind"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Record string `json:"record"`
				Alert  string `json:"alert"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func readRule(t *testing.T) prometheusRule {
	t.Helper()
	data, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatalf("%s: %v", ruleFile, err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("%s is not a PrometheusRule with rule groups", ruleFile)
	}
	return pr
}

// promtool returns the promtool binary: $PROMTOOL, or bin/promtool as built by
// `make promtool`. Outside CI a missing promtool skips the test; in CI it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = "../../bin/promtool"
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool not found at %s (%v): run `make promtool`, or set PROMTOOL", p, err)
		}
		t.Skipf("promtool not found at %s: run `make promtool` (or `make test`, which builds it)", p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestPrometheusRuleUnitTests runs `promtool check rules` on the plain rule
// file a Prometheus without the prometheus-operator loads, `promtool test
// rules` with the tests in rules_test.yaml, and `promtool check config` on
// the standalone example configuration (which loads rules.yaml), in
// config/prometheus as a user would. hack/promrules' test keeps rules.yaml
// equal to the PrometheusRule's spec.
func TestPrometheusRuleUnitTests(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "rules.yaml"},
		{"test", "rules", "rules_test.yaml"},
		{"check", "config", "scrape-standalone.yaml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = promDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestEveryAlertHasAUnitTest keeps rules_test.yaml covering every alert.
func TestEveryAlertHasAUnitTest(t *testing.T) {
	pr := readRule(t)
	tests, err := os.ReadFile(ruleTestFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no test in %s", r.Alert, ruleTestFile)
			}
		}
	}
}

// dataPlaneMetrics returns the names of every series the data plane exports,
// registered exactly as cmd/dataplane registers them. Names come from the
// registered collectors' descriptors, so a vector that has no child yet (a
// per-backend counter before any backend failed) still counts.
func dataPlaneMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := server.New(server.Options{HashKey: []byte("0123456789abcdef0123456789abcdef"), Registerer: reg, Gatherer: reg.Registry})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reload.New(srv.Load, reload.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	add := func(n string, histogram bool) {
		names[n] = true
		if histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	for _, f := range families {
		add(f.GetName(), f.GetType().String() == "HISTOGRAM")
	}
	for _, c := range reg.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fqNameRE.FindStringSubmatch(d.String()); m != nil && !names[m[1]] {
				// Not gathered yet, so its type is unknown: allow the
				// histogram suffixes too; a misspelt name still fails.
				add(m[1], true)
			}
		}
	}
	if !names["rate_limit_fair_queue_depth"] || !names[reload.ReloadsTotalName] || !names[reload.ConfigInfoName] {
		t.Fatalf("the data plane registry lacks its own metrics: %v", names)
	}
	return names
}

// fqNameRE takes the metric name out of a prometheus.Desc's String().
var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// recordingRegisterer is a registry that remembers what was registered.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// expr is one PromQL expression and where it was found.
type expr struct{ where, query string }

func ruleExprs(t *testing.T) (exprs []expr, records map[string]bool) {
	pr := readRule(t)
	records = map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			exprs = append(exprs, expr{ruleFile + " " + name, r.Expr})
			if r.Record != "" {
				records[r.Record] = true
			}
		}
	}
	return exprs, records
}

// dashboardExprs returns every "expr" of every dashboard JSON and the names
// of the dashboard variables, which expressions may reference as $name.
func dashboardExprs(t *testing.T) (exprs []expr, vars []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboardsDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s is not JSON: %v", f, err)
		}
		var walk func(path string, v any)
		walk = func(path string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, c := range v {
					if s, ok := c.(string); ok && k == "expr" {
						exprs = append(exprs, expr{f + " " + path, s})
					}
					walk(path+"."+k, c)
				}
				if q, ok := v["query"].(map[string]any); ok && strings.HasSuffix(path, "list[]") {
					if s, ok := q["query"].(string); ok {
						exprs = append(exprs, expr{f + " variable", s})
					}
				}
				if name, ok := v["name"].(string); ok && strings.HasSuffix(path, "list[]") {
					vars = append(vars, name)
				}
			case []any:
				for _, c := range v {
					walk(path+"[]", c)
				}
			}
		}
		walk("", doc)
	}
	return exprs, vars
}

var cheatSheetRow = regexp.MustCompile("`([^`]+)`")

// cheatSheetExprs returns the PromQL of the cheat sheet table in docs/operations.md.
func cheatSheetExprs(t *testing.T) []expr {
	t.Helper()
	data, err := os.ReadFile(cheatSheetDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### PromQL cheat sheet")
	if !ok {
		t.Fatal(cheatSheetDoc + " has no PromQL cheat sheet section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	section, _, _ = strings.Cut(section, "\n### ")
	var out []expr
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 2 {
			continue
		}
		for _, m := range cheatSheetRow.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			out = append(out, expr{cheatSheetDoc + ": " + strings.TrimPrefix(cells[0], "| "), strings.ReplaceAll(m[1], `\|`, "|")})
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d expressions in the cheat sheet of %s; the table format changed?", len(out), cheatSheetDoc)
	}
	return out
}

// grafanaVar matches Grafana template variables and built-ins in a query.
var grafanaVar = regexp.MustCompile(`\$\{?[A-Za-z_]+\}?`)

// TestPromQLNamesRealMetrics parses every expression of the rules, the
// dashboards and the cheat sheet of docs/operations.md with Prometheus' parser and checks
// that every metric it selects is exported by the data plane, recorded by a
// rule, or one of the few listed external series.
func TestPromQLNamesRealMetrics(t *testing.T) {
	known := dataPlaneMetrics(t)
	rules, records := ruleExprs(t)
	dash, _ := dashboardExprs(t)
	all := append(append(rules, dash...), cheatSheetExprs(t)...)
	used := map[string]bool{}
	for _, e := range all {
		q := grafanaVar.ReplaceAllStringFunc(e.query, func(v string) string {
			switch strings.Trim(v, "${}") {
			case "__rate_interval", "__interval", "__range":
				return "5m"
			}
			return "x"
		})
		// label_values(metric, label) is Grafana's, not PromQL.
		if m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		node, err := parser.NewParser(parser.Options{}).ParseExpr(q)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", e.where, e.query, err)
			continue
		}
		parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			used[name] = true
			if !known[name] && !records[name] && externalMetrics[name] == "" {
				t.Errorf("%s: %q selects %q, which the data plane does not export (nor a recording rule, nor a listed external series)",
					e.where, e.query, name)
			}
			return nil
		})
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d expressions use %d metrics: %v", len(all), len(names), names)
}
