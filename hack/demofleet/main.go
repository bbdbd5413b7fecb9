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

// Command demofleet shows fleet-wide fair shares on one machine: three
// data-plane replicas share one model limit in Redis (a real redis-server
// when one is on PATH, else an embedded miniredis), tenant A reaches only
// replica 0, B only replica 1 and C all three, with weights 1:1:3. It prints
// the fleet and per-replica shares every second, kills Redis for a few
// seconds midway to show the failure mode, and writes a PNG chart.
//
//	make demo-fleet               # or: go run ./hack/demofleet
//	go run ./hack/demofleet --duration 20s --failure-mode Open
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter/redisstore"
	"github.com/fairqueue/fairqueue/internal/fleetdemo"
)

// errInterrupted ends a run stopped by Ctrl-C or SIGTERM.
var errInterrupted = errors.New("interrupted")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop() // before os.Exit, which skips deferred calls
	if err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			return
		case errors.Is(err, errInterrupted):
			os.Exit(130) // as hack/demo does
		}
		fmt.Fprintln(os.Stderr, "demofleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demofleet", flag.ContinueOnError)
	var (
		o     fleetdemo.Options
		mode  string
		chart string
	)
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "how long load is offered (at least 5s)")
	fs.Int64Var(&o.PerModel, "per-model", 90, "the model limit the fleet shares, requests per second")
	fs.DurationVar(&o.OutageAt, "outage-at", 0, "when Redis is killed, after the load starts (default 60% of --duration)")
	fs.DurationVar(&o.Outage, "outage", 3*time.Second, "how long Redis stays down; 0 for no outage")
	fs.StringVar(&mode, "failure-mode", string(redisstore.FailClosed), "the store's behaviour while Redis is down: Closed (503) or Open (local buckets)")
	fs.StringVar(&o.RedisServer, "redis-server", "", "redis-server `binary`; empty looks it up on PATH, - uses the embedded miniredis")
	fs.StringVar(&chart, "chart", filepath.Join("bin", "demo-fleet-shares.png"), "`file` to write the PNG chart of fleet shares to; empty for none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: see --help", fs.Arg(0))
	}
	switch redisstore.FailureMode(mode) {
	case redisstore.FailClosed, redisstore.FailOpen:
		o.FailureMode = redisstore.FailureMode(mode)
	default:
		return fmt.Errorf("--failure-mode %q: want Closed or Open", mode)
	}
	if o.OutageAt == 0 {
		o.OutageAt = o.Duration * 6 / 10
	}
	o.Out = os.Stdout
	res, err := fleetdemo.Run(ctx, o)
	if ctx.Err() != nil {
		fmt.Println("==> Interrupted: the replicas and Redis the demo started have been stopped")
		return errInterrupted
	}
	if res != nil {
		err = errors.Join(err, res.WriteReport(os.Stdout))
		if chart != "" && len(res.Unavailable) > 0 {
			if werr := res.Chart().WritePNG(chart); werr != nil {
				err = errors.Join(err, werr)
			} else {
				fmt.Printf("==> Chart of the fleet shares over time: %s\n", chart)
			}
		}
	}
	return err
}
