// Package usage measures the tokens of LLM API requests for token budgets:
// an Estimator counts a request's prompt with the model family's tokenizer
// (tiktoken's cl100k_base and o200k_base, embedded in the binary, built once
// on first use) and reads its output cap, which together are the tokens
// reserved before the request is forwarded; AddStreamUsage asks a streaming
// upstream for a final usage chunk; and a Meter, fed by the ResponseWriter
// NewResponseWriter returns, reads the usage the upstream reports (or counts
// the output it relays) so that the reservation can be settled to what the
// request actually used.
package usage
