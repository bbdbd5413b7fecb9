package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/internal/loadgen"
)

// tenantHash returns the identity hash t is queued under in cfg, or false
// when fair queuing is off or t sends no identity of the tenant dimension.
func tenantHash(cfg *config.Config, key []byte, t loadgen.Tenant) (string, bool) {
	if !cfg.FairQueuing.Enabled {
		return "", false
	}
	var raw string
	switch cfg.FairQueuing.TenantDimension {
	case identity.DimensionAPIKey:
		raw = t.APIKey
	case identity.DimensionUser:
		raw = t.User
	case identity.DimensionTeam:
		raw = t.Team
	}
	if raw == "" {
		return "", false
	}
	return identity.Hash(key, raw), true
}

// weightEntry returns the index of hash's weights entry in cfg, or -1.
func weightEntry(cfg *config.Config, hash string) int {
	return slices.IndexFunc(cfg.FairQueuing.Weights, func(w config.Weight) bool { return w.TenantHash == hash })
}

// weightOf returns the weight the rendered config gives tenant t.
func weightOf(cfg *config.Config, key []byte, t loadgen.Tenant) int32 {
	h, ok := tenantHash(cfg, key, t)
	if !ok {
		return 0
	}
	if i := weightEntry(cfg, h); i >= 0 {
		return cfg.FairQueuing.Weights[i].Weight
	}
	return cfg.FairQueuing.DefaultWeight
}

// bandIndex returns the index of the band named name in cfg, or -1.
func bandIndex(cfg *config.Config, name string) int {
	return slices.IndexFunc(cfg.FairQueuing.Bands, func(b config.Band) bool { return b.Name == name })
}

// bandOf returns the band t's requests are scheduled in under cfg: its
// weights entry's, else the default band, lowered (never raised) by the
// request band header when t sends one naming a lower band, as the data
// plane does. Empty when cfg has no bands or t is not queued.
func bandOf(cfg *config.Config, key []byte, t loadgen.Tenant) string {
	fq := &cfg.FairQueuing
	h, ok := tenantHash(cfg, key, t)
	if !ok || len(fq.Bands) == 0 {
		return ""
	}
	band := fq.DefaultBand
	if i := weightEntry(cfg, h); i >= 0 && fq.Weights[i].Band != "" {
		band = fq.Weights[i].Band
	}
	if fq.RequestBandHeader != "" {
		for k, v := range t.Headers {
			if strings.EqualFold(k, fq.RequestBandHeader) && bandIndex(cfg, v) > bandIndex(cfg, band) {
				band = v
			}
		}
	}
	return band
}

// bandMove is one --move-tenant NAME=BAND.
type bandMove struct {
	tenant, band string
}

// parseMoves reads the --move-tenant flags.
func parseMoves(flags []string) ([]bandMove, error) {
	moves := make([]bandMove, 0, len(flags))
	for _, f := range flags {
		name, band, ok := strings.Cut(f, "=")
		if !ok || name == "" || band == "" {
			return nil, fmt.Errorf("--move-tenant %q: give NAME=BAND, the name of a tenant of the load file and a band of the policy, such as --move-tenant acme=batch", f)
		}
		if slices.ContainsFunc(moves, func(m bandMove) bool { return m.tenant == name }) {
			return nil, fmt.Errorf("--move-tenant moves tenant %q twice; give each tenant once", name)
		}
		moves = append(moves, bandMove{tenant: name, band: band})
	}
	return moves, nil
}

// moveTenants returns a copy of cfg in which each moved tenant of load is in
// its new band: its weights entry names the band, or, for a tenant without
// one, a new entry at the default weight does. Errors say which tenant or
// band is unknown and which there are.
func moveTenants(cfg *config.Config, key []byte, load *Load, moves []bandMove) (*config.Config, error) {
	out := cfg.DeepCopy()
	fq := &out.FairQueuing
	if len(fq.Bands) == 0 {
		return nil, fmt.Errorf("--move-tenant: the policy has no fairQueuing.priorityBands to move a tenant between; add them to the policy (or --policy-file) first")
	}
	var bands []string
	for _, b := range fq.Bands {
		bands = append(bands, b.Name)
	}
	lc := load.LoadgenConfig("http://sim")
	for _, m := range moves {
		i := slices.IndexFunc(lc.Tenants, func(t loadgen.Tenant) bool { return t.Name == m.tenant })
		if i < 0 {
			var names []string
			for _, t := range lc.Tenants {
				names = append(names, t.Name)
			}
			return nil, fmt.Errorf("--move-tenant %s=%s: the load file has no tenant %q; its tenants are %s", m.tenant, m.band, m.tenant, strings.Join(names, ", "))
		}
		if bandIndex(out, m.band) < 0 {
			return nil, fmt.Errorf("--move-tenant %s=%s: the policy has no band %q; its bands are %s", m.tenant, m.band, m.band, strings.Join(bands, ", "))
		}
		h, ok := tenantHash(out, key, lc.Tenants[i])
		if !ok {
			return nil, fmt.Errorf("--move-tenant %s=%s: tenant %s is not queued (fair queuing is off, or it sends no %s identity), so it has no band",
				m.tenant, m.band, m.tenant, fq.TenantDimension)
		}
		if e := weightEntry(out, h); e >= 0 {
			fq.Weights[e].Band = m.band
		} else {
			fq.Weights = append(fq.Weights, config.Weight{TenantHash: h, Weight: fq.DefaultWeight, Band: m.band})
		}
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("--move-tenant: the moved config is not valid: %w", err)
	}
	return out, nil
}

// bandLabel names a band in a table, marking the default one.
func bandLabel(name string, isDefault bool) string {
	if isDefault {
		return name + " (default)"
	}
	return name
}

// fraction prints a fraction of 1 such as a minShare as a percentage, "-"
// for 0.
func fraction(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%g%%", 100*f)
}

// percentOf prints a share as a percentage, "-" when there is none.
func percentOf(share float64, some bool) string {
	if !some {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*share)
}
