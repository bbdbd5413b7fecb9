package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// standaloneReplicas are the instance labels of two data planes scraped by a
// plain Prometheus job without Kubernetes: no namespace, no pod label.
var standaloneReplicas = []string{"127.0.0.1:9090", "127.0.0.1:9190"}

// dashboardVariable is the part of a Grafana template variable the test reads.
type dashboardVariable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
	// Query is an object with the PromQL for a query variable, and a
	// string (the data source type) for a datasource variable.
	Query json.RawMessage `json:"query"`
}

// promQL returns the query of a query variable.
func (v dashboardVariable) promQL(t *testing.T) string {
	t.Helper()
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		t.Fatalf("variable %s: query: %v", v.Name, err)
	}
	return q.Query
}

// dashboardTarget is one query of a panel.
type dashboardTarget struct {
	panel, expr, legend string
}

func readDashboard(t *testing.T, file string) (vars []dashboardVariable, targets []dashboardTarget) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Templating struct {
			List []dashboardVariable `json:"list"`
		} `json:"templating"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	type panel struct {
		Title   string            `json:"title"`
		Panels  []json.RawMessage `json:"panels"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
			Format       string `json:"format"`
		} `json:"targets"`
	}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, tg := range p.Targets {
				legend := tg.LegendFormat
				if tg.Format == "table" {
					legend = "" // a table shows the labels as columns
				}
				targets = append(targets, dashboardTarget{p.Title, tg.Expr, legend})
			}
			walk(p.Panels)
		}
	}
	walk(doc.Panels)
	return doc.Templating.List, targets
}

// standaloneSeries returns promtool input series: for every metric the
// queries select, one series per standalone replica labelled as a plain
// scrape labels it (job, instance), with the label values the queries filter
// on and the tenant, reason, dimension, backend and signal labels the data
// plane exports.
func standaloneSeries(t *testing.T, queries []string) []promtoolSeries {
	t.Helper()
	metrics := map[string]map[string]string{}
	for _, q := range queries {
		node, err := parser.NewParser(parser.Options{}).ParseExpr(q)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			if metrics[vs.Name] == nil {
				metrics[vs.Name] = map[string]string{}
			}
			for _, m := range vs.LabelMatchers {
				if m.Name != "__name__" && m.Type.String() == "=" {
					metrics[vs.Name][m.Name] = m.Value
				}
			}
			return nil
		})
	}
	var out []promtoolSeries
	for name, fixed := range metrics {
		labels := map[string]string{"job": "fairqueue-dataplane", "tenant_dimension": "user", "tenant": "aaaaaaaaaaaa",
			"reason": "queue_full", "dimension": "user", "outcome": "allowed", "limit_type": "user_tokens", "hash": "0123abcd",
			"backend": "vllm-a", "signal": "vllm:num_requests_waiting", "kind": "timeout"}
		for k, v := range fixed {
			labels[k] = v
		}
		les := []string{""}
		if strings.HasSuffix(name, "_bucket") {
			les = []string{"1", "+Inf"}
		}
		for _, inst := range standaloneReplicas {
			labels["instance"] = inst
			for i, le := range les {
				if le != "" {
					labels["le"] = le
				}
				var pairs []string
				for k, v := range labels {
					pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
				}
				sort.Strings(pairs)
				out = append(out, promtoolSeries{
					Series: name + "{" + strings.Join(pairs, ",") + "}",
					Values: fmt.Sprintf("0+%dx80", 10*(i+1)),
				})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out
}

// The parts of a promtool rule file and rule test file the test writes.
type (
	promtoolSeries struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	promtoolSample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	promtoolExprTest struct {
		Expr       string           `json:"expr"`
		EvalTime   string           `json:"eval_time"`
		ExpSamples []promtoolSample `json:"exp_samples"`
	}
	promtoolRule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
)

// TestDashboardServesStandaloneScrapes evaluates every panel query of the
// dashboards with promtool (Prometheus' own engine) on series scraped as a
// standalone data plane is (job and instance labels, no namespace, no pod),
// with every variable at its All value: every query returns data, every
// panel drawn per replica draws one line per replica, and the replica
// variable offers every replica. Each query becomes a recording rule, and a
// promql_expr_test counts its series.
func TestDashboardServesStandaloneScrapes(t *testing.T) {
	bin := promtool(t)
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboardsDir, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			vars, targets := readDashboard(t, file)
			values := map[string]string{"__rate_interval": "1m", "__interval": "15s", "__range": "10m"}
			for _, v := range vars {
				if v.Type != "query" {
					continue
				}
				// Without an All value of .*, Grafana's All is the list of the
				// label's values: none for a label a standalone scrape lacks.
				if !v.IncludeAll || v.AllValue != ".*" {
					t.Errorf("variable %s: includeAll %v, allValue %q; want an All of \".*\", which also matches series without the label",
						v.Name, v.IncludeAll, v.AllValue)
				}
				values[v.Name] = ".*"
			}
			interpolate := func(q string) string {
				return grafanaVar.ReplaceAllStringFunc(q, func(s string) string {
					if v, ok := values[strings.Trim(s, "${}")]; ok {
						return v
					}
					t.Errorf("%q uses %s, which is no variable of the dashboard", q, s)
					return s
				})
			}
			var rules []promtoolRule
			var tests []promtoolExprTest
			var queries []string
			var names strings.Builder // which panel each recorded query is
			expect := func(expr string, n float64) {
				tests = append(tests, promtoolExprTest{Expr: expr, EvalTime: "15m",
					ExpSamples: []promtoolSample{{Labels: "{}", Value: n}}})
			}
			for i, tg := range targets {
				q := interpolate(tg.expr)
				queries = append(queries, q)
				rec := fmt.Sprintf("dashboard_query_%d", i)
				rules = append(rules, promtoolRule{Record: rec, Expr: q})
				fmt.Fprintf(&names, "%s: panel %q: %s\n", rec, tg.panel, q)
				// "count(q) > bool 0" is 1 when q returns data and nothing
				// when it returns none: promtool names the query that failed.
				expect(fmt.Sprintf("count(%s) > bool 0", rec), 1)
				if strings.Contains(tg.legend, "{{pod}}") || strings.Contains(tg.legend, "{{instance}}") {
					if !strings.Contains(tg.legend, "{{instance}}") {
						t.Errorf("panel %q is drawn per replica but its legend %q lacks {{instance}}, the only name a standalone replica has", tg.panel, tg.legend)
					}
					// One line per replica, each with its own instance.
					expect(fmt.Sprintf("count(%s)", rec), float64(len(standaloneReplicas)))
					expect(fmt.Sprintf("count(count by (instance) (%s))", rec), float64(len(standaloneReplicas)))
				}
			}
			labelValues := regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)
			for i, v := range vars {
				if v.Type != "query" {
					continue
				}
				m := labelValues.FindStringSubmatch(interpolate(v.promQL(t)))
				if m == nil {
					continue
				}
				queries = append(queries, m[1])
				if m[2] == "instance" {
					rec := fmt.Sprintf("dashboard_variable_%d", i)
					rules = append(rules, promtoolRule{Record: rec, Expr: fmt.Sprintf("count by (instance) (%s)", m[1])})
					fmt.Fprintf(&names, "%s: variable %s: %s\n", rec, v.Name, m[1])
					expect(fmt.Sprintf("count(%s)", rec), float64(len(standaloneReplicas)))
				}
			}
			dir := t.TempDir()
			write := func(name string, v any) {
				data, err := yaml.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("dashboard.rules.yaml", map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
			write("dashboard_test.yaml", map[string]any{
				"rule_files":          []string{"dashboard.rules.yaml"},
				"evaluation_interval": "15s",
				"tests": []any{map[string]any{
					"interval":         "15s",
					"input_series":     standaloneSeries(t, queries),
					"promql_expr_test": tests,
				}},
			})
			cmd := exec.Command(bin, "test", "rules", "dashboard_test.yaml")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("promtool test rules on the dashboard's queries over a standalone scrape: %v\n%s\nwhere\n%s", err, out, names.String())
			}
		})
	}
}
