//go:build linux

// Command bench measures Chaperone's proxy side by side with a direct
// connection, a relay that only copies bytes (the cost of the hop alone), a
// minimal TLS-intercepting proxy in Go (bench/tlsfloor: what interception
// costs before a proxy does anything of its own), a bare goproxy
// intercepting proxy (bench/gomitm), mitmproxy and Squid (ssl-bump), in one
// run on one machine, and writes a table to stdout and JSON and an SVG chart
// to -out.
//
//	go run ./bench/cmd/bench              # everything (≈20 minutes)
//	go run ./bench/cmd/bench -quick       # short scenarios, 1,000 idle connections
//	go run ./bench/cmd/bench -proxies direct,chaperone-proxy -scenarios ka
//
// It installs mitmproxy, squid-openssl and nghttp2-client from Debian when
// they are missing (root), starts every peer itself on 127.0.0.1 with its own
// configuration in a temporary directory, and stops them before it exits.
// All traffic stays on the loopback interface. It runs on Linux only: it
// reads /proc and starts peers in process groups.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/bench/origin"
	"github.com/chaperone-dev/chaperone/bench/report"
)

// Column names: direct, then each proxy.
const (
	colDirect      = report.Direct
	colRelay       = report.Relay
	colFloor       = report.Floor
	colChaperone   = "chaperone-proxy"
	colTransparent = "chaperone-transparent"
	colGoproxy     = report.Goproxy
	colMitm        = report.Mitmproxy
	colSquid       = "squid"
)

func allColumns() []string {
	return []string{colDirect, colRelay, colFloor, colChaperone, colTransparent, colGoproxy, colMitm, colSquid}
}

// Scenario groups, as -scenarios names them.
func allGroups() []string { return []string{"ka", "h3", "new", "download", "idle"} }

type options struct {
	columns   []string
	groups    []string
	duration  time.Duration
	warmup    time.Duration
	newConnC  int
	rounds    int
	idle      int
	holdOpen  time.Duration
	out       string
	install   bool
	keep      bool
	quick     bool
	moduleDir string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o         options
		columns   = fs.String("proxies", strings.Join(allColumns(), ","), "columns to run, in order: "+strings.Join(allColumns(), ","))
		groups    = fs.String("scenarios", strings.Join(allGroups(), ","), "scenario groups: ka (keep-alive 1 KB), h3 (keep-alive 1 KB over HTTP/3, direct and transparent only; the origin on UDP 127.0.0.1:443), new (new connection per request), download (100 MB), idle (hold idle connections)")
		noInstall = fs.Bool("no-install", false, "do not install missing peers from Debian (their columns are skipped)")
	)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each scenario")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up before each scenario (fills pools and leaf caches)")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds of the load scenarios; the least disturbed (fastest) round of each is reported, and each round's ratio to direct in the notes")
	fs.IntVar(&o.newConnC, "new-conn-c", 16, "concurrency of the new-connection scenario")
	fs.IntVar(&o.idle, "idle", 10000, "idle connections to hold")
	fs.DurationVar(&o.holdOpen, "hold-open", 2*time.Minute, "budget to open the idle connections")
	fs.StringVar(&o.out, "out", "bench/results", "directory for results-<date>.json, latest.json and latest.svg (\"\" = none)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configurations, logs)")
	fs.BoolVar(&o.quick, "quick", false, "short run: one round of 2 s scenarios, 0.5 s warm-up, 1,000 idle connections")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
		if !set["warmup"] {
			o.warmup = 500 * time.Millisecond
		}
		if !set["idle"] {
			o.idle = 1000
		}
		if !set["rounds"] {
			o.rounds = 1
		}
	}
	o.install = !*noInstall
	for c := range strings.SplitSeq(*columns, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(allColumns(), c) {
			return options{}, fmt.Errorf("bench: unknown proxy %q (known: %s)", c, strings.Join(allColumns(), ", "))
		}
		o.columns = append(o.columns, c)
	}
	for g := range strings.SplitSeq(*groups, ",") {
		if g = strings.TrimSpace(g); g == "" {
			continue
		}
		if !slices.Contains(allGroups(), g) {
			return options{}, fmt.Errorf("bench: unknown scenario group %q (known: %s)", g, strings.Join(allGroups(), ", "))
		}
		o.groups = append(o.groups, g)
	}
	if o.rounds < 1 {
		return options{}, errors.New("bench: -rounds must be at least 1")
	}
	if len(o.columns) == 0 || len(o.groups) == 0 {
		return options{}, errors.New("bench: nothing to run")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", a...) }
	if o.moduleDir, err = moduleDir(ctx); err != nil {
		return err
	}
	limit, err := raiseFileLimit(1 << 18)
	if err != nil {
		logf("%v", err)
	}
	// A proxy holds two descriptors per idle connection (client and
	// upstream); the hard limit may be out of reach without
	// CAP_SYS_RESOURCE.
	var idleNote string
	if most := (int(limit) - 512) / 2; limit > 0 && most < o.idle {
		idleNote = fmt.Sprintf("idle connections capped at %d of %d: open files are limited to %d here and a proxy holds two per connection", most, o.idle, limit)
		logf("%s", idleNote)
		o.idle = max(most, 1)
	}
	if o.install {
		ensurePeers(ctx, o.columns, logf)
	}

	tmp, err := os.MkdirTemp("", "chaperone-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if o.keep {
		logf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	// Peers that drop privileges (squid) read their files from here.
	os.Chmod(tmp, 0o755)

	bins, err := build(ctx, o.moduleDir, tmp, o.columns)
	if err != nil {
		return err
	}
	org, err := origin.Start("127.0.0.1:0", tmp, time.Now)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer org.Close()
	logf("origin on %s", org.Addr)
	h := &harness{o: o, tmp: tmp, bins: bins, origin: org, logf: logf}
	if contains(o.groups, "h3") {
		// 443: the port a transparent session sends to its QUIC listener.
		if err := org.ServeHTTP3(443); err != nil {
			h.h3Err = err.Error()
			logf("no HTTP/3 scenarios: %v", err)
		} else {
			logf("origin's HTTP/3 on %s", org.H3Addr)
		}
	}

	result := report.Run{
		Date:    time.Now().UTC(),
		Machine: machine(),
		Settings: report.Settings{
			Duration: o.duration.String(), Warmup: o.warmup.String(),
			NewConnC: o.newConnC, IdleConns: o.idle, Rounds: o.rounds,
			FileLimit: limit, IdleNote: idleNote,
		},
	}
	started := time.Now()
	result.Machine.LoadStart = loadAvg()
	result.Proxies = h.measure(ctx)
	result.Machine.LoadEnd = loadAvg()
	if ctx.Err() != nil {
		return fmt.Errorf("bench: interrupted: %w", ctx.Err())
	}
	logf("measured in %s", time.Since(started).Round(time.Second))
	result.Targets = report.Targets(result)

	fmt.Fprintf(stdout, "Chaperone proxy benchmark, %s, %d CPUs, %s, Go %s\n%s per scenario after %s warm-up, best of %d rounds; load average %s at the start, %s at the end\n\n",
		result.Date.Format("2006-01-02 15:04 MST"), result.Machine.CPUs, result.Machine.Kernel, result.Machine.Go,
		o.duration, o.warmup, o.rounds, result.Machine.LoadStart, result.Machine.LoadEnd)
	if err := report.WriteTable(stdout, result); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if len(result.Targets) > 0 {
		if err := report.WriteTargets(stdout, result.Targets); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	if idleNote != "" {
		fmt.Fprintf(stdout, "note: %s\n", idleNote)
	}
	for _, p := range result.Proxies {
		for _, n := range p.Notes {
			fmt.Fprintf(stdout, "note: %s: %s\n", p.Name, n)
		}
	}
	if o.out != "" {
		if err := writeResults(o.out, result); err != nil {
			return err
		}
		logf("wrote %s", o.out)
	}
	return nil
}

// writeResults writes results-<date>.json, latest.json and latest.svg.
func writeResults(dir string, r report.Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	write := func(name string, f func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		tmp := path + ".tmp"
		fh, err := os.Create(tmp)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := f(fh); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Close(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		return os.Rename(tmp, path)
	}
	js := func(w io.Writer) error { return report.WriteJSON(w, r) }
	if err := write("results-"+r.Date.Format("2006-01-02")+".json", js); err != nil {
		return err
	}
	if err := write("latest.json", js); err != nil {
		return err
	}
	return write("latest.svg", func(w io.Writer) error { return report.WriteSVG(w, r) })
}

// loadAvg returns the 1-minute load average: other work on the machine.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func machine() report.Machine {
	m := report.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	return m
}
