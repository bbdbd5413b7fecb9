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

// Command bench-check runs the benchmarks whose ratios the README claims and
// fails when a median misses its target. Every ratio is taken against a
// baseline measured in the same run, over several rounds that alternate
// the two sides, so a noisy shared machine slows both alike; the median of
// the rounds is compared with the target. The admission checks measure CPU
// time rather than wall time, and like the bands check they are report-only:
// their misses are printed and never fail the run.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	benchHTTP := flag.String("bench-http", "", "the hack/bench-http binary; empty skips the HTTP check")
	dataplane := flag.String("dataplane", "", "the cmd/dataplane binary, for the HTTP check")
	vegeta := flag.String("vegeta", "bin/vegeta", "the vegeta binary, for the HTTP check")
	rounds := flag.Int("rounds", 5, "rounds per benchmark check")
	cpuIters := flag.Int("cpu-iterations", 500000, "iterations per round of the checks measured in CPU time")
	httpRounds := flag.Int("http-rounds", 9, "rounds of the HTTP check; more and shorter rounds than the benchmarks', because one disturbed attack moves its round far more than a benchmark's")
	httpDuration := flag.Duration("http-duration", 2*time.Second, "length of each attack of the HTTP check")
	httpMaxRounds := flag.Int("http-max-rounds", 18, "rounds the HTTP check may grow to when the first --http-rounds miss (bench-http --max-rounds)")
	advisory := flag.String("advisory", "", "comma-separated checks (scanner, scaling, http) whose miss is printed but does not fail the run: "+
		"for a target the code is known not to meet yet, so CI keeps measuring it without going red")
	report := flag.Bool("report", false, "print every ratio and its verdict but fail only when a benchmark cannot run: "+
		"for CI on a shared machine, where a timing ratio measures the neighbours as much as the code")
	flag.Parse()
	soft := map[string]bool{}
	if *report {
		*advisory = "scanner,scaling,http"
	}
	for _, k := range strings.Split(*advisory, ",") {
		if k = strings.TrimSpace(k); k != "" {
			soft[k] = true
		}
	}

	var failed []string
	check := func(key, name string, got float64, op string, target float64) {
		ok := (op == "<=" && got <= target) || (op == ">=" && got >= target)
		verdict := "ok"
		switch {
		case ok:
		case soft[key]:
			verdict = "MISSED (reported, not failing the run)"
		default:
			verdict = "MISSED"
			failed = append(failed, name)
		}
		fmt.Printf("bench-check: %-58s median %.3f (target %s %.2f) %s\n", name, got, op, target, verdict)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "bench-check:", err)
		os.Exit(1)
	}

	// The model scanner against encoding/json on the same body.
	scanner, err := pairRatio("./dataplane/identity/resolver", "BenchmarkModelFromJSON", "BenchmarkModelFromJSONReference", "1", "1", *rounds)
	if err != nil {
		fail(err)
	}
	check("scanner", "model scanner time / encoding/json time", scanner, "<=", 0.25)

	// Admissions per second with two cores over one, parallel goroutines
	// with their own keys sharing a model.
	if runtime.NumCPU() >= 2 {
		scaling, err := pairRatio("./dataplane/limiter", "BenchmarkTakeIdentityParallel", "BenchmarkTakeIdentityParallel", "1", "2", *rounds)
		if err != nil {
			fail(err)
		}
		check("scaling", "limiter admissions/s, GOMAXPROCS=2 over 1", scaling, ">=", 1.6)
	} else {
		fmt.Println("bench-check: limiter scaling skipped: one CPU")
	}

	// Priority bands: a grant with 1,024 tenants over three bands against
	// one band (issue 21's target is at most 1.10). Report-only: it never
	// fails the run.
	soft["bands"] = true
	bands, err := pairRatio("./dataplane/fairqueue", "BenchmarkGrantThreeBands", "BenchmarkGrantOneBand", "1", "1", *rounds)
	if err != nil {
		fail(err)
	}
	check("bands", "fair-queue grant, three bands / one band (1024 tenants)", bands, "<=", 1.10)

	// The admission fast path against six keyed x/time/rate limiters, and
	// capacity mode's overhead on it (issues 20 and 22: at most 1.2 and
	// 1.10). CPU time per op rather than wall time, because on a shared
	// machine a descheduled benchmark's wall clock runs on. Report-only.
	soft["admission"], soft["capacity"] = true, true
	admit, err := pairRatioCPU("./dataplane/admission", "BenchmarkAdmitFastPath", "BenchmarkXTimeRateSixKeyed", *cpuIters, *rounds)
	if err != nil {
		fail(err)
	}
	check("admission", "admission fast path / six keyed x/time/rate (CPU)", admit, "<=", 1.20)
	capOn, err := pairRatioCPU("./dataplane/admission", "BenchmarkBeginCapacity/on", "BenchmarkBeginCapacity/off", *cpuIters, *rounds)
	if err != nil {
		fail(err)
	}
	check("capacity", "admission with capacity mode on / off (CPU)", capOn, "<=", 1.10)

	if *benchHTTP != "" {
		cmd := exec.Command(*benchHTTP, "--dataplane", *dataplane, "--vegeta", *vegeta,
			"--rounds", strconv.Itoa(*httpRounds), "--max-rounds", strconv.Itoa(*httpMaxRounds), "--duration", httpDuration.String(), "--check")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if !soft["http"] {
				failed = append(failed, "HTTP CPU per request and throughput against a bare proxy")
			} else {
				fmt.Println("bench-check: HTTP CPU per request and throughput against a bare proxy MISSED (reported, not failing the run)")
			}
		}
	}
	if len(failed) > 0 {
		fail(fmt.Errorf("%d ratio(s) missed their targets: %s", len(failed), strings.Join(failed, "; ")))
	}
}

// pairRatio runs benchmark a (at GOMAXPROCS cpuA) and b (at cpuB) once each
// per round, alternating which goes first, and returns the median over the
// rounds of a's ns/op over b's.
func pairRatio(pkg, a, b, cpuA, cpuB string, rounds int) (float64, error) {
	test, remove, err := buildTests(pkg)
	if err != nil {
		return 0, err
	}
	defer remove()
	run := func(name, cpu string) (float64, error) {
		out, err := benchCmd(test, name, cpu, "1s").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		return nsPerOp(out, name)
	}
	ratios, _, _, err := alternate(rounds,
		func() (float64, error) { return run(a, cpuA) },
		func() (float64, error) { return run(b, cpuB) })
	if err != nil {
		return 0, err
	}
	slices.Sort(ratios)
	fmt.Printf("bench-check: %s %s@%s / %s@%s per round: %.3f\n", pkg, a, cpuA, b, cpuB, ratios)
	return ratios[len(ratios)/2], nil
}

// pairRatioCPU is pairRatio at GOMAXPROCS 1 measured in CPU time: each
// round runs a and b for iters iterations, alternating which goes first,
// and takes the CPU time the test process used (user and system), less
// that of a one-iteration run (the process's start and the benchmark's
// setup), per iteration. It returns the median over the rounds of a's over
// b's.
func pairRatioCPU(pkg, a, b string, iters, rounds int) (float64, error) {
	test, remove, err := buildTests(pkg)
	if err != nil {
		return 0, err
	}
	defer remove()
	cpu := func(name string, n int) (time.Duration, error) {
		cmd := benchCmd(test, name, "1", strconv.Itoa(n)+"x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		if _, err := nsPerOp(out, name); err != nil {
			return 0, err
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	}
	perOp := func(name string, base time.Duration) (float64, error) {
		t, err := cpu(name, iters)
		if err != nil {
			return 0, err
		}
		return float64(t-base) / float64(iters-1), nil
	}
	var baseA, baseB time.Duration
	if baseA, err = cpu(a, 1); err == nil {
		baseB, err = cpu(b, 1)
	}
	if err != nil {
		return 0, err
	}
	ratios, nsA, nsB, err := alternate(rounds,
		func() (float64, error) { return perOp(a, baseA) },
		func() (float64, error) { return perOp(b, baseB) })
	if err != nil {
		return 0, err
	}
	slices.Sort(ratios)
	slices.Sort(nsA)
	slices.Sort(nsB)
	fmt.Printf("bench-check: %s %s / %s CPU ns/op medians %.0f / %.0f, ratio per round: %.3f\n",
		pkg, a, b, nsA[len(nsA)/2], nsB[len(nsB)/2], ratios)
	return ratios[len(ratios)/2], nil
}

// buildTests compiles the test binary of pkg once into a temporary file,
// so the rounds run the same binary and measure no compilation; remove
// deletes the file.
func buildTests(pkg string) (bin string, remove func(), err error) {
	f, err := os.CreateTemp("", "bench-check-*.test")
	if err != nil {
		return "", nil, err
	}
	_ = f.Close()
	remove = func() { _ = os.Remove(f.Name()) }
	if out, err := exec.Command("go", "test", "-c", "-o", f.Name(), pkg).CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("building the tests of %s: %w\n%s", pkg, err, out)
	}
	return f.Name(), remove, nil
}

// benchCmd runs benchmark name of the test binary bin alone, once, at
// GOMAXPROCS cpu for benchtime (a duration, or "Nx" iterations).
func benchCmd(bin, name, cpu, benchtime string) *exec.Cmd {
	return exec.Command(bin, "-test.run", "^$", "-test.bench", "^"+name+"$", "-test.cpu", cpu,
		"-test.benchtime", benchtime, "-test.count", "1")
}

// nsPerOp returns the ns/op of benchmark name in go test output.
func nsPerOp(out []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || (f[0] != name && !strings.HasPrefix(f[0], name+"-")) {
			continue
		}
		for i := 2; i+1 < len(f); i++ {
			if f[i+1] == "ns/op" {
				return strconv.ParseFloat(f[i], 64)
			}
		}
	}
	return 0, errors.New("no ns/op for " + name + " in:\n" + string(out))
}

// alternate measures a and b rounds times, alternating which goes first so
// that both see the same drift of a shared machine, and returns a's over
// b's per round with each side's figures.
func alternate(rounds int, a, b func() (float64, error)) (ratios, as, bs []float64, err error) {
	for r := range rounds {
		var ta, tb float64
		if r%2 == 0 {
			if ta, err = a(); err == nil {
				tb, err = b()
			}
		} else {
			if tb, err = b(); err == nil {
				ta, err = a()
			}
		}
		if err != nil {
			return nil, nil, nil, err
		}
		ratios, as, bs = append(ratios, ta/tb), append(as, ta), append(bs, tb)
	}
	return ratios, as, bs, nil
}
