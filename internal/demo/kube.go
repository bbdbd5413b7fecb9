package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// Names of the objects the demo creates.
const (
	// Namespace holds the demo's objects.
	Namespace = "default"
	// PolicyName is the demo's FairQueuePolicy.
	PolicyName = "demo"
	// TenantsSecret holds the ${VAR} values of the policy's weights.
	TenantsSecret = "demo-tenants"
	// PriorityVar is the Secret variable naming the tenant at weight 3.
	PriorityVar = "PRIORITY_TENANT"
	// configMapName is the ConfigMap the operator renders for PolicyName.
	configMapName = PolicyName + "-dataplane"
	// hashKeySecret is the hash-key Secret the operator creates for PolicyName.
	hashKeySecret = PolicyName + "-hash-key"
	// hashKeyDataKey is the data key of the hash key in hashKeySecret.
	hashKeyDataKey = "key"
)

// manifests returns the demo's Secret and FairQueuePolicy (see tenantsSecret
// and sharesPolicy) as one multi-document manifest.
func manifests(priorityKey, backendURL string, perModel int) []byte {
	return append(append(tenantsSecret(PriorityVar, priorityKey), "---\n"...), sharesPolicy(backendURL, perModel)...)
}

// tenantsSecret returns the tenants Secret, whose variable name holds the
// API key key: PRIORITY_TENANT names the key at weight 3 in the shares
// scenario, INTERACTIVE_TENANT the key in band interactive in the bands one.
func tenantsSecret(name, key string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Secret
metadata:
  name: %[1]s
  namespace: %[2]s
type: Opaque
stringData:
  %[3]s: %[4]s
`, TenantsSecret, Namespace, name, key)
}

// sharesPolicy returns the demo's FairQueuePolicy: requests for the model are
// limited per replica, fair queuing is on with API keys as tenants, and the
// tenant whose key the tenants Secret's PRIORITY_TENANT holds has weight 3.
func sharesPolicy(backendURL string, perModel int) []byte {
	return requestPolicy(backendURL, perModel, "", PriorityVar, "3")
}

// requestPolicy returns a FairQueuePolicy limiting the model to perModel
// requests per second per replica, with fair queuing on API keys, the
// fairQueuing fields bands (YAML lines indented by four spaces, or empty),
// and one weights entry: the key the tenants Secret's variable holds, at
// entry (the weight, and any further fields of the entry).
func requestPolicy(backendURL string, perModel int, bands, variable, entry string) []byte {
	return fmt.Appendf(nil, `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata:
  name: %[4]s
  namespace: %[2]s
spec:
  rateLimits:
    perModel: {requests: %[5]d, period: 1s, burst: 5}
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    defaultWeight: 1
%[7]s    weights:
    - identity: ${%[3]s}
      weight: %[8]s
    weightsFrom:
    - secretRef: {name: %[1]s}
    bounds: {maxQueueDepthPerTenant: 32, maxInFlight: 8, maxWait: 5s}
  timeouts:
    request:
      default: {total: 30s}
  backends:
  - name: fakeupstream
    url: %[6]s
`, TenantsSecret, Namespace, variable, PolicyName, perModel, backendURL, bands, entry)
}

// kubectl runs the kubectl binary against the demo's control plane.
type kubectl struct {
	path, kubeconfig string
}

// run runs kubectl with args, feeding it stdin, and returns its output.
func (k kubectl) run(ctx context.Context, stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.path, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w: %s", args, err, bytes.TrimSpace(out))
	}
	return string(bytes.TrimSpace(out)), nil
}

// findKubectl returns kubectl from PATH, else the one `make envtest` built.
func findKubectl(binDir string) (string, error) {
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p, nil
	}
	p := filepath.Join(binDir, "k8s", "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no kubectl on PATH nor at %s: install kubectl or run `make envtest`", p)
	}
	return p, nil
}

// rendered is what the operator made of the policy: the rendered config and
// its hash.
type rendered struct {
	config []byte
	hash   string
}

// waitRendered polls until the operator has rendered the policy's ConfigMap
// and created its hash-key Secret, both of which the data planes read.
func waitRendered(ctx context.Context, c kubernetes.Interface, timeout time.Duration) (*rendered, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		r, err := readRendered(ctx, c)
		if err == nil {
			return r, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the operator did not render policy %s/%s within %v (is the manager running? see its log): %w", Namespace, PolicyName, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func readRendered(ctx context.Context, c kubernetes.Interface) (*rendered, error) {
	cm, err := c.CoreV1().ConfigMaps(Namespace).Get(ctx, configMapName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s: %w", configMapName, err)
	}
	data, ok := cm.Data[config.ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s has no %s key yet", configMapName, config.ConfigMapKey)
	}
	sec, err := c.CoreV1().Secrets(Namespace).Get(ctx, hashKeySecret, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", hashKeySecret, err)
	}
	if len(sec.Data[hashKeyDataKey]) == 0 {
		return nil, fmt.Errorf("secret %s has no %q key yet", hashKeySecret, hashKeyDataKey)
	}
	return &rendered{config: []byte(data), hash: config.Hash([]byte(data))}, nil
}
