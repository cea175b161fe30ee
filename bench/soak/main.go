// Command soak holds many concurrent HTTPS clients in one transparent
// Chaperone session for a bounded time, on loopback only, and checks that
// every allowed request was answered right and that Chaperone gives back
// what the load took: goroutines, file descriptors and redirect map
// entries return to their post-warm-up level, and resident memory stays
// flat under steady load.
//
//	go build -o bin/chaperone ./cmd/chaperone && go build -o bin/soak ./bench/soak
//	sudo bin/soak -chaperone bin/chaperone            # SOAK_DURATION, SOAK_CLIENTS
//
// The same binary is the agent: chaperone runs "soak client ..." in the
// session. The origin (127.0.0.1, a CA of its own that only Chaperone
// trusts, through --upstream-ca) and the orchestrator live outside it. The
// orchestrator reads chaperone's goroutines and redirect map through its
// hidden loopback debug listener (CHAPERONE_DEBUG_ADDR), its descriptors
// and RSS from /proc. It prints a summary and exits 1 on any violation, 2
// when the soak could not run. Needs root, cgroup v2 and the eBPF cgroup
// hooks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "client" {
		os.Exit(runClient(os.Args[2:]))
	}
	os.Exit(orchestrate(os.Args[1:]))
}

func orchestrate(args []string) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var c config
	var keep bool
	fs.StringVar(&c.Chaperone, "chaperone", "bin/chaperone", "the chaperone binary")
	fs.IntVar(&c.Clients, "clients", envInt("SOAK_CLIENTS", 1000), "concurrent clients (SOAK_CLIENTS)")
	fs.DurationVar(&c.Duration, "duration", envDuration("SOAK_DURATION", 10*time.Minute), "load after the warm-up (SOAK_DURATION)")
	fs.DurationVar(&c.Warmup, "warmup", envDuration("SOAK_WARMUP", 0), "warm-up load (SOAK_WARMUP; default a tenth of the duration, 10s to 1m)")
	fs.DurationVar(&c.Interval, "interval", envDuration("SOAK_INTERVAL", time.Second), "mean time between one client's requests (SOAK_INTERVAL)")
	fs.DurationVar(&c.Sample, "sample", 0, "RSS sampling interval (default a sixtieth of the duration, 1s to 5s)")
	fs.Float64Var(&c.RSSGrowth, "rss-growth", 1.2, "largest allowed ratio of steady RSS at the end to steady RSS at the start")
	fs.BoolVar(&keep, "keep", false, "keep the scratch directory (audit log, chaperone's stderr)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.fill()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: needs root: the clients run in a transparent session (eBPF cgroup hooks)")
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	c.Client = []string{exe, "client"}
	if c.Dir, err = os.MkdirTemp("", "chaperone-soak-"); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	if keep {
		fmt.Println("soak: scratch directory", c.Dir)
	} else {
		defer os.RemoveAll(c.Dir)
	}
	c.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r.print(os.Stdout, c)
	if len(r.Violations) > 0 {
		return 1
	}
	return 0
}

// fill sets what was left to its default, derived from the duration.
func (c *config) fill() {
	if c.Warmup <= 0 {
		c.Warmup = min(max(c.Duration/10, 10*time.Second), time.Minute)
	}
	if c.Sample <= 0 {
		c.Sample = min(max(c.Duration/60, time.Second), 5*time.Second)
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.RSSGrowth <= 0 {
		c.RSSGrowth = 1.2
	}
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return d
	}
	return def
}
