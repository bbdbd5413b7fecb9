// Command localcp runs a local Kubernetes control plane for development and
// demos: etcd and kube-apiserver from the envtest binaries that `make envtest`
// builds into bin/k8s, with the fairqueue CRDs installed and a cluster-admin
// kubeconfig written to a file. It runs until interrupted (Ctrl-C or SIGTERM),
// then stops both processes and removes every file it wrote.
//
//	go run ./hack/localcp --kubeconfig /tmp/fq.kubeconfig
//
// On stdout it prints "kubeconfig: PATH", "server: URL" and, once the API
// server answers and the CRDs are established, "ready". There are no nodes:
// objects are stored and validated, but no Pod ever runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/stdr"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/gobuild"
)

// adminUser is the identity the written kubeconfig authenticates as.
var adminUser = envtest.User{Name: "fairqueue-local-admin", Groups: []string{"system:masters"}}

// options are the command-line settings.
type options struct {
	dir         string
	kubeconfig  string
	assets      string
	crds        string
	healthEvery time.Duration
}

func main() {
	logger := stdr.New(log.New(os.Stderr, "localcp ", log.LstdFlags))
	ctrllog.SetLogger(logger.V(1))
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		cli.PrintError(os.Stderr, "localcp", err)
		os.Exit(2)
	}
	err = cli.WithSignals(func(ctx context.Context) error { return run(ctx, opts, os.Stdout, logger) })
	if err != nil {
		cli.PrintError(os.Stderr, "localcp", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("localcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), `Usage: localcp [--dir DIR] [--kubeconfig FILE] [--assets DIR] [--crds DIR]

Starts etcd and kube-apiserver from the envtest binaries, installs the CRDs,
writes a cluster-admin kubeconfig, prints "ready" and runs until Ctrl-C or
SIGTERM; then stops both processes and removes DIR and the kubeconfig.

Flags:
`)
		fs.PrintDefaults()
	}
	var o options
	fs.StringVar(&o.dir, "dir", "", "state `directory` for etcd data and certificates; must be absent or empty, and is removed on exit (default: a new temporary directory)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "`file` to write the kubeconfig to; removed on exit (default: DIR/kubeconfig)")
	fs.StringVar(&o.assets, "assets", "", "`directory` holding kube-apiserver and etcd (default: $KUBEBUILDER_ASSETS, else bin/k8s in the repository)")
	fs.StringVar(&o.crds, "crds", "", "`directory` of CRD manifests to install (default: config/crd/bases in the repository)")
	fs.DurationVar(&o.healthEvery, "health-interval", 5*time.Second, "how often to check that the API server still answers; 0 disables the check")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: see --help", fs.Arg(0))
	}
	return o, nil
}

// run starts the control plane, reports it ready and blocks until ctx ends
// or the API server stops answering. Everything it started or wrote is gone
// when it returns.
func run(ctx context.Context, o options, stdout io.Writer, logger logr.Logger) (err error) {
	if err := o.resolve(os.Getenv); err != nil {
		return err
	}
	dir, cleanupDir, err := prepareDir(o.dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanupDir()) }()
	if o.kubeconfig == "" {
		o.kubeconfig = filepath.Join(dir, "kubeconfig")
	}

	// envtest puts etcd's data and the API server's certificates in fresh
	// directories under TMPDIR; pointing it at dir keeps every file the
	// control plane writes inside the one directory removed on exit.
	if err := os.Setenv("TMPDIR", dir); err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: o.assets,
		CRDDirectoryPaths:     []string{o.crds},
		ErrorIfCRDPathMissing: true,
	}
	logger.Info("starting etcd and kube-apiserver", "assets", o.assets, "crds", o.crds, "dir", dir)
	cfg, err := env.Start()
	if err != nil {
		return errors.Join(fmt.Errorf("starting the control plane from %s: %w", o.assets, err), env.Stop())
	}
	defer func() {
		logger.Info("stopping kube-apiserver and etcd")
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the control plane: %w", stopErr))
		}
	}()

	user, err := env.AddUser(adminUser, nil)
	if err != nil {
		return fmt.Errorf("adding the admin user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering the kubeconfig: %w", err)
	}
	if err := os.WriteFile(o.kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	defer func() {
		if rmErr := os.Remove(o.kubeconfig); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			err = errors.Join(err, rmErr)
		}
	}()

	if ctx.Err() != nil {
		// Interrupted while starting: stop without claiming readiness.
		return nil
	}
	// The ready line is the contract with whoever started us (tests, scripts
	// waiting for "ready"): failing to write it is fatal.
	if _, err := fmt.Fprintf(stdout, "kubeconfig: %s\nserver: %s\nready\n", o.kubeconfig, cfg.Host); err != nil {
		return fmt.Errorf("writing the ready line to stdout: %w", err)
	}
	logger.Info("control plane ready; press Ctrl-C to stop", "kubeconfig", o.kubeconfig, "server", cfg.Host)

	health, err := discovery.NewDiscoveryClientForConfig(user.Config())
	if err != nil {
		return fmt.Errorf("building a health-check client: %w", err)
	}
	return watchHealth(ctx, clock.RealClock{}, o.healthEvery, func(ctx context.Context) error {
		return health.RESTClient().Get().AbsPath("/livez").Do(ctx).Error()
	})
}

// watchHealth blocks until ctx ends, returning nil, or until check fails
// three times in a row, returning the last failure.
func watchHealth(ctx context.Context, clk clock.WithTicker, every time.Duration, check func(context.Context) error) error {
	if every <= 0 {
		<-ctx.Done()
		return nil
	}
	ticker := clk.NewTicker(every)
	defer ticker.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
		checkCtx, cancel := context.WithTimeout(ctx, every)
		err := check(checkCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			failures = 0
		default:
			if failures++; failures >= 3 {
				return fmt.Errorf("the API server stopped answering /livez (%w); shutting down", err)
			}
		}
	}
}

// resolve fills the default asset and CRD directories and checks that the
// binaries exist.
func (o *options) resolve(getenv func(string) string) error {
	if o.assets == "" {
		o.assets = getenv("KUBEBUILDER_ASSETS")
	}
	if o.assets == "" || o.crds == "" {
		root, err := gobuild.RepoRoot()
		if err != nil {
			return fmt.Errorf("%w; pass --assets and --crds, or run from inside the repository", err)
		}
		if o.assets == "" {
			o.assets = filepath.Join(root, "bin", "k8s")
		}
		if o.crds == "" {
			o.crds = filepath.Join(root, "config", "crd", "bases")
		}
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(o.assets, bin)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make envtest` to build it, or point --assets at the directory holding it", bin, o.assets)
		}
	}
	if _, err := os.Stat(o.crds); err != nil {
		return fmt.Errorf("CRD directory %s not found: run `make manifests`, or point --crds at the CRD manifests", o.crds)
	}
	return nil
}

// prepareDir returns the state directory and a function that removes it. An
// empty path makes a new temporary directory; a given path must be absent
// (it is created, then removed) or empty (its contents are removed).
func prepareDir(path string) (string, func() error, error) {
	if path == "" {
		dir, err := os.MkdirTemp("", "fairqueue-localcp-")
		if err != nil {
			return "", nil, err
		}
		return dir, func() error { return os.RemoveAll(dir) }, nil
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	entries, err := os.ReadDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(path, 0o700); err != nil {
			return "", nil, err
		}
		return path, func() error { return os.RemoveAll(path) }, nil
	case err != nil:
		return "", nil, fmt.Errorf("--dir %s: %w", path, err)
	case len(entries) > 0:
		return "", nil, fmt.Errorf("--dir %s is not empty and would be removed on exit: give an empty or new directory", path)
	}
	return path, func() error {
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		var errs []error
		for _, e := range entries {
			errs = append(errs, os.RemoveAll(filepath.Join(path, e.Name())))
		}
		return errors.Join(errs...)
	}, nil
}
