package demo

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fairqueue/fairqueue/internal/proc"
)

// startStandalone starts the fake upstream and one data plane that reads the
// scenario's policy and tenants Secret from files, as `dataplane --policy`
// runs outside Kubernetes; the weight change rewrites the Secret's file,
// which the data plane follows.
func startStandalone(ctx context.Context, o Options, sc scenario, p *progress, sup *proc.Supervisor, work string) (*plane, error) {
	pl := &plane{}
	upstreamAddr, err := startUpstream(ctx, o, sc, p, sup)
	if err != nil {
		return pl, err
	}
	pl.addrs = append(pl.addrs, upstreamAddr)

	policy, secrets := filepath.Join(work, "policy.yaml"), filepath.Join(work, "secrets.yaml")
	manifest, secret := sharesPolicy("http://"+upstreamAddr, o.PerModel), tenantsSecret(PriorityVar, Tenants[priorityBefore].APIKey)
	switch {
	case sc.tokens:
		manifest = tokenManifests("http://"+upstreamAddr, o.TokensPerPeriod, o.Cost)
	case sc.bands:
		manifest, secret = bandsPolicy("http://"+upstreamAddr, o.PerModel, !o.NoBands), tenantsSecret(ChatVar, sc.tenants[0].APIKey)
	}
	if err := os.WriteFile(policy, manifest, 0o600); err != nil {
		return pl, err
	}
	if err := writeAtomically(secrets, secret); err != nil {
		return pl, err
	}
	p.printf("==> Policy %s, tenants Secret %s (no control plane: the data plane reads both files and follows their changes)\n", policy, secrets)
	traffic, metrics, err := startDataPlane(ctx, o, p, sup, "dataplane-1", "--policy", policy, "--secrets", secrets,
		"--hash-key-file", filepath.Join(work, "hash-key"))
	if err != nil {
		return pl, err
	}
	pl.addrs = append(pl.addrs, traffic, metrics)
	pl.targets = []string{"http://" + traffic}
	pl.metricsURLs = []string{"http://" + metrics + "/metrics"}

	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	counts, err := scrape(ctx, c, pl.metricsURLs[0])
	if err != nil {
		return pl, err
	}
	if len(counts.ConfigHashes) != 1 {
		return pl, fmt.Errorf("dataplane-1 reports %d config hashes, want the one it loaded", len(counts.ConfigHashes))
	}
	pl.initialHash = counts.ConfigHashes[0]
	pl.change = weightChange{
		what: "rewrite " + secrets,
		apply: func(context.Context) error {
			return writeAtomically(secrets, tenantsSecret(PriorityVar, Tenants[priorityAfter].APIKey))
		},
	}
	return pl, nil
}

// writeAtomically replaces path by a rename, as config tools do, so the
// data plane never reads a half-written file.
func writeAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
