package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/internal/testbin"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testbin.Main(m)) }

var key = configtest.Key

func validConfig() *config.Config {
	return configtest.Valid(key, "http://127.0.0.1:1")
}

func write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStartupErrors(t *testing.T) {
	good, err := config.Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	badField := bytes.Replace(good, []byte(`"maxInFlight": 8`), []byte(`"maxInFlight": 0`), 1)
	keyFile := write(t, "key", key)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "invalid field", args: []string{"--hash-key-file", keyFile, "--config", write(t, "c.json", badField)},
			wantErr: "fairQueuing.bounds.maxInFlight"},
		{name: "unknown field", args: []string{"--hash-key-file", keyFile, "--config", write(t, "c.json", bytes.Replace(good, []byte(`"kind"`), []byte(`"kindd"`), 1))},
			wantErr: `unknown field "kindd"`},
		{name: "missing config file", args: []string{"--hash-key-file", keyFile, "--config", "/nonexistent/config.json"},
			wantErr: "reading --config"},
		{name: "no hash key", args: []string{"--config", write(t, "c.json", good)}, wantErr: "--hash-key-file is required"},
		{name: "short hash key", args: []string{"--hash-key-file", write(t, "k", []byte("short"))}, wantErr: "holds 5 bytes"},
		{name: "wrong hash key", args: []string{"--hash-key-file", write(t, "k", []byte("another key of thirty-two bytes!")), "--config", write(t, "c.json", good)},
			wantErr: "hashKeySecret.fingerprint"},
		{name: "bad env value", env: map[string]string{"FAIRQUEUE_SHUTDOWN_GRACE": "soon"}, wantErr: "FAIRQUEUE_SHUTDOWN_GRACE"},
		{name: "env supplies a flag", env: map[string]string{"FAIRQUEUE_HASH_KEY_FILE": keyFile, "FAIRQUEUE_TRUSTED_PROXIES": "bogus"},
			wantErr: `--trusted-proxies: trusted proxy "bogus"`},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown config source", args: []string{"--config-source", "etcd"}, wantErr: `--config-source "etcd": use file or kubernetes`},
		{name: "file source without a file", args: []string{"--config-source", "file"}, wantErr: "--config-source=file needs --config FILE"},
		{name: "kubernetes source without a ConfigMap", args: []string{"--config-source", "kubernetes"}, wantErr: "needs --configmap NAMESPACE/NAME"},
		{name: "ConfigMap without namespace", args: []string{"--hash-key-file", keyFile, "--configmap", "llm-dataplane"}, wantErr: "or set POD_NAMESPACE"},
		{name: "ConfigMap without name", args: []string{"--hash-key-file", keyFile, "--configmap", "ns/"}, wantErr: "use NAMESPACE/NAME"},
		{name: "unreachable kubeconfig", args: []string{"--hash-key-file", keyFile, "--configmap", "ns/llm-dataplane", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantErr: "set --kubeconfig outside a cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("run() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestHelpDocumentsFlagsAndEnvironment(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(--help) error = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-listen", "-metrics-listen", "-config", "-hash-key-file", "-shutdown-grace", "-log-level", "-trusted-proxies", "FAIRQUEUE_HASH_KEY_FILE",
		"-config-source", "-configmap", "-kubeconfig", "-pod-name", "POD_NAME",
		"-shutdown-delay", "-max-buffered-body-bytes", "-body-read-timeout", "-max-header-bytes", "-read-header-timeout"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %s:\n%s", want, out.String())
		}
	}
}

func TestRunStartsAndStops(t *testing.T) {
	good, err := config.Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--hash-key-file", write(t, "k", key), "--config", write(t, "c.json", good),
			"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--shutdown-grace", "1s", "--shutdown-delay", "0s"}, func(string) string { return "" }, &stderr)
	}()
	cancel()
	waitRun(t, done, 10*time.Second, &stderr)
}

// logOnFailure logs the data plane's log when the test has failed by its end.
func logOnFailure(t *testing.T, log *testutil.SyncBuffer) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("data plane log:\n%s", log.String())
		}
	})
}

// waitMetrics waits until the /metrics of the ops server at addr shows every
// line of want, after what happened.
func waitMetrics(t *testing.T, addr, what string, want ...string) {
	t.Helper()
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("the last /metrics:\n%s", body)
		}
	}()
	testutil.Eventually(t, what+": /metrics to show "+strings.Join(want, ", "), func() bool {
		body = ""
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			body = string(b)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
}

// waitRun waits for a run started in a goroutine, which sends its result on
// done, to return after its context ended, and fails the test (with run's
// log) if it returns an error or has not returned within timeout, so a run
// that does not stop fails in seconds instead of hanging until go test's
// own timeout. It only reports (t.Errorf), so it can be deferred.
func waitRun(t *testing.T, done <-chan error, timeout time.Duration, log *testutil.SyncBuffer) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run() = %v, want nil after its context ended; log:\n%s", err, log.String())
		}
	case <-time.After(timeout):
		t.Errorf("run() did not return within %v after its context ended; log:\n%s", timeout, log.String())
	}
}

func TestHashKeyFromSecret(t *testing.T) {
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
	}
	tests := []struct {
		name    string
		flag    string // --hash-key-secret
		secrets []runtime.Object
		want    string
		wantErr string
	}{
		{name: "operator default name", secrets: []runtime.Object{secret("llm-hash-key", map[string][]byte{"key": key})}, want: string(key)},
		{name: "named by flag", flag: "mine", secrets: []runtime.Object{secret("mine", map[string][]byte{"key": key})}, want: string(key)},
		{name: "too short", secrets: []runtime.Object{secret("llm-hash-key", map[string][]byte{"key": []byte("short")})}, wantErr: "holds 5 bytes"},
		{name: "missing: waits until stopped", wantErr: "reading hash key Secret ns/llm-hash-key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			got, err := hashKey(ctx, &options{hashKeySecret: tc.flag}, fake.NewClientset(tc.secrets...), "ns", "llm-dataplane", logr.Discard())
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("hashKey() error = %v, want one containing %q", err, tc.wantErr)
				}
			case err != nil || string(got) != tc.want:
				t.Errorf("hashKey() = %q, %v; want the Secret's key", got, err)
			}
		})
	}
}

// TestRunFollowsTheConfigFile checks the binary's wiring: an edited --config
// is loaded without restart, a bad edit is refused and counted while the
// last good config stays in force and the replica stays ready.
func TestRunFollowsTheConfigFile(t *testing.T) {
	v1, err := config.Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	c2 := validConfig()
	c2.Policy.Generation = 2
	v2, err := config.Marshal(c2)
	if err != nil {
		t.Fatal(err)
	}
	path := write(t, "config.json", v1)
	ops := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--hash-key-file", write(t, "k", key), "--config", path,
			"--listen", "127.0.0.1:0", "--metrics-listen", ops, "--shutdown-grace", "1s", "--shutdown-delay", "0s"}, func(string) string { return "" }, &stderr)
	}()
	defer func() {
		cancel()
		waitRun(t, done, 20*time.Second, &stderr)
	}()
	logOnFailure(t, &stderr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			return 0, ""
		}
		defer func() { _ = resp.Body.Close() }() // read-only: a close error loses nothing
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitMetrics(t, ops, "startup", `fairqueue_config_info{hash="`+config.Hash(v1)+`"} 1`)

	// Replace the file the way editors and config tools do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, v2, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, ops, "an edited file", `fairqueue_config_info{hash="`+config.Hash(v2)+`"} 1`, `fairqueue_config_reloads_total{result="success"} 2`)

	if err := os.WriteFile(path, bytes.Replace(v2, []byte(`"maxInFlight": 8`), []byte(`"maxInFlight": 0`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, ops, "a bad edit", `fairqueue_config_reloads_total{result="failure"} 1`, `fairqueue_config_last_reload_successful 0`,
		`fairqueue_config_info{hash="`+config.Hash(v2)+`"} 1`)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d after a refused edit, want 200: the last good config is in force", code)
	}
}

// TestDeploymentArgsParse keeps config/dataplane/deployment.yaml and the flags
// in step: its args and downward-API environment select the kubernetes source
// on the ConfigMap in the Pod's namespace, the Secret-read hash key and a
// report Lease.
func TestDeploymentArgsParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "dataplane", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{"POD_NAMESPACE": "fairqueue-system", "POD_NAME": "dp-0", "POD_UID": "uid"}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	o, err := parseFlags(c.Args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the deployment's args %q do not parse: %v", c.Args, err)
	}
	if o.configSource != sourceKubernetes || o.hashKeyFile != "" || o.podName != "dp-0" || o.podUID != "uid" {
		t.Errorf("parsed %+v; want the kubernetes source, the hash key from its Secret, and the Pod's name and UID", o)
	}
	if ns, name, err := splitConfigMap(o.configMap, o.podNamespace); err != nil || ns != "fairqueue-system" || name != "default-dataplane" {
		t.Errorf("--configmap %q resolves to %s/%s (%v), want fairqueue-system/default-dataplane", o.configMap, ns, name, err)
	}

	// Shutdown: readiness is seen failing before the shutdown delay ends, so
	// the endpoint is dropped while the replica still accepts connections,
	// and the kubelet's grace period covers the whole bounded drain.
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" {
		t.Fatalf("readinessProbe = %+v, want GET /readyz", rp)
	}
	if seen := time.Duration(rp.PeriodSeconds*rp.FailureThreshold) * time.Second; seen >= o.shutdownDelay {
		t.Errorf("readiness failure is seen up to %s after SIGTERM, not before --shutdown-delay %s ends", seen, o.shutdownDelay)
	}
	drain := o.shutdownDelay + o.shutdownGrace + stopWait
	if tg := d.Spec.Template.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second < drain {
		t.Errorf("terminationGracePeriodSeconds %v is shorter than the drain (delay + grace + stop wait = %s)", tg, drain)
	}
}

func TestWaitAtMostBoundsTheStopWait(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release }) // a config source stuck in a client-go call
	start := time.Now()
	if waitAtMost(&wg, 20*time.Millisecond) {
		t.Fatal("waitAtMost reported a stuck goroutine as stopped")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("waitAtMost(20ms) took %s", waited)
	}
	close(release)
	if !waitAtMost(&wg, 10*time.Second) {
		t.Error("waitAtMost did not see the goroutine stop")
	}
}
