package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/render"
	"github.com/fairqueue/fairqueue/internal/testbin"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

const samplesDir = "../../config/samples"

func TestStandaloneKeyIsWrittenOnlyByPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "key")
	k1, err := readOrNewHashKey(path)
	if err != nil || !k1.new {
		t.Fatalf("no file: %+v %v, want a new key", k1, err)
	}
	if len(k1.key) < minHashKeyLen {
		t.Fatalf("generated key holds %d bytes, want at least %d", len(k1.key), minHashKeyLen)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("readOrNewHashKey wrote to disk before persist: %v", err)
	}
	if created, err := k1.persist(); err != nil || !created {
		t.Fatalf("persist() = %v, %v; want the key written", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %o, want 600", mode)
	}
	k2, err := readOrNewHashKey(path)
	if err != nil || k2.new || !bytes.Equal(k1.key, k2.key) {
		t.Errorf("second read: %+v %v, want the existing key", k2, err)
	}
	if created, err := k2.persist(); err != nil || created {
		t.Errorf("persisting a key read from its file: %v %v, want nothing written", created, err)
	}
	other, err := readOrNewHashKey(filepath.Join(t.TempDir(), "key"))
	if err != nil || bytes.Equal(other.key, k1.key) {
		t.Errorf("two new keys are equal (%v); keys must be random", err)
	}
	// Another process wrote a different key first: this one must not run
	// with configs hashed by a key nobody else has.
	other.path = path
	if _, err := other.persist(); err == nil || !strings.Contains(err.Error(), "another process created") {
		t.Errorf("persist over another key: %v", err)
	}
}

func TestConfigGivenYAMLSaysWhichFlagToUse(t *testing.T) {
	keyFile := write(t, "key", key)
	for _, tc := range []struct{ name, data, want string }{
		{"policy", readSample(t, "fairqueue_v1alpha1_fairqueuepolicy_minimal.yaml"), "run with --policy FILE instead"},
		{"configmap", "apiVersion: v1\nkind: ConfigMap\ndata:\n  config.json: '{}'\n", "pass its config.json key"},
		{"other yaml", "# comment\nfoo: bar\n", "not YAML: for a FairQueuePolicy manifest use --policy FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, "c.yaml", []byte(tc.data))
			err := run(context.Background(), []string{"--config", path, "--hash-key-file", keyFile}, noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(--config YAML) = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func noEnv(string) string { return "" }

func readSample(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(samplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRenderSubcommandWritesTheOperatorsConfig checks that `dataplane render`
// writes exactly what the operator's renderer gives for the policy, Secrets
// and key, and that the key file it creates is then reused.
func TestRenderSubcommandWritesTheOperatorsConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile, out := filepath.Join(dir, "key"), filepath.Join(dir, "config.json")
	policyFile := filepath.Join(samplesDir, "fairqueue_v1alpha1_fairqueuepolicy_full.yaml")
	args := []string{"render", "--policy", policyFile, "--secrets", samplesDir, "--hash-key-file", keyFile, "-o", out}
	if err := run(context.Background(), args, noEnv, io.Discard); err != nil {
		t.Fatalf("dataplane render: %v", err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatalf("render did not create the hash key file: %v", err)
	}
	p, _, err := reload.DecodePolicy([]byte(readSample(t, "fairqueue_v1alpha1_fairqueuepolicy_full.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := reload.ReadSecrets(samplesDir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render.Render(render.Input{Policy: p, HashKey: k, HashKeySecret: "full-hash-key", Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Data) {
		t.Errorf("render wrote\n%s\nthe operator's renderer gives\n%s", got, want.Data)
	}
	if _, err := config.Parse(got); err != nil {
		t.Errorf("the written config does not load with --config: %v", err)
	}
	// Rendering again reuses the key: same bytes.
	if err := run(context.Background(), args, noEnv, io.Discard); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(out)
	if !bytes.Equal(again, got) {
		t.Error("a second render with the same key file gave different bytes")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"render"}, "--policy FILE is required"},
		{[]string{"render", "--policy", policyFile}, "--hash-key-file is required"},
		{[]string{"render", "--policy", policyFile, "--hash-key-file", keyFile}, `Secret "api-key-registry" named in spec.identity.keyRegistry.secretRef does not exist`},
		{[]string{"render", "--policy", policyFile, "extra"}, "unexpected arguments"},
	} {
		if err := run(context.Background(), tc.args, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestPolicyFlagsParse(t *testing.T) {
	o, err := parseFlags([]string{"--policy", "p.yaml", "--secrets", "s", "--backend-url", "a=http://x,b=http://y"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.configSource != sourcePolicy || o.policy.secrets != "s" || o.policy.backendURLs["b"] != "http://y" {
		t.Errorf("parsed %+v, want the policy source with its secrets and two backend URLs", o)
	}
	if _, err := parseFlags([]string{"--config-source", "policy"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "needs --policy FILE") {
		t.Errorf("--config-source=policy without --policy: %v", err)
	}
	if _, err := parseFlags([]string{"--backend-url", "novalue"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "NAME=URL") {
		t.Errorf("a bad --backend-url: %v", err)
	}
	if _, err := preparePolicy(&options{policy: policyOptions{file: write(t, "p.yaml", []byte("kind: ConfigMap\nmetadata: {name: x}\n"))}}); err == nil ||
		!strings.Contains(err.Error(), "no document has kind: FairQueuePolicy") {
		t.Errorf("preparePolicy on a file without a policy: %v", err)
	}
}

// TestSamplesRunStandalone runs the built binary on every sample policy,
// unmodified, with its backends pointed at a fake upstream, and proxies a
// request through it.
func TestSamplesRunStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := testbin.Build(t, "./cmd/dataplane")
	var hits atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			// A capacity sample's saturation poller, not a proxied request.
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n")
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","path":"`+r.URL.Path+`"}`)
	}))
	defer upstream.Close()

	samples, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, f := range samples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := reload.DecodePolicy(data)
		if err != nil {
			continue // a Secret sample
		}
		ran++
		t.Run(filepath.Base(f), func(t *testing.T) {
			args := []string{"--policy", f, "--secrets", samplesDir, "--hash-key-file", filepath.Join(t.TempDir(), "key")}
			for _, b := range p.Spec.Backends {
				args = append(args, "--backend-url", b.Name+"="+upstream.URL)
			}
			before := hits.Load()
			traffic := runBinary(t, bin, args)
			req, _ := http.NewRequest(http.MethodPost, "http://"+traffic+"/v1/chat/completions",
				strings.NewReader(`{"model":"meta-llama/Llama-3.1-70B-Instruct","messages":[]}`))
			req.Header.Set("Authorization", "Bearer sk-example-acme-0000000000000000")
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var answer struct{ Path string }
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &answer) != nil || answer.Path != "/v1/chat/completions" {
				t.Fatalf("proxied request: %d %s, want 200 from the fake upstream", resp.StatusCode, body)
			}
			if hits.Load() != before+1 {
				t.Errorf("the fake upstream saw %d requests, want 1", hits.Load()-before)
			}
		})
	}
	if ran < 2 {
		t.Fatalf("ran %d sample policies, want the minimal and the full one", ran)
	}
}

// runBinary starts the data plane with args on free loopback ports, waits
// until it is ready and returns its traffic address; it is stopped with
// SIGTERM when the test ends.
func runBinary(t *testing.T, bin string, args []string) string {
	t.Helper()
	traffic, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	testbin.Start(t, bin, testbin.Options{
		Args:  append(args, "--listen", traffic, "--metrics-listen", ops),
		Ready: testbin.HTTPReady("http://" + ops + "/readyz"),
	})
	return traffic
}

// TestRunFollowsThePolicyAndSecrets runs the data plane on a policy file and
// a Secrets directory and checks, through /metrics, that a Secret rotation and
// a policy edit are rendered and loaded, and that a bad edit is refused and
// counted while the last good config stays.
func TestRunFollowsThePolicyAndSecrets(t *testing.T) {
	dir := t.TempDir()
	secretsDir := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secretsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	policy := func(weight string) []byte {
		return []byte("apiVersion: fairqueue.dev/v1alpha1\nkind: FairQueuePolicy\nmetadata: {name: llm}\nspec:\n" +
			"  fairQueuing:\n    enabled: true\n    tenantDimension: apiKey\n    weights:\n    - {identity: \"${ACME}\", weight: " + weight + "}\n" +
			"    weightsFrom:\n    - secretRef: {name: tenants}\n  backends:\n  - {name: b, url: \"http://127.0.0.1:1\"}\n")
	}
	secret := func(v string) []byte {
		return []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: tenants}\nstringData: {ACME: " + v + "}\n")
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	writeAtomically(t, policyPath, policy("3"))
	writeAtomically(t, filepath.Join(secretsDir, "tenants.yaml"), secret("sk-1"))
	keyFile := filepath.Join(dir, "key")

	ops := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--policy", policyPath, "--secrets", secretsDir, "--hash-key-file", keyFile,
			"--listen", "127.0.0.1:0", "--metrics-listen", ops, "--shutdown-grace", "1s"}, noEnv, &stderr)
	}()
	defer func() {
		cancel()
		waitRun(t, done, 20*time.Second, &stderr)
	}()
	logOnFailure(t, &stderr)
	// hashOf renders what the data plane should load for the inputs now on disk.
	hashOf := func() string {
		t.Helper()
		k, err := os.ReadFile(keyFile)
		if err != nil {
			t.Fatal(err)
		}
		r, err := reload.NewPolicySource(policyPath, reload.PolicyOptions{SecretsPath: secretsDir, HashKey: k}).Render()
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash
	}
	testutil.EventuallyWithin(t, 10*time.Second, keyFile+" to be created", func() bool {
		_, err := os.Stat(keyFile)
		return err == nil
	})
	waitMetrics(t, ops, "startup", `fairqueue_config_info{hash="`+hashOf()+`"} 1`)

	writeAtomically(t, filepath.Join(secretsDir, "tenants.yaml"), secret("sk-2"))
	waitMetrics(t, ops, "a Secret rotation", `fairqueue_config_info{hash="`+hashOf()+`"} 1`, `fairqueue_config_reloads_total{result="success"} 2`)

	writeAtomically(t, policyPath, policy("5"))
	good := hashOf()
	waitMetrics(t, ops, "a policy edit", `fairqueue_config_info{hash="`+good+`"} 1`, `fairqueue_config_reloads_total{result="success"} 3`)

	writeAtomically(t, policyPath, policy("0"))
	waitMetrics(t, ops, "a bad edit", `fairqueue_config_reloads_total{result="failure"} 1`, `fairqueue_config_last_reload_successful 0`,
		`fairqueue_config_info{hash="`+good+`"} 1`)
}

// writeAtomically replaces path by a rename, as editors and config tools do.
func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestFailedStartWritesNothing runs the built binary, as a user does, on
// inputs that cannot start: each exits 1 with a message naming the field or
// the standalone fix (SPEC 10), and leaves no file behind, neither the
// --hash-key-file nor a default key under the user's config directory.
func TestFailedStartWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := testbin.Build(t, "./cmd/dataplane")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Close() }()
	const head = "apiVersion: fairqueue.dev/v1alpha1\nkind: FairQueuePolicy\nmetadata: {name: llm, namespace: ns}\nspec:\n"
	const backends = "  backends: [{name: b, url: 'http://127.0.0.1:1'}]\n"
	weighted := head + "  fairQueuing:\n    enabled: true\n    weights:\n    - {identity: \"${ACME}\", weight: 3}\n" +
		"    weightsFrom: [{secretRef: {name: tenants}}]\n" + backends
	for _, tc := range []struct {
		name, policy string
		args         []string // besides --policy
		want         []string
	}{
		{"requests 0", head + "  rateLimits: {global: {requests: 0}}\n" + backends, nil,
			[]string{"spec.rateLimits.global.requests: Invalid value: 0: spec.rateLimits.global.requests in body should be greater than or equal to 1"}},
		{"missing Secret, no --secrets", weighted, nil, []string{`Secret "tenants"`, "pass --secrets FILE|DIR"}},
		{"unquoted ${VAR}", strings.Replace(weighted, `"${ACME}"`, "${ACME}", 1), nil, []string{"line 8", `must be quoted`}},
		{"missing Redis Secret", head + "  store: {type: Redis, redis: {addresses: ['127.0.0.1:1'], secretRef: {name: redis-auth}}}\n" + backends, nil,
			[]string{`Secret "redis-auth"`, "--secrets"}},
		{"listen address in use", head + backends, []string{"--listen", busy.Addr().String()}, []string{"--listen"}},
		{"render without --hash-key-file", head + backends, []string{"render"}, []string{"--hash-key-file is required", "ns get secret llm-hash-key"}},
		{"render of a bad policy", head + "  rateLimits: {global: {requests: 0}}\n" + backends, []string{"render", "--hash-key-file", "KEY"},
			[]string{"spec.rateLimits.global.requests"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			home := filepath.Join(dir, "home")
			policy := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(policy, []byte(tc.policy), 0o600); err != nil {
				t.Fatal(err)
			}
			key := filepath.Join(dir, "key")
			var args []string
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "KEY", key))
			}
			if len(args) == 0 || args[0] != "render" {
				args = append(args, "--metrics-listen", "127.0.0.1:0")
				if tc.name != "requests 0" { // that one uses the default key path
					args = append(args, "--hash-key-file", key)
				}
				if !slices.Contains(args, "--listen") {
					args = append(args, "--listen", "127.0.0.1:0")
				}
			}
			args = append(args, "--policy", policy)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("dataplane %q: %v, want exit status 1\n%s", args, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the error lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(key); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a failed start wrote --hash-key-file %s", key)
			}
			if _, err := os.Stat(home); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a failed start wrote under the home directory %s", home)
			}
		})
	}
}
