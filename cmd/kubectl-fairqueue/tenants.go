package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/render"
)

// tenantRow is one tenant's figures over a top window, summed over replicas.
type tenantRow struct {
	label, dim                   string
	grants, wait, queued, weight float64
	refused                      map[string]float64
}

// counterDelta is a counter's increase between two scrapes; a counter that
// went down was reset (its series deleted and created again), so all of its
// value is new, as PromQL's increase() counts it.
func counterDelta(after, before float64) float64 {
	if after >= before {
		return after - before
	}
	return after
}

// tenantRows sums each tenant's figures over the replicas scraped twice.
func tenantRows(before, after []replicaSample) map[string]*tenantRow {
	rows := map[string]*tenantRow{}
	for i := range after {
		b, a := before[i], after[i]
		if firstErr(b.err, a.err) != nil {
			continue
		}
		for label, at := range a.byTenant {
			bt := b.byTenant[label]
			if bt == nil {
				bt = &tenantSample{}
			}
			r := rows[label]
			if r == nil {
				r = &tenantRow{label: label, refused: map[string]float64{}}
				rows[label] = r
			}
			switch {
			case label == metrics.OtherTenant:
				r.dim = "all" // summed over the dimensions
			case at.dim != "":
				r.dim = at.dim
			}
			r.grants += counterDelta(at.grants, bt.grants)
			r.wait += counterDelta(at.wait, bt.wait)
			r.queued += at.queued
			r.weight = max(r.weight, at.weight)
			for reason, v := range at.refused {
				if d := counterDelta(v, bt.refused[reason]); d > 0 {
					r.refused[reason] += d
				}
			}
		}
	}
	return rows
}

// printTenants prints the per-tenant table: at most limit rows (0: all),
// busiest first, named from names (hash prefix to name) when given.
func printTenants(out io.Writer, before, after []replicaSample, interval time.Duration, limit int, names map[string]string) error {
	rows := tenantRows(before, after)
	if len(rows) == 0 {
		return nil // a data plane without per-tenant metrics
	}
	secs := interval.Seconds()
	var total, activeWeights float64
	list := make([]*tenantRow, 0, len(rows))
	for _, r := range rows {
		total += r.grants
		if r.weight > 0 && (r.grants > 0 || r.queued > 0) {
			activeWeights += r.weight
		}
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.grants != b.grants {
			return a.grants > b.grants
		}
		if a.queued != b.queued {
			return a.queued > b.queued
		}
		return a.label < b.label
	})
	w := newTable(out)
	name := ""
	if names != nil {
		name = "NAME\t"
	}
	w.printf("TENANT\t%sDIMENSION\tGRANTS/S\tSHARE\tWEIGHT\tWEIGHTED SHARE\tMEAN WAIT\tQUEUED\tREFUSED/S BY REASON\n", name)
	shown := 0
	for _, r := range list {
		if limit > 0 && shown == limit {
			break
		}
		shown++
		share, weight, wshare, wait := "-", "-", "-", "-"
		if total > 0 {
			share = fmt.Sprintf("%.1f%%", 100*r.grants/total)
		}
		if r.weight > 0 {
			weight = fmt.Sprintf("%.0f", r.weight)
			if activeWeights > 0 && (r.grants > 0 || r.queued > 0) {
				wshare = fmt.Sprintf("%.1f%%", 100*r.weight/activeWeights)
			}
		}
		if r.grants > 0 {
			wait = time.Duration(r.wait / r.grants * float64(time.Second)).Round(time.Millisecond).String()
		}
		var refused []string
		for reason, v := range r.refused {
			refused = append(refused, fmt.Sprintf("%s=%.1f", reason, v/secs))
		}
		sort.Strings(refused)
		if names != nil {
			name = orDefault(names[r.label], "-") + "\t"
		}
		w.printf("%s\t%s%s\t%.1f\t%s\t%s\t%s\t%s\t%.0f\t%s\n", r.label, name, orDefault(r.dim, "-"), r.grants/secs, share, weight, wshare,
			wait, r.queued, orDefault(strings.Join(refused, " "), "-"))
	}
	if more := len(list) - shown; more > 0 {
		w.printf("(%d more tenants; --tenants 0 shows all)\n", more)
	}
	w.printf("\n")
	return w.flush()
}

// resolveTenants maps the hash prefix of every weighted tenant of the policy
// to a name: its identity hashed with the policy's key, as the operator's
// renderer does. API keys are named by the ${VAR} they come from (or as a
// literal entry), never shown. It needs get on the hash-key and weightsFrom
// Secrets, and says so when it is missing.
func resolveTenants(ctx context.Context, g *globals, policy string) (map[string]string, error) {
	p, err := g.getPolicy(ctx, policy)
	if err != nil {
		return nil, err
	}
	fq := p.Spec.FairQueuing
	get := func(name, what string) (*corev1.Secret, error) {
		sec := &corev1.Secret{}
		err := g.client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, sec)
		switch {
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("--resolve needs get on secrets in namespace %s (the policy's %s Secret %q is forbidden to you): "+
				"ask for that permission, or run top without --resolve to see tenants by hash prefix: %w", p.Namespace, what, name, err)
		case err != nil:
			return nil, fmt.Errorf("--resolve: reading the policy's %s Secret %s/%s: %w", what, p.Namespace, name, err)
		}
		return sec, nil
	}
	keySecret, err := get(p.HashKeySecretName(), "hash-key")
	if err != nil {
		return nil, err
	}
	key := keySecret.Data[fqv1alpha1.HashKeySecretKey]
	if len(key) == 0 {
		return nil, fmt.Errorf("--resolve: the hash-key Secret %s/%s has no data key %q", p.Namespace, p.HashKeySecretName(), fqv1alpha1.HashKeySecretKey)
	}
	var sources []*corev1.Secret
	for _, src := range fq.WeightsFrom {
		sec, err := get(src.SecretRef.Name, "weightsFrom")
		if apierrors.IsNotFound(err) {
			continue // its entries stay unnamed, as the operator cannot render them either
		}
		if err != nil {
			return nil, err
		}
		sources = append(sources, sec)
	}
	lookup := render.SecretLookup(sources)
	names := make(map[string]string, len(fq.Weights))
	for i, w := range fq.Weights {
		id, err := fqv1alpha1.Expand(w.Identity, lookup)
		if err != nil || id == "" {
			continue
		}
		name := id
		if fq.TenantDimension == fqv1alpha1.TenantDimensionAPIKey {
			name = weightName(&fq, i)
		}
		names[identity.Short(identity.Hash(key, id))] = name
	}
	names[metrics.OtherTenant] = "(others)"
	return names, nil
}
