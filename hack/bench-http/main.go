/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command bench-http measures the data plane's HTTP cost from outside, as
// its users meet it: an external load generator (vegeta) drives, to
// saturation on loopback, a bare httputil.ReverseProxy with a buffer pool
// and the cmd/dataplane binary (with the GOGC its Deployment sets), both in
// front of the same fake upstream, each in its own process. Rounds
// alternate between the two so both see the same machine noise, and each
// round reports the data plane's CPU per request (utime+stime from /proc
// over requests served) and throughput as ratios to the bare proxy's in the
// same round. The medians are printed; only --check makes a missed target
// fail the run, which CI never asks for (timing ratios on a shared machine
// are reported, not enforced).
//
//	go run ./hack/bench-http --dataplane bin/dataplane --vegeta bin/vegeta
//
// The same binary also serves as the upstream (--role upstream) and the
// bare proxy (--role bare), so neither shares a process with the driver.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/config/configtest"
	"github.com/fairqueue/fairqueue/dataplane/proxy"
	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/proc"
)

const body = `{"model":"llama","messages":[{"role":"user","content":"Say hello."}]}`

type options struct {
	role      string
	listen    string
	target    string
	dataplane string
	vegeta    string
	rounds    int
	maxRounds int
	duration  time.Duration
	workers   int
	maxCPU    float64
	minTput   float64
	check     bool
	serve     bool
	gogc      string
}

func main() {
	var o options
	flag.StringVar(&o.role, "role", "driver", "driver, or (started by the driver) upstream or bare")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "with --role upstream or bare: the address to serve on")
	flag.StringVar(&o.target, "target", "", "with --role bare: the upstream URL")
	flag.StringVar(&o.dataplane, "dataplane", "bin/dataplane", "the cmd/dataplane binary")
	flag.StringVar(&o.vegeta, "vegeta", "bin/vegeta", "the vegeta binary (make bench-http installs the pinned version)")
	flag.IntVar(&o.rounds, "rounds", 9, "rounds; each attacks the bare proxy and the data plane once, in alternating order")
	flag.IntVar(&o.maxRounds, "max-rounds", 0, "with --check: when the median of --rounds rounds misses a target, keep adding rounds up to this many and judge the median of all of them (0: --rounds); a real regression misses on more data too, a disturbed round weighs less")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of each attack")
	flag.IntVar(&o.workers, "workers", 16, "vegeta's concurrent workers (it runs at its maximum rate)")
	flag.Float64Var(&o.maxCPU, "max-cpu-ratio", 1.10, "target: data-plane CPU per request over the bare proxy's, at most")
	flag.Float64Var(&o.minTput, "min-throughput-ratio", 0.95, "target: data-plane throughput over the bare proxy's, at least")
	flag.BoolVar(&o.check, "check", false, "exit non-zero when a median ratio misses its target")
	flag.StringVar(&o.gogc, "dataplane-gogc", "400", "GOGC for the data plane, as config/dataplane/deployment.yaml sets it; empty leaves it to the environment")
	flag.BoolVar(&o.serve, "serve", false, "start the three processes, print their addresses and vegeta targets, and wait for Ctrl-C instead of attacking (to profile one of them)")
	flag.Parse()

	var err error
	switch o.role {
	case "upstream":
		err = serve(o.listen, fakeupstream.New(fakeupstream.Options{}))
	case "bare":
		err = serveBare(o.listen, o.target)
	case "driver":
		err = drive(o)
	default:
		err = fmt.Errorf("--role %q: use driver, upstream or bare", o.role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-http:", err)
		os.Exit(1)
	}
}

// serve serves h on addr until SIGTERM.
func serve(addr string, h http.Handler) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveBare serves a bare httputil.ReverseProxy to target, with a 32 KiB
// buffer pool and the data plane's upstream transport.
func serveBare(addr, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--target %q is not an absolute URL", target)
	}
	pool := &sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	return serve(addr, &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  proxy.NewTransport(),
		BufferPool: bufferPool{pool},
	})
}

type bufferPool struct{ p *sync.Pool }

func (bp bufferPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp bufferPool) Put(b []byte) { bp.p.Put(&b) }

// child is a started server process.
type child struct {
	*proc.Process
	name string
	url  string
}

// start starts argv with env added to the environment and waits until GET
// ready answers 200.
func start(name, url, ready string, env []string, argv ...string) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	p, err := proc.StartReady(cmd, proc.HTTPReady(ready), 20*time.Second)
	if err != nil {
		return nil, fmt.Errorf("the %s: %w", name, err)
	}
	return &child{Process: p, name: name, url: url}, nil
}

func (c *child) stop() { _ = c.Stop() } // a benchmark's servers: how they ended does not matter

// cpuTicks returns the process's user plus system CPU time in clock ticks.
func (c *child) cpuTicks() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the %s's CPU time (Linux /proc is required): %w", c.name, err)
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	rest := data[bytes.LastIndexByte(data, ')')+2:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", c.Cmd.Process.Pid, data)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
}

// result is one attack on one front.
type result struct {
	requests   int64
	throughput float64 // successful requests per second
	cpuPerReq  float64 // clock ticks per request
	success    float64
}

// vegetaReport is the part of `vegeta report -type=json` used here.
type vegetaReport struct {
	Requests   int64    `json:"requests"`
	Throughput float64  `json:"throughput"`
	Success    float64  `json:"success"`
	Errors     []string `json:"errors"`
}

func (o options) attack(c *child, targets string, d time.Duration) (result, error) {
	before, err := c.cpuTicks()
	if err != nil {
		return result{}, err
	}
	attack := exec.Command(o.vegeta, "attack", "-rate=0", "-max-workers="+strconv.Itoa(o.workers), "-workers="+strconv.Itoa(o.workers),
		"-duration="+d.String(), "-keepalive=true", "-targets="+targets)
	report := exec.Command(o.vegeta, "report", "-type=json")
	pipe, err := attack.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	report.Stdin = pipe
	var out bytes.Buffer
	report.Stdout, report.Stderr, attack.Stderr = &out, os.Stderr, os.Stderr
	if err := report.Start(); err != nil {
		return result{}, fmt.Errorf("starting vegeta report: %w", err)
	}
	if err := attack.Run(); err != nil {
		return result{}, fmt.Errorf("vegeta attack on the %s: %w", c.name, err)
	}
	if err := report.Wait(); err != nil {
		return result{}, fmt.Errorf("vegeta report: %w", err)
	}
	after, err := c.cpuTicks()
	if err != nil {
		return result{}, err
	}
	var r vegetaReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return result{}, fmt.Errorf("parsing vegeta's report %q: %w", out.String(), err)
	}
	if r.Success < 0.999 || r.Requests == 0 {
		return result{}, fmt.Errorf("the %s answered only %.2f%% of %d requests with 2xx: %v", c.name, 100*r.Success, r.Requests, r.Errors)
	}
	return result{requests: r.Requests, throughput: r.Throughput, success: r.Success,
		cpuPerReq: float64(after-before) / float64(r.Requests)}, nil
}

// benchConfig is the data plane's config: fair queuing on and every limit
// configured but far from exhausted, as in BenchmarkLoopbackThroughput.
func benchConfig(upstream string, key []byte) *config.Config {
	big := &config.Limit{Requests: 1 << 40, Burst: 1 << 40, Period: config.Duration{Duration: time.Second}}
	c := configtest.Valid(key, upstream)
	c.Identity = config.Identity{
		APIKeyHeaders: []string{"Authorization", "X-Api-Key"},
		UserHeader:    "X-User", TeamHeader: "X-Team", NoTeamValue: "none", TrustHeaders: true,
	}
	c.RateLimits = config.RateLimits{Global: big, PerClient: big, PerAPIKey: big, PerUser: big, PerTeam: big,
		PerModel: &config.ModelLimits{Default: big}, PerBackend: big}
	c.FairQueuing.Enabled = true
	c.Timeouts = config.Timeouts{RequestTotal: config.Duration{Duration: time.Minute}}
	return c
}

func drive(o options) error {
	for _, p := range []string{o.dataplane, o.vegeta} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not found (make bench-http builds the data plane and installs vegeta): %w", p, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-http-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	var addrs [4]string
	for i := range addrs {
		if addrs[i], err = proc.FreeAddr(); err != nil {
			return err
		}
	}
	upURL, bareURL, dpURL := "http://"+addrs[0], "http://"+addrs[1], "http://"+addrs[2]
	key := bytes.Repeat([]byte{7}, 32)
	cfgJSON, err := config.Marshal(benchConfig(upURL, key))
	if err != nil {
		return err
	}
	cfgFile, keyFile := filepath.Join(dir, "config.json"), filepath.Join(dir, "hash-key")
	if err := errors.Join(os.WriteFile(cfgFile, cfgJSON, 0o600), os.WriteFile(keyFile, key, 0o600)); err != nil {
		return err
	}

	up, err := start("upstream", upURL, upURL+"/v1/models", nil, self, "--role", "upstream", "--listen", addrs[0])
	if err != nil {
		return err
	}
	defer up.stop()
	bare, err := start("bare proxy", bareURL, bareURL+"/v1/models", nil, self, "--role", "bare", "--listen", addrs[1], "--target", upURL)
	if err != nil {
		return err
	}
	defer bare.stop()
	var dpEnv []string
	if o.gogc != "" {
		dpEnv = append(dpEnv, "GOGC="+o.gogc)
	}
	dp, err := start("data plane", dpURL, "http://"+addrs[3]+"/readyz", dpEnv, o.dataplane, "--config", cfgFile, "--hash-key-file", keyFile,
		"--listen", addrs[2], "--metrics-listen", addrs[3], "--log-level", "error")
	if err != nil {
		return err
	}
	defer dp.stop()

	targets := map[*child]string{}
	for _, c := range []*child{bare, dp} {
		f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".targets")
		t := fmt.Sprintf("POST %s/v1/chat/completions\nAuthorization: Bearer sk-bench-key\nX-User: bench-user\nContent-Type: application/json\n@%s\n",
			c.url, filepath.Join(dir, "body.json"))
		if err := os.WriteFile(f, []byte(t), 0o600); err != nil {
			return err
		}
		targets[c] = f
	}
	if err := os.WriteFile(filepath.Join(dir, "body.json"), []byte(body), 0o600); err != nil {
		return err
	}

	if o.serve {
		fmt.Printf("upstream %s (pid %d)\nbare proxy %s (pid %d)\ndata plane %s (pid %d)\ntargets: %s %s\nCtrl-C stops all three\n",
			upURL, up.Cmd.Process.Pid, bareURL, bare.Cmd.Process.Pid, dpURL, dp.Cmd.Process.Pid, targets[bare], targets[dp])
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		<-ctx.Done()
		return nil
	}
	// Warm both up: connection pools, buffer pools, the limiter's tables.
	for _, c := range []*child{bare, dp} {
		if _, err := o.attack(c, targets[c], time.Second); err != nil {
			return err
		}
	}
	fmt.Printf("bench-http: %d rounds of %s per front, vegeta with %d workers at maximum rate, %d CPUs per process\n",
		o.rounds, o.duration, o.workers, numCPU())
	fmt.Printf("%-6s %14s %14s %12s %12s %10s %10s\n", "round", "bare req/s", "dp req/s", "bare CPU/req", "dp CPU/req", "CPU ratio", "tput ratio")
	var cpuRatios, tputRatios []float64
	meets := func() bool { return median(cpuRatios) <= o.maxCPU && median(tputRatios) >= o.minTput }
	for r := 0; r < max(o.rounds, o.maxRounds); r++ {
		if r >= o.rounds && (!o.check || meets()) {
			break
		}
		order := []*child{bare, dp}
		if r%2 == 1 {
			order = []*child{dp, bare}
		}
		res := map[*child]result{}
		for _, c := range order {
			if res[c], err = o.attack(c, targets[c], o.duration); err != nil {
				return err
			}
		}
		b, d := res[bare], res[dp]
		cpu, tput := d.cpuPerReq/b.cpuPerReq, d.throughput/b.throughput
		cpuRatios, tputRatios = append(cpuRatios, cpu), append(tputRatios, tput)
		fmt.Printf("%-6d %14.0f %14.0f %10.1fus %10.1fus %10.3f %10.3f\n", r+1, b.throughput, d.throughput,
			b.cpuPerReq*1e6/clockTicks, d.cpuPerReq*1e6/clockTicks, cpu, tput)
	}
	cpu, tput := median(cpuRatios), median(tputRatios)
	fmt.Printf("median of %d rounds: CPU per request %.3fx the bare proxy (target <= %.2f), throughput %.3fx (target >= %.2f); min/max CPU %.3f/%.3f, throughput %.3f/%.3f\n",
		len(cpuRatios), cpu, o.maxCPU, tput, o.minTput, slices.Min(cpuRatios), slices.Max(cpuRatios), slices.Min(tputRatios), slices.Max(tputRatios))
	if o.check && (cpu > o.maxCPU || tput < o.minTput) {
		return fmt.Errorf("median ratios miss their targets: CPU %.3f (<= %.2f), throughput %.3f (>= %.2f)", cpu, o.maxCPU, tput, o.minTput)
	}
	return nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; it is 100 on
// every Linux architecture Go supports. Only the printed microseconds depend
// on it, never the ratios.
const clockTicks = 100

func numCPU() int {
	n, _ := strconv.Atoi(os.Getenv("GOMAXPROCS"))
	if n > 0 {
		return n
	}
	return runtime.NumCPU()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
