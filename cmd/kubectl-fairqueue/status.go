package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// now is the clock ages are computed against.
var now = time.Now

func newStatusCommand(g *globals) *cobra.Command {
	var all bool
	out := &outputFlag{}
	cmd := &cobra.Command{
		Use:   "status [POLICY]",
		Short: "Conditions, config hash and each data-plane replica's loaded config",
		Long: "Show a FairQueuePolicy's conditions and rendered config hash, and for each data-plane replica\n" +
			"(from its report Lease) the config hash it runs, whether that is the current one, when it last\n" +
			"reported and whether it is live (Lease unexpired). With spec.capacity, each backend's maxInFlight and\n" +
			"saturation signals (the metrics URL polled, interval, staleAfter, each signal's max). Needs get on the\n" +
			"policy and list on leases.\n\n" +
			"Without POLICY, list the policies of the namespace (-A: of every namespace), one line each.\n" +
			"-o json|yaml prints PolicyStatus objects (apiVersion kubectl-fairqueue/v1; a List without POLICY);\n" +
			"-o wide adds columns.",
		Example: "  kubectl fairqueue status llm -n team-a\n" +
			"  kubectl fairqueue status -A\n" +
			"  kubectl fairqueue status llm -o json | jq .replicas",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return fmt.Errorf("status %s names one policy in one namespace; drop -A (--all-namespaces), or drop POLICY to list them all", args[0])
			}
			if err := g.connect(); err != nil {
				return err
			}
			ctx, cancel := g.bounded(cmd.Context())
			defer cancel()
			if len(args) == 0 {
				return runStatusList(ctx, g, all, out)
			}
			return runStatus(ctx, g, args[0], out)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "without POLICY, list the policies of every namespace")
	out.add(cmd, "", "wide")
	return cmd
}

// PolicyStatus is `kubectl fairqueue status -o json|yaml`: a policy's
// status as the operator wrote it, and its replicas' reports.
type PolicyStatus struct {
	// APIVersion is "kubectl-fairqueue/v1"; Kind is "PolicyStatus".
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	// Generation is the policy's; ObservedGeneration, the one the operator
	// last rendered.
	Generation         int64             `json:"generation"`
	ObservedGeneration int64             `json:"observedGeneration"`
	FairQueuing        FairQueuingOutput `json:"fairQueuing"`
	// ConfigHash is the rendered config's; empty until the first render.
	ConfigHash      string `json:"configHash"`
	ConfigMap       string `json:"configMap"`
	WeightedTenants int32  `json:"weightedTenants"`
	// LiveReplicas and UpdatedReplicas are the operator's counts of the
	// live replicas and of those on the current config.
	LiveReplicas    int32              `json:"liveReplicas"`
	UpdatedReplicas int32              `json:"updatedReplicas"`
	Conditions      []metav1.Condition `json:"conditions"`
	// Replicas are the data-plane report Leases, by replica name.
	Replicas []ReplicaStatus `json:"replicas"`
	// Bands are the policy's priority bands, highest first, and
	// RequestBandHeader the header with which a request may lower its band;
	// both absent without bands.
	Bands             []BandStatus `json:"bands,omitempty"`
	RequestBandHeader string       `json:"requestBandHeader,omitempty"`
	// Capacity is the policy's capacity mode (spec.capacity) with its
	// defaults resolved; absent without it.
	Capacity *CapacityStatus `json:"capacity,omitempty"`
}

// ReplicaStatus is one data-plane replica's report.
type ReplicaStatus struct {
	// Name is the replica's pod; Lease, its report Lease.
	Name  string `json:"name"`
	Lease string `json:"lease"`
	// ConfigHash is the config the replica runs (empty: none reported);
	// Current, whether that is the policy's.
	ConfigHash string `json:"configHash"`
	Current    bool   `json:"current"`
	// LastReport is when the replica last renewed its Lease (null: never),
	// LeaseDurationSeconds how long a report holds, and Live whether the
	// last one still does.
	LastReport           *metav1.Time `json:"lastReport"`
	LeaseDurationSeconds int32        `json:"leaseDurationSeconds"`
	Live                 bool         `json:"live"`
}

// PolicyStatusList is `kubectl fairqueue status -o json|yaml` without
// POLICY, in kubectl's List shape.
type PolicyStatusList struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Items      []PolicyStatus `json:"items"`
}

// replicaLeases lists the data-plane report Leases in namespace (all of
// them when it is empty), of one policy when policy is set.
func replicaLeases(ctx context.Context, g *globals, namespace, policy string) ([]coordinationv1.Lease, error) {
	labels := client.MatchingLabels{reload.LeaseComponentLabel: reload.LeaseComponentValue}
	if policy != "" {
		labels[reload.LeasePolicyLabel] = policy
	}
	var leases coordinationv1.LeaseList
	if err := g.client.List(ctx, &leases, client.InNamespace(namespace), labels); err != nil {
		return nil, fmt.Errorf("listing the data-plane report Leases in %s (needs list on leases.coordination.k8s.io): %w", orDefault(namespace, "all namespaces"), err)
	}
	return leases.Items, nil
}

// policyStatus puts a policy and its replicas' Leases together as of t.
func policyStatus(p *fqv1alpha1.FairQueuePolicy, leases []coordinationv1.Lease, t time.Time) PolicyStatus {
	s := PolicyStatus{
		APIVersion: outputAPIVersion, Kind: "PolicyStatus", Namespace: p.Namespace, Name: p.Name,
		Generation: p.Generation, ObservedGeneration: p.Status.ObservedGeneration,
		FairQueuing: FairQueuingOutput{Enabled: p.Spec.FairQueuing.Enabled, TenantDimension: orDefault(string(p.Spec.FairQueuing.TenantDimension), "user")},
		ConfigHash:  p.Status.ConfigHash, ConfigMap: p.Status.ConfigMapName, WeightedTenants: p.Status.WeightedTenants,
		LiveReplicas: p.Status.DataPlaneReplicas, UpdatedReplicas: p.Status.UpdatedReplicas,
		Conditions: p.Status.Conditions, Replicas: []ReplicaStatus{},
		Bands: bandStatuses(&p.Spec.FairQueuing), Capacity: capacityStatus(&p.Spec),
	}
	if len(s.Bands) > 0 {
		s.RequestBandHeader = p.Spec.FairQueuing.RequestBandHeader
	}
	if s.Conditions == nil {
		s.Conditions = []metav1.Condition{}
	}
	for i := range leases {
		l := &leases[i]
		r := ReplicaStatus{Name: holder(l), Lease: l.Name, ConfigHash: l.Annotations[reload.LeaseConfigHashAnnotation]}
		r.Current = s.ConfigHash != "" && r.ConfigHash == s.ConfigHash
		if l.Spec.LeaseDurationSeconds != nil {
			r.LeaseDurationSeconds = *l.Spec.LeaseDurationSeconds
		}
		if l.Spec.RenewTime != nil {
			r.LastReport = &metav1.Time{Time: l.Spec.RenewTime.Time}
			r.Live = l.Spec.LeaseDurationSeconds != nil && t.Before(r.LastReport.Add(time.Duration(r.LeaseDurationSeconds)*time.Second))
		}
		s.Replicas = append(s.Replicas, r)
	}
	sort.Slice(s.Replicas, func(i, j int) bool { return s.Replicas[i].Name < s.Replicas[j].Name })
	return s
}

func runStatus(ctx context.Context, g *globals, name string, out *outputFlag) error {
	p, err := g.getPolicy(ctx, name)
	if err != nil {
		return err
	}
	leases, err := replicaLeases(ctx, g, g.namespace, name)
	if err != nil {
		return err
	}
	s := policyStatus(p, leases, now())
	if !out.table() {
		return out.print(g.streams.Out, s)
	}
	return printStatus(g.streams.Out, &s, out.format == "wide")
}

// printStatus writes one policy's status for people; wide adds each
// replica's Lease and the time of its last report.
func printStatus(out io.Writer, s *PolicyStatus, wide bool) error {
	t := now()
	w := newTable(out)
	w.printf("Policy:\t%s/%s (generation %d, observed %d)\n", s.Namespace, s.Name, s.Generation, s.ObservedGeneration)
	w.printf("Fair queuing:\t%v (tenant dimension %s)\n", s.FairQueuing.Enabled, s.FairQueuing.TenantDimension)
	w.printf("Config hash:\t%s\n", orDefault(s.ConfigHash, "(not rendered yet)"))
	if s.ConfigMap != "" {
		w.printf("ConfigMap:\t%s\n", s.ConfigMap)
	}
	w.printf("Weighted tenants:\t%d\n", s.WeightedTenants)
	w.printf("Replicas:\t%d live, %d on the current config\n", s.LiveReplicas, s.UpdatedReplicas)
	printCapacityLine(w, s)
	printBandStatus(w, s)
	printCapacityStatus(w, s, wide)
	w.printf("\nCONDITION\tSTATUS\tREASON\tAGE\tMESSAGE\n")
	for _, c := range s.Conditions {
		w.printf("%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(t, c.LastTransitionTime.Time), c.Message)
	}
	if len(s.Conditions) == 0 {
		w.printf("(none: is the operator running and watching this namespace?)\n")
	}
	extra := ""
	if wide {
		extra = "\tLEASE\tRENEWED AT\tLEASE DURATION"
	}
	w.printf("\nREPLICA\tCONFIG HASH\tCURRENT\tLAST REPORT\tLIVE%s\n", extra)
	for _, r := range s.Replicas {
		var last time.Time
		if r.LastReport != nil {
			last = r.LastReport.Time
		}
		live := "no (expired)"
		if r.Live {
			live = "yes"
		}
		if wide {
			renewed := "-"
			if !last.IsZero() {
				renewed = last.UTC().Format(time.RFC3339)
			}
			extra = fmt.Sprintf("\t%s\t%s\t%ds", r.Lease, renewed, r.LeaseDurationSeconds)
		}
		w.printf("%s\t%s\t%s\t%s\t%s%s\n", r.Name, orDefault(r.ConfigHash, "-"), yesNo(r.Current), age(t, last), live, extra)
	}
	if len(s.Replicas) == 0 {
		w.printf("(no data-plane replica reports for this policy: are the data planes running with --configmap and POD_NAME?)\n")
	}
	return w.flush()
}

// runStatusList lists the policies of the namespace, or of all with -A.
func runStatusList(ctx context.Context, g *globals, all bool, out *outputFlag) error {
	ns := g.namespace
	if all {
		ns = ""
	}
	var policies fqv1alpha1.FairQueuePolicyList
	if err := g.client.List(ctx, &policies, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing FairQueuePolicies in %s (needs list on fairqueuepolicies.fairqueue.dev): %w", orDefault(ns, "all namespaces"), err)
	}
	leases, err := replicaLeases(ctx, g, ns, "")
	if err != nil {
		return err
	}
	byPolicy := map[client.ObjectKey][]coordinationv1.Lease{}
	for _, l := range leases {
		k := client.ObjectKey{Namespace: l.Namespace, Name: l.Labels[reload.LeasePolicyLabel]}
		byPolicy[k] = append(byPolicy[k], l)
	}
	t := now()
	list := PolicyStatusList{APIVersion: "v1", Kind: "List", Items: make([]PolicyStatus, 0, len(policies.Items))}
	for i := range policies.Items {
		p := &policies.Items[i]
		list.Items = append(list.Items, policyStatus(p, byPolicy[client.ObjectKeyFromObject(p)], t))
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	if !out.table() {
		return out.print(g.streams.Out, list)
	}
	if len(list.Items) == 0 {
		_, err := fmt.Fprintf(g.streams.ErrOut, "No FairQueuePolicies found in %s.\n", orDefault(ns, "any namespace"))
		return err
	}
	return printStatusList(g.streams.Out, list.Items, all, out.format == "wide")
}

// printStatusList writes one line per policy, as kubectl get does.
func printStatusList(out io.Writer, items []PolicyStatus, all, wide bool) error {
	w := newTable(out)
	col := func(allCol, cols, wideCols string) {
		if all {
			w.printf("%s\t", allCol)
		}
		w.printf("%s", cols)
		if wide {
			w.printf("\t%s", wideCols)
		}
		w.printf("\n")
	}
	col("NAMESPACE", "NAME\tREADY\tCONFIG HASH\tREPLICAS\tUPDATED\tREPORTING", "FAIR QUEUING\tTENANT DIMENSION\tWEIGHTED TENANTS\tBANDS\tCAPACITY\tCONFIGMAP")
	for _, s := range items {
		ready := "Unknown"
		if c := meta.FindStatusCondition(s.Conditions, fqv1alpha1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		col(s.Namespace,
			fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d", s.Name, ready, orDefault(s.ConfigHash, "-"), s.LiveReplicas, s.UpdatedReplicas, len(s.Replicas)),
			fmt.Sprintf("%v\t%s\t%d\t%s\t%s\t%s", s.FairQueuing.Enabled, s.FairQueuing.TenantDimension, s.WeightedTenants, bandList(s.Bands),
				capacityList(s.Capacity), orDefault(s.ConfigMap, "-")))
	}
	return w.flush()
}

// printer writes the tab-separated lines of a table and keeps the first
// write error, so a print function checks once, at flush.
type printer struct {
	tw  *tabwriter.Writer
	err error
}

// newTable returns a printer aligning its columns as kubectl's tables do.
func newTable(out io.Writer) *printer {
	return &printer{tw: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.tw, format, args...)
	}
}

// flush writes out the aligned table, or returns the first write error.
func (p *printer) flush() error {
	if p.err != nil {
		return p.err
	}
	return p.tw.Flush()
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
