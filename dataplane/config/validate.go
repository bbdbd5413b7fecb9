package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/fairqueue/fairqueue/dataplane/identity"
)

var dnsLabelPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// isLowerHex reports whether s is n lowercase hex digits. It replaces a
// regular expression on the reload path, where thousands of hashes are checked.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// fieldErrors collects validation errors, each prefixed with its JSON path.
//
// +kubebuilder:object:generate=false
type fieldErrors []error

func (e *fieldErrors) add(path, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate reports every invalid value in c, joined into one error; each names
// its JSON path, what is allowed and what was found. It returns nil for a valid
// config. Lists may be in any order.
//
// It checks what the data plane needs to run the config: values it divides
// by or dials, hashes, enums, keys unique within a list, and how sections fit
// together. The rules a policy author must follow (header choices, upper
// bounds, backend URLs without credentials, Redis modes) are the CRD's: the
// API server and `dataplane --policy` apply them to the policy, and the
// operator renders only policies that passed them.
func (c *Config) Validate() error {
	var errs fieldErrors
	if c.APIVersion != APIVersion {
		errs.add("apiVersion", "must be %q, got %q", APIVersion, c.APIVersion)
	}
	if c.Kind != Kind {
		errs.add("kind", "must be %q, got %q", Kind, c.Kind)
	}
	c.Policy.validate(&errs)
	c.HashKeySecret.validate(&errs)
	c.Identity.validate(&errs)
	c.eachLimit(func(path, unit string, l *Limit) { l.validate(path, unit, &errs) })
	c.eachModelLimits(func(path, unit string, m *ModelLimits) { m.validate(path, unit, &errs) })
	c.FairQueuing.validate(&errs)
	c.Timeouts.validate(&errs)
	validateBackends(c.Backends, &errs)
	c.Store.validate(c, &errs)
	c.DeferredAdmission.validate(&errs)
	c.validateCost(&errs)
	c.Capacity.validate(c.Backends, &errs)
	return errors.Join(errs...)
}

func (p *PolicyRef) validate(errs *fieldErrors) {
	requireDNSName("policy.namespace", p.Namespace, 63, errs)
	requireDNSName("policy.name", p.Name, 253, errs)
	if p.Generation < 0 {
		errs.add("policy.generation", "must be >= 0, got %d", p.Generation)
	}
}

func (s *HashKeySecret) validate(errs *fieldErrors) {
	requireDNSName("hashKeySecret.namespace", s.Namespace, 63, errs)
	requireDNSName("hashKeySecret.name", s.Name, 253, errs)
	if s.Key == "" {
		errs.add("hashKeySecret.key", "must name the Secret data key holding the hash key")
	}
	if !isLowerHex(s.Fingerprint, 16) {
		errs.add("hashKeySecret.fingerprint", "must be 16 lowercase hex digits (see KeyFingerprint), got %q", s.Fingerprint)
	}
}

func (id *Identity) validate(errs *fieldErrors) {
	if len(id.APIKeyHeaders) == 0 {
		errs.add("identity.apiKeyHeaders", "must list at least one header, such as \"Authorization\"")
	}
	seen := map[string]int{}
	for i, h := range id.APIKeyHeaders {
		path := fmt.Sprintf("identity.apiKeyHeaders[%d]", i)
		validateHeaderName(path, h, errs)
		canonical := strings.ToLower(h)
		if j, dup := seen[canonical]; dup {
			errs.add(path, "duplicates identity.apiKeyHeaders[%d] (%q); header names are case-insensitive", j, h)
			continue
		}
		seen[canonical] = i
	}
	if id.UserHeader != "" {
		validateHeaderName("identity.userHeader", id.UserHeader, errs)
	}
	if id.TeamHeader != "" {
		validateHeaderName("identity.teamHeader", id.TeamHeader, errs)
	}
	if id.ModelHeader != "" {
		validateHeaderName("identity.modelHeader", id.ModelHeader, errs)
	}
	if r := id.KeyRegistry; r != nil {
		seen := map[string]int{}
		for i, e := range r.Entries {
			path := fmt.Sprintf("identity.keyRegistry.entries[%d]", i)
			requireHash(path+".apiKeyHash", e.APIKeyHash, errs)
			if e.UserHash != "" {
				requireHash(path+".userHash", e.UserHash, errs)
			}
			if e.TeamHash != "" {
				requireHash(path+".teamHash", e.TeamHash, errs)
			}
			if j, dup := seen[e.APIKeyHash]; dup {
				errs.add(path+".apiKeyHash", "duplicates identity.keyRegistry.entries[%d]; each API key may be registered once", j)
				continue
			}
			seen[e.APIKeyHash] = i
		}
	}
}

func (f *FairQueuing) validate(errs *fieldErrors) {
	switch f.TenantDimension {
	case identity.DimensionUser, identity.DimensionAPIKey, identity.DimensionTeam:
	default:
		errs.add("fairQueuing.tenantDimension", "must be one of %q, %q or %q, got %q",
			identity.DimensionUser, identity.DimensionAPIKey, identity.DimensionTeam, f.TenantDimension)
	}
	if f.DefaultWeight < 1 || f.DefaultWeight > MaxWeight {
		errs.add("fairQueuing.defaultWeight", "must be in [1, %d], got %d", MaxWeight, f.DefaultWeight)
	}
	seen := map[string]int{}
	for i, w := range f.Weights {
		path := fmt.Sprintf("fairQueuing.weights[%d]", i)
		requireHash(path+".tenantHash", w.TenantHash, errs)
		if j, dup := seen[w.TenantHash]; dup {
			errs.add(path+".tenantHash", "duplicates fairQueuing.weights[%d]; each tenant may have one weight", j)
		} else {
			seen[w.TenantHash] = i
		}
		if w.Weight < 1 || w.Weight > MaxWeight {
			errs.add(path+".weight", "must be in [1, %d], got %d", MaxWeight, w.Weight)
		}
		if w.Band != "" {
			f.requireBand(path+".band", w.Band, errs)
		}
	}
	f.validateBands(errs)
	b := &f.Bounds
	for _, v := range []struct {
		name  string
		value int32
	}{
		{"maxQueueDepthPerTenant", b.MaxQueueDepthPerTenant}, {"maxTotalQueued", b.MaxTotalQueued},
		{"maxTenants", b.MaxTenants}, {"maxInFlight", b.MaxInFlight},
	} {
		atLeastOne("fairQueuing.bounds."+v.name, int64(v.value), errs)
	}
	positive("fairQueuing.bounds.maxWait", b.MaxWait, errs)
}

// validateBands checks what the scheduler needs of the priority bands:
// at most MaxBands, names it can tell apart, shares that leave the highest
// band something, and a default band that exists. Which band may set a
// share, and header choices, are the CRD's rules.
func (f *FairQueuing) validateBands(errs *fieldErrors) {
	if len(f.Bands) > MaxBands {
		errs.add("fairQueuing.bands", "must list at most %d bands, got %d", MaxBands, len(f.Bands))
	}
	seen := map[string]int{}
	var sum float64
	for i, b := range f.Bands {
		path := fmt.Sprintf("fairQueuing.bands[%d]", i)
		if b.Name == "" {
			errs.add(path+".name", "must not be empty")
		} else if j, dup := seen[b.Name]; dup {
			errs.add(path+".name", "duplicates fairQueuing.bands[%d] (%q)", j, b.Name)
		} else {
			seen[b.Name] = i
		}
		// Written so that NaN fails too.
		if !(b.MinShare >= 0 && b.MinShare < 1) {
			errs.add(path+".minShare", "must be in [0, 1), got %v", b.MinShare)
		}
		sum += b.MinShare
	}
	if len(f.Bands) > 0 && !(sum < 1) {
		errs.add("fairQueuing.bands", "minShare must sum to less than 1, got %v", sum)
	}
	switch {
	case f.DefaultBand != "":
		f.requireBand("fairQueuing.defaultBand", f.DefaultBand, errs)
	case len(f.Bands) > 0:
		errs.add("fairQueuing.defaultBand", "must name the band of tenants without one when bands are set")
	}
	if f.RequestBandHeader != "" {
		validateHeaderName("fairQueuing.requestBandHeader", f.RequestBandHeader, errs)
	}
}

// requireBand checks that name is one of f.Bands.
func (f *FairQueuing) requireBand(path, name string, errs *fieldErrors) {
	for _, b := range f.Bands {
		if b.Name == name {
			return
		}
	}
	if len(f.Bands) == 0 {
		errs.add(path, "names band %q but fairQueuing.bands is empty", name)
		return
	}
	errs.add(path, "names band %q, which is not in fairQueuing.bands", name)
}

// atLeastOne checks a count the data plane sizes or divides by.
func atLeastOne(path string, v int64, errs *fieldErrors) {
	if v < 1 {
		errs.add(path, "must be >= 1, got %d", v)
	}
}

// positive checks a duration the data plane waits for or divides by.
func positive(path string, d Duration, errs *fieldErrors) {
	if d.Duration <= 0 {
		errs.add(path, "must be > 0, got %s", d)
	}
}

func (t *Timeouts) validate(errs *fieldErrors) {
	if t.RequestTotal.Duration < 0 {
		errs.add("timeouts.requestTotal", "must be >= 0 (0 means no total timeout), got %s", t.RequestTotal)
	}
	if t.ClientDeadlineHeader != "" {
		validateHeaderName("timeouts.clientDeadlineHeader", t.ClientDeadlineHeader, errs)
	}
	seen := map[string]int{}
	for i, m := range t.Models {
		path := fmt.Sprintf("timeouts.models[%d]", i)
		validateModelName(path+".model", m.Model, errs)
		if j, dup := seen[m.Model]; dup {
			errs.add(path+".model", "duplicates timeouts.models[%d] (%q)", j, m.Model)
		} else {
			seen[m.Model] = i
		}
		positive(path+".total", m.Total, errs)
	}
}

func validateBackends(backends []Backend, errs *fieldErrors) {
	seen := map[string]int{}
	for i, b := range backends {
		path := fmt.Sprintf("backends[%d]", i)
		if b.Name == "" {
			errs.add(path+".name", "must not be empty")
		}
		if j, dup := seen[b.Name]; dup {
			errs.add(path+".name", "duplicates backends[%d] (%q)", j, b.Name)
		} else {
			seen[b.Name] = i
		}
		if b.Weight < 1 || b.Weight > MaxWeight {
			errs.add(path+".weight", "must be in [1, %d], got %d", MaxWeight, b.Weight)
		}
		validateHTTPURL(path+".url", b.URL, errs)
	}
}

// validateHTTPURL checks that v is an absolute http or https URL the data
// plane can dial. Messages never quote the URL: its query or userinfo may
// hold a token, and these errors reach logs, status and Events.
func validateHTTPURL(path, v string, errs *fieldErrors) {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		errs.add(path, "must be an absolute http or https URL, got a value of %d characters that does not parse", len(v))
	case u.Scheme != "http" && u.Scheme != "https":
		errs.add(path, "scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		errs.add(path, "must have a host")
	}
}

func requireHash(path, v string, errs *fieldErrors) {
	if !isLowerHex(v, 64) {
		errs.add(path, "must be a 64-digit lowercase hex HMAC-SHA256, got %s", describe(v))
	}
}

// describe quotes v only when it cannot be a raw identity: a value that failed
// hash validation may be an identity pasted by mistake, which must not be
// echoed into logs.
func describe(v string) string {
	if v == "" {
		return `""`
	}
	return "a value of " + strconv.Itoa(len(v)) + " characters"
}

func requireDNSName(path, v string, maxLen int, errs *fieldErrors) {
	if v == "" {
		errs.add(path, "must not be empty")
		return
	}
	if len(v) > maxLen {
		errs.add(path, "must be at most %d characters, got %d", maxLen, len(v))
		return
	}
	for _, label := range strings.Split(v, ".") {
		if !dnsLabelPattern.MatchString(label) {
			errs.add(path, "must be a lowercase DNS name, got %q", v)
			return
		}
	}
}

func validateModelName(path, v string, errs *fieldErrors) {
	if v == "" {
		errs.add(path, "must name a model, got \"\"")
	}
}

// validateHeaderName checks that v is an HTTP header field name (an RFC 9110
// token).
func validateHeaderName(path, v string, errs *fieldErrors) {
	if v == "" {
		errs.add(path, "must be a header name, got \"\"")
		return
	}
	for i := 0; i < len(v); i++ {
		if !isTokenChar(v[i]) {
			errs.add(path, "must be a header name (letters, digits and !#$%%&'*+-.^_`|~), got %q", v)
			return
		}
	}
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
