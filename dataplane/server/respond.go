package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Header names written by the server, as SPEC section 5 defines them.
const (
	headerRetryAfter          = "Retry-After"
	headerRetryAfterMS        = "Retry-After-Ms"
	headerQueuePosition       = "X-Fair-Queue-Position"
	headerQueueWaitMS         = "X-Fair-Queue-Wait-Ms"
	headerQueueEstimatedWait  = "X-Fair-Queue-Estimated-Wait-Ms"
	headerQueueBand           = "X-Fair-Queue-Band"
	headerRateLimitLimit      = "X-Ratelimit-Limit-Requests"
	headerRateLimitRemaining  = "X-Ratelimit-Remaining-Requests"
	headerRateLimitReset      = "X-Ratelimit-Reset-Requests"
	errorTypeRateLimit        = "rate_limit_exceeded"
	errorTypeInvalidRequest   = "invalid_request_error"
	errorTypeAuthentication   = "authentication_error"
	errorTypeUnavailable      = "service_unavailable"
	errorTypeUpstream         = "upstream_error"
	contentTypeJSON           = "application/json"
	contentTypeHeader         = "Content-Type"
	contentTypeOptionsHeader  = "X-Content-Type-Options"
	contentTypeOptionsNoSniff = "nosniff"
)

// queueInfo is what a refused request experienced in the fair queue. The
// estimated wait is not part of it: SPEC section 5 sends
// x-fair-queue-estimated-wait-ms only on admitted requests, which ServeHTTP
// writes from the admission decision.
type queueInfo struct {
	// tenantDimension is the dimension the tenant was chosen by (user, team, api_key).
	tenantDimension string
	// reason is the refusal reason (queue_full, ...).
	reason string
	// position is the request's place in its tenant queue (1 is next), or
	// the place it would have had when refused at enqueue.
	position int
	// waited is the time spent queued.
	waited time.Duration
	// band names the priority band the request waited in; empty without
	// bands.
	band string
}

// quota is the tightest identity bucket, for the x-ratelimit-* headers.
type quota struct {
	limit, remaining int64
	reset            time.Duration
}

// apiError is one error answer: status, OpenAI-style body and headers.
type apiError struct {
	status     int
	errType    string
	code       string
	message    string
	limitType  string           // set on rate-limit refusals
	retryAfter time.Duration    // written as Retry-After and retry-after-ms when > 0 or on 429
	queue      *queueInfo       // set when the fair queue was involved
	deferred   *deferredDetails // set on a token-budget refusal
}

// errorBody is the JSON document of an error answer.
type errorBody struct {
	Error errorObject `json:"error"`
}

// errorObject is OpenAI's error object: param is always present and null, as
// OpenAI sends it for errors not tied to a request parameter.
type errorObject struct {
	Message string        `json:"message"`
	Type    string        `json:"type"`
	Param   *string       `json:"param"`
	Code    string        `json:"code"`
	Details *errorDetails `json:"details,omitempty"`
}

type errorDetails struct {
	LimitType    string            `json:"limit_type,omitempty"`
	RetryAfterMS int64             `json:"retry_after_ms"`
	FairQueue    *fairQueueDetails `json:"fair_queue,omitempty"`
	Deferred     *deferredDetails  `json:"deferred,omitempty"`
}

type fairQueueDetails struct {
	TenantDimension string `json:"tenant_dimension"`
	Reason          string `json:"reason"`
	Position        int    `json:"position"`
	WaitedMS        int64  `json:"waited_ms"`
	Band            string `json:"band,omitempty"`
}

// write sends e to the client.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set(contentTypeHeader, contentTypeJSON)
	h.Set(contentTypeOptionsHeader, contentTypeOptionsNoSniff)
	body := errorBody{Error: errorObject{Message: e.message, Type: e.errType, Code: e.code}}
	if e.status == http.StatusTooManyRequests || e.retryAfter > 0 {
		h.Set(headerRetryAfter, strconv.FormatInt(ceilDiv(e.retryAfter, time.Second), 10))
		h.Set(headerRetryAfterMS, strconv.FormatInt(ceilDiv(e.retryAfter, time.Millisecond), 10))
		body.Error.Details = &errorDetails{
			LimitType:    e.limitType,
			RetryAfterMS: ceilDiv(e.retryAfter, time.Millisecond),
		}
	}
	if q := e.queue; q != nil {
		writeQueueHeaders(h, q)
		if body.Error.Details == nil {
			body.Error.Details = &errorDetails{}
		}
		body.Error.Details.FairQueue = &fairQueueDetails{
			TenantDimension: q.tenantDimension,
			Reason:          q.reason,
			Position:        q.position,
			WaitedMS:        q.waited.Milliseconds(),
			Band:            q.band,
		}
	}
	if e.deferred != nil && body.Error.Details != nil {
		body.Error.Details.Deferred = e.deferred
	}
	data, err := json.Marshal(body)
	if err != nil { // cannot happen: only strings and integers
		data = []byte(`{"error":{"message":"internal error","type":"internal_error","param":null,"code":"internal_error"}}`)
	}
	data = append(data, '\n')
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(e.status)
	_, _ = w.Write(data)
}

// writeQueueHeaders sets the position and wait headers every queued request
// carries, refused or admitted, and its band when there are bands.
func writeQueueHeaders(h http.Header, q *queueInfo) {
	h.Set(headerQueuePosition, strconv.Itoa(q.position))
	h.Set(headerQueueWaitMS, strconv.FormatInt(q.waited.Milliseconds(), 10))
	writeBandHeader(h, q.band)
}

// writeBandHeader sets x-fair-queue-band to the band a request waited in,
// when there are bands (band is empty without them).
func writeBandHeader(h http.Header, band string) {
	if band != "" {
		h.Set(headerQueueBand, band)
	}
}

// writeQuotaHeaders sets the OpenAI-style x-ratelimit-* headers.
func writeQuotaHeaders(h http.Header, q quota) {
	// One backing array for the three values: the names are canonical.
	vals := [...]string{strconv.FormatInt(q.limit, 10), strconv.FormatInt(q.remaining, 10), formatReset(q.reset)}
	all := vals[:]
	h[headerRateLimitLimit] = all[0:1:1]
	h[headerRateLimitRemaining] = all[1:2:2]
	h[headerRateLimitReset] = all[2:3:3]
}

// formatReset writes a reset time the way OpenAI does ("1s", "6m0s",
// "120ms"): a Go duration rounded up to the millisecond.
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return time.Duration(ceilDiv(d, time.Millisecond) * int64(time.Millisecond)).String()
}

// ceilDiv returns d/unit rounded up, and 0 for non-positive d.
func ceilDiv(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}
