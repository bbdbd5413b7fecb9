package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/controllers"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

func newRenderCommand(g *globals) *cobra.Command {
	var diff bool
	cmd := &cobra.Command{
		Use:   "render POLICY",
		Short: "The rendered data-plane config, as the operator writes it",
		Long: "Render a FairQueuePolicy with the operator's renderer, from the policy, the Secrets it references and\n" +
			"its hash-key Secret, and print the config.json the operator writes into <policy>-dataplane.\n" +
			"Needs get on the policy and on those Secrets. With --diff, exits 1 when the ConfigMap in the\n" +
			"cluster holds something else.",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRender(cmd.Context(), g, args, diff, g.streams.Out)
		},
	}
	cmd.Flags().BoolVar(&diff, "diff", false, "compare with the ConfigMap in the cluster: print 'up to date' or the two hashes, exit 1 when they differ")
	return cmd
}

// errDiffers is returned by render --diff when the ConfigMap is stale.
var errDiffers = errors.New("the ConfigMap differs from the render: the operator has not written it yet, or cannot (see kubectl fairqueue status)")

func runRender(ctx context.Context, g *globals, args []string, diff bool, out io.Writer) error {
	name, err := onePolicy("render", args)
	if err != nil {
		return err
	}
	if err := g.connect(); err != nil {
		return err
	}
	ctx, cancel := g.bounded(ctx)
	defer cancel()
	p, r, _, err := g.renderPolicy(ctx, name)
	if err != nil {
		return err
	}
	if !diff {
		_, err = out.Write(r.Data)
		return err
	}
	cm := &corev1.ConfigMap{}
	cmName := controllers.ConfigMapName(p.Name)
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: cmName}, cm); err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", p.Namespace, cmName, err)
	}
	if cm.Data[config.ConfigMapKey] == string(r.Data) {
		_, err = fmt.Fprintf(out, "up to date: ConfigMap %s/%s holds the render (config hash %s)\n", p.Namespace, cmName, r.Hash)
		return err
	}
	_, _ = fmt.Fprintf(out, "ConfigMap %s/%s is stale: it holds config hash %s, the render gives %s\n",
		p.Namespace, cmName, orDefault(cm.Annotations[config.ConfigHashAnnotation], "(none)"), r.Hash)
	return errDiffers
}

// secretData reads one data key of a Secret in the policy's namespace.
func (g *globals) secretData(ctx context.Context, name, key string) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: name}, sec); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("hash-key Secret %s/%s not found; the operator creates it on the policy's first render", g.namespace, name)
		}
		return nil, fmt.Errorf("reading Secret %s/%s (needs get on secrets): %w", g.namespace, name, err)
	}
	v, ok := sec.Data[key]
	if !ok || len(v) == 0 {
		return nil, fmt.Errorf("hash-key Secret %s/%s has no data key %q", g.namespace, name, key)
	}
	return v, nil
}

// renderPolicy reads the named policy, its Secrets and its hash key, and
// renders it as the operator does.
func (g *globals) renderPolicy(ctx context.Context, name string) (*fqv1alpha1.FairQueuePolicy, *render.Rendered, []byte, error) {
	p, err := g.getPolicy(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := g.secretData(ctx, p.HashKeySecretName(), fqv1alpha1.HashKeySecretKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the hash key: %w", err)
	}
	in := render.Input{Policy: p, HashKey: key, HashKeySecret: p.HashKeySecretName(), Secrets: map[string]*corev1.Secret{}}
	for _, s := range render.ReferencedSecrets(p) {
		sec := &corev1.Secret{}
		err := g.client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: s}, sec)
		switch {
		case client.IgnoreNotFound(err) == nil && err != nil:
			// Render reports the missing Secret in the operator's words.
		case err != nil:
			return nil, nil, nil, fmt.Errorf("reading Secret %s/%s (needs get on secrets): %w", p.Namespace, s, err)
		default:
			in.Secrets[s] = sec
		}
	}
	r, err := render.Render(in)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the operator cannot render %s/%s either: %w", p.Namespace, p.Name, err)
	}
	return p, r, key, nil
}
