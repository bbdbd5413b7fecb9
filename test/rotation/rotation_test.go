// Package rotation checks, end to end on a real API server, that the policy's
// hash key can rotate under traffic: the operator (in process) re-renders with
// a new key, and a data-plane replica (the real binary, watching its
// ConfigMap and hash-key Secret through the API) follows it without a restart
// and without refusing a request.
package rotation

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testbin"
	"github.com/fairqueue/fairqueue/internal/testenv"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

func TestMain(m *testing.M) {
	// The operator's logs are not asserted on; without a logger
	// controller-runtime prints a warning with a stack trace.
	ctrl.SetLogger(logr.Discard())
	// controller-runtime's metadata-only Secret watch can leave this
	// goroutine blocked after its reflector stopped (see controllers'
	// suite_test.go).
	goleak.VerifyTestMain(testbin.Main(m), goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"))
}

const (
	rotations = 2
	// loaders send requests back to back through the data plane.
	loaders = 4
	// followTimeout bounds how long the replica may take to load the config
	// rendered with a new key.
	followTimeout = 30 * time.Second
)

// tally counts the answers of the load.
type tally struct {
	total, failed atomic.Int64
	mu            sync.Mutex
	samples       []string
}

func (t *tally) record(code int, err error) {
	t.total.Add(1)
	if err == nil && code >= 200 && code < 300 {
		return
	}
	t.failed.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.samples) < 10 {
		t.samples = append(t.samples, fmt.Sprintf("%d %v", code, err))
	}
}

// call sends one chat request with the API key through the data plane.
func call(ctx context.Context, c *http.Client, addr, apiKey string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = bytes.NewBuffer(nil).ReadFrom(resp.Body)
	return resp.StatusCode, nil
}

// TestHashKeyRotationUnderTraffic rotates the hash key of a policy whose key
// registry is enforced (a request hashed with the wrong key would get 401)
// while a data-plane replica serves traffic. Every request must succeed, the
// replica must report each new config within followTimeout, and a registry
// change after the rotations must take effect, all without a restart.
func TestHashKeyRotationUnderTraffic(t *testing.T) {
	bin := testbin.Build(t, "./cmd/dataplane")

	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c := env.Client
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rotation-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name

	upstream := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	defer upstream.Close()

	const keyA, keyB = "sk-rotation-a-4c1d", "sk-rotation-b-93fe"
	registry := func(keys ...string) []byte {
		var entries []string
		for _, k := range keys {
			entries = append(entries, `{"apiKey":"`+k+`","user":"u-`+k+`"}`)
		}
		return []byte("[" + strings.Join(entries, ",") + "]")
	}
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"},
		Data:       map[string][]byte{"keys.json": registry(keyA)},
	}); err != nil {
		t.Fatal(err)
	}
	policy := &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Identity: fqv1alpha1.IdentitySpec{KeyRegistry: &fqv1alpha1.KeyRegistry{
				SecretRef: fqv1alpha1.LocalSecretReference{Name: "registry"}, Enforce: true,
			}},
			Backends: []fqv1alpha1.Backend{{Name: "fake", URL: upstream.URL}},
		},
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}

	// The operator.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Cache: controllers.CacheOptions([]string{ns}), Client: controllers.ClientOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	mgrCtx, stopMgr := context.WithCancel(ctx)
	if err := (&controllers.FairQueuePolicyReconciler{}).SetupWithManager(mgrCtx, mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	defer func() {
		stopMgr()
		select {
		case err := <-mgrDone:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("operator: the manager did not stop within 30s of its context ending")
		}
	}()
	rendered := waitPolicy(ctx, t, c, policy, func(p *fqv1alpha1.FairQueuePolicy) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, fqv1alpha1.ConditionReady)
	})

	// The data plane, as deployed: ConfigMap and Secret through the API.
	listen, ops := testutil.FreeAddr(t), testutil.FreeAddr(t)
	dp := testbin.Start(t, bin, testbin.Options{
		Args: []string{"--kubeconfig", env.Kubeconfig, "--configmap", ns + "/" + controllers.ConfigMapName(policy.Name),
			"--listen", listen, "--metrics-listen", ops, "--pod-name", "rotation-0"},
		Ready: testbin.HTTPReady("http://" + ops + "/readyz"),
	})
	hc := &http.Client{Timeout: 10 * time.Second}
	waitPolicy(ctx, t, c, policy, func(p *fqv1alpha1.FairQueuePolicy) bool {
		return p.Status.ConfigHash == rendered.Status.ConfigHash && p.Status.UpdatedReplicas == 1
	})

	// Traffic through every rotation.
	var load tally
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range loaders {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				code, err := call(loadCtx, hc, listen, keyA)
				if loadCtx.Err() != nil {
					return // the stop, not the data plane
				}
				load.record(code, err)
			}
		})
	}
	stopLoadAndWait := func() { stopLoad(); wg.Wait() }
	defer stopLoadAndWait()
	testutil.EventuallyWithin(t, followTimeout, "traffic to flow", func() bool { return load.total.Load() >= 50 })

	hash := rendered.Status.ConfigHash
	for i := range rotations {
		old := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy.HashKeySecretName()}, old); err != nil {
			t.Fatal(err)
		}
		before := load.total.Load()
		start := time.Now()
		if err := c.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
		p := waitPolicy(ctx, t, c, policy, func(p *fqv1alpha1.FairQueuePolicy) bool {
			return p.Status.ConfigHash != hash && p.Status.UpdatedReplicas == 1 && p.Status.DataPlaneReplicas == 1
		})
		followed := time.Since(start)
		hash = p.Status.ConfigHash
		fresh := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy.HashKeySecretName()}, fresh); err != nil {
			t.Fatal(err)
		}
		if string(fresh.Data[fqv1alpha1.HashKeySecretKey]) == string(old.Data[fqv1alpha1.HashKeySecretKey]) {
			t.Fatalf("rotation %d: the key did not change", i+1)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.ConfigMapName(policy.Name)}, cm); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]byte(cm.Data[config.ConfigMapKey]))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HashKeySecret.Fingerprint != config.KeyFingerprint(fresh.Data[fqv1alpha1.HashKeySecretKey]) {
			t.Errorf("rotation %d: the ConfigMap names another key than the Secret holds", i+1)
		}
		t.Logf("rotation %d: replica running the new config %v after the Secret's deletion; %d requests meanwhile",
			i+1, followed.Round(time.Millisecond), load.total.Load()-before)
		testutil.EventuallyWithin(t, followTimeout, "more traffic", func() bool { return load.total.Load() >= before+50 })
	}

	// New configs still load after the rotations: a key added to the
	// registry is accepted (enforce refuses it until then).
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "registry"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["keys.json"] = registry(keyA, keyB)
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, followTimeout, "the key added after the rotations to be accepted", func() bool {
		code, err := call(ctx, hc, listen, keyB)
		return err == nil && code == http.StatusOK
	})

	stopLoadAndWait()
	if dp.Exited() {
		t.Fatalf("the data plane exited during the test: %v", dp.Err())
	}
	// What an operator sees: kubectl's columns report the replica running
	// the current config.
	// The replica reports the config it runs through its Lease, renewed
	// shortly after a reload, so the columns may lag the last rotation by a
	// report interval: poll them for a bounded time.
	if kc, err := exec.LookPath("kubectl"); err == nil {
		for _, args := range [][]string{{"get", "fqp"}, {"get", "fqp", "-o", "wide"}} {
			var out []byte
			testutil.EventuallyWithin(t, 15*time.Second, fmt.Sprintf("kubectl %v shows the policy Ready with 1/1 replicas updated", args), func() bool {
				if out, err = exec.CommandContext(ctx, kc, append([]string{"--kubeconfig", env.Kubeconfig, "-n", ns}, args...)...).CombinedOutput(); err != nil {
					t.Fatalf("kubectl %v: %v\n%s", args, err, out)
				}
				fields := strings.Fields(strings.Split(strings.TrimSpace(string(out)), "\n")[1])
				return len(fields) >= 7 && fields[3] == "True" && fields[4] == fqv1alpha1.ReasonRendered && fields[5] == "1" && fields[6] == "1"
			})
			t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
		}
	}
	t.Logf("%d requests through %d rotations, %d not 2xx", load.total.Load(), rotations, load.failed.Load())
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the rotations, for example %q", n, load.total.Load(), load.samples)
	}
}

// waitPolicy polls the policy until cond holds, within followTimeout.
func waitPolicy(ctx context.Context, t *testing.T, c client.Client, p *fqv1alpha1.FairQueuePolicy, cond func(*fqv1alpha1.FairQueuePolicy) bool) *fqv1alpha1.FairQueuePolicy {
	t.Helper()
	got := &fqv1alpha1.FairQueuePolicy{}
	testutil.EventuallyWithin(t, followTimeout, "the policy's status", func() bool {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		return cond(got)
	})
	if t.Failed() {
		t.Logf("policy status: %+v", got.Status)
	}
	return got
}
