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

// addPolicyFlags registers the standalone flags on fs: for the server, or
// for the render subcommand, which reads its inputs once.
func addPolicyFlags(fs *flag.FlagSet, o *policyOptions, render bool) {
	if render {
		fs.StringVar(&o.file, "policy", "", "FairQueuePolicy manifest (YAML or JSON) to render with the operator's renderer")
		fs.StringVar(&o.secrets, "secrets", "", "a file or directory of Secret manifests the policy references "+
			"(weightsFrom, keyRegistry); documents of other kinds are skipped")
	} else {
		fs.StringVar(&o.file, "policy", "", "FairQueuePolicy manifest (YAML or JSON) to render in-process with the operator's renderer, "+
			"watched for changes: run without Kubernetes; the hash key is read from --hash-key-file, created when absent once the policy has loaded")
		fs.StringVar(&o.secrets, "secrets", "", "with --policy, a file or directory of Secret manifests the policy references "+
			"(weightsFrom, keyRegistry, store.redis.secretRef); documents of other kinds are skipped, changes are followed")
	}
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

// standaloneKey is the hash key of the standalone mode: the one in path, or
// a new one that is written to path only by persist, once the start has
// succeeded, so that a failed start writes nothing.
type standaloneKey struct {
	path string
	key  []byte
	new  bool
}

// readOrNewHashKey reads the hash key at path, or makes a new random one
// (kept in memory) when the file does not exist.
func readOrNewHashKey(path string) (*standaloneKey, error) {
	key, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(key) < minHashKeyLen {
			return nil, fmt.Errorf("the hash key in %s holds %d bytes; it needs at least %d", path, len(key), minHashKeyLen)
		}
		return &standaloneKey{path: path, key: key}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading --hash-key-file: %w", err)
	}
	raw := make([]byte, hashKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generating a hash key: %w", err)
	}
	return &standaloneKey{path: path, key: []byte(base64.StdEncoding.EncodeToString(raw)), new: true}, nil
}

// persist writes a new key to its file (mode 0600, its directory 0700) and
// reports whether it wrote one. If another process created the file
// meanwhile, its key wins only when it is the same; otherwise the configs
// rendered with this key would disagree with it, and persist fails.
func (k *standaloneKey) persist() (bool, error) {
	if !k.new {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return false, fmt.Errorf("creating the directory of --hash-key-file: %w", err)
	}
	// Written to a temporary file and linked into place, which fails if the
	// file exists: the key appears whole or not at all, so a process or a
	// reader that finds the file never reads a partial key.
	tmp, err := os.CreateTemp(filepath.Dir(k.path), filepath.Base(k.path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("creating --hash-key-file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(k.key); err != nil {
		_ = tmp.Close()
		return false, fmt.Errorf("writing --hash-key-file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("writing --hash-key-file: %w", err)
	}
	err = os.Link(tmp.Name(), k.path)
	if errors.Is(err, fs.ErrExist) {
		theirs, rerr := os.ReadFile(k.path)
		if rerr == nil && bytes.Equal(theirs, k.key) {
			return false, nil
		}
		return false, fmt.Errorf("another process created --hash-key-file %s while this one started; start again to use its key", k.path)
	}
	if err != nil {
		return false, fmt.Errorf("creating --hash-key-file: %w", err)
	}
	k.new = false
	return true, nil
}

// preparePolicy resolves the hash key of the standalone mode: the file
// given, or the default for the policy; when the file does not exist the
// key is new and written only by persist. It sets o.hashKeyFile to the path.
func preparePolicy(o *options) (*standaloneKey, error) {
	if o.configFile != "" {
		return nil, errors.New("--policy and --config are both set: --policy renders the config itself, so give one of them")
	}
	if o.hashKeyFile == "" {
		data, err := os.ReadFile(o.policy.file)
		if err != nil {
			return nil, fmt.Errorf("reading --policy: %w", err)
		}
		p, _, err := reload.DecodePolicy(data)
		if err != nil {
			return nil, fmt.Errorf("--policy %s: %w", o.policy.file, err)
		}
		if o.hashKeyFile, err = defaultHashKeyFile(p.Namespace, p.Name); err != nil {
			return nil, err
		}
	}
	return readOrNewHashKey(o.hashKeyFile)
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
// would render for a policy file. It needs --hash-key-file: the config holds
// identities hashed with the key, so only the key the data plane will load
// makes it usable. A file that does not exist gets a new key, written only
// once the render has succeeded and said so; a failed render writes nothing.
func runRender(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataplane render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o policyOptions
	addPolicyFlags(fs, &o, true)
	var hashKeyFile, out string
	fs.StringVar(&hashKeyFile, "hash-key-file", "", "required: the file holding the policy's hash key, which the data plane loading the config must use; "+
		"a file that does not exist is created with a new key (mode 0600) once the render succeeds")
	fs.StringVar(&out, "o", "-", "where to write config.json; - is standard output")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "Usage: dataplane render --policy FILE --hash-key-file F [--secrets FILE|DIR] [-o config.json]\n\n"+
			"Writes, once, the config.json an operator would render for the policy (the config.json key of its ConfigMap),\n"+
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
	if hashKeyFile == "" {
		hashKeyFile = getenv(envPrefix + "HASH_KEY_FILE")
	}
	if o.file == "" {
		return errors.New("render: --policy FILE is required")
	}
	if hashKeyFile == "" {
		return renderNeedsKeyFile(o.file)
	}
	opts := &options{policy: o, hashKeyFile: hashKeyFile}
	sk, err := preparePolicy(opts)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	r, err := newPolicySource(opts, sk.key, logr.Discard()).Render()
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	created, err := sk.persist()
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if out == "-" {
		_, err = stdout.Write(r.Data)
	} else if err = os.WriteFile(out, r.Data, 0o644); err != nil { //nolint:gosec // the rendered config holds only hashes
		err = fmt.Errorf("render: writing -o: %w", err)
	}
	if err != nil {
		if created {
			_ = os.Remove(sk.path) // nothing was rendered with it
		}
		return err
	}
	if created {
		_, _ = fmt.Fprintf(stderr, "created a new hash key in %s; load the config with it (--hash-key-file) and keep it to keep tenant hashes stable\n", sk.path)
	}
	if out != "-" {
		_, _ = fmt.Fprintf(stderr, "wrote %s (config hash %s, hash key %s)\n", out, r.Hash, sk.path)
	}
	return nil
}

// renderNeedsKeyFile is the error of a render without --hash-key-file: it
// names the keys a user can mean.
func renderNeedsKeyFile(policyFile string) error {
	msg := "render: --hash-key-file is required: the config holds identities hashed with that key, so give the key the data plane will load: " +
		"the cluster's Secret (kubectl get secret NAME-hash-key -o jsonpath='{.data.key}' | base64 -d > key) for the operator's exact bytes"
	if data, err := os.ReadFile(policyFile); err == nil {
		if p, _, err := reload.DecodePolicy(data); err == nil {
			msg = "render: --hash-key-file is required: the config holds identities hashed with that key, so give the key the data plane will load: " +
				fmt.Sprintf("the cluster's Secret (kubectl -n %s get secret %s -o jsonpath='{.data.key}' | base64 -d > key) for the operator's exact bytes", p.Namespace, p.HashKeySecretName())
			if def, err := defaultHashKeyFile(p.Namespace, p.Name); err == nil {
				msg += ", or " + def + ", the key `dataplane --policy` uses without the flag"
			}
		}
	}
	return errors.New(msg + "; a file that does not exist is created with a new key")
}
