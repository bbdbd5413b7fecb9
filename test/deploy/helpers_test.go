// Package deploy checks the deployment artefacts a cluster operator relies on:
// that config/default renders with kustomize into the expected, hardened
// objects, that a real API server accepts every one of them, and that the
// local control plane (hack/localcp) starts and stops cleanly.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fairqueue/fairqueue/internal/testenv"
)

// kubectl returns a kubectl binary: the one on PATH, else the one `make
// envtest` builds. It skips the test when there is none.
func kubectl(t *testing.T, root string) string {
	t.Helper()
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	p := filepath.Join(root, "bin", "k8s", "kubectl")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	t.Skip("kubectl is neither on PATH nor in bin/k8s: install kubectl or run `ENVTEST_KUBECTL=always make envtest` to test the manifests")
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
