package server

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, path, nil)
}
