// Package reload keeps a data plane's configuration in step with the rendered
// ConfigMap of its FairQueuePolicy. A Source (the Kubernetes API through a
// name-scoped informer, or a watched file) hands raw bytes to a Reloader, which
// parses and validates them, applies them through one swap function, records
// Prometheus metrics in the style of Prometheus' own config reloads, and keeps
// the last good config in force whenever a new one is refused. A LeaseReporter
// publishes the loaded config's hash on a per-replica Lease so the operator can
// count the replicas running the current config.
//
// # Reporting back: why a Lease per replica
//
// Each replica keeps a coordination.k8s.io Lease named
// <policy>-dataplane-<pod> in the policy's namespace, labelled
// fairqueue.dev/policy=<policy> and app.kubernetes.io/component=
// fairqueue-dataplane, annotated fairqueue.dev/config-hash=<hash>, with the Pod
// as holder (and owner, given its UID). It is rewritten at once after a reload
// and renewed every 10s with a 30s duration, and deleted on shutdown. The
// operator lists these Leases by label and counts the unexpired ones
// (status.dataPlaneReplicas) and those whose hash equals status.configHash
// (status.updatedReplicas), like a Deployment's updated replicas.
//
// A Lease was chosen over a Pod annotation because it needs no write access
// to Pods (a data plane able to patch Pods could relabel itself out of its
// Service), it expires on its own when a replica dies without cleaning up, and
// it is a small object the operator can cache by label without caching Pods.
package reload

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/metrics/collector"
)

// Metric names, following Prometheus' own prometheus_config_* reload metrics.
const (
	// LastReloadSuccessfulName is a gauge: 1 when the last reload attempt
	// succeeded, 0 when it was refused.
	LastReloadSuccessfulName = "fairqueue_config_last_reload_successful"
	// LastReloadSuccessTimeName is a gauge: when the last successful reload
	// happened, in seconds since the epoch.
	LastReloadSuccessTimeName = "fairqueue_config_last_reload_success_timestamp_seconds"
	// ReloadsTotalName counts reload attempts by result, "success" or "failure".
	ReloadsTotalName = "fairqueue_config_reloads_total"
	// ConfigInfoName is always 1, labelled with the hash of the config in
	// force, so one query shows every replica's version.
	ConfigInfoName = "fairqueue_config_info"
)

// Values of the result label of ReloadsTotalName.
const resultSuccess, resultFailed = "success", "failure"

// ApplyFunc puts a parsed, valid config in force. hash is config.Hash of the
// bytes it was parsed from. An error refuses the config and the caller keeps
// the previous one; the error should name the field at fault.
type ApplyFunc func(cfg *config.Config, hash string) error

// Loaded describes the config in force after a successful reload.
type Loaded struct {
	// Config is the parsed config; it must not be modified.
	Config *config.Config
	// Hash is config.Hash of the bytes Config was parsed from.
	Hash string
}

// Options configures a Reloader.
type Options struct {
	// Logger receives one line per reload; a zero Logger discards them.
	Logger logr.Logger
	// Registerer receives the reload metrics; nil means they are not exported.
	Registerer prometheus.Registerer
	// Clock timestamps successful reloads; nil means the real clock.
	Clock clock.PassiveClock
	// OnLoaded, if set, is called after every successful reload, in order,
	// from the goroutine that delivered the config. It must not block.
	OnLoaded func(Loaded)
}

// Reloader turns raw config bytes into an applied config, refusing bad ones
// and keeping the last good config in force. It implements Sink and is safe
// for concurrent use; updates are applied one at a time.
type Reloader struct {
	apply    ApplyFunc
	log      logr.Logger
	clk      clock.PassiveClock
	onLoaded func(Loaded)

	mu           sync.Mutex // serialises Update and Reject
	rejected     bool       // the last attempt was refused
	rejectedHash string     // hash of the last refused bytes, so a resync does not repeat the error

	loaded atomic.Pointer[Loaded]
	health *sourceHealth

	lastOK   prometheus.Gauge
	lastTime prometheus.Gauge
	reloads  *prometheus.CounterVec
	info     *prometheus.GaugeVec
}

// New returns a Reloader that applies configs through apply. It registers
// its metrics on opts.Registerer and fails if they are already registered.
func New(apply ApplyFunc, opts Options) (*Reloader, error) {
	if apply == nil {
		return nil, errors.New("reload: an ApplyFunc is required")
	}
	r := &Reloader{
		apply:    apply,
		log:      opts.Logger,
		clk:      opts.Clock,
		onLoaded: opts.OnLoaded,
		health:   newSourceHealth(),
		lastOK:   collector.Gauge(LastReloadSuccessfulName, "Whether the last configuration reload attempt was successful (1) or refused (0)."),
		lastTime: collector.Gauge(LastReloadSuccessTimeName, "Timestamp of the last successful configuration reload, in seconds since the epoch."),
		reloads:  collector.CounterVec(ReloadsTotalName, "Configuration reload attempts by result (success or failure).", "result"),
		info: collector.GaugeVec(ConfigInfoName,
			"Always 1, labelled with the hash of the configuration in force; absent before the first valid config.", "hash"),
	}
	if r.clk == nil {
		r.clk = clock.RealClock{}
	}
	// Both results exist from the start so rate() and absent() behave.
	r.reloads.WithLabelValues(resultSuccess)
	r.reloads.WithLabelValues(resultFailed)
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{r.lastOK, r.lastTime, r.reloads, r.info, r.health.up, r.health.errors} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("reload: registering metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Ready reports whether a valid config has ever been applied. It stays true
// when later configs are refused, since the last good one is still in force.
func (r *Reloader) Ready() bool { return r.loaded.Load() != nil }

// Loaded returns the config in force, or nil before the first valid one.
func (r *Reloader) Loaded() *Loaded { return r.loaded.Load() }

// Hash returns the hash of the config in force, or "" before the first one.
func (r *Reloader) Hash() string {
	if l := r.loaded.Load(); l != nil {
		return l.Hash
	}
	return ""
}

// Update parses, validates and applies data. Bytes equal to the config in
// force are a no-op, except that after a refusal they count as a successful
// reload (the source was reverted). A refused config leaves the one in force untouched; the
// refusal is logged with the fields at fault, counted, and returned.
func (r *Reloader) Update(source string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	hash := config.Hash(data)
	if cur := r.loaded.Load(); cur != nil && cur.Hash == hash {
		if r.rejected {
			// Reverted to the config in force after a refusal: the source
			// is healthy again, which is what the last-reload gauge tells.
			r.rejected, r.rejectedHash = false, ""
			r.lastOK.Set(1)
			r.reloads.WithLabelValues(resultSuccess).Inc()
			r.log.Info("Config reverted to the one in force", "source", source, "configHash", hash)
			return nil
		}
		r.log.V(2).Info("Config unchanged", "source", source, "configHash", hash)
		return nil
	}
	cfg, err := config.Parse(data)
	if err == nil {
		err = r.apply(cfg, hash)
	}
	if err != nil {
		return r.refuseLocked(source, hash, err)
	}
	r.rejected, r.rejectedHash = false, ""
	l := &Loaded{Config: cfg, Hash: hash}
	r.loaded.Store(l)
	r.lastOK.Set(1)
	r.lastTime.Set(float64(r.clk.Now().UnixNano()) / 1e9)
	r.reloads.WithLabelValues(resultSuccess).Inc()
	r.info.Reset()
	r.info.WithLabelValues(hash).Set(1)
	r.log.Info("Config loaded", "source", source, "configHash", hash,
		"policy", cfg.Policy.Namespace+"/"+cfg.Policy.Name, "generation", cfg.Policy.Generation)
	if r.onLoaded != nil {
		r.onLoaded(*l)
	}
	return nil
}

// Reject records that the source holds no usable config (for example a
// ConfigMap without the config key): it is counted and logged like a config
// that fails validation, and the one in force stays.
func (r *Reloader) Reject(source string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.refuseLocked(source, "", err)
}

func (r *Reloader) refuseLocked(source, hash string, err error) error {
	err = fmt.Errorf("config from %s refused, keeping %s: %w", source, r.describeCurrent(), err)
	r.lastOK.Set(0)
	r.rejected = true
	if hash != "" && hash == r.rejectedHash {
		// The same bad bytes again (a resync, a re-read): counted once.
		return err
	}
	r.rejectedHash = hash
	r.reloads.WithLabelValues(resultFailed).Inc()
	r.log.Error(err, "Config refused", "source", source, "configHash", hash, "fields", FieldsAtFault(err))
	return err
}

func (r *Reloader) describeCurrent() string {
	if l := r.loaded.Load(); l != nil {
		return "config " + l.Hash
	}
	return "no config (not ready)"
}

// FieldsAtFault returns the JSON paths named by a config error: the text
// before the first ": " of each joined error that looks like a field path,
// looking through wrapping errors until one names a field.
// It returns nil when err names no field.
func FieldsAtFault(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		msg := e.Error()
		if path, _, ok := strings.Cut(msg, ": "); ok && isFieldPath(path) {
			out = append(out, path)
			return
		}
		// Strict decoding names a stray field as: unknown field "a.b".
		if _, rest, ok := strings.Cut(msg, `unknown field "`); ok {
			if path, _, ok := strings.Cut(rest, `"`); ok && isFieldPath(path) {
				out = append(out, path)
				return
			}
		}
		if w := errors.Unwrap(e); w != nil {
			walk(w)
		}
	}
	walk(err)
	return out
}

// isFieldPath reports whether s looks like a JSON path such as
// fairQueuing.weights[2].weight.
func isFieldPath(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isFieldPathByte(s[i]) {
			return false
		}
	}
	return true
}

// isFieldPathByte reports whether c may appear in a field path: an ASCII
// letter or digit, '.', '[' or ']'.
func isFieldPathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '[' || c == ']'
}
