/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package api_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// kubectlPath returns the kubectl built next to the envtest binaries, or the
// one on PATH; the test is skipped when there is none.
func kubectlPath(t *testing.T) string {
	t.Helper()
	local := filepath.Join(env.Root, "bin", "k8s", "kubectl")
	if _, err := os.Stat(local); err == nil {
		return local
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	t.Skipf("kubectl is neither in %s nor on PATH; run `make envtest` to build it", filepath.Dir(local))
	return ""
}

// kubectl runs kubectl against the envtest API server and returns its stdout.
func kubectl(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	args = append([]string{"--kubeconfig", env.Kubeconfig, "--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = env.Root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args[4:], " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestKubectlApplyAndGet is the user's first session: apply the CRD and the
// samples with kubectl, list the policies with their printer columns, read
// the defaults back and learn a field with kubectl explain.
func TestKubectlApplyAndGet(t *testing.T) {
	bin := kubectlPath(t)
	ctx := testContext(t)
	ns := newNamespace(t)

	kubectl(ctx, t, bin, "apply", "-f", "config/crd/bases")
	kubectl(ctx, t, bin, "apply", "-n", ns, "-f", "config/samples/")

	// Mark one policy Ready the way the operator will, to see the column.
	var full fqv1alpha1.FairQueuePolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "full"}, &full); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&full.Status.Conditions, metav1.Condition{
		Type: fqv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: fqv1alpha1.ReasonRendered,
		Message: "rendered", ObservedGeneration: full.Generation,
	})
	full.Status.ObservedGeneration = full.Generation
	full.Status.ConfigHash = "0123456789abcdef"
	full.Status.DataPlaneReplicas, full.Status.UpdatedReplicas = 2, 1
	if err := env.Client.Status().Update(ctx, &full); err != nil {
		t.Fatalf("setting the Ready condition: %v", err)
	}

	out := kubectl(ctx, t, bin, "get", "fqp", "-n", ns)
	t.Logf("kubectl get fqp:\n%s", out)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^NAME\s+ENABLED\s+TENANT\s+READY\s+REASON\s+UPDATED\s+REPLICAS\s+AGE$`),
		regexp.MustCompile(`^bands\s+true\s+apiKey\s+\S+$`),
		regexp.MustCompile(`^capacity\s+true\s+apiKey\s+\S+$`),
		regexp.MustCompile(`^full\s+true\s+apiKey\s+True\s+Rendered\s+1\s+2\s+\S+$`),
		regexp.MustCompile(`^minimal\s+false\s+user\s+\S+$`),
		regexp.MustCompile(`^tokens\s+true\s+apiKey\s+\S+$`),
	}
	matchLines(t, "kubectl get fqp", out, want)

	// -o wide adds the config hash and the generation the status describes.
	wide := kubectl(ctx, t, bin, "get", "fqp", "-n", ns, "-o", "wide")
	t.Logf("kubectl get fqp -o wide:\n%s", wide)
	matchLines(t, "kubectl get fqp -o wide", wide, []*regexp.Regexp{
		regexp.MustCompile(`^NAME\s+ENABLED\s+TENANT\s+READY\s+REASON\s+UPDATED\s+REPLICAS\s+AGE\s+CONFIG HASH\s+GENERATION\s+OBSERVED$`),
		regexp.MustCompile(`^bands\s+true\s+apiKey\s+\S+\s+1\s*$`),
		regexp.MustCompile(`^capacity\s+true\s+apiKey\s+\S+\s+1\s*$`),
		regexp.MustCompile(`^full\s+true\s+apiKey\s+True\s+Rendered\s+1\s+2\s+\S+\s+0123456789abcdef\s+1\s+1$`),
		regexp.MustCompile(`^minimal\s+false\s+user\s+\S+\s+1\s*$`),
		regexp.MustCompile(`^tokens\s+true\s+apiKey\s+\S+\s+1\s*$`),
	})

	// A minimal object shows every effective bound.
	yamlOut := kubectl(ctx, t, bin, "get", "fqp", "minimal", "-n", ns, "-o", "yaml")
	for _, s := range []string{"enabled: false", "maxQueueDepthPerTenant: 32", "maxTotalQueued: 4096", "maxTenants: 1024", "maxInFlight: 8", "maxWait: 5s", "total: 60s"} {
		if !strings.Contains(yamlOut, s) {
			t.Errorf("kubectl get fqp minimal -o yaml lacks %q:\n%s", s, yamlOut)
		}
	}

	// minShare reads back as written, not as a Quantity's 50m.
	bandsYAML := kubectl(ctx, t, bin, "get", "fqp", "bands", "-n", ns, "-o", "yaml")
	if !strings.Contains(bandsYAML, "minShare: 0.05") {
		t.Errorf("kubectl get fqp bands -o yaml lacks %q:\n%s", "minShare: 0.05", bandsYAML)
	}

	// kubectl explain teaches the bounds from the field docs.
	explain := kubectl(ctx, t, bin, "explain", "fqp.spec.fairQueuing.bounds")
	for _, s := range []string{"maxWait", "maxWait is the longest time one request may spend queued", "maxTotalQueued"} {
		if !strings.Contains(explain, s) {
			t.Errorf("kubectl explain fqp.spec.fairQueuing.bounds lacks %q:\n%s", s, explain)
		}
	}
	// ... and the band fields' defaults, which no marker can state.
	explain = kubectl(ctx, t, bin, "explain", "fqp.spec.fairQueuing")
	for _, s := range []string{"priorityBands", "Defaults to the lowest (last) band of", "requestBandHeader", "Unset by default: requests keep their tenant's band."} {
		if !strings.Contains(strings.Join(strings.Fields(explain), " "), s) {
			t.Errorf("kubectl explain fqp.spec.fairQueuing lacks %q:\n%s", s, explain)
		}
	}
	explain = kubectl(ctx, t, bin, "explain", "fqp.spec.fairQueuing.priorityBands.minShare")
	if !strings.Contains(strings.Join(strings.Fields(explain), " "), "Defaults to 0: strict priority.") {
		t.Errorf("kubectl explain fqp.spec.fairQueuing.priorityBands.minShare lacks its default:\n%s", explain)
	}
	explain = kubectl(ctx, t, bin, "explain", "fqp.spec.deferredAdmission.tokenLimits.perModel")
	for _, s := range []string{"tokens", "overrides", "Defaults to \"1m\"."} {
		if !strings.Contains(explain, s) {
			t.Errorf("kubectl explain fqp.spec.deferredAdmission.tokenLimits.perModel lacks %q:\n%s", s, explain)
		}
	}
}

// matchLines checks that out has exactly one line per pattern, each matching.
func matchLines(t *testing.T, what, out string, want []*regexp.Regexp) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%s printed %d lines, want %d:\n%s", what, len(lines), len(want), out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("%s line %d = %q, want it to match %s", what, i, lines[i], re)
		}
	}
}
