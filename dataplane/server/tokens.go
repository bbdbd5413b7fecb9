/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package server

import (
	"net/http"
	"strconv"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/usage"
)

// Token-budget response headers (SPEC section 6), as OpenAI sends the first
// three.
const (
	headerTokensLimit     = "X-Ratelimit-Limit-Tokens"
	headerTokensRemaining = "X-Ratelimit-Remaining-Tokens"
	headerTokensReset     = "X-Ratelimit-Reset-Tokens"
	// headerDeferredMS is the time a request was held for its tokens.
	headerDeferredMS = "X-Fair-Queue-Deferred-Ms"
)

// tokenRuntime is deferred admission compiled for the request path; nil in a
// runtime without deferredAdmission.
type tokenRuntime struct {
	estimator *usage.Estimator
	// includeUsage asks the upstream for the usage of streamed responses.
	includeUsage bool
}

// newTokenRuntime returns the token runtime of cfg, reusing prev's estimator
// when its default output cap is unchanged (the tokenizer is loaded once).
func newTokenRuntime(da *config.DeferredAdmission, prev *tokenRuntime, prevCap int64) *tokenRuntime {
	if da == nil {
		return nil
	}
	capTokens := da.Estimation.DefaultMaxTokens
	if capTokens <= 0 {
		capTokens = config.DefaultMaxTokensReserved
	}
	tr := &tokenRuntime{includeUsage: da.Estimation.IncludeUsage}
	if prev != nil && prevCap == capTokens {
		tr.estimator = prev.estimator
	} else {
		tr.estimator = usage.NewEstimator(capTokens)
	}
	// Build the tokenizers now, while the config loads, rather than on the
	// first request (20-220 ms each, once per process): the default
	// encoding, and that of every model the token limits name.
	usage.Warm("")
	if m := da.TokenLimits.PerModel; m != nil {
		for _, o := range m.Overrides {
			usage.Warm(o.Model)
		}
	}
	return tr
}

// writeTokenHeaders sets x-ratelimit-*-tokens from the tightest token bucket.
func writeTokenHeaders(h http.Header, t *admission.TokenInfo) {
	if t.HasQuota {
		q := t.Quota
		h.Set(headerTokensLimit, strconv.FormatInt(q.Limit, 10))
		h.Set(headerTokensRemaining, strconv.FormatInt(max(q.Remaining, 0), 10))
		h.Set(headerTokensReset, formatReset(q.Reset))
	}
	if t.Deferred {
		h.Set(headerDeferredMS, strconv.FormatInt(t.Waited.Milliseconds(), 10))
	}
}

// deferredDetails is the error body's account of a hold.
type deferredDetails struct {
	Reason   string `json:"reason,omitempty"`
	WaitedMS int64  `json:"waited_ms"`
	Tokens   int64  `json:"tokens"`
	// Band names the priority band the request was held in; absent
	// without bands.
	Band string `json:"band,omitempty"`
}

// tokenError fills e for a token-budget refusal: its code, message and hold
// details.
func tokenError(e *apiError, dec *admission.Decision) {
	t := &dec.Tokens
	reserve := t.Requested
	switch {
	case t.Deferred && t.Reason != "":
		e.code = string(t.Reason)
		e.message = "the request was held for its token budget (" + dec.LimitType + ") and refused (" + string(t.Reason) +
			"); it reserves " + strconv.FormatInt(reserve, 10) + " tokens; retry after the indicated time"
	default:
		e.code = dec.LimitType + "_rate_limit_exceeded"
		e.message = "token budget exceeded for " + dec.LimitType + ": the request reserves " + strconv.FormatInt(reserve, 10) +
			" tokens (prompt estimate plus its output cap); retry after the indicated time, or lower max_tokens"
	}
	e.deferred = &deferredDetails{Reason: string(t.Reason), WaitedMS: t.Waited.Milliseconds(), Tokens: reserve, Band: t.Band}
}
