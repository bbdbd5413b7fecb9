package server

import (
	"encoding/hex"
	"math/rand/v2"
	"net/http"
)

// headerRequestID is the OpenAI-style request id header every response carries.
const headerRequestID = "X-Request-Id"

// newRequestID returns a fresh request id, "req_" and 32 hex digits. It
// identifies a request in logs; it is not a secret, so the fast, randomly
// seeded generator of math/rand/v2 is enough.
func newRequestID() string {
	var b [4 + 32]byte
	copy(b[:], "req_")
	var raw [16]byte
	for i := 0; i < len(raw); i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			raw[i+j] = byte(v >> (8 * j))
		}
	}
	hex.Encode(b[4:], raw[:])
	return string(b[:])
}

// requestIDWriter sets the request id header on the response when the
// header is written: the client's own id always, else a generated one when
// the handler (or the upstream, through the proxy) has not set one.
type requestIDWriter struct {
	http.ResponseWriter
	id []string // the header value: the client's id, or one generated
	// client is set when id is the client's own, which replaces the
	// upstream's so the client can match the response to its request.
	client bool
	wrote  bool
	status int // the status written, for the access log; 0 before
}

func (w *requestIDWriter) setID() {
	if w.wrote {
		return
	}
	w.wrote = true
	if h := w.Header(); w.client || len(h[headerRequestID]) == 0 {
		h[headerRequestID] = w.id
	}
}

// WriteHeader implements http.ResponseWriter.
func (w *requestIDWriter) WriteHeader(code int) {
	w.setID()
	if w.status < 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *requestIDWriter) Write(b []byte) (int, error) {
	w.setID()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes the underlying writer, for http.ResponseController
// (which the reverse proxy uses to stream).
func (w *requestIDWriter) FlushError() error {
	w.setID()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *requestIDWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
