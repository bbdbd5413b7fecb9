// Command dataplane is fairqueue's admission proxy: it loads the rendered
// FairQueuePolicy config, applies the rate limits and weighted fair queuing
// of the product specification to every request, and proxies admitted
// requests to the configured backends.
//
// Every flag can also be set through the environment variable
// FAIRQUEUE_<FLAG>, upper-cased with dashes turned into underscores (for
// example FAIRQUEUE_HASH_KEY_FILE); a flag given on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fairqueue/fairqueue/dataplane/identity/resolver"
	"github.com/fairqueue/fairqueue/dataplane/metrics"
	"github.com/fairqueue/fairqueue/dataplane/reload"
	"github.com/fairqueue/fairqueue/dataplane/server"
	"github.com/fairqueue/fairqueue/internal/cli"
	"github.com/fairqueue/fairqueue/internal/version"
)

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "FAIRQUEUE_"

// defaultShutdownDelay is --shutdown-delay's default: long enough for
// kube-proxy and ingress controllers to drop a terminating Pod's endpoint.
const defaultShutdownDelay = 5 * time.Second

// minHashKeyLen is the shortest hash key accepted; the operator generates 32 bytes.
const minHashKeyLen = 16

// The operator's naming: it renders policy P into ConfigMap P-dataplane and
// keeps P's hash key in Secret P-hash-key under data key "key".
const (
	configMapSuffix     = "-dataplane"
	hashKeySecretSuffix = "-hash-key"
	hashKeySecretKey    = "key"
)

// stopWait bounds how long run waits, once the server has stopped, for the
// config source and the Lease reporter to stop. Whatever still runs after it
// (a request to an unreachable API server) ends with the process.
const stopWait = 2 * time.Second

func main() {
	if version.PrintIfRequested(os.Stdout, "dataplane", os.Args[1:]) {
		return
	}
	cli.Main("dataplane", func(ctx context.Context) error {
		cli.SecondSignalKills(ctx) // skipping the drain
		return run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	})
}

// options are the parsed flags.
type options struct {
	listen         string
	metricsListen  string
	configFile     string
	hashKeyFile    string
	shutdownGrace  time.Duration
	shutdownDelay  time.Duration
	logLevel       string
	trustedProxies string
	maxBodyBytes   int64
	maxBuffered    int64
	bodyTimeout    time.Duration
	maxHeaderBytes int
	headerTimeout  time.Duration
	topTenants     int
	configSource   string
	configMap      string
	kubeconfig     string
	podName        string
	podUID         string
	podNamespace   string
	hashKeySecret  string
	policy         policyOptions
	storeReplicas  int
	storeSecretDir string
}

// Config sources for --config-source.
const (
	sourceFile       = "file"
	sourceKubernetes = "kubernetes"
)

// parseFlags reads flags from args, falling back to FAIRQUEUE_* variables
// from getenv for every flag not given on the command line.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", ":8080", "address for proxied API traffic")
	fs.StringVar(&o.metricsListen, "metrics-listen", ":9090", "address for /metrics, /healthz and /readyz")
	fs.StringVar(&o.configFile, "config", "", "file holding the rendered config (the config.json key of the policy's ConfigMap), "+
		"watched for changes; it must be valid at startup")
	fs.StringVar(&o.configSource, "config-source", "", "where the config comes from: file (--config), kubernetes (--configmap, watched through the API) or policy (--policy, rendered in-process); "+
		"empty means policy when --policy is set, else file when --config is set, else kubernetes when --configmap is set")
	fs.StringVar(&o.configMap, "configmap", "", "NAMESPACE/NAME (or NAME in $POD_NAMESPACE) of the policy's rendered ConfigMap <policy>-dataplane, "+
		"watched through the Kubernetes API; the data plane is unready until it holds a valid config")
	fs.StringVar(&o.hashKeySecret, "hash-key-secret", "", "with --configmap and no --hash-key-file, the Secret in the ConfigMap's namespace holding the hash key "+
		"under data key \"key\"; empty means <policy>-hash-key, the operator's default")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for the Kubernetes API; empty means the in-cluster service account")
	fs.StringVar(&o.podName, "pod-name", "", "this replica's Pod name (POD_NAME from the downward API also works); with the kubernetes source, "+
		"the loaded config hash is reported on Lease <policy>-dataplane-<pod> for the operator's status")
	fs.StringVar(&o.podUID, "pod-uid", "", "this replica's Pod UID (POD_UID also works); makes the Pod own its report Lease so it is deleted with the Pod")
	fs.StringVar(&o.hashKeyFile, "hash-key-file", "", "file holding the policy's HMAC hash key (the key of the policy's hash-key Secret); "+
		"required with --config; with --policy created when absent, once the policy has loaded (a failed start writes nothing); with --configmap the Secret is read through the API when unset")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", server.DefaultShutdownGrace, "on SIGTERM, after --shutdown-delay, how long admitted requests may finish; queued ones are answered 503 at once")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", defaultShutdownDelay, "on SIGTERM, how long to keep accepting and serving with /readyz failing, so load balancers stop sending first; "+
		"a second signal skips it")
	fs.StringVar(&o.logLevel, "log-level", "info", "log verbosity: error, info, debug, or a number (higher is more verbose)")
	fs.StringVar(&o.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs or addresses of proxies whose X-Forwarded-For decides the client address for the perClient limit")
	fs.IntVar(&o.storeReplicas, "store-replicas", 0, "with a Redis store failing open, the number of data-plane replicas each limit is divided among while Redis is down; "+
		"0 counts the live replicas: their report Leases through the Kubernetes API, else the replicas the fleet exchange in Redis last saw")
	fs.StringVar(&o.storeSecretDir, "store-secret-dir", "", "directory holding the Redis Secret's files (username, password, ca.crt), for a config naming one when the "+
		"Kubernetes API is not used; with --configmap the Secret is read through the API, with --policy from --secrets unless this is set")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted (read to find the model); larger bodies get 413")
	fs.Int64Var(&o.maxBuffered, "max-buffered-body-bytes", server.DefaultMaxBufferedBytes, "request-body bytes held in memory across all requests at once; "+
		"a body that would pass it gets 503 request_buffer_full; must be larger than --max-body-bytes")
	fs.DurationVar(&o.bodyTimeout, "body-read-timeout", server.DefaultBodyReadTimeout, "how long a client may take to send its request body; a slower one gets 408")
	fs.IntVar(&o.maxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request line and headers accepted; larger ones get 431")
	fs.IntVar(&o.topTenants, "tenant-metrics-top", metrics.DefaultTopTenants, "how many tenants without a weights entry get per-tenant metric series of their own (the most active); "+
		"tenants with a weights entry always do, all others are summed under tenant=\"other\"; 0 means only the weighted tenants")
	fs.DurationVar(&o.headerTimeout, "read-header-timeout", server.DefaultReadHeaderTimeout, "how long a client may take to send its request line and headers")
	addPolicyFlags(fs, &o.policy, false)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(out, "Usage: dataplane [flags]\n       dataplane render --policy FILE (see dataplane render --help)\n       dataplane --version\n\nfairqueue data plane: rate limits and weighted fair queuing in front of HTTP backends.\n"+
			"Every flag may also be set as %s<FLAG> (upper case, '-' as '_'), e.g. %sHASH_KEY_FILE.\n\nFlags:\n", envPrefix, envPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q; every setting is a flag, see --help", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(getenv, env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q is not a valid --%s: %w", env, v, f.Name, err))
			}
		}
	})
	if o.podName == "" {
		o.podName = getenv("POD_NAME")
	}
	if o.podUID == "" {
		o.podUID = getenv("POD_UID")
	}
	o.podNamespace = getenv("POD_NAMESPACE")
	switch o.configSource {
	case "":
		switch {
		case o.policy.file != "":
			o.configSource = sourcePolicy
		case o.configFile != "":
			o.configSource = sourceFile
		case o.configMap != "":
			o.configSource = sourceKubernetes
		}
	case sourceFile:
		if o.configFile == "" {
			errs = append(errs, errors.New("--config-source=file needs --config FILE"))
		}
	case sourceKubernetes:
		if o.configMap == "" {
			errs = append(errs, errors.New("--config-source=kubernetes needs --configmap NAMESPACE/NAME"))
		}
	case sourcePolicy:
		if o.policy.file == "" {
			errs = append(errs, errors.New("--config-source=policy needs --policy FILE"))
		}
	default:
		errs = append(errs, fmt.Errorf("--config-source %q: use file or kubernetes, or policy with --policy", o.configSource))
	}
	return o, errors.Join(errs...)
}

func lookup(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	return v, v != ""
}

// newLogger returns a JSON logger at the given level.
func newLogger(level string, out io.Writer) (logr.Logger, error) {
	var lvl slog.Level
	switch level {
	case "error":
		lvl = slog.LevelError
	case "info", "":
		lvl = slog.LevelInfo
	case "debug":
		lvl = slog.Level(-1)
	default:
		n, err := strconv.Atoi(level)
		if err != nil || n < 0 {
			return logr.Logger{}, fmt.Errorf("--log-level %q: use error, info, debug or a verbosity number >= 0", level)
		}
		lvl = slog.Level(-n)
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: lvl})), nil
}

// run starts the data plane and blocks until ctx ends and shutdown is over.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "render" {
		return runRender(args[1:], getenv, os.Stdout, stderr)
	}
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	var kube kubernetes.Interface
	var cmNamespace, cmName string
	if o.configSource == sourceKubernetes {
		if cmNamespace, cmName, err = splitConfigMap(o.configMap, o.podNamespace); err != nil {
			return err
		}
		if kube, err = newKubeClient(o.kubeconfig); err != nil {
			return err
		}
	}
	// With --policy a new hash key is written only once the start has
	// succeeded (persistKey below): a failed start writes nothing.
	var standalone *standaloneKey
	var key []byte
	if o.configSource == sourcePolicy {
		if standalone, err = preparePolicy(o); err != nil {
			return err
		}
		key = standalone.key
	} else if key, err = hashKey(ctx, o, kube, cmNamespace, cmName, log); err != nil {
		return err
	}
	trusted, err := resolver.ParseTrustedProxies(o.trustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}

	// With the key read from the Secret, follow it: see keyRotation.
	var rot *keyRotation
	if kube != nil && o.hashKeyFile == "" {
		rot = newKeyRotation(kube, cmNamespace, hashKeySecretName(o, cmName), key, log)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	stores, err := newStoreWiring(o, kube, cmNamespace, cmName, reg, log)
	if err != nil {
		return err
	}
	defer stores.close()
	pacer, err := newFleetPacer(o, stores, reg, log)
	if err != nil {
		return err
	}
	leases, err := newCapacityLeases(o, stores, log)
	if err != nil {
		return err
	}
	defer leases.Close()
	srvOpts := server.Options{
		CapacityShared: leases,
		Logger:         log, HashKey: key, TrustedProxies: trusted, MaxBodyBytes: o.maxBodyBytes,
		Registerer: reg, Gatherer: reg, ShutdownGrace: o.shutdownGrace, ShutdownDelay: o.shutdownDelay,
		MaxBufferedBodyBytes: o.maxBuffered, BodyReadTimeout: o.bodyTimeout,
		MaxHeaderBytes: o.maxHeaderBytes, ReadHeaderTimeout: o.headerTimeout,
		Store: stores.sw, Fleet: pacer, TopTenants: o.topTenants,
	}
	if o.topTenants <= 0 {
		srvOpts.TopTenants = -1 // only the weighted tenants
	}
	if rot != nil {
		srvOpts.HashKeys = rot.keys.Lookup
	}
	srv, err := server.New(srvOpts)
	if err != nil {
		return err
	}
	reporter, source, err := configSource(o, kube, cmNamespace, cmName, log)
	if o.configSource == sourcePolicy {
		source = newPolicySource(o, key, log.WithName("policy"))
	}
	if err != nil {
		return err
	}
	var onLoaded func(reload.Loaded)
	if reporter != nil {
		onLoaded = reporter.OnLoaded
	}
	reloader, err := reload.New(fleetApply(pacer, stores.apply(srv.Load)), reload.Options{Logger: log.WithName("reload"), Registerer: reg, OnLoaded: onLoaded})
	if err != nil {
		return err
	}
	srv.SetConfigSourceHealth(reloader.SourceHealth)
	// A hash-key disagreement in the fleet is the shared store's trouble,
	// not the config source's: /readyz names it beside the store's state.
	srv.SetStoreHealth(joinHealth(stores.sw.Health, pacer.KeyHealth))
	if o.configSource == sourceFile {
		// A file named on the command line must be usable at startup; later
		// edits are followed, and a bad one keeps this config in force.
		data, err := os.ReadFile(o.configFile)
		if err != nil {
			return fmt.Errorf("reading --config: %w", err)
		}
		if err := reloader.Update(source.String(), data); err != nil {
			return yamlHint(data, err)
		}
	}
	if src, ok := source.(*reload.PolicySource); ok {
		if err := loadPolicyAtStartup(src, reloader); err != nil {
			return err
		}
	}
	if source == nil {
		log.Info("No --config or --configmap given: not ready until a config is loaded")
	}

	trafficLn, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	opsLn, err := net.Listen("tcp", o.metricsListen)
	if err != nil {
		_ = trafficLn.Close() // never served: nothing to flush
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	if standalone != nil {
		created, err := standalone.persist()
		if err != nil {
			_, _ = trafficLn.Close(), opsLn.Close() // never served: nothing to flush
			return err
		}
		if created {
			log.Info("Created a new hash key; keep it to keep tenant hashes stable", "hashKeyFile", standalone.path)
		}
	}

	// The source and reporter stop with ctx; Run returns after shutdown, and
	// we wait for both, at most stopWait, so a shutdown is always bounded.
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sink reload.Sink = reloader
	if rot != nil {
		sink = rot.sink(reloader)
		wg.Go(func() { _ = rot.watcher.Run(bg) })
	}
	if source != nil {
		wg.Go(func() {
			if err := source.Run(bg, sink); err != nil {
				log.Error(err, "Config source stopped; the config in force stays until restart", "source", source.String())
			}
		})
	}
	if reporter != nil {
		wg.Go(func() { _ = reporter.Run(bg) })
	}
	wg.Go(func() { stores.run(bg) })
	pacerCtx, stopPacer := whileAdmitting(ctx, o.shutdownDelay)
	wg.Go(func() { pacer.Run(pacerCtx) })
	err = srv.Run(ctx, trafficLn, opsLn)
	stopPacer()
	stopBG()
	if !waitAtMost(&wg, stopWait) {
		log.Info("The config source or Lease reporter did not stop in time; exiting without them", "waited", stopWait.String())
	}
	return err
}

// waitAtMost waits for wg for at most d and reports whether it finished.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// configSource builds the config source the flags select, and the Lease
// reporter when the Kubernetes API is in use and the Pod name is known.
func configSource(o *options, kube kubernetes.Interface, namespace, name string, log logr.Logger) (*reload.LeaseReporter, reload.Source, error) {
	switch o.configSource {
	case sourceFile:
		return nil, reload.NewFileSource(o.configFile, reload.FileOptions{Logger: log.WithName("config-file")}), nil
	case sourceKubernetes:
		src := reload.NewConfigMapSource(kube, namespace, name, log.WithName("configmap"))
		if o.podName == "" {
			log.Info("No --pod-name or POD_NAME: the loaded config hash is not reported to the operator")
			return nil, src, nil
		}
		rep, err := reload.NewLeaseReporter(kube, reload.LeaseOptions{PodName: o.podName, PodUID: types.UID(o.podUID), Logger: log.WithName("lease")})
		if err != nil {
			return nil, nil, err
		}
		return rep, src, nil
	}
	return nil, nil, nil
}

// splitConfigMap parses --configmap: NAMESPACE/NAME, or NAME in podNamespace.
func splitConfigMap(v, podNamespace string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(v, "/")
	if !ok {
		namespace, name = podNamespace, v
	}
	switch {
	case namespace == "" && !ok:
		return "", "", fmt.Errorf("--configmap %q: give NAMESPACE/NAME, or set POD_NAMESPACE from the downward API", v)
	case namespace == "" || name == "" || strings.Contains(name, "/"):
		return "", "", fmt.Errorf("--configmap %q: use NAMESPACE/NAME, e.g. team-a/llm-dataplane", v)
	}
	return namespace, name, nil
}

// newKubeClient connects to the API server named by kubeconfig, or to the
// cluster the Pod runs in when kubeconfig is empty.
func newKubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to the Kubernetes API (set --kubeconfig outside a cluster): %w", err)
	}
	rc.UserAgent = "fairqueue-dataplane"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	return c, nil
}

// hashKey returns the policy's HMAC key: from --hash-key-file, or else, with
// the kubernetes source, from the hash-key Secret, waiting for the operator
// to create it.
func hashKey(ctx context.Context, o *options, kube kubernetes.Interface, namespace, configMap string, log logr.Logger) ([]byte, error) {
	var key []byte
	switch {
	case o.hashKeyFile != "":
		var err error
		if key, err = os.ReadFile(o.hashKeyFile); err != nil {
			return nil, fmt.Errorf("reading --hash-key-file: %w", err)
		}
	case kube != nil:
		name := hashKeySecretName(o, configMap)
		secrets := kube.CoreV1().Secrets(namespace)
		err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				log.Info("Waiting for the hash key Secret", "secret", namespace+"/"+name, "error", err.Error())
				return false, nil
			}
			key = s.Data[hashKeySecretKey]
			if len(key) == 0 {
				log.Info("Waiting for the hash key Secret to hold its key", "secret", namespace+"/"+name, "key", hashKeySecretKey)
			}
			return len(key) > 0, nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading hash key Secret %s/%s: %w", namespace, name, err)
		}
	default:
		return nil, errors.New("--hash-key-file is required: mount the policy's hash-key Secret and point the flag at its key")
	}
	if len(key) < minHashKeyLen {
		return nil, fmt.Errorf("the hash key holds %d bytes; it needs at least %d (the operator generates 32)", len(key), minHashKeyLen)
	}
	return key, nil
}

// hashKeySecretName is the policy's hash-key Secret: --hash-key-secret, or
// the operator's default for the ConfigMap's policy.
func hashKeySecretName(o *options, configMap string) string {
	if o.hashKeySecret != "" {
		return o.hashKeySecret
	}
	return strings.TrimSuffix(configMap, configMapSuffix) + hashKeySecretSuffix
}

// keyRotation follows the policy's hash-key Secret (reload.HashKeyWatcher):
// every key seen is kept by fingerprint for the server, and a config refused
// for want of its key is offered again when the key arrives.
type keyRotation struct {
	keys    *reload.HashKeys
	watcher *reload.HashKeyWatcher
	retry   *reload.RetrySink
}

func newKeyRotation(kube kubernetes.Interface, namespace, secret string, key []byte, log logr.Logger) *keyRotation {
	r := &keyRotation{keys: reload.NewHashKeys(key)}
	r.watcher = reload.NewHashKeyWatcher(kube, namespace, secret, r.keys, reload.HashKeyWatcherOptions{
		DataKey: hashKeySecretKey, MinLen: minHashKeyLen, Logger: log.WithName("hash-key"),
		OnNewKey: func() {
			if r.retry != nil {
				r.retry.Retry()
			}
		},
	})
	return r
}

// sink returns the Sink the config source must feed, set before the
// watcher runs.
func (r *keyRotation) sink(next reload.Sink) reload.Sink {
	r.retry = reload.NewRetrySink(next)
	return r.retry
}
