package fakeupstream

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestChat(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		wantStatus int
		wantCT     string
		wantLines  []string // for streams: the data lines in order
		wantModel  string   // for whole answers
	}{
		{name: "whole answer", body: `{"model":"m1"}`, wantStatus: 200, wantCT: "application/json", wantModel: "m1"},
		{name: "stream", body: `{"model":"m1","stream":true}`, wantStatus: 200, wantCT: "text/event-stream",
			wantLines: []string{"chunk 0", "chunk 1", "[DONE]"}},
		{name: "malformed", body: `{"model":`, wantStatus: 400, wantCT: "application/json"},
		{name: "forced status", body: `{}`, header: map[string]string{"X-Fake-Status": "503"}, wantStatus: 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := New(Options{Chunks: 2, Record: 1})
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(tc.body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			up.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.wantCT != "" && !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.wantCT) {
				t.Errorf("Content-Type = %q, want %q", rec.Header().Get("Content-Type"), tc.wantCT)
			}
			if tc.wantModel != "" {
				var got struct{ Model string }
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Model != tc.wantModel {
					t.Errorf("model = %q (err %v), want %q", got.Model, err, tc.wantModel)
				}
			}
			if tc.wantLines != nil {
				var data []string
				sc := bufio.NewScanner(rec.Body)
				for sc.Scan() {
					if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
						data = append(data, line)
					}
				}
				if len(data) != len(tc.wantLines) {
					t.Fatalf("got %d data lines %q, want %d", len(data), data, len(tc.wantLines))
				}
				for i, want := range tc.wantLines {
					if !strings.Contains(data[i], want) {
						t.Errorf("data line %d = %q, want it to contain %q", i, data[i], want)
					}
				}
			}
			got := up.Requests()
			if len(got) != 1 || string(got[0].Body) != tc.body || got[0].Path != "/v1/chat/completions" {
				t.Errorf("recorded %+v, want the one request with body %q", got, tc.body)
			}
		})
	}
}

func TestRecordIsBounded(t *testing.T) {
	up := New(Options{Record: 2})
	for _, model := range []string{"a", "b", "c"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
		up.ServeHTTP(httptest.NewRecorder(), req)
	}
	got := up.Requests()
	if len(got) != 2 || string(got[0].Body) != `{"model":"b"}` || string(got[1].Body) != `{"model":"c"}` {
		t.Errorf("recorded %d requests %+v, want the last two (b, c)", len(got), got)
	}
	if up.Count() != 3 {
		t.Errorf("Count() = %d, want 3", up.Count())
	}
}

func TestModels(t *testing.T) {
	up := New(Options{Models: []string{"x", "y"}})
	rec := httptest.NewRecorder()
	up.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	var got struct {
		Data []struct{ ID string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 2 || got.Data[0].ID != "x" || got.Data[1].ID != "y" {
		t.Errorf("models = %+v, want x, y", got.Data)
	}
}
