package usage

import "net/http"

// Account is one request's token accounting where it meets admission: the
// estimate admission reserves (Reservation, which admission calls at most
// once, so that a request refused by its request limits never pays for a
// tokenizer pass) and the meter that counts what the response used.
type Account struct {
	estimator *Estimator
	model     string
	body      []byte
	est       Estimate // zero until Reservation has run
	meter     *Meter   // nil until Meter has run
}

// NewAccount returns the account of a request for model with body.
func NewAccount(e *Estimator, model string, body []byte) *Account {
	return &Account{estimator: e, model: model, body: body}
}

// Reservation estimates the request's tokens and returns what to reserve:
// the prompt estimate plus the output cap, at least one.
func (a *Account) Reservation() int64 {
	a.est = a.estimator.Estimate(a.model, a.body)
	return max(a.est.Total(), 1)
}

// Estimate returns the estimate Reservation made; zero when it did not run.
func (a *Account) Estimate() Estimate { return a.est }

// Meter starts counting the response: what is written through the returned
// writer is relayed to w and counted. strip removes the usage chunk the
// upstream was asked for on the client's behalf (see AddStreamUsage). Call
// Finish on the returned writer once the response is relayed.
func (a *Account) Meter(w http.ResponseWriter, strip bool) http.ResponseWriter {
	a.meter = NewMeter(a.estimator, a.model, a.est, strip)
	return NewResponseWriter(w, a.meter)
}

// Used is what the request used, however its response ended (SPEC section
// 6): the upstream's reported usage, else the prompt estimate plus the output
// relayed so far; nothing when Meter never ran (no backend was called).
// complete is set when the response ended normally; cancelled when the
// client left or the total timeout ran out. An error answer the client
// received without reported usage used nothing (the backend refused, could
// not be reached, or broke off before any byte reached the client), unless
// the request was cancelled while the upstream had it; so did an upstream
// 4xx (Meter.Usage).
func (a *Account) Used(complete, cancelled bool, status int) int64 {
	if a == nil || a.meter == nil {
		return 0
	}
	u := a.meter.Usage(complete)
	if !u.Reported && !cancelled && status >= 400 {
		return 0
	}
	return u.Total()
}
