package usage

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"
)

// TestMeterBehindReverseProxy relays a streamed response through
// httputil.ReverseProxy, as the data plane does, over real connections: the
// proxy's flushes reach the client through the meter's writer (the upstream
// sends the rest only once the client has read the first events), the
// client gets the stream without the usage chunk and the meter the
// upstream's usage.
func TestMeterBehindReverseProxy(t *testing.T) {
	const wait = 10 * time.Second
	clientGot := make(chan struct{})
	flushed := make(chan bool, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ev0+ev1)
		w.(http.Flusher).Flush()
		select {
		case <-clientGot:
			flushed <- true
		case <-time.After(wait):
			flushed <- false
		}
		for _, ev := range []string{ev2, evUsage, evDone} {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	defer upstream.Close()
	target, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{}
	defer rp.Transport.(*http.Transport).CloseIdleConnections()
	meters := make(chan *Meter, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := NewMeter(nil, "gpt-4o", Estimate{Prompt: 40}, true)
		rp.ServeHTTP(NewResponseWriter(w, m), r)
		meters <- m
	}))
	defer front.Close()

	client := &http.Client{Timeout: 2 * wait, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	first := make([]byte, len(ev0+ev1))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	close(clientGot)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !<-flushed {
		t.Errorf("the client did not get the first events within %v: the flush did not go through", wait)
	}
	if got, want := string(first)+string(rest), ev0+ev1+ev2+evDone; got != want {
		t.Errorf("client got %q, want %q", got, want)
	}
	select {
	case m := <-meters:
		if u := m.Usage(true); u != reported {
			t.Errorf("Usage = %+v, want %+v", u, reported)
		}
	case <-time.After(wait):
		t.Fatalf("the proxy handler did not return within %v", wait)
	}
}
