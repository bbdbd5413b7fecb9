// Command kubectl-fairqueue is the `kubectl fairqueue` plugin: it shows a
// FairQueuePolicy's rollout across its data-plane replicas, its live queues,
// renders a policy as the operator would and simulates it under a load.
//
// Install it on PATH with
//
//	go install github.com/fairqueue/fairqueue/cmd/kubectl-fairqueue@latest
//
// and run `kubectl fairqueue --help`. It is built like kubectl's own
// commands: cobra for the command line, k8s.io/cli-runtime for the standard
// kubectl flags (--kubeconfig, --context, -n, --as, --token, --server,
// --request-timeout, ...) and for the -o json|yaml printers.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/version"
)

// binary names the plugin in errors and in --version.
const binary = "kubectl-fairqueue"

// defaultRequestTimeout is --request-timeout's default: every API call and
// every scrape is bounded unless the user says otherwise (0: no bound).
const defaultRequestTimeout = "30s"

func main() {
	cli.Main(binary, func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}

// run runs the plugin with args, as main does with the process's.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return execute(ctx, newGlobals(genericiooptions.IOStreams{In: os.Stdin, Out: stdout, ErrOut: stderr}), args)
}

// execute runs the plugin's commands with g's flags and clients.
func execute(ctx context.Context, g *globals, args []string) error {
	cmd := newRootCommand(g)
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

func newGlobals(streams genericiooptions.IOStreams) *globals {
	g := &globals{configFlags: genericclioptions.NewConfigFlags(true), streams: streams}
	g.configFlags.Timeout = ptr.To(defaultRequestTimeout)
	return g
}

const rootHelp = `kubectl fairqueue inspects fairqueue's FairQueuePolicies and their data planes: a policy's rollout
across its replicas (status), their live queues (top), the config the operator renders (render), and
what a policy would do under an offered load (simulate).`

func newRootCommand(g *globals) *cobra.Command {
	streams := g.streams
	var showVersion bool
	root := &cobra.Command{
		Use:         "fairqueue",
		Short:       "Inspect fairqueue's FairQueuePolicies and their data planes",
		Long:        rootHelp,
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fairqueue"},
		// Usage is for mistakes on the command line (see SetFlagErrorFunc),
		// not for an API server that cannot be reached; main prints errors.
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		// Only --version or --help get here; cobra prints help for the rest.
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				_, err := fmt.Fprintln(streams.Out, version.Line(binary))
				return err
			}
			return cmd.Help()
		},
		PersistentPreRunE: func(*cobra.Command, []string) error {
			d, err := clientcmd.ParseTimeout(*g.configFlags.Timeout)
			if err != nil {
				return fmt.Errorf("--request-timeout %q is not a duration such as 30s or 2m (0 means no timeout): %w", *g.configFlags.Timeout, err)
			}
			g.timeout = d
			return nil
		},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage", err, c.CommandPath())
	})
	root.CompletionOptions.DisableDefaultCmd = true
	// Not cobra's Version: its template would link text/template, which
	// keeps every exported method in the binary and doubles its size.
	root.Flags().BoolVar(&showVersion, "version", false, "print the version (module version, VCS revision) and exit")
	g.configFlags.AddFlags(root.PersistentFlags())
	root.AddCommand(newStatusCommand(g), newTopCommand(g), newRenderCommand(g), newSimulateCommand(g), newVersionCommand(g))
	return root
}

// globals are the standard kubectl flags every command accepts, and the
// clients they select.
type globals struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams

	// namespace holds the policies named: -n, else the kubeconfig
	// context's. timeout bounds each API call and scrape (--request-timeout;
	// 0: unbounded).
	namespace string
	timeout   time.Duration

	// client and kube are built by connect, like kubectl's.
	client client.Client
	kube   kubernetes.Interface
}

// connect builds the API clients and resolves the namespace from the
// standard flags and the kubeconfig, like kubectl.
func (g *globals) connect() error {
	if g.namespace == "" {
		ns, _, err := g.configFlags.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			return fmt.Errorf("finding the namespace in the kubeconfig (set --kubeconfig or $KUBECONFIG, or pass -n NAMESPACE): %w", err)
		}
		g.namespace = ns
	}
	if g.client != nil {
		return nil
	}
	rc, err := g.configFlags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig (set --kubeconfig or $KUBECONFIG, or --server with --token): %w", err)
	}
	rc.UserAgent = binary
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := fqv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	if g.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	g.client = c
	return nil
}

// bounded derives a context that ends after --request-timeout, if one is set.
func (g *globals) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, g.timeout)
}

// withTimeout is context.WithTimeout where 0 means no timeout, as in
// --request-timeout.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// onePolicy checks that exactly one POLICY argument was given.
func onePolicy(verb string, args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("%s takes one POLICY name, got %d arguments; list policies with kubectl get fairqueuepolicies", verb, len(args))
	}
	return args[0], nil
}

// getPolicy reads the named policy, with an error that says what to do.
func (g *globals) getPolicy(ctx context.Context, name string) (*fqv1alpha1.FairQueuePolicy, error) {
	p := &fqv1alpha1.FairQueuePolicy{}
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: name}, p); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("FairQueuePolicy %s/%s not found; list them with kubectl get fairqueuepolicies -n %s, or pass -n NAMESPACE",
				g.namespace, name, g.namespace)
		}
		return nil, fmt.Errorf("reading FairQueuePolicy %s/%s: %w", g.namespace, name, err)
	}
	return p, nil
}

func newVersionCommand(g *globals) *cobra.Command {
	out := &outputFlag{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The plugin's version and the VCS revision it was built from",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out.table() {
				_, err := fmt.Fprintln(g.streams.Out, version.Line(binary))
				return err
			}
			return out.print(g.streams.Out, versionOutput{APIVersion: outputAPIVersion, Kind: "Version", Info: version.Get()})
		},
	}
	out.add(cmd, "")
	return cmd
}

// versionOutput is `kubectl fairqueue version -o json|yaml`.
type versionOutput struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	version.Info
}
