package reload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/clock"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
	fqrender "github.com/fairqueue/fairqueue/dataplane/render"
)

// DefaultNamespace is the namespace of a policy file whose metadata names
// none, as kubectl would apply it.
const DefaultNamespace = "default"

// maxPolicyInputBytes bounds every file a PolicySource reads, so a wrong path
// (a log, an image) fails fast instead of filling memory. A ConfigMap holds
// 1 MiB; the inputs of a policy are of that order.
const maxPolicyInputBytes = 4 << 20

// maxSecretFiles bounds how many files of a --secrets directory are read.
const maxSecretFiles = 256

// PolicyOptions configures a PolicySource.
type PolicyOptions struct {
	// SecretsPath is a file or directory of Secret manifests (YAML or JSON,
	// several documents per file allowed) that the policy references; empty
	// means none. Documents of other kinds are skipped, so a directory may
	// also hold the policy itself.
	SecretsPath string
	// HashKey is the HMAC key identities are hashed with.
	HashKey []byte
	// BackendURLs replaces the URL of the named backends before rendering,
	// e.g. to point a cluster policy at a local server.
	BackendURLs map[string]string
	// Logger receives watch problems; a zero Logger discards them.
	Logger logr.Logger
	// Clock times the debounce and resync; nil means the real clock.
	Clock clock.Clock
	// Debounce and Resync are as in FileOptions; zero means their defaults.
	Debounce time.Duration
	Resync   time.Duration
}

// PolicySource renders a FairQueuePolicy manifest and the Secrets it
// references in-process, with the operator's renderer, and hands the rendered
// config to a Sink. It follows the FileSource semantics: it watches the
// directories of the policy file and of the Secrets (so in-place writes,
// renames, delete-then-recreate and the kubelet's ..data swap are seen),
// debounces bursts, re-reads on a resync timer, and offers a change only when
// its inputs changed. A policy that does not parse or render is rejected, so
// the last good config stays in force.
type PolicySource struct {
	path string
	opts PolicyOptions
	clk  clock.Clock

	lastInputs string // hash of the inputs last rendered
}

var _ Source = (*PolicySource)(nil)

// NewPolicySource returns a Source rendering the policy manifest at path.
func NewPolicySource(path string, opts PolicyOptions) *PolicySource {
	p := &PolicySource{path: filepath.Clean(path), opts: opts, clk: opts.Clock}
	if p.clk == nil {
		p.clk = clock.RealClock{}
	}
	if p.opts.Debounce <= 0 {
		p.opts.Debounce = DefaultDebounce
	}
	if p.opts.Resync <= 0 {
		p.opts.Resync = DefaultResync
	}
	return p
}

// String implements Source.
func (p *PolicySource) String() string { return "policy " + p.path }

// Render reads the policy and its Secrets now and renders them.
func (p *PolicySource) Render() (*fqrender.Rendered, error) {
	in, _, err := p.readInputs()
	if err != nil {
		return nil, err
	}
	return p.render(in)
}

// Secret returns the data of the Secret called name among the policy's
// inputs, read now: the Secret documents of the policy file and of
// SecretsPath, stringData merged into data. It lets the standalone data
// plane read the Secret a rendered config names (store.redis.secretRef)
// from the same files that resolve the policy's other Secrets.
func (p *PolicySource) Secret(name string) (map[string][]byte, error) {
	in, _, err := p.readInputs()
	if err != nil {
		return nil, err
	}
	s, ok := in.secrets[name]
	if !ok {
		return nil, fmt.Errorf("no Secret %q among the policy's files; %s", name, p.missingSecretFix())
	}
	return s.Data, nil
}

// missingSecretFix says where a Secret the policy names must be added.
func (p *PolicySource) missingSecretFix() string {
	if p.opts.SecretsPath == "" {
		return "without Kubernetes, Secrets come from files: pass --secrets FILE|DIR holding its manifest (kind: Secret), or add the manifest to the policy file"
	}
	return "without Kubernetes, Secrets come from files: add its manifest (kind: Secret) to --secrets " + p.opts.SecretsPath
}

// Run implements Source. It fails at once when a directory to watch cannot
// be watched.
func (p *PolicySource) Run(ctx context.Context, sink Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", p.path, err)
	}
	defer func() { _ = w.Close() }() // only releases the inotify descriptor
	for _, dir := range p.watchDirs() {
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watching directory %s: %w; the directory must exist", dir, err)
		}
	}
	return debouncedWatch{
		clk: p.clk, debounce: p.opts.Debounce, resync: p.opts.Resync,
		changed: func(ev fsnotify.Event) bool {
			p.opts.Logger.V(2).Info("Policy input changed", "path", ev.Name, "event", ev.Op.String())
			return true
		},
		failed: func(err error) { p.opts.Logger.Error(err, "Watching the policy files", "path", p.path) },
		read:   func() { p.read(sink) },
	}.run(ctx, w)
}

// watchDirs returns the directories whose changes can change the render.
func (p *PolicySource) watchDirs() []string {
	dirs := []string{filepath.Dir(p.path)}
	if s := p.opts.SecretsPath; s != "" {
		if fi, err := os.Stat(s); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Clean(s))
		} else {
			dirs = append(dirs, filepath.Dir(filepath.Clean(s)))
		}
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// read renders the inputs when they changed since the last read and offers
// the result to sink.
func (p *PolicySource) read(sink Sink) {
	in, digest, err := p.readInputs()
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEmptyFile) {
		// Between a delete and the recreate, or half written: not a bad
		// policy, just none yet.
		p.opts.Logger.V(1).Info("Policy input missing or empty, keeping the config in force", "path", p.path, "reason", err.Error())
		return
	}
	if digest != "" && digest == p.lastInputs {
		return
	}
	p.lastInputs = digest
	if err != nil {
		sink.Reject(p.String(), err)
		return
	}
	out, err := p.render(in)
	if err != nil {
		sink.Reject(p.String(), err)
		return
	}
	_ = sink.Update(p.String(), out.Data) // the sink logs and counts refusals
}

// policyInputs is everything read from disk for one render.
type policyInputs struct {
	policy  *fqv1alpha1.FairQueuePolicy
	secrets map[string]*corev1.Secret
}

var errEmptyFile = errors.New("the file is empty")

// readInputs reads the policy and the Secrets and returns them with a digest
// of every byte read, so unchanged inputs are recognised before rendering.
func (p *PolicySource) readInputs() (*policyInputs, string, error) {
	h := sha256.New()
	data, err := readBounded(p.path)
	if err != nil {
		return nil, "", err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, "", fmt.Errorf("policy file %s: %w", p.path, errEmptyFile)
	}
	_, _ = fmt.Fprintf(h, "%s\x00%d\x00", p.path, len(data))
	h.Write(data)
	policy, secrets, err := DecodePolicy(data)
	if err == nil && p.opts.SecretsPath != "" {
		var more map[string]*corev1.Secret
		more, err = readSecrets(p.opts.SecretsPath, h)
		for name, s := range more {
			if _, dup := secrets[name]; !dup {
				secrets[name] = s
			}
		}
	}
	digest := hex.EncodeToString(h.Sum(nil))
	if err != nil {
		return nil, digest, fmt.Errorf("%s: %w", p.path, err)
	}
	for name, url := range p.opts.BackendURLs {
		found := false
		for i := range policy.Spec.Backends {
			if policy.Spec.Backends[i].Name == name {
				policy.Spec.Backends[i].URL, found = url, true
			}
		}
		if !found {
			return nil, digest, fmt.Errorf("--backend-url names backend %q, which spec.backends does not have", name)
		}
	}
	return &policyInputs{policy: policy, secrets: secrets}, digest, nil
}

func (p *PolicySource) render(in *policyInputs) (*fqrender.Rendered, error) {
	return fqrender.Render(fqrender.Input{
		Policy:           in.policy,
		HashKey:          p.opts.HashKey,
		HashKeySecret:    in.policy.HashKeySecretName(),
		Secrets:          in.secrets,
		MissingSecretFix: p.missingSecretFix(),
	})
}

// DecodePolicy decodes a manifest holding exactly one FairQueuePolicy and any
// number of Secrets, as YAML or JSON documents. Decoding is strict: an unknown
// or misspelt field is an error naming it, as `kubectl apply` with server-side
// field validation would report, and the policy is validated against the
// CRD's schema and rules as the API server validates it (*SchemaError). The
// policy's namespace defaults to DefaultNamespace; Secrets are returned by
// name with stringData merged into data, as the API server stores them.
func DecodePolicy(data []byte) (*fqv1alpha1.FairQueuePolicy, map[string]*corev1.Secret, error) {
	var policy *fqv1alpha1.FairQueuePolicy
	var policyDoc []byte
	var policyIndex int
	secrets := map[string]*corev1.Secret{}
	err := eachDocument(data, func(i int, kind string, doc []byte) error {
		switch kind {
		case "FairQueuePolicy":
			if policy != nil {
				return fmt.Errorf("document %d is a second FairQueuePolicy; give one policy per file", i)
			}
			policy = &fqv1alpha1.FairQueuePolicy{}
			j, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return fmt.Errorf("document %d (FairQueuePolicy): %w", i, err)
			}
			strict, err := kjson.UnmarshalStrict(j, policy)
			if err != nil {
				// A value the Go types cannot hold (a malformed duration)
				// is one the API server refuses in its own words: say
				// those, with the field (SPEC 10).
				if serr := validateAsAPIServer(j); serr != nil {
					err = serr
				}
				return fmt.Errorf("document %d (FairQueuePolicy): %w", i, err)
			}
			if err := errors.Join(strict...); err != nil {
				return fmt.Errorf("document %d (FairQueuePolicy): %w", i, err)
			}
			if gv := fqv1alpha1.GroupVersion.String(); policy.APIVersion != gv {
				return fmt.Errorf("document %d: apiVersion %q is not %q", i, policy.APIVersion, gv)
			}
			policyDoc, policyIndex = doc, i
		case "Secret":
			s, err := decodeSecret(doc)
			if err != nil {
				return fmt.Errorf("document %d (Secret): %w", i, err)
			}
			secrets[s.Name] = s
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if policy == nil {
		return nil, nil, errors.New("no document has kind: FairQueuePolicy (apiVersion " + fqv1alpha1.GroupVersion.String() + ")")
	}
	if policy.Name == "" {
		return nil, nil, errors.New("the FairQueuePolicy has no metadata.name")
	}
	if policy.Namespace == "" {
		policy.Namespace = DefaultNamespace
	}
	j, err := yaml.YAMLToJSON(policyDoc)
	if err == nil {
		err = validateAsAPIServer(j)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("document %d (FairQueuePolicy): %w", policyIndex, err)
	}
	return policy, secrets, nil
}

// eachDocument calls fn with every non-empty document of a YAML or JSON
// stream, numbered from 1, with its kind.
func eachDocument(data []byte, fn func(i int, kind string, doc []byte) error) error {
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 1; ; i++ {
		var raw map[string]any
		if err := r.Decode(&raw); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("document %d is not YAML or JSON: %w%s", i, err, unquotedVarHint(data))
		}
		if len(raw) == 0 {
			continue
		}
		kind, _ := raw["kind"].(string)
		doc, err := yaml.Marshal(raw)
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if err := fn(i, kind, doc); err != nil {
			return err
		}
	}
}

// unquotedVarHint explains the YAML error an unquoted ${VAR} gives inside a
// flow mapping or sequence ({...} or [...]), where { and } end the value:
// it names the first such line and the fix, or returns "".
func unquotedVarHint(data []byte) string {
	for n, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for i := strings.Index(line, "${"); i >= 0; {
			before := strings.TrimRight(line[:i], " \t")
			flow := strings.ContainsAny(before, "{[")
			quoted := strings.HasSuffix(before, `"`) || strings.HasSuffix(before, "'")
			if flow && !quoted {
				return fmt.Sprintf("\nline %d: a ${VAR} inside { } or [ ] must be quoted, or YAML reads its braces as the mapping's: "+
					`write "${VAR}", e.g. - {identity: "${ACME_KEY}", weight: 3}`, n+1)
			}
			next := strings.Index(line[i+2:], "${")
			if next < 0 {
				break
			}
			i += 2 + next
		}
	}
	return ""
}

// strictDecode decodes a YAML or JSON document into obj as the API server
// does with strict field validation: field names match case-sensitively and
// unknown or duplicate fields are errors naming their full path.
func strictDecode(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeSecret decodes a Secret manifest and merges stringData into data.
func decodeSecret(doc []byte) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := strictDecode(doc, s); err != nil {
		return nil, err
	}
	if s.Name == "" {
		return nil, errors.New("the Secret has no metadata.name")
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
	return s, nil
}

// ReadSecrets reads the Secret manifests of a file, or of every *.yaml,
// *.yml and *.json file of a directory (not recursing, skipping hidden
// files), by name. Documents of other kinds are skipped.
func ReadSecrets(path string) (map[string]*corev1.Secret, error) {
	return readSecrets(path, io.Discard)
}

func readSecrets(path string, digest io.Writer) (map[string]*corev1.Secret, error) {
	files := []string{path}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--secrets: %w", err)
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("--secrets: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			name := e.Name()
			ext := strings.ToLower(filepath.Ext(name))
			if strings.HasPrefix(name, ".") || e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
				continue
			}
			files = append(files, filepath.Join(path, name))
		}
		if len(files) > maxSecretFiles {
			return nil, fmt.Errorf("--secrets directory %s has %d manifest files, more than the %d read; keep only the policy's Secrets there", path, len(files), maxSecretFiles)
		}
	}
	out := map[string]*corev1.Secret{}
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			return nil, fmt.Errorf("--secrets: %w", err)
		}
		_, _ = fmt.Fprintf(digest, "%s\x00%d\x00", f, len(data))
		_, _ = digest.Write(data)
		err = eachDocument(data, func(i int, kind string, doc []byte) error {
			if kind != "Secret" {
				return nil
			}
			s, err := decodeSecret(doc)
			if err != nil {
				return fmt.Errorf("document %d (Secret): %w", i, err)
			}
			out[s.Name] = s
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("--secrets file %s: %w", f, err)
		}
	}
	return out, nil
}

// readBounded reads a file of at most maxPolicyInputBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxPolicyInputBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it the right file?", path, maxPolicyInputBytes)
	}
	return data, nil
}
