package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/internal/testenv"
	"github.com/fairqueue/fairqueue/internal/testutil"
)

// managerRan is set once run has started a manager in this process.
var managerRan atomic.Bool

// TestManagerAtHighestVerbosity runs the manager at -v=10 against a real API
// server through a full reconcile of a policy with weightsFrom, a key
// registry and a generated hash key, then stops it. Its output must hold no
// Secret value and no raw identity in any encoding, and the Rendered Event of
// its last reconcile must be stored by the time it has exited.
func TestManagerAtHighestVerbosity(t *testing.T) {
	if managerRan.Swap(true) {
		// controller-runtime refuses a second controller of the same name
		// in one process, as it should in production.
		t.Skip("run registers the controller once per process; go test -count>1 checks it once")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c := env.Client

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "logs-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	const (
		acmeKey     = "sk-acme-logs-8c1f2e9d"
		registryKey = "sk-registry-logs-51aa07"
		user        = "carol-logs@example.com"
		team        = "team-logs-omega"
		literal     = "literal-tenant-logs-4711"
	)
	registry := `[{"apiKey":"` + registryKey + `","user":"` + user + `","team":"` + team + `"}]`
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-ids"}, StringData: map[string]string{"ACME_KEY": acmeKey, "TEAM": team}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, StringData: map[string]string{"keys.json": registry}},
	}
	for _, s := range secrets {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	policy := &fqv1alpha1.FairQueuePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
		Spec: fqv1alpha1.FairQueuePolicySpec{
			Identity: fqv1alpha1.IdentitySpec{KeyRegistry: &fqv1alpha1.KeyRegistry{SecretRef: fqv1alpha1.LocalSecretReference{Name: "registry"}}},
			FairQueuing: fqv1alpha1.FairQueuing{
				Enabled: true,
				Weights: []fqv1alpha1.TenantWeight{
					{Identity: "${ACME_KEY}", Weight: 3}, {Identity: "${TEAM}", Weight: 2}, {Identity: literal, Weight: 4},
				},
				WeightsFrom: []fqv1alpha1.WeightsSource{{SecretRef: fqv1alpha1.LocalSecretReference{Name: "tenant-ids"}}},
			},
			Backends: []fqv1alpha1.Backend{{Name: "vllm", URL: "http://vllm:8000"}},
		},
	}
	if err := c.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}

	out := &testutil.SyncBuffer{}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{
			"--kubeconfig", env.Kubeconfig, "-v=10", "--namespaces", ns,
			"--leader-elect", "--leader-election-namespace", ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=0",
		}, out)
	}()

	ready := false
	for !ready {
		select {
		case err := <-done:
			t.Fatalf("the manager exited before the policy was Ready: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("the policy did not become Ready: %v\n%s", ctx.Err(), out.String())
		case <-time.After(100 * time.Millisecond):
		}
		got := &fqv1alpha1.FairQueuePolicy{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
			t.Fatal(err)
		}
		ready = meta.IsStatusConditionTrue(got.Status.Conditions, fqv1alpha1.ConditionReady)
	}
	// Stop as soon as the render is done, as a rollout's SIGTERM would.
	stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("the manager failed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the manager did not stop")
	}

	t.Run("the last reconcile's Event is stored once the manager has exited", func(t *testing.T) {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs.Items {
			found = found || (e.Reason == fqv1alpha1.ReasonRendered && e.Regarding.Name == policy.Name)
		}
		if !found {
			t.Errorf("no Rendered Event for the policy among %d Events", len(evs.Items))
		}
	})

	t.Run("no Secret value or raw identity in the output", func(t *testing.T) {
		logs := out.String()
		if !strings.Contains(logs, "Rendered data-plane ConfigMap") {
			t.Fatalf("the output does not show the reconcile; is the logger wired?\n%s", logs)
		}
		hashKey := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy.HashKeySecretName()}, hashKey); err != nil {
			t.Fatal(err)
		}
		values := map[string][]byte{
			"weightsFrom API key": []byte(acmeKey), "registry API key": []byte(registryKey), "user": []byte(user),
			"team": []byte(team), "literal identity": []byte(literal), "registry document": []byte(registry),
			"hash key": hashKey.Data[fqv1alpha1.HashKeySecretKey],
		}
		// client-go prints binary (protobuf) bodies as hex dumps: search
		// their bytes too.
		dumped := string(hexDumpBytes(logs))
		for name, v := range values {
			for enc, s := range map[string]string{
				"raw": string(v), "base64": base64.StdEncoding.EncodeToString(v), "hex": hex.EncodeToString(v),
			} {
				if strings.Contains(logs, s) {
					t.Errorf("the %s appears %s in the manager's output at -v=10", name, enc)
				}
				if strings.Contains(dumped, s) {
					t.Errorf("the %s appears %s in a hex dump in the manager's output at -v=10", name, enc)
				}
			}
		}
		t.Logf("scanned %d bytes, %d lines of output", len(logs), strings.Count(logs, "\n"))
	})
}

// hexDumpBytes returns the bytes of every hex.Dump line in logs, in order.
func hexDumpBytes(logs string) []byte {
	var out []byte
	for _, line := range strings.Split(logs, "\n") {
		line = strings.TrimSpace(line)
		bar := strings.IndexByte(line, '|')
		if len(line) < 10 || line[8] != ' ' || bar < 0 {
			continue
		}
		if _, err := hex.DecodeString(line[:8]); err != nil {
			continue
		}
		for _, f := range strings.Fields(line[8:bar]) {
			if b, err := hex.DecodeString(f); err == nil && len(b) == 1 {
				out = append(out, b[0])
			}
		}
	}
	return out
}
