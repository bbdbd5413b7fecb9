// Package testenv starts a real Kubernetes API server (etcd plus kube-apiserver,
// built from source by `make envtest`) with the fairqueue CRDs installed, for
// tests that must see what the API server really accepts, defaults and stores.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/internal/gobuild"
)

// Env is a running API server with a client that knows the fairqueue types.
type Env struct {
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Client is a direct (uncached) client built from Config.
	Client client.Client
	// Scheme holds the built-in Kubernetes types and the fairqueue API.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for Config, for kubectl.
	Kubeconfig string
	// Root is the repository root the CRDs and binaries were found under.
	Root string

	env *envtest.Environment
	dir string
}

// ErrMissingBinaries is wrapped by New's error when kube-apiserver or etcd
// is not where New looks.
var ErrMissingBinaries = errors.New("envtest binaries missing")

// New starts etcd and kube-apiserver and installs every CRD under
// config/crd/bases. The binaries come from $KUBEBUILDER_ASSETS, or else from
// bin/k8s in the repository root; New fails with a hint to run `make envtest`
// when they are missing.
func New() (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%w: %s not found in %s: run `make envtest` (or set KUBEBUILDER_ASSETS): %w", ErrMissingBinaries, bin, assets, err)
		}
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := fqv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}

	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest API server from %s: %w", assets, err)
	}
	e := &Env{Config: cfg, Scheme: scheme, Root: root, env: te}
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	if err := e.writeKubeconfig(); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

// Start is New for a single test: it fails the test when the API server cannot
// start and stops the server when the test ends.
func Start(t testing.TB) *Env {
	t.Helper()
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return e
}

// Stop shuts the API server and etcd down and removes the kubeconfig.
func (e *Env) Stop() error {
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	return e.env.Stop()
}

func (e *Env) writeKubeconfig() error {
	user, err := e.env.AddUser(envtest.User{Name: "fairqueue-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding envtest admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering envtest kubeconfig: %w", err)
	}
	if e.dir, err = os.MkdirTemp("", "fairqueue-envtest-"); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, data, 0o600)
}

// RepoRoot returns the directory holding this module's go.mod, found by
// walking up from the working directory (go test runs in the package folder).
func RepoRoot() (string, error) { return gobuild.RepoRoot() }
