package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-logr/logr"

	"github.com/fairqueue/fairqueue/dataplane/reload"
)

// sourcePolicy is the --config-source that renders a FairQueuePolicy file
// in-process.
const sourcePolicy = "policy"

// hashKeyBytes is the length of a generated hash key before base64, as the
// operator generates.
const hashKeyBytes = 32

// policyOptions are the flags of the standalone mode, shared by the server
// and the render subcommand.
type policyOptions struct {
	file        string
	secrets     string
	backendURLs backendURLFlag
}

// addPolicyFlags registers the standalone flags on fs.
func addPolicyFlags(fs *flag.FlagSet, o *policyOptions) {
	fs.StringVar(&o.file, "policy", "", "FairQueuePolicy manifest (YAML or JSON) to render in-process with the operator's renderer, "+
		"watched for changes: run without Kubernetes; the hash key is read from --hash-key-file, created when absent")
	fs.StringVar(&o.secrets, "secrets", "", "with --policy, a file or directory of Secret manifests the policy references "+
		"(weightsFrom, keyRegistry, store.redis.secretRef); documents of other kinds are skipped, changes are followed")
	fs.Var(&o.backendURLs, "backend-url", "with --policy, NAME=URL replaces the URL of backend NAME before rendering "+
		"(repeatable), e.g. to try a cluster policy against a local server")
}

// backendURLFlag collects repeated NAME=URL values.
type backendURLFlag map[string]string

func (b *backendURLFlag) String() string {
	if b == nil || len(*b) == 0 {
		return ""
	}
	var parts []string
	for k, v := range *b {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (b *backendURLFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		name, url, ok := strings.Cut(item, "=")
		if !ok || name == "" || url == "" {
			return fmt.Errorf("%q: use NAME=URL, e.g. vllm=http://127.0.0.1:8000", item)
		}
		if *b == nil {
			*b = backendURLFlag{}
		}
		(*b)[name] = url
	}
	return nil
}

// defaultHashKeyFile is where a standalone policy's hash key lives when
// --hash-key-file is not given: the user's config directory, keyed by the
// policy's namespace and name so every policy keeps its own key.
func defaultHashKeyFile(namespace, name string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no --hash-key-file and no user config directory (%w); pass --hash-key-file", err)
	}
	return filepath.Join(dir, "fairqueue", "hash-keys", namespace+"."+name), nil
}

// ensureHashKeyFile returns the hash key at path, creating the file with a new
// random key (mode 0600) when it does not exist. created reports a new key.
func ensureHashKeyFile(path string) (key []byte, created bool, err error) {
	key, err = os.ReadFile(path)
	if err == nil {
		return key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("reading --hash-key-file: %w", err)
	}
	raw := make([]byte, hashKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("generating a hash key: %w", err)
	}
	key = []byte(base64.StdEncoding.EncodeToString(raw))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("creating the directory of --hash-key-file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process created it first: use its key.
		key, err = os.ReadFile(path)
		return key, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("creating --hash-key-file: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("writing --hash-key-file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("writing --hash-key-file: %w", err)
	}
	return key, true, nil
}

// preparePolicy resolves the hash key file of the standalone mode: the one
// given, or the default for the policy, created when absent. It sets
// o.hashKeyFile so the rest of startup reads it like any other.
func preparePolicy(o *options, log logr.Logger) error {
	if o.configFile != "" {
		return errors.New("--policy and --config are both set: --policy renders the config itself, so give one of them")
	}
	if o.hashKeyFile == "" {
		data, err := os.ReadFile(o.policy.file)
		if err != nil {
			return fmt.Errorf("reading --policy: %w", err)
		}
		p, _, err := reload.DecodePolicy(data)
		if err != nil {
			return fmt.Errorf("--policy %s: %w", o.policy.file, err)
		}
		if o.hashKeyFile, err = defaultHashKeyFile(p.Namespace, p.Name); err != nil {
			return err
		}
	}
	_, created, err := ensureHashKeyFile(o.hashKeyFile)
	if err != nil {
		return err
	}
	if created {
		log.Info("Created a new hash key; keep it to keep tenant hashes stable", "hashKeyFile", o.hashKeyFile)
	}
	return nil
}

// newPolicySource returns the source of the standalone mode.
func newPolicySource(o *options, key []byte, log logr.Logger) *reload.PolicySource {
	return reload.NewPolicySource(o.policy.file, reload.PolicyOptions{
		SecretsPath: o.policy.secrets, HashKey: key, BackendURLs: o.policy.backendURLs, Logger: log,
	})
}

// loadPolicyAtStartup renders the policy once: like --config, a policy named
// on the command line must be valid at startup.
func loadPolicyAtStartup(src *reload.PolicySource, sink reload.Sink) error {
	out, err := src.Render()
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	return sink.Update(src.String(), out.Data)
}

// yamlHint adds to a --config parse error what to do when the file is not
// the rendered JSON config: a FairQueuePolicy goes to --policy, a ConfigMap's
// config.json key must be extracted.
func yamlHint(data []byte, err error) error {
	if err == nil {
		return nil
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return err
	}
	switch {
	case bytes.Contains(data, []byte("kind: FairQueuePolicy")):
		return fmt.Errorf("%w\n--config takes the rendered JSON config; this file is a FairQueuePolicy manifest: "+
			"run with --policy FILE instead, or write the JSON with `dataplane render --policy FILE`", err)
	case bytes.Contains(data, []byte("kind: ConfigMap")):
		return fmt.Errorf("%w\n--config takes the rendered JSON config; this file is a ConfigMap manifest: "+
			"pass its config.json key, e.g. `kubectl get cm NAME -o jsonpath='{.data.config\\.json}' > config.json`", err)
	}
	return fmt.Errorf("%w\n--config takes the rendered JSON config, not YAML: for a FairQueuePolicy manifest use --policy FILE, "+
		"or write the JSON with `dataplane render --policy FILE`", err)
}

// runRender is the render subcommand: it writes the config.json the operator
// would render for a policy file.
func runRender(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataplane render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o policyOptions
	addPolicyFlags(fs, &o)
	var hashKeyFile, out string
	fs.StringVar(&hashKeyFile, "hash-key-file", "", "the policy's hash key; empty means the standalone default "+
		"($XDG_CONFIG_HOME/fairqueue/hash-keys/NAMESPACE.NAME), created when absent")
	fs.StringVar(&out, "o", "-", "where to write config.json; - is standard output")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: dataplane render --policy FILE [--secrets FILE|DIR] [--hash-key-file F] [-o config.json]\n\n"+
			"Writes the config.json an operator would render for the policy (the config.json key of its ConfigMap),\n"+
			"for GitOps diffs and for `dataplane --config`. Use the hash key of the cluster's <policy>-hash-key Secret\n"+
			"to get byte-identical output.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("render: unexpected arguments %q; pass the policy with --policy FILE", fs.Args())
	}
	if o.file == "" {
		o.file = getenv(envPrefix + "POLICY")
	}
	if o.file == "" {
		return errors.New("render: --policy FILE is required")
	}
	opts := &options{policy: o, hashKeyFile: hashKeyFile}
	if err := preparePolicy(opts, logr.Discard()); err != nil {
		return err
	}
	key, err := os.ReadFile(opts.hashKeyFile)
	if err != nil {
		return fmt.Errorf("reading --hash-key-file: %w", err)
	}
	if len(key) < minHashKeyLen {
		return fmt.Errorf("the hash key in %s holds %d bytes; it needs at least %d", opts.hashKeyFile, len(key), minHashKeyLen)
	}
	r, err := newPolicySource(opts, key, logr.Discard()).Render()
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if out == "-" {
		_, err = stdout.Write(r.Data)
		return err
	}
	if err := os.WriteFile(out, r.Data, 0o644); err != nil { //nolint:gosec // the rendered config holds only hashes
		return fmt.Errorf("render: writing -o: %w", err)
	}
	_, _ = fmt.Fprintf(stderr, "wrote %s (config hash %s, hash key %s)\n", out, r.Hash, opts.hashKeyFile)
	return nil
}
