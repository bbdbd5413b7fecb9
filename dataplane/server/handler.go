package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/admission"
	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// ServeHTTP runs one request through the admission path of SPEC section 2:
// identity resolution, the admission core (pre-auth limits, identity limits,
// fair queue), backend selection, and the proxied call with what is left of
// the total timeout.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := s.rt.Load()
	if rt == nil {
		(&apiError{status: http.StatusServiceUnavailable, errType: errorTypeUnavailable, code: "not_ready",
			message: "the data plane has no valid config loaded yet; retry shortly", retryAfter: time.Second}).write(w)
		return
	}
	start := s.clock.Now()
	client := s.trusted.clientAddr(r)

	// Identity resolution (SPEC section 3). Requests answered before the
	// admission core still pay the pre-auth limits first.
	var id requestIdentity
	rt.identity.resolve(r, &id)
	if rt.identity.enforce && !id.knownKey {
		if s.preAuthRefused(w, r, rt, client) {
			return
		}
		msg := "the API key is not registered; use a key issued for this API"
		if id.apiKeyHash == "" {
			msg = "no API key; send it as \"Authorization: Bearer <key>\""
		}
		(&apiError{status: http.StatusUnauthorized, errType: errorTypeAuthentication, code: "invalid_api_key", message: msg}).write(w)
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
	var ok bool
	if id.model, ok = rt.model(r.Header, body); !ok {
		if !s.preAuthRefused(w, r, rt, client) {
			writeModelNotDetermined(w)
		}
		return
	}

	total := rt.timeout(id.model)
	dec := rt.admit.Admit(r.Context(), admission.Request{
		ClientAddr:   client,
		Identity:     identity.Set{APIKey: id.apiKeyHash, User: id.userHash, Team: id.teamHash},
		Model:        id.model,
		TotalTimeout: total,
	})
	if !dec.Allowed {
		s.refuse(w, r, &dec, &id)
		return
	}

	// A request that waited through a reload goes to the backends in force
	// now, not to those of the config it arrived under.
	rt = s.rt.Load()
	b, retry := rt.pool.Pick(rt.take)
	if b == nil {
		s.refundIdentity(rt, &id)
		// Backend capacity is never queued, so the refusal carries no queue
		// details even when the request waited for its identity limits.
		dec = admission.Decision{Status: http.StatusTooManyRequests, LimitType: "backend", RetryAfter: retry,
			Quota: dec.Quota, HasQuota: dec.HasQuota}
		s.refuse(w, r, &dec, &id)
		return
	}

	h := w.Header()
	if dec.HasQuota {
		writeQuotaHeaders(h, quota{limit: dec.Quota.Limit, remaining: dec.Quota.Remaining, reset: dec.Quota.Reset})
	}
	if q := &dec.Queue; q.Queued {
		h.Set(headerQueuePosition, strconv.Itoa(q.Position))
		h.Set(headerQueueWaitMS, strconv.FormatInt(q.Waited.Milliseconds(), 10))
		h.Set(headerQueueEstimatedWait, strconv.FormatInt(q.Estimate.Milliseconds(), 10))
	}

	// The total timeout runs from arrival: queued time is deducted from what
	// is left for the upstream call.
	if total > 0 {
		remaining := start.Add(total).Sub(s.clock.Now())
		if remaining <= 0 {
			writeTimeout(w)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		t := s.clock.AfterFunc(remaining, func() { cancel(errTotalTimeout) })
		defer t.Stop()
		defer cancel(nil)
		r = r.WithContext(ctx)
	}
	b.ServeHTTP(w, r)
}

// preAuthRefused charges the pre-auth limits for a request answered before
// the admission core (401, 413), and answers 429 or 503 when they refuse.
func (s *Server) preAuthRefused(w http.ResponseWriter, r *http.Request, rt *runtime, client string) bool {
	d, err := rt.lim.TakePreAuth(s.clock.Now(), client)
	var dec admission.Decision
	switch {
	case err != nil:
		dec = admission.Decision{Status: http.StatusServiceUnavailable, RetryAfter: time.Second, Err: err}
	case !d.Allowed:
		dec = admission.Decision{Status: http.StatusTooManyRequests, LimitType: d.LimitType.String(), RetryAfter: d.RetryAfter, TableFull: d.TableFull != 0}
	default:
		return false
	}
	s.refuse(w, r, &dec, nil)
	return true
}

// refuse answers a refused admission decision and logs it with hashed
// identities only.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, dec *admission.Decision, id *requestIdentity) {
	if dec.Status == admission.StatusClientClosedRequest {
		return // the client left while queued; its slot is already free
	}
	e := apiError{status: dec.Status, limitType: dec.LimitType, retryAfter: dec.RetryAfter}
	q := &dec.Queue
	switch {
	case dec.Status == http.StatusServiceUnavailable && q.Reason == fairqueue.ReasonShutdown:
		e.errType, e.code = errorTypeUnavailable, "shutting_down"
		e.message = "this gateway replica is shutting down; the request was not sent upstream, retry it"
		e.limitType = ""
	case dec.Status == http.StatusServiceUnavailable:
		e.errType, e.code = errorTypeUnavailable, "rate_limit_store_unavailable"
		e.message = "the rate-limit store is unavailable; this is not your quota, retry shortly"
		if dec.Err != nil {
			s.log.Info("Rate-limit store unavailable, answering 503", "error", dec.Err.Error())
		}
	case dec.TableFull:
		e.errType, e.code = errorTypeRateLimit, dec.LimitType+"_table_full"
		e.message = "this gateway replica tracks as many " + dec.LimitType + " keys as it may and none has refilled, " +
			"so a new one cannot be limited yet; retry after the indicated time"
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
			position: q.Position, waited: q.Waited}
	}
	if dec.HasQuota {
		writeQuotaHeaders(w.Header(), quota{limit: dec.Quota.Limit, remaining: dec.Quota.Remaining, reset: dec.Quota.Reset})
	}
	e.write(w)
	if log := s.log.V(1); log.Enabled() {
		kv := []any{"status", dec.Status, "code", e.code, "limitType", dec.LimitType, "retryAfter", dec.RetryAfter.String(), "path", r.URL.Path}
		if id != nil {
			kv = append(kv, "apiKey", shortHash(id.apiKeyHash), "user", shortHash(id.userHash), "team", shortHash(id.teamHash))
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
