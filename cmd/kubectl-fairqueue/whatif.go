package main

import (
	"context"
	"io"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// SimulationComparison is `kubectl fairqueue simulate --move-tenant -o
// json|yaml`: the policy simulated as it is (Before) and with the tenants
// moved (After), on the same arrivals.
type SimulationComparison struct {
	// APIVersion is "kubectl-fairqueue/v1"; Kind is "SimulationComparison".
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Moves are the tenants moved, with the band each was in and is moved to.
	Moves  []TenantMove     `json:"moves"`
	Before SimulationOutput `json:"before"`
	After  SimulationOutput `json:"after"`
}

// TenantMove is one tenant moved between bands.
type TenantMove struct {
	Tenant string `json:"tenant"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// runWhatIf simulates cfg and cfg with moves applied, on the same arrivals
// (the same seed), and prints both.
func runWhatIf(ctx context.Context, w io.Writer, out *outputFlag, cfg *config.Config, key []byte, load *Load, opts SimOptions, moves []bandMove) error {
	moved, err := moveTenants(cfg, key, load, moves)
	if err != nil {
		return err
	}
	before, err := Simulate(ctx, cfg, key, load, opts)
	if err != nil {
		return err
	}
	after, err := Simulate(ctx, moved, key, load, opts)
	if err != nil {
		return err
	}
	c := SimulationComparison{APIVersion: outputAPIVersion, Kind: "SimulationComparison",
		Before: simulationOutput(cfg, load, before), After: simulationOutput(moved, load, after)}
	for _, m := range moves {
		for i, t := range before.Tenants {
			if t.Name == m.tenant {
				c.Moves = append(c.Moves, TenantMove{Tenant: m.tenant, From: t.Band, To: after.Tenants[i].Band})
			}
		}
	}
	if !out.table() {
		return out.print(w, c)
	}
	return printComparison(w, load, &c)
}

// printComparison writes the bands and tenants of a comparison, before and
// after side by side.
func printComparison(out io.Writer, load *Load, c *SimulationComparison) error {
	w := newTable(out)
	w.printf("Simulated %s of offered load, backend service time %s, twice on the same arrivals:\n", load.Duration.Duration, load.serviceTime())
	for _, m := range c.Moves {
		w.printf("  what if %s moves from band %s to band %s\n", m.Tenant, m.From, m.To)
	}
	w.printf("\nBAND\tADMITTED/S BEFORE\tAFTER\tSHARE BEFORE\tAFTER\tWAIT P99 BEFORE\tAFTER\tREFUSED/S BEFORE\tAFTER\n")
	for i, b := range c.Before.Bands {
		a := c.After.Bands[i]
		w.printf("%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%.1f\t%.1f\n", bandLabel(b.Name, b.Default), b.AdmittedPerSecond, a.AdmittedPerSecond,
			percentOf(b.Share, b.AdmittedPerSecond > 0), percentOf(a.Share, a.AdmittedPerSecond > 0),
			seconds(b.WaitP99Seconds), seconds(a.WaitP99Seconds), b.RefusedPerSecond, a.RefusedPerSecond)
	}
	w.printf("\nTENANT\tBAND BEFORE\tAFTER\tOFFERED/S\tADMITTED/S BEFORE\tAFTER\tSHARE BEFORE\tAFTER\tWAIT P99 BEFORE\tAFTER\n")
	for i, b := range c.Before.Tenants {
		a := c.After.Tenants[i]
		w.printf("%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\n", b.Name, orDefault(b.Band, "-"), orDefault(a.Band, "-"), b.OfferedPerSecond,
			b.AdmittedPerSecond, a.AdmittedPerSecond, percentOf(b.Share, b.AdmittedPerSecond > 0), percentOf(a.Share, a.AdmittedPerSecond > 0),
			seconds(b.WaitP99Seconds), seconds(a.WaitP99Seconds))
	}
	w.printf("\n%s\n", wrap("Both runs are steady-state over the same window and the same jittered arrivals (--seed); only the moved "+
		"tenants' bands differ. Bands are strict priority: a band is granted what the bands above it leave, or its minShare while backlogged.", 110))
	return w.flush()
}
