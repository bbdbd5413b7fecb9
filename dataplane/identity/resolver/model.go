package resolver

import (
	"errors"
	"net/http"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// ErrModelNotDetermined refuses a request whose model per-model limits need
// but cannot be read, under the default unknownModel action (Reject).
var ErrModelNotDetermined = errors.New(`per-model rate limits apply, but the request body is not a JSON object with a string "model" ` +
	`that this gateway can read (for example it contains NaN or is not JSON); send standard JSON with a "model" field`)

// modelPolicy is how a config finds a request's model.
type modelPolicy struct {
	// header is the canonical model header; empty reads the body only.
	header string
	// readBody is true when a limit or a timeout depends on the model.
	readBody bool
	// limited is true when per-model limits are configured, so a body whose
	// model cannot be read must not skip them.
	limited bool
	// chargeAs is the model charged for such a body; empty refuses it.
	chargeAs string
	// known interns the model names the config mentions.
	known map[string]string
}

func newModelPolicy(cfg *config.Config) modelPolicy {
	da := cfg.DeferredAdmission
	p := modelPolicy{
		header:   http.CanonicalHeaderKey(cfg.Identity.ModelHeader),
		readBody: cfg.RateLimits.PerModel != nil || len(cfg.Timeouts.Models) > 0 || da != nil,
		limited:  cfg.RateLimits.PerModel != nil || (da != nil && da.TokenLimits.PerModel != nil),
		known:    make(map[string]string),
	}
	if m := cfg.RateLimits.PerModel; m != nil {
		if m.UnknownModel.Action == config.UnknownModelCharge {
			p.chargeAs = m.UnknownModel.ChargeAs
		}
		for _, o := range m.Overrides {
			p.known[o.Model] = o.Model
		}
	}
	for _, m := range cfg.Timeouts.Models {
		p.known[m.Model] = m.Model
	}
	if da != nil && da.TokenLimits.PerModel != nil {
		for _, o := range da.TokenLimits.PerModel.Overrides {
			p.known[o.Model] = o.Model
		}
	}
	return p
}

// Model returns the model of a request with headers h and body: the
// configured model header when present, else the JSON body's "model", else
// "" when nothing depends on it. When per-model limits apply and a body's
// model cannot be read, it returns the unknownModel chargeAs model, or
// ErrModelNotDetermined.
func (rv *Resolver) Model(h http.Header, body []byte) (string, error) {
	p := &rv.model
	if p.header != "" {
		if v := HeaderValue(h, p.header); v != "" {
			return v, nil
		}
	}
	if !p.readBody || len(body) == 0 {
		return "", nil // no body names no model: nothing to charge
	}
	if m, found := modelFromJSON(body, p.known); found {
		return m, nil
	}
	if !p.limited {
		return "", nil
	}
	if p.chargeAs == "" {
		return "", ErrModelNotDetermined
	}
	return p.chargeAs, nil
}
