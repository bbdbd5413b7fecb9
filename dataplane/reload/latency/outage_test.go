package latency_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/internal/testenv"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// outageRuns is how many outages TestConfigMapChangeServesSoonAfterAnOutage
// measures; serveLimit is the most a change may take to serve once the API
// server answers again.
const (
	outageRuns = 3
	serveLimit = 2 * time.Second
)

// outageLength is how long the API server stays down in each run:
// $FAIRQUEUE_OUTAGE (a Go duration) or 5 s. Past a few seconds the backoff
// is at its cap, so longer outages change nothing; the scenario is
// FAIRQUEUE_OUTAGE=60s.
func outageLength(t *testing.T) time.Duration {
	if v := os.Getenv("FAIRQUEUE_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAIRQUEUE_OUTAGE=%q: %v", v, err)
		}
		return d
	}
	return 5 * time.Second
}

// restartableAPIServer starts etcd and a kube-apiserver whose certificates
// live in a directory of the test's, so the API server can be stopped and
// started again on the same port, certificates and etcd.
func restartableAPIServer(t *testing.T) (*envtest.Environment, *envtest.APIServer) {
	t.Helper()
	root, err := testenv.RepoRoot()
	mustDo(t, err)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("envtest binary kube-apiserver not found in %s: run `make envtest` (or set KUBEBUILDER_ASSETS): %v", assets, err)
	}
	api := &envtest.APIServer{CertDir: t.TempDir()}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlane: envtest.ControlPlane{APIServer: api}}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env, api
}

// killAPIServer kills the kube-apiserver started with certDir (SIGKILL) and
// waits for it to be gone.
func killAPIServer(t *testing.T, certDir string) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	mustDo(t, err)
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmd, []byte("kube-apiserver")) || !bytes.Contains(cmd, []byte("--cert-dir="+certDir)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		mustDo(t, err)
		mustDo(t, syscall.Kill(pid, syscall.SIGKILL))
		testutil.EventuallyWithin(t, wait, "the API server to die", func() bool {
			data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			return err != nil || bytes.Contains(data, []byte(") Z ")) // gone, or a zombie its parent will reap
		})
		return
	}
	t.Fatalf("no kube-apiserver process with --cert-dir=%s found", certDir)
}

// writeWhenAnswering polls the API server every 10 ms until it answers a
// read of the ConfigMap, writes data into it, and returns when it first
// answered. It gives up after 60 s.
func writeWhenAnswering(ctx context.Context, cms typedcorev1.ConfigMapInterface, data string) (time.Time, error) {
	deadline := time.Now().Add(60 * time.Second)
	var answering time.Time
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		cm, err := cms.Get(rctx, "llm-dataplane", metav1.GetOptions{})
		if err == nil {
			if answering.IsZero() {
				answering = time.Now()
			}
			cm.Data[config.ConfigMapKey] = data
			_, err = cms.Update(rctx, cm, metav1.UpdateOptions{})
		}
		cancel()
		if err == nil {
			return answering, nil
		}
		if time.Now().After(deadline) {
			return answering, fmt.Errorf("the API server did not take the change within 60 s: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outageConfig renders a valid config whose generation tells versions apart.
func outageConfig(t *testing.T, key []byte, generation int64) string {
	t.Helper()
	c := configtest.Valid(key, "http://vllm:8000")
	c.Policy.Namespace, c.HashKeySecret.Namespace = ns, ns
	c.Policy.Generation = generation
	c.FairQueuing.Enabled, c.FairQueuing.TenantDimension = true, identity.DimensionAPIKey
	data, err := config.Marshal(c)
	mustDo(t, err)
	return string(data)
}

// TestConfigMapChangeServesSoonAfterAnOutage stops the API server for
// outageLength, starts it again on the same port and etcd, changes the
// ConfigMap at once and measures how long the data plane takes to serve the
// change: at most serveLimit, against 46-84 s with client-go's default
// backoff. The outage must show in the source's health (log, metric).
func TestConfigMapChangeServesSoonAfterAnOutage(t *testing.T) {
	env, api := restartableAPIServer(t)
	admin, err := kubernetes.NewForConfig(env.Config)
	mustDo(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	mustDo(t, err)
	key := []byte("0123456789abcdef0123456789abcdef")
	cms := admin.CoreV1().ConfigMaps(ns)
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm-dataplane"},
		Data: map[string]string{config.ConfigMapKey: outageConfig(t, key, 1)}}, metav1.CreateOptions{})
	mustDo(t, err)

	// The data plane's config path: source -> Reloader -> apply.
	var mu sync.Mutex
	served := map[string]time.Time{} // config hash -> when applied
	reg := prometheus.NewRegistry()
	log := testr.New(t)
	rl, err := reload.New(func(_ *config.Config, hash string) error {
		mu.Lock()
		defer mu.Unlock()
		served[hash] = time.Now()
		return nil
	}, reload.Options{Logger: log.WithName("reload"), Registerer: reg})
	mustDo(t, err)
	src := reload.NewConfigMapSource(admin, ns, "llm-dataplane", log.WithName("configmap"))
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rl) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			mustDo(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the source did not stop within 10 s of the cancel")
		}
	}()
	testutil.EventuallyWithin(t, wait, "the first config", rl.Ready)

	outage := outageLength(t)
	var lat []time.Duration
	for run := 1; run <= outageRuns; run++ {
		// The API server crashes: a graceful stop takes kube-apiserver over
		// 20 s with a watch open, and a crash is the harder case anyway.
		killAPIServer(t, api.CertDir)
		mustDo(t, api.Stop()) // notices the exit; frees the port for Start
		stopped := time.Now()
		testutil.EventuallyWithin(t, wait, "the outage to show in the source's health", func() bool { return rl.SourceHealth() != nil })
		if up := metricValue(t, reg, reload.SourceUpName); up != 0 {
			t.Errorf("run %d: %s = %v during the outage, want 0", run, reload.SourceUpName, up)
		}
		if rest := outage - time.Since(stopped); rest > 0 {
			time.Sleep(rest) // the outage itself: nothing to wait for but time
		}
		// Start the API server again and write the change the moment it
		// first answers; Start itself returns only after /healthz passes,
		// later than that.
		started := make(chan error, 1)
		go func() { started <- api.Start() }()
		data := outageConfig(t, key, int64(run+1))
		hash := config.Hash([]byte(data))
		answering, werr := writeWhenAnswering(ctx, cms, data)
		mustDo(t, werr)
		select {
		case err := <-started:
			mustDo(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the API server did not start within 60 s")
		}
		var at time.Time
		deadline := answering.Add(30 * time.Second)
		for {
			mu.Lock()
			at = served[hash]
			mu.Unlock()
			if !at.IsZero() || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if at.IsZero() {
			t.Fatalf("run %d: the change was not served within 30 s of the API server answering again", run)
		}
		lat = append(lat, at.Sub(answering))
		t.Logf("run %d: API server down for %s; change served %s after it answered again", run, outage.Round(time.Millisecond), at.Sub(answering).Round(time.Millisecond))
		testutil.EventuallyWithin(t, wait, "the source's health to recover", func() bool { return rl.SourceHealth() == nil })
	}
	t.Logf("time to serve a change after a %s outage over %d runs: min %s, max %s", outage, len(lat), slices.Min(lat).Round(time.Millisecond), slices.Max(lat).Round(time.Millisecond))
	if worst := slices.Max(lat); worst > serveLimit {
		t.Errorf("a change took %s to serve after the API server answered again, want at most %s", worst, serveLimit)
	}
	if errs := metricValue(t, reg, reload.SourceErrorsName); errs < outageRuns {
		t.Errorf("%s = %v after %d outages, want at least one failure per outage", reload.SourceErrorsName, errs, outageRuns)
	}
}

// metricValue returns the value of the unlabelled gauge or counter name in
// reg, or -1 when it is absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	mustDo(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
