package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/redirect"
)

// The test binary is also the soak's client: chaperone starts it as
// "soak.test client ..." inside the session.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "client" {
		os.Exit(runClient(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// needTransparent skips unless this machine can run transparent sessions:
// root, cgroup v2 and the eBPF cgroup hooks.
func needTransparent(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("transparent sessions are built for Linux only")
	}
	if os.Geteuid() != 0 {
		t.Skip("transparent mode needs root")
	}
	if _, err := redirect.CgroupRoot(); err != nil {
		t.Skipf("no cgroup v2: %v", err)
	}
	r, err := redirect.Load(redirect.Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:9")})
	if errors.Is(err, redirect.ErrNotPermitted) || errors.Is(err, redirect.ErrNotSupported) {
		t.Skipf("eBPF cgroup hooks unavailable: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// TestSoakShort is `make soak` made small: 200 clients for 15 seconds after 5 of warm-up in a
// transparent session, every check of the long run. It takes about half a
// minute once chaperone is built.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 second soak; -short skips it")
	}
	needTransparent(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // the client runs without capabilities
	bin := filepath.Join(dir, "chaperone")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/chaperone-dev/chaperone/cmd/chaperone")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chaperone: %v\n%s", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c := config{
		Chaperone: bin,
		Client:    []string{exe, "client"},
		Clients:   200,
		Warmup:    5 * time.Second,
		Duration:  15 * time.Second,
		Interval:  time.Second,
		Sample:    time.Second,
		RSSGrowth: 1.2,
		Dir:       dir,
		Out:       &out,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := run(ctx, c)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	r.print(&out, c)
	if len(r.Violations) > 0 {
		t.Fatalf("soak violations:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
	// The checks must be able to fail: the run must have measured load.
	if r.Load.NewConns == 0 || r.Load.Reused == 0 || r.Load.HTTP2 == 0 {
		t.Errorf("load did not mix new, reused and HTTP/2 connections: %+v", r.Load)
	}
	if r.Before.Goroutines == 0 || r.Before.FDs == 0 || r.Before.MapEntries < 0 {
		t.Errorf("baseline not read: %s", r.Before)
	}
	if !strings.Contains(out.String(), "soak: PASS") {
		t.Errorf("summary does not say PASS:\n%s", out.String())
	}
}

// TestJudge checks that each violation is found.
func TestJudge(t *testing.T) {
	c := config{Duration: 10 * time.Second, RSSGrowth: 1.2}
	flat := func(rss ...int64) []snapshot {
		var ss []snapshot
		for i, r := range rss {
			ss = append(ss, snapshot{At: time.Duration(i+1) * time.Second, RSS: r})
		}
		return ss
	}
	good := func() *report {
		return &report{
			Warm:           loadStats{Requests: 10},
			Load:           loadStats{Requests: 90},
			OriginRequests: 100,
			Before:         snapshot{Goroutines: 20, FDs: 30},
			After:          snapshot{Goroutines: 20, FDs: 30},
			Samples:        flat(100, 100, 110, 100, 100, 100, 101, 102, 103, 100),
		}
	}
	tests := []struct {
		name   string
		change func(r *report)
		want   string // in the one violation; "" = none
	}{
		{"clean", func(*report) {}, ""},
		{"failed request", func(r *report) { r.Load.Failures = 1 }, "load: 1 of 90 requests failed"},
		{"origin count", func(r *report) { r.OriginRequests = 99 }, "the origin received 99"},
		{"no load", func(r *report) { r.Load.Requests, r.OriginRequests = 0, 10 }, "no request was sent"},
		{"goroutine leak", func(r *report) { r.After.Goroutines = 21 }, "goroutines: 21 after"},
		{"fd leak", func(r *report) { r.After.FDs = 31 }, "file descriptors: 31 after"},
		{"map entries", func(r *report) { r.After.MapEntries = 2 }, "redirect map: 2 entries"},
		{"rss growth", func(r *report) { r.Samples = flat(100, 100, 100, 100, 100, 100, 100, 130, 130, 130) }, "rss grew"},
		{"rss swings", func(r *report) { r.Samples = flat(100, 90, 130, 100, 95, 125, 100, 90, 130, 105) }, ""},
		{"few samples", func(r *report) { r.Samples = flat(100, 100, 100) }, "rss: 2 samples"},
		{"exit status", func(r *report) { r.ExitCode = 3 }, "exited with status 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.change(r)
			r.judge(c)
			switch {
			case tt.want == "" && len(r.Violations) > 0:
				t.Errorf("violations %q, want none", r.Violations)
			case tt.want != "" && (len(r.Violations) != 1 || !strings.Contains(r.Violations[0], tt.want)):
				t.Errorf("violations %q, want one with %q", r.Violations, tt.want)
			}
		})
	}
}
