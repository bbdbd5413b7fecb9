package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// now is the clock ages are computed against.
var now = time.Now

func statusVerb() *verb {
	return &verb{
		name: "status", args: "POLICY",
		short: "conditions, config hash and each data-plane replica's loaded config",
		long: "Show a FairQueuePolicy's conditions and rendered config hash, and for each data-plane replica\n" +
			"(from its report Lease) the config hash it runs, whether that is the current one, when it last\n" +
			"reported and whether it is live (Lease unexpired).",
		run: runStatus,
	}
}

func runStatus(ctx context.Context, g *globals, args []string, out io.Writer) error {
	name, err := onePolicy("status", args)
	if err != nil {
		return err
	}
	if err := g.connect(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	p, err := g.getPolicy(ctx, name)
	if err != nil {
		return err
	}
	var leases coordinationv1.LeaseList
	if err := g.client.List(ctx, &leases, client.InNamespace(g.namespace), client.MatchingLabels{
		reload.LeasePolicyLabel: name, reload.LeaseComponentLabel: reload.LeaseComponentValue,
	}); err != nil {
		return fmt.Errorf("listing the data-plane report Leases in %s (needs list on leases.coordination.k8s.io): %w", g.namespace, err)
	}
	t := now()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	w := &printer{w: tw}
	w.printf("Policy:\t%s/%s (generation %d, observed %d)\n", p.Namespace, p.Name, p.Generation, p.Status.ObservedGeneration)
	w.printf("Fair queuing:\t%v (tenant dimension %s)\n", p.Spec.FairQueuing.Enabled, orDefault(string(p.Spec.FairQueuing.TenantDimension), "user"))
	hash := p.Status.ConfigHash
	w.printf("Config hash:\t%s\n", orDefault(hash, "(not rendered yet)"))
	if p.Status.ConfigMapName != "" {
		w.printf("ConfigMap:\t%s\n", p.Status.ConfigMapName)
	}
	w.printf("Weighted tenants:\t%d\n", p.Status.WeightedTenants)
	w.printf("Replicas:\t%d live, %d on the current config\n", p.Status.DataPlaneReplicas, p.Status.UpdatedReplicas)
	w.printf("\nCONDITION\tSTATUS\tREASON\tAGE\tMESSAGE\n")
	for _, c := range p.Status.Conditions {
		w.printf("%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(t, c.LastTransitionTime.Time), c.Message)
	}
	if len(p.Status.Conditions) == 0 {
		w.printf("(none: is the operator running and watching this namespace?)\n")
	}
	items := leases.Items
	sort.Slice(items, func(i, j int) bool { return holder(&items[i]) < holder(&items[j]) })
	w.printf("\nREPLICA\tCONFIG HASH\tCURRENT\tLAST REPORT\tLIVE\n")
	for i := range items {
		l := &items[i]
		loaded := l.Annotations[reload.LeaseConfigHashAnnotation]
		var last time.Time
		if l.Spec.RenewTime != nil {
			last = l.Spec.RenewTime.Time
		}
		live := "no (expired)"
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
			t.Before(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)) {
			live = "yes"
		}
		w.printf("%s\t%s\t%s\t%s\t%s\n", holder(l), orDefault(loaded, "-"), yesNo(hash != "" && loaded == hash), age(t, last), live)
	}
	if len(items) == 0 {
		w.printf("(no data-plane replica reports for this policy: are the data planes running with --configmap and POD_NAME?)\n")
	}
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

// printer writes formatted lines and keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		return *l.Spec.HolderIdentity
	}
	return l.Name
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
