package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

const benchBody = `{"model":"llama","messages":[{"role":"user","content":"Say hello."}]}`

// benchFronts starts one upstream and two proxies to it on loopback: a bare
// httputil.ReverseProxy with a buffer pool, and the admission server with
// fair queuing on and every limit configured but far from exhausted.
func benchFronts(b *testing.B) (bare, fq string, client *http.Client) {
	b.Helper()
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	b.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)

	bareTr := proxy.NewTransport()
	b.Cleanup(bareTr.CloseIdleConnections)
	pool := &sync.Pool{New: func() any { buf := make([]byte, 32<<10); return &buf }}
	bareProxy := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport:  bareTr,
		BufferPool: benchPool{pool},
	}
	bareFront := httptest.NewServer(bareProxy)
	b.Cleanup(bareFront.Close)

	cfg := baseConfig(up.URL)
	cfg.Identity.TrustHeaders = true
	big := limit(1<<40, 1<<40, time.Second)
	cfg.RateLimits = config.RateLimits{Global: big, PerClient: big, PerAPIKey: big, PerUser: big, PerTeam: big,
		PerModel: &config.ModelLimits{Default: big}, PerBackend: big}
	cfg.FairQueuing.Enabled = true
	cfg.Timeouts.RequestTotal = dur(time.Minute)
	ct := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(ct.CloseIdleConnections)
	return bareFront.URL, benchServer(b, cfg), &http.Client{Transport: ct}
}

// benchServer serves cfg with a Server of its own transport on loopback
// until b ends, and returns its URL.
func benchServer(b *testing.B, cfg *config.Config) string {
	b.Helper()
	tr := proxy.NewTransport()
	b.Cleanup(tr.CloseIdleConnections)
	srv, err := New(Options{Logger: logr.Discard(), HashKey: testKey, Transport: tr})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Load(cfg, "bench"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.rt.Load().close() })
	front := httptest.NewServer(srv)
	b.Cleanup(front.Close)
	return front.URL
}

type benchPool struct{ p *sync.Pool }

func (bp benchPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp benchPool) Put(b []byte) { bp.p.Put(&b) }

// benchPair sends one request to the bare proxy and then one to the
// admission server, so both see the same machine noise, and returns how long
// each took.
func benchPair(b *testing.B, client *http.Client, bare, fq string) (dBare, dFQ time.Duration) {
	t0 := time.Now()
	benchRequest(b, client, bare)
	t1 := time.Now()
	benchRequest(b, client, fq)
	return t1.Sub(t0), time.Since(t1)
}

func benchRequest(b *testing.B, client *http.Client, base string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(benchBody))
	req.Header.Set("Authorization", "Bearer sk-bench-key")
	req.Header.Set("X-User", "bench-user")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close() // read to EOF: closing cannot lose anything
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkLoopbackThroughput drives both proxies with concurrent clients,
// each client alternating between them so both see the same load and the
// same noise from other processes. At equal concurrency throughput is the
// inverse of the mean time per request, so the throughput ratio (admission
// server over bare proxy) is the bare mean over the admission server's mean.
// On a shared machine a few requests stall for milliseconds whichever proxy
// they go through, so the ratio is also reported over the fastest 99% of
// each side ("trimmed").
func BenchmarkLoopbackThroughput(b *testing.B) {
	bare, fq, client := benchFronts(b)
	var (
		mu             sync.Mutex
		bareLat, fqLat []time.Duration
	)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var myBare, myFQ []time.Duration
		for pb.Next() {
			dBare, dFQ := benchPair(b, client, bare, fq)
			myBare, myFQ = append(myBare, dBare), append(myFQ, dFQ)
		}
		mu.Lock()
		bareLat, fqLat = append(bareLat, myBare...), append(fqLat, myFQ...)
		mu.Unlock()
	})
	b.StopTimer()
	mean := func(l []time.Duration, keep float64) float64 {
		slices.Sort(l)
		l = l[:max(1, int(float64(len(l))*keep))]
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		return float64(sum.Nanoseconds()) / float64(len(l)) / 1e3
	}
	bareMean, fqMean := mean(bareLat, 1), mean(fqLat, 1)
	b.ReportMetric(bareMean, "bare-mean-µs")
	b.ReportMetric(fqMean, "fairqueue-mean-µs")
	b.ReportMetric(bareMean/fqMean, "throughput-ratio")
	b.ReportMetric(mean(bareLat, 0.99)/mean(fqLat, 0.99), "trimmed-throughput-ratio")
}

// BenchmarkLoopbackLatency sends one request at a time, alternating between
// the bare proxy and the admission server so both see the same machine
// noise, and reports each median and the added median latency.
func BenchmarkLoopbackLatency(b *testing.B) {
	bare, fq, client := benchFronts(b)
	for range 200 { // warm up connections and pools
		benchRequest(b, client, bare)
		benchRequest(b, client, fq)
	}
	bareLat := make([]time.Duration, 0, b.N)
	fqLat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		dBare, dFQ := benchPair(b, client, bare, fq)
		bareLat, fqLat = append(bareLat, dBare), append(fqLat, dFQ)
	}
	b.StopTimer()
	slices.Sort(bareLat)
	slices.Sort(fqLat)
	p50 := func(l []time.Duration) float64 { return float64(l[len(l)/2].Nanoseconds()) / 1e3 }
	b.ReportMetric(p50(bareLat), "bare-p50-µs")
	b.ReportMetric(p50(fqLat), "fairqueue-p50-µs")
	b.ReportMetric(p50(fqLat)-p50(bareLat), "added-p50-µs")
}

// cannedTransport answers every request at once with a small JSON body,
// reading and closing the request body as a real transport does, so an
// in-process benchmark measures the proxies and not the network.
type cannedTransport struct{}

var cannedBody = []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"}}]}`)

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(cannedBody)),
		ContentLength: int64(len(cannedBody))}, nil
}

// discardWriter is a reusable http.ResponseWriter that keeps nothing.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// handlerFronts returns the two handlers of benchFronts in process, both
// sending upstream through cannedTransport.
func handlerFronts(b *testing.B) (bare, fq http.Handler) {
	b.Helper()
	target, _ := url.Parse("http://upstream.invalid")
	pool := &sync.Pool{New: func() any { buf := make([]byte, 32<<10); return &buf }}
	bare = &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport:  cannedTransport{},
		BufferPool: benchPool{pool},
	}
	cfg := baseConfig(target.String())
	cfg.Identity.TrustHeaders = true
	big := limit(1<<40, 1<<40, time.Second)
	cfg.RateLimits = config.RateLimits{Global: big, PerClient: big, PerAPIKey: big, PerUser: big, PerTeam: big,
		PerModel: &config.ModelLimits{Default: big}, PerBackend: big}
	cfg.FairQueuing.Enabled = true
	cfg.Timeouts.RequestTotal = dur(time.Minute)
	srv, err := New(Options{Logger: logr.Discard(), HashKey: testKey, Transport: cannedTransport{}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Load(cfg, "bench"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.rt.Load().close() })
	return bare, srv
}

// serveOnce sends one chat completion through h, as net/http would hand it
// over: a fresh request with a body and the client's headers.
func serveOnce(b *testing.B, h http.Handler, w *discardWriter) {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(benchBody))
	r.Header.Set("Authorization", "Bearer sk-bench-key")
	r.Header.Set("X-User", "bench-user")
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "127.0.0.1:40000"
	clear(w.h)
	w.code = 0
	h.ServeHTTP(w, r)
	if w.code != http.StatusOK {
		b.Fatalf("status %d", w.code)
	}
}

// BenchmarkHandlerOverhead serves requests in process, alternating between
// the bare proxy and the admission server, and reports the admission
// server's time per request over the bare proxy's (overhead-ratio) and the
// added time. Without network and upstream it isolates the request path's
// own CPU cost: identity hashing, the body read for the model, the limiter,
// the fair-queue checks and the headers.
func BenchmarkHandlerOverhead(b *testing.B) {
	bare, fq := handlerFronts(b)
	w := &discardWriter{h: http.Header{}}
	for range 1000 {
		serveOnce(b, bare, w)
		serveOnce(b, fq, w)
	}
	var bareTime, fqTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		serveOnce(b, bare, w)
		t1 := time.Now()
		serveOnce(b, fq, w)
		bareTime += t1.Sub(t0)
		fqTime += time.Since(t1)
	}
	b.ReportMetric(float64(fqTime)/float64(bareTime), "overhead-ratio")
	b.ReportMetric(float64(fqTime-bareTime)/float64(b.N), "added-ns/req")
}
