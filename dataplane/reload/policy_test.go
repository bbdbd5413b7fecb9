package reload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

const testPolicy = `# a standalone policy
apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata:
  name: llm
spec:
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    weights:
    - identity: ${ACME}
      weight: WEIGHT
    weightsFrom:
    - secretRef: {name: tenants}
  backends:
  - name: vllm
    url: http://127.0.0.1:8000
`

func policyWithWeight(w string) []byte { return []byte(strings.Replace(testPolicy, "WEIGHT", w, 1)) }

const testSecret = `apiVersion: v1
kind: Secret
metadata:
  name: tenants
stringData:
  ACME: KEY
`

func secretWithKey(k string) []byte { return []byte(strings.Replace(testSecret, "KEY", k, 1)) }

// weightOf parses rendered bytes and returns the weight of tenant id.
func weightOf(t *testing.T, data []byte, id string) int32 {
	t.Helper()
	c, err := config.Parse(data)
	if err != nil {
		t.Fatalf("rendered config does not parse: %v", err)
	}
	for _, w := range c.FairQueuing.Weights {
		if w.TenantHash == identity.Hash(testKey, id) {
			return w.Weight
		}
	}
	return 0
}

func runPolicySource(t *testing.T, src *PolicySource, clk *clocktesting.FakeClock) *recordingSink {
	t.Helper()
	sink := runSource(t, src)
	testutil.Eventually(t, "the source to start", func() bool { return clk.HasWaiters() })
	return sink
}

// stepUntil steps the fake clock past the debounce until cond holds.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, what, func() bool {
		clk.Step(testDebounce)
		return cond()
	})
}

func TestPolicySourceFollowsPolicyAndSecrets(t *testing.T) {
	dir := t.TempDir()
	secretsDir := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secretsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyPath, policyWithWeight("3"))
	writeFile(t, filepath.Join(secretsDir, "tenants.yaml"), secretWithKey("sk-one"))

	clk := clocktesting.NewFakeClock(time.Now())
	src := NewPolicySource(policyPath, PolicyOptions{SecretsPath: secretsDir, HashKey: testKey, Logger: testLogger(t),
		Clock: clk, Debounce: testDebounce, Resync: 24 * time.Hour})
	sink := runPolicySource(t, src, clk)

	u, r := sink.snapshot()
	if len(u) != 1 || len(r) != 0 {
		t.Fatalf("after start: %d updates, rejects %v; want the first render", len(u), r)
	}
	if got := weightOf(t, u[0], "sk-one"); got != 3 {
		t.Fatalf("first render gives sk-one weight %d, want 3", got)
	}

	// An edit of the policy is rendered.
	writeFile(t, policyPath, policyWithWeight("5"))
	stepUntil(t, clk, "the weight edit", func() bool {
		u, _ := sink.snapshot()
		return len(u) == 2 && weightOf(t, u[1], "sk-one") == 5
	})

	// A Secret rotation re-hashes the tenant.
	writeFile(t, filepath.Join(secretsDir, "tenants.yaml"), secretWithKey("sk-two"))
	stepUntil(t, clk, "the Secret rotation", func() bool {
		u, _ := sink.snapshot()
		return len(u) == 3 && weightOf(t, u[2], "sk-two") == 5
	})

	// A bad edit is rejected once, even when resyncs read it again.
	writeFile(t, policyPath, policyWithWeight("5\n      wieght: 2"))
	stepUntil(t, clk, "the bad edit's rejection", func() bool {
		_, r := sink.snapshot()
		return len(r) == 1
	})
	_, r = sink.snapshot()
	if !strings.Contains(r[0].Error(), `unknown field "spec.fairQueuing.weights[0].wieght"`) {
		t.Errorf("rejection %q does not name the misspelt field", r[0])
	}
	clk.Step(25 * time.Hour) // a resync
	writeFile(t, filepath.Join(dir, "unrelated"), []byte("x"))
	clk.Step(testDebounce)
	// A missing Secret is a render error naming it.
	if err := os.Remove(filepath.Join(secretsDir, "tenants.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, policyPath, policyWithWeight("7"))
	stepUntil(t, clk, "the missing Secret's rejection", func() bool {
		_, r := sink.snapshot()
		return len(r) == 2
	})
	u, r = sink.snapshot()
	if len(u) != 3 {
		t.Errorf("%d updates after bad inputs, want still 3", len(u))
	}
	if !strings.Contains(r[1].Error(), `Secret "tenants"`) {
		t.Errorf("rejection %q does not name the missing Secret", r[1])
	}

	// Restoring the Secret renders again.
	writeFile(t, filepath.Join(secretsDir, "tenants.yaml"), secretWithKey("sk-two"))
	stepUntil(t, clk, "the recovery", func() bool {
		u, _ := sink.snapshot()
		return len(u) == 4 && weightOf(t, u[3], "sk-two") == 7
	})
}

func TestPolicySourceKeepsConfigWhileFileIsMissing(t *testing.T) {
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyPath, policyWithWeight("3"))
	writeFile(t, filepath.Join(dir, "secret.yaml"), secretWithKey("sk-one"))
	clk := clocktesting.NewFakeClock(time.Now())
	src := NewPolicySource(policyPath, PolicyOptions{SecretsPath: filepath.Join(dir, "secret.yaml"), HashKey: testKey,
		Clock: clk, Debounce: testDebounce, Resync: time.Hour})
	sink := runPolicySource(t, src, clk)

	if err := os.Remove(policyPath); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "other"), []byte("x")) // an event after the delete, to be sure it was seen
	for range 5 {
		clk.Step(testDebounce)
	}
	clk.Step(time.Hour)
	writeFile(t, policyPath, []byte{})
	writeFile(t, policyPath, policyWithWeight("3")) // the same content again: not re-offered
	writeFile(t, filepath.Join(dir, "other"), []byte("y"))
	writeFile(t, policyPath, policyWithWeight("4"))
	stepUntil(t, clk, "the recreated policy", func() bool {
		u, _ := sink.snapshot()
		return len(u) == 2
	})
	u, r := sink.snapshot()
	if len(r) != 0 {
		t.Errorf("a missing or empty policy file was rejected: %v; it should keep the config in force silently", r)
	}
	if got := weightOf(t, u[1], "sk-one"); got != 4 {
		t.Errorf("after recreate, weight %d, want 4", got)
	}
}

func TestDecodePolicy(t *testing.T) {
	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"policy and secret in one file", string(policyWithWeight("2")) + "---\n" + string(secretWithKey("k")), ""},
		{"JSON", `{"apiVersion":"fairqueue.dev/v1alpha1","kind":"FairQueuePolicy","metadata":{"name":"p"},"spec":{"backends":[{"name":"b","url":"http://b"}]}}`, ""},
		{"no policy", testSecret, "no document has kind: FairQueuePolicy"},
		{"two policies", string(policyWithWeight("2")) + "---\n" + string(policyWithWeight("3")), "second FairQueuePolicy"},
		{"wrong version", strings.Replace(string(policyWithWeight("2")), "v1alpha1", "v1", 1), `apiVersion "fairqueue.dev/v1" is not`},
		{"unknown field", strings.Replace(string(policyWithWeight("2")), "  backends:", "  backend:", 1), `unknown field "spec.backend"`},
		{"no name", strings.Replace(string(policyWithWeight("2")), "name: llm", "labels: {}", 1), "no metadata.name"},
		{"not yaml", "\t{{", "not YAML or JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, secrets, err := DecodePolicy([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodePolicy() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodePolicy() = %v", err)
			}
			if p.Namespace != DefaultNamespace {
				t.Errorf("namespace %q, want the default %q", p.Namespace, DefaultNamespace)
			}
			if s, ok := secrets["tenants"]; ok && string(s.Data["ACME"]) != "k" {
				t.Errorf("stringData not merged into data: %v", s.Data)
			}
		})
	}
}

func TestPolicySourceBackendURLs(t *testing.T) {
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyPath, policyWithWeight("3"))
	writeFile(t, filepath.Join(dir, "s.yaml"), secretWithKey("sk"))
	opts := PolicyOptions{SecretsPath: filepath.Join(dir, "s.yaml"), HashKey: testKey, BackendURLs: map[string]string{"vllm": "http://127.0.0.1:9"}}
	out, err := NewPolicySource(policyPath, opts).Render()
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out.Data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backends[0].URL != "http://127.0.0.1:9" {
		t.Errorf("backend URL %q, want the override", c.Backends[0].URL)
	}
	opts.BackendURLs = map[string]string{"nope": "http://x"}
	if _, err := NewPolicySource(policyPath, opts).Render(); err == nil || !strings.Contains(err.Error(), `backend "nope"`) {
		t.Errorf("override of an unknown backend: error %v, want one naming it", err)
	}
}

// TestPolicySourceNamesSecretsFlagForAMissingSecret: without Kubernetes a
// missing Secret is fixed with --secrets, not by creating it in a namespace.
func TestPolicySourceNamesSecretsFlagForAMissingSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, policyWithWeight("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.yaml")
	if err := os.WriteFile(other, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: unrelated}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ secrets, want string }{
		{"", "pass --secrets FILE|DIR holding its manifest"},
		{other, "add its manifest (kind: Secret) to --secrets " + other},
	} {
		src := NewPolicySource(path, PolicyOptions{SecretsPath: tc.secrets, HashKey: []byte("0123456789abcdef")})
		_, err := src.Render()
		if err == nil || !strings.Contains(err.Error(), `Secret "tenants"`) || !strings.Contains(err.Error(), tc.want) ||
			strings.Contains(err.Error(), "policy's namespace") {
			t.Errorf("--secrets %q: Render() = %v, want the missing Secret and %q", tc.secrets, err, tc.want)
		}
		if _, err := src.Secret("tenants"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--secrets %q: Secret() = %v, want %q", tc.secrets, err, tc.want)
		}
	}
}

// TestDecodePolicyHintsAtQuotingVariables: an unquoted ${VAR} in a flow
// mapping is a YAML syntax error; the error says which line and how to
// quote it. A quoted one, and one in block style, decode.
func TestDecodePolicyHintsAtQuotingVariables(t *testing.T) {
	doc := func(entry string) []byte {
		return []byte("apiVersion: fairqueue.dev/v1alpha1\nkind: FairQueuePolicy\nmetadata: {name: llm}\nspec:\n" +
			"  fairQueuing:\n    enabled: true\n    weights:\n" + entry +
			"    weightsFrom:\n    - secretRef: {name: tenants}\n  backends:\n  - {name: b, url: 'http://b'}\n")
	}
	_, _, err := DecodePolicy(doc("    - {identity: ${ACME}, weight: 3}\n"))
	if err == nil || !strings.Contains(err.Error(), `line 8: a ${VAR} inside { } or [ ] must be quoted`) ||
		!strings.Contains(err.Error(), `{identity: "${ACME_KEY}", weight: 3}`) {
		t.Fatalf("an unquoted ${VAR} in a flow mapping: %v; want the line and a hint to quote it", err)
	}
	for _, ok := range []string{
		"    - {identity: \"${ACME}\", weight: 3}\n",
		"    - {identity: '${ACME}', weight: 3}\n",
		"    - identity: ${ACME}\n      weight: 3\n",
	} {
		if _, _, err := DecodePolicy(doc(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if _, _, err := DecodePolicy([]byte("\t{{")); err == nil || strings.Contains(err.Error(), "must be quoted") {
		t.Errorf("a YAML error without a variable: %v; want no quoting hint", err)
	}
}
