package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fairqueue/fairqueue/internal/loadgen"
)

const usageHeader = `Usage: fqload --target URL[,URL...] [flags] (--tenant SPEC ... | --spec FILE)

Offers open-loop load (a constant arrival rate per tenant, independent of how
fast the server answers) and prints a JSON summary per tenant on stdout.

--tenant SPEC is a comma-separated list of key=value pairs:
  name=NAME          label in the summary (required, unique; never sent)
  rate=N             requests per second (required)
  api-key=KEY        sent as "Authorization: Bearer KEY" (visible in ps; prefer api-key-env)
  api-key-env=VAR    read the API key from environment variable VAR
  user=ID, team=ID   sent in --user-header and --team-header
  header=NAME:VALUE  extra header (repeatable)
  start=DUR          first request this long after the run starts
  stop=DUR           last arrivals before this offset
  prompt-bytes=N     size of the prompt (user message content) in bytes (default: "fqload")
  max-tokens=N       max_tokens of each request (default 1)
  stream=BOOL        ask for a streamed answer with its usage chunk (default false)

--spec FILE is YAML or JSON with the same settings; flags given explicitly
override it and --tenant flags add to its tenants:
  targets: [http://127.0.0.1:8080, http://127.0.0.1:8081]
  duration: 30s
  tenants:
  - {name: heavy, rate: 50, apiKeyEnv: HEAVY_KEY}
  - {name: light, rate: 5, user: alice, start: 10s}
  - {name: long, rate: 2, promptBytes: 4000, maxTokens: 100, stream: true}

Flags:
`

// specFile is the --spec document.
type specFile struct {
	Targets        []string     `json:"targets,omitempty"`
	Path           string       `json:"path,omitempty"`
	Duration       string       `json:"duration,omitempty"`
	Model          string       `json:"model,omitempty"`
	Timeout        string       `json:"timeout,omitempty"`
	MaxOutstanding int          `json:"maxOutstanding,omitempty"`
	UserHeader     string       `json:"userHeader,omitempty"`
	TeamHeader     string       `json:"teamHeader,omitempty"`
	Tenants        []tenantSpec `json:"tenants,omitempty"`
}

// tenantSpec is one tenant of a spec file.
type tenantSpec struct {
	Name      string            `json:"name"`
	Rate      float64           `json:"rate"`
	APIKey    string            `json:"apiKey,omitempty"`
	APIKeyEnv string            `json:"apiKeyEnv,omitempty"`
	User      string            `json:"user,omitempty"`
	Team      string            `json:"team,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Start     string            `json:"start,omitempty"`
	Stop      string            `json:"stop,omitempty"`

	PromptBytes int  `json:"promptBytes,omitempty"`
	MaxTokens   int  `json:"maxTokens,omitempty"`
	Stream      bool `json:"stream,omitempty"`
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// parse turns the command line (and the spec file it names) into a load
// configuration. It returns flag.ErrHelp after printing usage for --help.
func parse(args []string, stderr io.Writer, getenv func(string) string, readFile func(string) ([]byte, error)) (loadgen.Config, error) {
	fs := flag.NewFlagSet("fqload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), usageHeader)
		fs.PrintDefaults()
	}
	var (
		targets, tenants listFlag
		specPath         = fs.String("spec", "", "YAML or JSON `file` with targets, settings and tenants")
		duration         = fs.Duration("duration", 10*time.Second, "how long to schedule arrivals for (at most 1h)")
		model            = fs.String("model", loadgen.DefaultModel, "model field of every request body")
		timeout          = fs.Duration("timeout", loadgen.DefaultTimeout, "bound on each request, queueing included")
		maxOutstanding   = fs.Int("max-outstanding", loadgen.DefaultMaxOutstanding, "hard bound on requests in flight; arrivals beyond it count as dropped_client_side")
		path             = fs.String("path", loadgen.DefaultPath, "request path appended to each target")
		userHeader       = fs.String("user-header", loadgen.DefaultUserHeader, "header carrying a tenant's user=")
		teamHeader       = fs.String("team-header", loadgen.DefaultTeamHeader, "header carrying a tenant's team=")
	)
	fs.Var(&targets, "target", "data-plane base `URL[,URL...]`, requests spread round-robin (repeatable)")
	fs.Var(&tenants, "tenant", "tenant `SPEC` such as name=a,rate=10,user=alice (repeatable; see above)")
	if err := fs.Parse(args); err != nil {
		return loadgen.Config{}, err
	}
	if fs.NArg() > 0 {
		return loadgen.Config{}, fmt.Errorf("unexpected argument %q: every setting is a flag, see --help", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var spec specFile
	if *specPath != "" {
		data, err := readFile(*specPath)
		if err != nil {
			return loadgen.Config{}, fmt.Errorf("reading --spec: %w", err)
		}
		if err := yaml.UnmarshalStrict(data, &spec); err != nil {
			return loadgen.Config{}, fmt.Errorf("parsing --spec %s: %w", *specPath, err)
		}
	}

	cfg := loadgen.Config{
		Targets:        spec.Targets,
		Path:           pick(set["path"], *path, spec.Path),
		Model:          pick(set["model"], *model, spec.Model),
		MaxOutstanding: pick(set["max-outstanding"], *maxOutstanding, spec.MaxOutstanding),
		UserHeader:     pick(set["user-header"], *userHeader, spec.UserHeader),
		TeamHeader:     pick(set["team-header"], *teamHeader, spec.TeamHeader),
		Duration:       *duration,
		Timeout:        *timeout,
	}
	var errs []error
	if !set["duration"] && spec.Duration != "" {
		cfg.Duration, errs = parseDuration(errs, "spec duration", spec.Duration)
	}
	if !set["timeout"] && spec.Timeout != "" {
		cfg.Timeout, errs = parseDuration(errs, "spec timeout", spec.Timeout)
	}
	if len(targets) > 0 {
		cfg.Targets = nil
		for _, t := range targets {
			for _, u := range strings.Split(t, ",") {
				if u = strings.TrimSpace(u); u != "" {
					cfg.Targets = append(cfg.Targets, u)
				}
			}
		}
	}
	for i, ts := range spec.Tenants {
		t, err := ts.tenant(getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec tenants[%d]: %w", i, err))
			continue
		}
		cfg.Tenants = append(cfg.Tenants, t)
	}
	for _, v := range tenants {
		ts, err := parseTenantFlag(v)
		if err == nil {
			var t loadgen.Tenant
			if t, err = ts.tenant(getenv); err == nil {
				cfg.Tenants = append(cfg.Tenants, t)
				continue
			}
		}
		errs = append(errs, fmt.Errorf("--tenant %q: %w", redact(v), err))
	}
	if err := errors.Join(errs...); err != nil {
		return loadgen.Config{}, err
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return loadgen.Config{}, err
	}
	return cfg, nil
}

// pick returns the flag value when the flag was given or the spec value is
// unset, and the spec value otherwise.
func pick[T comparable](flagSet bool, flagValue, specValue T) T {
	var zero T
	if flagSet || specValue == zero {
		return flagValue
	}
	return specValue
}

func parseDuration(errs []error, what, v string) (time.Duration, []error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s %q is not a duration such as 30s or 2m", what, v))
	}
	return d, errs
}

// parseTenantFlag reads a --tenant value.
func parseTenantFlag(v string) (tenantSpec, error) {
	var ts tenantSpec
	for i, kv := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(kv, "=")
		if !ok {
			return ts, fmt.Errorf("item %d is not key=value", i+1)
		}
		switch key {
		case "name":
			ts.Name = val
		case "rate":
			r, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return ts, fmt.Errorf("rate %q is not a number of requests per second", val)
			}
			ts.Rate = r
		case "api-key":
			ts.APIKey = val
		case "api-key-env":
			ts.APIKeyEnv = val
		case "user":
			ts.User = val
		case "team":
			ts.Team = val
		case "header":
			name, hv, ok := strings.Cut(val, ":")
			if !ok || name == "" {
				return ts, errors.New("a header value is not NAME:VALUE")
			}
			if ts.Headers == nil {
				ts.Headers = map[string]string{}
			}
			ts.Headers[name] = hv
		case "start":
			ts.Start = val
		case "stop":
			ts.Stop = val
		case "prompt-bytes", "max-tokens":
			n, err := strconv.Atoi(val)
			if err != nil {
				return ts, fmt.Errorf("%s %q is not a whole number", key, val)
			}
			if key == "prompt-bytes" {
				ts.PromptBytes = n
			} else {
				ts.MaxTokens = n
			}
		case "stream":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return ts, fmt.Errorf("stream %q is not true or false", val)
			}
			ts.Stream = b
		default:
			return ts, fmt.Errorf("unknown key %q: use name, rate, api-key, api-key-env, user, team, header, start, stop, prompt-bytes, max-tokens or stream", key)
		}
	}
	return ts, nil
}

// tenant resolves a tenant spec into a loadgen tenant.
func (ts tenantSpec) tenant(getenv func(string) string) (loadgen.Tenant, error) {
	t := loadgen.Tenant{Name: ts.Name, Rate: ts.Rate, APIKey: ts.APIKey, User: ts.User, Team: ts.Team, Headers: ts.Headers,
		PromptBytes: ts.PromptBytes, MaxTokens: ts.MaxTokens, Stream: ts.Stream}
	var errs []error
	if ts.APIKeyEnv != "" {
		if ts.APIKey != "" {
			errs = append(errs, errors.New("both an API key and an API key variable given: keep one"))
		}
		if t.APIKey = getenv(ts.APIKeyEnv); t.APIKey == "" {
			errs = append(errs, fmt.Errorf("environment variable %s named for the API key is empty or unset", ts.APIKeyEnv))
		}
	}
	if ts.Start != "" {
		t.Start, errs = parseDuration(errs, "start", ts.Start)
	}
	if ts.Stop != "" {
		t.Stop, errs = parseDuration(errs, "stop", ts.Stop)
	}
	return t, errors.Join(errs...)
}

// redact hides api-key and header values, and items that are not key=value,
// so that an error message never repeats a credential.
func redact(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		switch k, _, ok := strings.Cut(p, "="); {
		case !ok:
			parts[i] = "REDACTED"
		case k == "api-key" || k == "header":
			parts[i] = k + "=REDACTED"
		}
	}
	return strings.Join(parts, ",")
}
