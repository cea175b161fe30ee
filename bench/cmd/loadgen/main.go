// Command loadgen sends HTTPS load to an origin, directly or through an
// explicit proxy, and prints what it measured as one JSON object on stdout.
//
//	loadgen -target https://127.0.0.1:8443/1k -c 64 -d 5s -proto h2
//	loadgen -target https://127.0.0.1:443/1k -c 64 -d 5s -proto h3 -direct
//	loadgen -target https://127.0.0.1:8443/1k -hold 10000 -watch-pid 1234
//
// The proxy comes from -proxy, else from HTTPS_PROXY (its userinfo becomes
// Proxy-Authorization); -direct ignores the environment. Targets and
// proxies are IP literals: loadgen never resolves a name.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		target    = fs.String("target", "", "origin URL, https://IP:port/path (required)")
		proxyFlag = fs.String("proxy", "", "explicit proxy http://[user:pass@]IP:port (default: HTTPS_PROXY)")
		direct    = fs.Bool("direct", false, "no proxy, whatever the environment says")
		caFile    = fs.String("ca", "", "PEM file of CAs to trust (default: the system's, honouring SSL_CERT_FILE)")
		proto     = fs.String("proto", "h1", "h1, h2 or h3 (HTTP/3 over QUIC, direct only) to the origin")
		keepAlive = fs.Bool("keepalive", true, "reuse connections (false: a new connection per request)")
		conc      = fs.Int("c", 1, "concurrent workers")
		dur       = fs.Duration("d", 5*time.Second, "measured duration")
		warmup    = fs.Duration("warmup", time.Second, "unmeasured warm-up before it")
		hold      = fs.Int("hold", 0, "hold mode: open this many keep-alive connections, one request each, and hold them idle")
		holdPar   = fs.Int("hold-parallel", 32, "hold mode: connections opened at once")
		holdOpen  = fs.Duration("hold-open", time.Minute, "hold mode: budget to open them")
		holdSet   = fs.Duration("hold-settle", 2*time.Second, "hold mode: wait after opening before sampling memory")
		holdIdle  = fs.Duration("hold-idle", 3*time.Second, "hold mode: hold them this long after sampling")
		watchPIDs = fs.String("watch-pid", "", "comma-separated pids of the proxy, sampled for CPU and memory")
		watchTree = fs.Bool("watch-tree", false, "also sample the watched pids' descendants")
		watchAnc  = fs.String("watch-ancestor", "", "sample this process's nearest ancestor with this command name (e.g. chaperone)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return fmt.Errorf("loadgen: -target is required")
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "https" {
		return fmt.Errorf("loadgen: -target %q is not an https URL", *target)
	}
	if h, _, err := net.SplitHostPort(u.Host); err != nil || net.ParseIP(h) == nil {
		return fmt.Errorf("loadgen: -target host %q is not IP:port", u.Host)
	}
	client := loadgen.Client{Proto: loadgen.Proto(*proto), KeepAlive: *keepAlive}
	switch client.Proto {
	case loadgen.HTTP1, loadgen.HTTP2:
	case loadgen.HTTP3:
		if !*keepAlive || *hold > 0 {
			return fmt.Errorf("loadgen: -proto h3 runs keep-alive load only")
		}
	default:
		return fmt.Errorf("loadgen: -proto %q, want h1, h2 or h3", *proto)
	}
	switch {
	case *direct:
	case *proxyFlag != "":
		if client.Proxy, err = loadgen.ParseProxy(*proxyFlag); err != nil {
			return err
		}
	default:
		if client.Proxy, err = loadgen.ProxyFromEnv(getenv); err != nil {
			return err
		}
	}
	if *caFile != "" {
		if client.Roots, err = loadgen.LoadRoots(*caFile); err != nil {
			return err
		}
	}
	watch := loadgen.Watch{Tree: *watchTree}
	for f := range strings.SplitSeq(*watchPIDs, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("loadgen: -watch-pid %q: %w", f, err)
		}
		watch.PIDs = append(watch.PIDs, pid)
	}
	if *watchAnc != "" {
		pid, err := loadgen.Ancestor("", os.Getpid(), *watchAnc)
		if err != nil {
			return err
		}
		watch.PIDs = append(watch.PIDs, pid)
	}

	var res loadgen.Result
	if *hold > 0 {
		res, err = loadgen.RunHold(ctx, loadgen.Hold{
			Client: client, Target: u, Conns: *hold, Parallel: *holdPar,
			Open: *holdOpen, Settle: *holdSet, Idle: *holdIdle, Watch: watch,
		})
	} else {
		res, err = loadgen.Run(ctx, loadgen.Load{
			Client: client, Target: u, Concurrency: *conc,
			Warmup: *warmup, Duration: *dur, Watch: watch,
		})
	}
	if err != nil {
		return err
	}
	res.WatchedPIDs = watch.PIDs
	res.GeneratorPPID = os.Getppid()
	enc := json.NewEncoder(stdout)
	return enc.Encode(res)
}
