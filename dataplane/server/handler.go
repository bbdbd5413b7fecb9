package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
	"github.com/fairqueue/fairqueue/dataplane/identity/resolver"
	"github.com/fairqueue/fairqueue/dataplane/usage"
)

// ServeHTTP runs one request through the admission path of SPEC section 2:
// identity resolution, the admission core (pre-auth limits, identity limits,
// fair queue), backend selection, and the proxied call with what is left of
// the total timeout.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	// Every response carries an x-request-id (SPEC section 5): the
	// client's own when it sent one, else the upstream's, else a generated
	// one, which the upstream then receives too.
	// One value slice serves both headers: neither is modified in place.
	w := &requestIDWriter{ResponseWriter: rw}
	if v := r.Header[headerRequestID]; len(v) > 0 && v[0] != "" {
		w.id, w.client = v[:1:1], true
	} else {
		w.id = []string{newRequestID()}
		r.Header[headerRequestID] = w.id
	}
	if log := s.log.V(2); log.Enabled() {
		defer s.accessLog(log, w, r, s.clock.Now())
	}
	rt := s.rt.Load()
	if rt == nil {
		(&apiError{status: http.StatusServiceUnavailable, errType: errorTypeUnavailable, code: "not_ready",
			message: "the data plane has no valid config loaded yet; retry shortly", retryAfter: time.Second}).write(w)
		return
	}
	start := s.clock.Now()

	// Identity resolution (SPEC section 3). Requests answered before the
	// admission core still pay the pre-auth limits first.
	id, err := rt.resolver.Resolve(r)
	client := id.ClientAddr
	if err != nil {
		if !s.preAuthRefused(w, r, rt, client) {
			(&apiError{status: http.StatusUnauthorized, errType: errorTypeAuthentication, code: "invalid_api_key", message: err.Error()}).write(w)
		}
		return
	}
	// The body is read (bounded) before admission even when the model comes
	// from a header: net/http notices a client hanging up only once the body
	// is consumed, and a queued request must leave the queue at once then.
	body, err := s.readBody(w, r)
	if err != nil {
		if !s.preAuthRefused(w, r, rt, client) {
			s.bodyError(w, err)
		}
		return
	}
	defer body.release()
	model, err := rt.resolver.Model(r.Header, body.bytes())
	if err != nil {
		if !s.preAuthRefused(w, r, rt, client) {
			(&apiError{status: http.StatusBadRequest, errType: errorTypeInvalidRequest, code: "model_not_determined", message: err.Error()}).write(w)
		}
		return
	}

	// The admission budget (SPEC section 5) is the smallest of maxWait
	// (applied by the queue), the total timeout of this request's model and
	// the client's own deadline, less a margin so that a refusal reaches the
	// client before it gives up.
	total := rt.timeout(model)
	ar := admission.Request{
		ClientAddr:   client,
		Identity:     id.Set,
		Model:        model,
		TotalTimeout: total,
	}
	if rt.bandHeader != "" {
		ar.Band = resolver.HeaderValue(r.Header, rt.bandHeader)
	}
	if d, ok := clientTimeout(r.Header, rt.deadlineHeader); ok {
		ar.Deadline = start.Add(d - config.DefaultClientDeadlineMargin)
	}
	// The token estimate is a tokenizer pass over the body: set up only when
	// a token budget applies, and made when admission asks for it (after
	// the request-count limits admitted the request, unless the fair queue
	// charges by tokens), so a client over its request limit cannot spend
	// the gateway's CPU on it.
	var acct *usage.Account
	tokensRT := rt.tokens
	if tokensRT != nil && rt.admit.NeedsTokens(ar) {
		acct = usage.NewAccount(tokensRT.estimator, model, body.bytes())
		ar.Reserver = acct
	}
	rt.capacityRequest(&ar)
	var tk admission.Ticket
	dec := rt.admit.Begin(r.Context(), ar, &tk)
	if !dec.Allowed {
		s.refuse(w, r, &dec, &id.Set)
		return
	}
	// From here the ticket is settled exactly once (SPEC section 6), however
	// the response ends: a complete one by its reported usage; one the
	// upstream broke, the client left or cancelled, the total timeout cut,
	// or a panic ended by the prompt estimate plus the output relayed so
	// far; to nothing when no backend was called. A broken relay ends in a
	// panic (http.ErrAbortHandler), so the usage is read in this deferred
	// call, not after Forward returns.
	ctx := r.Context()
	complete := false
	defer func() {
		cancelled := r.Context().Err() != nil || errors.Is(context.Cause(ctx), errTotalTimeout)
		tk.Done(acct.Used(complete, cancelled, w.status))
	}()

	// A request that waited through a reload goes to the backends in force
	// now, not to those of the config it arrived under.
	rt = s.rt.Load()
	b, retry := rt.pick(&tk)
	if b == nil {
		dec = tk.NoBackend(retry)
		s.refuse(w, r, &dec, &id.Set)
		return
	}

	h := w.Header()
	if dec.HasQuota {
		writeQuotaHeaders(h, quota{limit: dec.Quota.Limit, remaining: dec.Quota.Remaining, reset: dec.Quota.Reset})
	}
	writeTokenHeaders(h, &dec.Tokens)
	if q := &dec.Queue; q.Queued {
		writeQueueHeaders(h, &queueInfo{position: q.Position, waited: q.Waited, band: q.Band})
		h.Set(headerQueueEstimatedWait, strconv.FormatInt(q.Estimate.Milliseconds(), 10))
	} else if dec.Tokens.Deferred {
		writeBandHeader(h, dec.Tokens.Band)
	}

	// The total timeout runs from arrival: queued time is deducted from what
	// is left for the upstream call.
	if total > 0 {
		remaining := start.Add(total).Sub(s.clock.Now())
		if remaining <= 0 {
			writeTimeout(w)
			return
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		t := s.clock.AfterFunc(remaining, func() { cancel(errTotalTimeout) })
		defer t.Stop()
		defer cancel(nil)
	}
	if acct == nil || !tk.Settles() {
		b.Forward(ctx, w, r)
		return
	}
	est := acct.Estimate()
	strip := false
	// Only the chat and text completion APIs take stream_options.
	if tokensRT.includeUsage && est.Stream && !est.ClientAskedUsage && strings.HasSuffix(r.URL.Path, "/completions") {
		if out, ok := usage.AddStreamUsage(body.bytes()); ok {
			body.replace(out)
			r.ContentLength = int64(len(out))
			strip = true
		}
	}
	uw := acct.Meter(w, strip)
	b.Forward(ctx, uw, r)
	// A last event the upstream did not end with a blank line was held back
	// in case it was the usage chunk; it goes out now, as sent. An error
	// means the client is gone.
	_ = usage.Finish(uw)
	complete = ctx.Err() == nil
}

// preAuthRefused charges the pre-auth limits for a request answered before
// the admission core (401, 413), and answers 429 or 503 when they refuse.
func (s *Server) preAuthRefused(w http.ResponseWriter, r *http.Request, rt *runtime, client string) bool {
	dec, ok := rt.admit.PreAuth(s.clock.Now(), client)
	if ok {
		return false
	}
	s.refuse(w, r, &dec, nil)
	return true
}

// refuse answers a refused admission decision and logs it with hashed
// identities only.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, dec *admission.Decision, id *identity.Set) {
	if dec.Status == admission.StatusClientClosedRequest {
		return // the client left while queued; its slot is already free
	}
	e := apiError{status: dec.Status, limitType: dec.LimitType, retryAfter: dec.RetryAfter}
	if e.status == http.StatusTooManyRequests && e.retryAfter <= 0 {
		e.retryAfter = time.Millisecond // a 429 always tells when to retry
	}
	q := &dec.Queue
	switch {
	case dec.Status == http.StatusServiceUnavailable && q.Reason == fairqueue.ReasonShutdown:
		e.errType, e.code = errorTypeUnavailable, "shutting_down"
		e.message = "this gateway replica is shutting down; the request was not sent upstream, retry it"
		e.limitType = ""
	case dec.Status == http.StatusServiceUnavailable:
		e.errType, e.code = errorTypeUnavailable, "store_unavailable"
		e.message = "the rate-limit store is unavailable; this is not your quota, retry shortly"
		if errors.Is(dec.Err, admission.ErrCapacityUnavailable) {
			e.message = "the shared store of backend slot counts (capacity mode) is unavailable and the policy's store fails closed; this is not your quota, retry shortly"
		}
		if dec.Err != nil {
			// The store logs each outage once and counts every error
			// (rate_limit_store_errors_total); one line per refused
			// request would flood the log for the outage's length.
			s.log.V(1).Info("Rate-limit store unavailable, answering 503", "error", dec.Err.Error())
		}
	case dec.TableFull:
		e.errType, e.code = errorTypeRateLimit, dec.LimitType+"_table_full"
		e.message = "this gateway replica tracks as many " + dec.LimitType + " keys as it may and none has refilled, " +
			"so a new one cannot be limited yet; retry after the indicated time"
	case dec.TokenRefusal():
		e.errType = errorTypeRateLimit
		tokenError(&e, dec)
	case dec.LimitType == admission.LimitTypeCapacity && !q.Queued:
		e.errType, e.code = errorTypeRateLimit, "capacity_exceeded"
		e.message = "every backend is at capacity and this request cannot wait for one (it has no tenant identity, or fair queuing is off); retry after the indicated time"
	case q.Queued && q.Reason != "":
		e.errType, e.code = errorTypeRateLimit, string(q.Reason)
		e.message = "fair queue refused the request (" + string(q.Reason) + ") while the " + dec.LimitType +
			" limit was exhausted; retry after the indicated time"
	default:
		e.errType, e.code = errorTypeRateLimit, dec.LimitType+"_rate_limit_exceeded"
		e.message = "rate limit exceeded for " + dec.LimitType + "; retry after the indicated time"
	}
	if q.Queued {
		e.queue = &queueInfo{tenantDimension: string(q.TenantDimension), reason: string(q.Reason),
			position: q.Position, waited: q.Waited, band: q.Band}
	} else {
		writeBandHeader(w.Header(), dec.Tokens.Band)
	}
	if dec.HasQuota {
		writeQuotaHeaders(w.Header(), quota{limit: dec.Quota.Limit, remaining: dec.Quota.Remaining, reset: dec.Quota.Reset})
	}
	writeTokenHeaders(w.Header(), &dec.Tokens)
	e.write(w)
	if log := s.log.V(1); log.Enabled() {
		kv := []any{"status", dec.Status, "code", e.code, "limitType", dec.LimitType, "retryAfter", dec.RetryAfter.String(), "path", r.URL.Path,
			"requestID", w.Header().Get(headerRequestID)}
		if id != nil {
			kv = append(kv, "apiKey", shortHash(id.APIKey), "user", shortHash(id.User), "team", shortHash(id.Team))
		}
		if q.Queued {
			kv = append(kv, "reason", q.Reason, "position", q.Position, "waited", q.Waited.String())
		}
		log.Info("Refused request", kv...)
	}
}

// writeTimeout answers a request whose total timeout ran out.
func writeTimeout(w http.ResponseWriter) {
	(&apiError{status: http.StatusGatewayTimeout, errType: errorTypeUpstream, code: "upstream_timeout",
		message: "the request's total timeout ran out before the backend answered; time spent queued counts against it"}).write(w)
}

// Client deadline headers read besides the one a policy names.
const (
	// headerStainlessTimeout is the client's timeout in whole seconds, sent
	// by openai-node when the call sets a per-request timeout option; a
	// client-level or default timeout is not sent. (openai-python sends its
	// read timeout as X-Stainless-Read-Timeout instead, which a policy may
	// name as its client deadline header.)
	headerStainlessTimeout = "X-Stainless-Timeout"
	// headerEnvoyTimeout is the route timeout in milliseconds set by Envoy.
	headerEnvoyTimeout = "X-Envoy-Expected-Rq-Timeout-Ms"
)

// maxClientTimeout caps a client-sent timeout so the arithmetic on it never
// overflows; anything longer is no bound at all in practice.
const maxClientTimeout = 24 * time.Hour

// clientTimeout returns the shortest timeout the client sent, counted from
// arrival: X-Stainless-Timeout (seconds), X-Envoy-Expected-Rq-Timeout-Ms, and
// the policy's header (custom, canonical; seconds or a Go duration). Values
// that do not parse or are not positive are ignored.
func clientTimeout(h http.Header, custom string) (time.Duration, bool) {
	var least time.Duration
	found := false
	take := func(d time.Duration, ok bool) {
		if ok && d > 0 && (!found || d < least) {
			least, found = min(d, maxClientTimeout), true
		}
	}
	take(parseSeconds(resolver.HeaderValue(h, headerStainlessTimeout)))
	if v := resolver.HeaderValue(h, headerEnvoyTimeout); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		take(time.Duration(min(ms, int64(maxClientTimeout/time.Millisecond)))*time.Millisecond, err == nil)
	}
	if custom != "" {
		if v := resolver.HeaderValue(h, custom); v != "" {
			if d, ok := parseSeconds(v); ok {
				take(d, true)
			} else {
				d, err := time.ParseDuration(v)
				take(d, err == nil)
			}
		}
	}
	return least, found
}

// parseSeconds parses a decimal number of seconds ("600", "2.5").
func parseSeconds(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != f || f <= 0 { // f != f: NaN
		return 0, false
	}
	if f >= maxClientTimeout.Seconds() {
		return maxClientTimeout, true
	}
	return time.Duration(f * float64(time.Second)), true
}

// accessLog writes the access log line of one request (verbosity 2, i.e.
// --log-level 2): its x-request-id, method, path, status and duration. It
// holds no identity, not even hashed.
func (s *Server) accessLog(log logr.Logger, w *requestIDWriter, r *http.Request, start time.Time) {
	log.Info("Request", "requestID", w.Header().Get(headerRequestID), "method", r.Method, "path", r.URL.Path,
		"status", w.status, "duration", s.clock.Since(start).String())
}
