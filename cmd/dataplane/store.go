package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// secretReadTimeout bounds reading the Redis Secret during a reload.
const secretReadTimeout = 10 * time.Second

// storeWiring is the rate-limit store the config selects (spec.store): a
// Switch between the memory and Redis stores, the Redis Secret reader, and
// the live-replica count the fail-open fallback divides limits by.
type storeWiring struct {
	sw       *redisstore.Switch
	replicas *redisstore.LeaseReplicas // nil outside Kubernetes or with --store-replicas
	fleet    *fleetReplicas            // the fleet exchange's count: set outside Kubernetes without --store-replicas
	metrics  *metrics.StoreMetrics
	// count is the live-replica count in use, whichever of the above.
	count redisstore.Replicas
}

// newStoreWiring builds the store switch. Inside Kubernetes the Redis Secret
// is read through the API and live replicas are counted from the report
// Leases; outside, the Secret's files come from --store-secret-dir (or, with
// --policy, its manifest from --secrets) and the count from the fleet
// exchange (see fleetReplicas), or --store-replicas.
func newStoreWiring(o *options, kube kubernetes.Interface, namespace, configMap string, reg prometheus.Registerer, log logr.Logger) (*storeWiring, error) {
	if o.storeReplicas < 0 {
		return nil, fmt.Errorf("--store-replicas %d: give the number of data-plane replicas sharing the Redis store, or 0 to count them", o.storeReplicas)
	}
	sm, err := metrics.NewStore(reg)
	if err != nil {
		return nil, err
	}
	redisstore.SetClientLogger(log.WithName("redis-client"))
	w := &storeWiring{metrics: sm}
	var replicas redisstore.Replicas
	switch {
	case o.storeReplicas > 0:
		n := redisstore.StaticReplicas(o.storeReplicas)
		sm.LiveReplicas(n.Live())
		replicas = n
	case kube == nil:
		w.fleet = &fleetReplicas{}
		sm.LiveReplicas(w.fleet.Live())
		replicas = w.fleet
	default:
		policy := strings.TrimSuffix(configMap, configMapSuffix)
		w.replicas = redisstore.NewLeaseReplicas(kube, namespace, policy, redisstore.LeaseReplicasOptions{
			Logger: log.WithName("replicas"), Report: sm.LiveReplicas})
		replicas = w.replicas
	}
	w.count = replicas
	var secrets redisstore.SecretGetter
	switch {
	case o.storeSecretDir != "":
		secrets = secretDir(o.storeSecretDir)
	case o.configSource == sourcePolicy:
		// Standalone: the Secret comes from the same files as the policy's
		// other Secrets (--secrets, or the policy file itself).
		src := reload.NewPolicySource(o.policy.file, reload.PolicyOptions{SecretsPath: o.policy.secrets})
		secrets = func(_ context.Context, _, name string) (map[string][]byte, error) { return src.Secret(name) }
	case kube != nil:
		secrets = func(ctx context.Context, ns, name string) (map[string][]byte, error) {
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return s.Data, nil
		}
	}
	w.sw = redisstore.NewSwitch(redisstore.SwitchOptions{Secrets: secrets, Replicas: replicas, Observer: sm, Logger: log.WithName("store")})
	return w, nil
}

// secretDir reads a mounted Secret: one file per data key.
func secretDir(dir string) redisstore.SecretGetter {
	return func(context.Context, string, string) (map[string][]byte, error) {
		data := map[string][]byte{}
		for _, k := range []string{redisstore.SecretUsernameKey, redisstore.SecretPasswordKey, redisstore.SecretCAKey} {
			b, err := os.ReadFile(filepath.Join(dir, k))
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return nil, fmt.Errorf("--store-secret-dir: %w", err)
			default:
				data[k] = b
			}
		}
		return data, nil
	}
}

// apply wraps load so a config's store is built before the config is
// loaded and put in force only if the load succeeds.
func (w *storeWiring) apply(load reload.ApplyFunc) reload.ApplyFunc {
	return func(cfg *config.Config, hash string) error {
		ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
		defer cancel()
		p, err := w.sw.Prepare(ctx, cfg)
		if err != nil {
			return err
		}
		if err := load(cfg, hash); err != nil {
			p.Discard()
			return err
		}
		p.Commit()
		return nil
	}
}

// run counts live replicas until ctx ends, when that is done through Leases.
func (w *storeWiring) run(ctx context.Context) {
	if w.replicas != nil {
		w.replicas.Run(ctx)
	}
}

// close closes the Redis store in force.
func (w *storeWiring) close() { _ = w.sw.Close() }
