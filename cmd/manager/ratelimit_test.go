package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/testenv"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// runManagerEnv, set to "1", makes the test binary run the manager's main
// with its arguments instead of the tests: a test can then start the manager
// as its own process, as a user does, and start it more than once (one
// process registers the controller only once).
const runManagerEnv = "FAIRQUEUE_TEST_RUN_MANAGER"

func TestMain(m *testing.M) {
	if os.Getenv(runManagerEnv) == "1" {
		main() // exits non-zero on failure
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startManager runs the manager with args as a child process until the test
// ends, when it is stopped with SIGTERM as a rollout would. It returns the
// manager's output.
func startManager(t *testing.T, args ...string) *testutil.SyncBuffer {
	t.Helper()
	out := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runManagerEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second // then killed
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting the manager: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !exit.Exited() || exit.ExitCode() != 0 {
				t.Logf("the manager ended with %v", err)
			}
		}
	})
	return out
}

// TestSecretRotationLatencyWithKubeconfig runs the manager out of cluster
// with --kubeconfig, as a user debugging it or running it outside the
// cluster does, against a real API server, and rotates a weightsFrom Secret
// many times in a row, measuring each rotation until the ConfigMap holds
// the new render. clientcmd leaves client-go's client-side limit of 5
// requests/s (burst 10); every render reads two Secrets, so from the sixth
// rotation on each one waited ~400 ms for the limiter instead of the API
// server's few milliseconds. The manager now sets --kube-api-qps and
// --kube-api-burst whichever way it finds the API server.
func TestSecretRotationLatencyWithKubeconfig(t *testing.T) {
	const rotations = 40
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// The test's own client must not be the one throttled.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nsObj, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "qps-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	secrets := kube.CoreV1().Secrets(ns)
	secret, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-ids"},
		Data:       map[string][]byte{"ACME_KEY": []byte("sk-rotation-0")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled:     true,
				Weights:     []fqv1alpha1.TenantWeight{{Identity: "${ACME_KEY}", Weight: 3}},
				WeightsFrom: []fqv1alpha1.WeightsSource{{SecretRef: fqv1alpha1.LocalSecretReference{Name: "tenant-ids"}}},
			},
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}

	out := startManager(t, "--kubeconfig", env.Kubeconfig, "--namespaces", ns, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0")

	w, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", controllers.ConfigMapName(policy.Name)).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// nextHash waits for the ConfigMap to hold a config hash other than
	// prev and returns it.
	nextHash := func(prev string, timeout time.Duration) string {
		t.Helper()
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the ConfigMap watch ended\n%s", tail(out.String()))
				}
				cm, isCM := ev.Object.(*corev1.ConfigMap)
				if !isCM || ev.Type == watch.Deleted {
					continue
				}
				if h := cm.Annotations[config.ConfigHashAnnotation]; h != "" && h != prev {
					return h
				}
			case <-timer.C:
				t.Fatalf("the ConfigMap did not change within %v\n%s", timeout, tail(out.String()))
			}
		}
	}
	hash := nextHash("", time.Minute) // the first render

	latencies := make([]time.Duration, 0, rotations)
	for i := 1; i <= rotations; i++ {
		secret.Data["ACME_KEY"] = fmt.Appendf(nil, "sk-rotation-%d", i)
		start := time.Now()
		if secret, err = secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		hash = nextHash(hash, 20*time.Second)
		latencies = append(latencies, time.Since(start))
	}
	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[(len(latencies)*99+99)/100-1]
	t.Logf("%d Secret rotations to ConfigMap with --kubeconfig: p50 %v, p99 %v, max %v",
		rotations, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), latencies[len(latencies)-1].Round(100*time.Microsecond))
	// Throttled at 5 requests/s the median rotation waits ~400 ms for the
	// limiter alone, however fast the machine; unthrottled it takes a few
	// API round trips, tens of milliseconds even on a busy machine.
	if p50 > 200*time.Millisecond {
		t.Errorf("median Secret rotation to ConfigMap took %v (p99 %v); the manager is throttled by its own client", p50, p99)
	}
}

// tail returns the last lines of a process's output, for a failure message.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
