package main

import (
	"fmt"
	"strings"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// BandStatus is one priority band of a policy, in `status -o json|yaml`.
type BandStatus struct {
	Name     string  `json:"name"`
	MinShare float64 `json:"minShare"`
	// Default is whether tenants no weights entry or band Secret places are
	// in this band.
	Default bool `json:"default"`
	// Weights name the weights entries that place a tenant in the band:
	// the identity, or for API keys the ${VAR} it comes from (weights[i]
	// for a literal key), never a raw key.
	Weights []string `json:"weights"`
	// Secrets name the weightsFrom Secrets every identity of which is in
	// the band.
	Secrets []string `json:"secrets"`
}

// weightName names weights entry i of fq for people: its identity, or for
// API keys the ${VAR} it comes from (weights[i] for a literal key), so that
// no raw API key is printed.
func weightName(fq *fqv1alpha1.FairQueuing, i int) string {
	w := fq.Weights[i]
	if fq.TenantDimension != fqv1alpha1.TenantDimensionAPIKey {
		return w.Identity
	}
	if refs := fqv1alpha1.VarRefs(w.Identity); len(refs) > 0 {
		return "${" + strings.Join(refs, "}${") + "}"
	}
	return fmt.Sprintf("weights[%d]", i)
}

// bandStatuses lists fq's bands, highest first, with their members as the
// spec places them; nil without bands.
func bandStatuses(fq *fqv1alpha1.FairQueuing) []BandStatus {
	if len(fq.PriorityBands) == 0 {
		return nil
	}
	def := fq.EffectiveDefaultBand()
	out := make([]BandStatus, len(fq.PriorityBands))
	index := map[string]int{}
	for i, b := range fq.PriorityBands {
		out[i] = BandStatus{Name: b.Name, MinShare: b.MinShare, Default: b.Name == def, Weights: []string{}, Secrets: []string{}}
		index[b.Name] = i
	}
	for i, w := range fq.Weights {
		if b, ok := index[w.Band]; ok {
			out[b].Weights = append(out[b].Weights, weightName(fq, i))
		}
	}
	for _, s := range fq.WeightsFrom {
		if b, ok := index[s.Band]; ok {
			out[b].Secrets = append(out[b].Secrets, s.SecretRef.Name)
		}
	}
	return out
}

// bandList names the bands highest first, as "interactive>batch"; "-"
// without bands.
func bandList(bands []BandStatus) string {
	names := make([]string, len(bands))
	for i, b := range bands {
		names[i] = b.Name
	}
	return orDefault(strings.Join(names, ">"), "-")
}

// printBandStatus writes the bands section of `status POLICY`.
func printBandStatus(w *printer, s *PolicyStatus) {
	if len(s.Bands) == 0 {
		return
	}
	header := orDefault(s.RequestBandHeader, "none (requests keep their tenant's band)")
	w.printf("Priority bands:\t%s (highest first); request band header: %s\n", strings.ReplaceAll(bandList(s.Bands), ">", " > "), header)
	w.printf("\nBAND\tMIN SHARE\tMEMBERS\n")
	for _, b := range s.Bands {
		var members []string
		if len(b.Weights) > 0 {
			members = append(members, "weights: "+strings.Join(b.Weights, ", "))
		}
		for _, sec := range b.Secrets {
			members = append(members, "every identity in Secret "+sec)
		}
		if b.Default {
			members = append(members, "every tenant placed in no band")
		}
		w.printf("%s\t%s\t%s\n", bandLabel(b.Name, b.Default), fraction(b.MinShare), orDefault(strings.Join(members, "; "), "-"))
	}
}
