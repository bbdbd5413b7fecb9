// Command kubectl-fairqueue is the `kubectl fairqueue` plugin: it shows a
// FairQueuePolicy's rollout across its data-plane replicas and renders a
// policy as the operator would.
//
// Install it on PATH with
//
//	go install github.com/fairqueue/fairqueue/cmd/kubectl-fairqueue@latest
//
// and run `kubectl fairqueue --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// requestTimeout bounds every verb's API calls.
const requestTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// verb is one subcommand.
type verb struct {
	name, args, short, long string
	run                     func(ctx context.Context, g *globals, args []string, stdout io.Writer) error
	flags                   func(fs *flag.FlagSet)
}

func verbs() []*verb {
	return []*verb{statusVerb(), topVerb(), renderVerb(), simulateVerb()}
}

const usage = `kubectl fairqueue: inspect fairqueue's FairQueuePolicies and their data planes.

Usage:
  kubectl fairqueue VERB [POLICY] [flags]

Verbs:
%s
Global flags (every verb):
  -n, --namespace NS   the policy's namespace (default: the kubeconfig context's)
  --kubeconfig FILE    kubeconfig file (default: $KUBECONFIG or ~/.kube/config)
  --context NAME       kubeconfig context to use

Run "kubectl fairqueue VERB --help" for a verb's flags.
`

// globals are the flags every verb accepts, and the client they select.
type globals struct {
	namespace, kubeconfig, context string
	stderr                         io.Writer

	// client and kube are built by connect from the kubeconfig, like kubectl's.
	client client.Client
	kube   kubernetes.Interface
}

func addGlobals(fs *flag.FlagSet, g *globals) {
	fs.StringVar(&g.namespace, "namespace", "", "the policy's namespace (default: the kubeconfig context's)")
	fs.StringVar(&g.namespace, "n", "", "shorthand for --namespace")
	fs.StringVar(&g.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&g.context, "context", "", "kubeconfig context to use")
}

// run dispatches args to a verb.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	all := verbs()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		var b strings.Builder
		for _, v := range all {
			fmt.Fprintf(&b, "  %-9s %s\n", v.name, v.short)
		}
		_, _ = fmt.Fprintf(stdout, usage, b.String())
		if len(args) == 0 {
			return errors.New("no verb given: run kubectl fairqueue --help")
		}
		return nil
	}
	for _, v := range all {
		if v.name != args[0] {
			continue
		}
		g := &globals{stderr: stderr}
		fs := flag.NewFlagSet("kubectl fairqueue "+v.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		addGlobals(fs, g)
		if v.flags != nil {
			v.flags(fs)
		}
		fs.Usage = func() {
			_, _ = fmt.Fprintf(stderr, "%s\n\nUsage:\n  kubectl fairqueue %s %s [flags]\n\nFlags:\n", v.long, v.name, v.args)
			fs.PrintDefaults()
		}
		pos, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		return v.run(ctx, g, pos, stdout)
	}
	return fmt.Errorf("unknown verb %q: run kubectl fairqueue --help for the verbs", args[0])
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments, as kubectl allows, and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// connect builds the API client and resolves the namespace from the
// kubeconfig, like kubectl.
func (g *globals) connect() error {
	if g.client != nil {
		return nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig (set --kubeconfig or $KUBECONFIG): %w", err)
	}
	rc.UserAgent = "kubectl-fairqueue"
	rc.Timeout = requestTimeout
	if g.namespace == "" {
		if g.namespace, _, err = cc.Namespace(); err != nil {
			return fmt.Errorf("finding the namespace (pass -n NAMESPACE): %w", err)
		}
	}
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
