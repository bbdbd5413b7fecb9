package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fairqueue/fairqueue/dataplane/fairqueue"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, path, nil)
}

// fairQueue returns the admission controller's fair queue.
func (rt *runtime) fairQueue() *fairqueue.Queue { q, _ := rt.admit.Queues(); return q }

// deferralQueue returns the admission controller's deferral queue.
func (rt *runtime) deferralQueue() *fairqueue.Queue { _, q := rt.admit.Queues(); return q }
