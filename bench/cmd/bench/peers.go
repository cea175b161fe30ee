//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Debian packages of the peers, by the command that shows they are there.
type debPackage struct {
	command string
	pkg     string
	// ok, when set, checks more than the command's presence.
	ok func() bool
}

func peerPackages(columns []string) []debPackage {
	var out []debPackage
	if contains(columns, colMitm) {
		out = append(out, debPackage{command: "mitmdump", pkg: "mitmproxy"})
	}
	if contains(columns, colSquid) {
		// Debian's plain squid is built with GnuTLS and has no ssl-bump.
		out = append(out, debPackage{command: "squid", pkg: "squid-openssl", ok: func() bool {
			out, err := exec.Command("squid", "-v").Output()
			return err == nil && bytes.Contains(out, []byte("--with-openssl"))
		}})
	}
	if contains(columns, colDirect) {
		// h2load cross-checks the load generator against the origin.
		out = append(out, debPackage{command: "h2load", pkg: "nghttp2-client"})
	}
	return out
}

// ensurePeers installs the missing peers from Debian. Failures are logged:
// the columns whose peer is missing then say so.
func ensurePeers(ctx context.Context, columns []string, logf func(string, ...any)) {
	var missing []string
	for _, p := range peerPackages(columns) {
		if _, err := exec.LookPath(p.command); err == nil && (p.ok == nil || p.ok()) {
			continue
		}
		missing = append(missing, p.pkg)
	}
	if len(missing) == 0 {
		return
	}
	if os.Geteuid() != 0 {
		logf("missing %s and not root: not installing", strings.Join(missing, ", "))
		return
	}
	logf("installing %s from Debian", strings.Join(missing, " "))
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update", "-q"}, append([]string{"install", "-y", "-q"}, missing...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			logf("apt-get %s: %v: %s", args[0], err, tail(string(out), 600))
			return
		}
	}
	if contains(missing, "squid-openssl") {
		// The package may start and enable a system squid; this harness
		// runs its own and leaves no daemon behind.
		for _, argv := range [][]string{{"invoke-rc.d", "squid", "stop"}, {"update-rc.d", "squid", "disable"}, {"systemctl", "disable", "squid"}} {
			exec.CommandContext(ctx, argv[0], argv[1:]...).Run()
		}
		if b, err := os.ReadFile("/run/squid.pid"); err == nil {
			logf("a system squid (pid %s) still runs; this harness uses its own ports and pid file", strings.TrimSpace(string(b)))
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// daemon is a peer process started by the harness, in its own process
// group so that stopping it stops its helpers too.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func startDaemon(argv []string, dir, logFile string) (*daemon, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: start %s: %w", filepath.Base(argv[0]), err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() {
		cmd.Wait()
		f.Close()
		close(d.done)
	}()
	return d, nil
}

// waitListening waits until addr accepts connections or the daemon exits.
func (d *daemon) waitListening(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-d.done:
			return fmt.Errorf("exited: %s", d.logTail())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %s after %s: %s", addr, within, d.logTail())
}

func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.log)
	return tail(string(b), 500)
}

// stop sends SIGTERM to the daemon's process group, then SIGKILL.
func (d *daemon) stop() {
	pgid := d.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-d.done
	}
	// Helpers that outlived their parent.
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// relayPeer is bench/relay: a CONNECT proxy that copies bytes and does
// nothing else, the cost of the extra hop alone.
type relayPeer struct {
	d    *daemon
	addr string
	ca   string
}

// startOwn starts bin, one of the binaries the harness built, in a
// directory of its own (dir/name.d) with the arguments args gives for the
// loopback address it is to listen on, and waits until it listens.
func startOwn(ctx context.Context, h *harness, bin string, args func(addr, dir string) []string) (d *daemon, addr, dir string, err error) {
	name := filepath.Base(bin)
	dir = filepath.Join(h.tmp, name+".d") // h.tmp/<name> is the binary
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", "", err
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	d, err = startDaemon(append([]string{bin}, args(addr, dir)...), dir, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, "", "", err
	}
	if err := d.waitListening(ctx, addr, 30*time.Second); err != nil {
		d.stop()
		return nil, "", "", fmt.Errorf("%s: %w", name, err)
	}
	return d, addr, dir, nil
}

func startRelay(ctx context.Context, h *harness) (peer, error) {
	d, addr, _, err := startOwn(ctx, h, h.bins.relay, func(addr, _ string) []string { return []string{"-listen", addr} })
	if err != nil {
		return nil, err
	}
	return &relayPeer{d: d, addr: addr, ca: h.origin.CAFile}, nil
}

func (p *relayPeer) command(_ scenario, lg []string) ([]string, []string, func(), error) {
	// TLS is end to end: loadgen trusts the origin's CA.
	argv := append(lg, "-proxy", "http://"+p.addr, "-ca", p.ca, "-watch-pid", strconv.Itoa(p.d.cmd.Process.Pid))
	return argv, os.Environ(), func() {}, nil
}

func (p *relayPeer) describe() (string, string) {
	return "bench/relay", "CONNECT relay in Go that copies bytes both ways through a buffer (no splice): no TLS interception, no HTTP, no decision, no log"
}

func (p *relayPeer) stop() { p.d.stop() }

// ownMitmPeer is one of the benchmark's own intercepting proxies,
// bench/gomitm or bench/tlsfloor: it verifies the origin with its CA, and
// the client trusts the proxy's CA.
type ownMitmPeer struct {
	d              *daemon
	addr           string
	ca             string
	version, setup string
}

// startOwnMitm starts bin with -listen, -ca-out and -upstream-ca.
func startOwnMitm(ctx context.Context, h *harness, bin string) (*ownMitmPeer, error) {
	d, addr, dir, err := startOwn(ctx, h, bin, func(addr, dir string) []string {
		return []string{"-listen", addr, "-ca-out", filepath.Join(dir, "ca.pem"), "-upstream-ca", h.origin.CAFile}
	})
	if err != nil {
		return nil, err
	}
	return &ownMitmPeer{d: d, addr: addr, ca: filepath.Join(dir, "ca.pem")}, nil
}

func startGomitm(ctx context.Context, h *harness) (peer, error) {
	p, err := startOwnMitm(ctx, h, h.bins.gomitm)
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, h.bins.gomitm, "-version").Output(); err == nil {
		p.version = firstLine(string(out))
	}
	p.setup = "bench/gomitm: goproxy with every CONNECT intercepted, ECDSA leaves kept per host, HTTP/2 allowed, one http.Transport upstream; no decision, no log"
	return p, nil
}

func startFloor(ctx context.Context, h *harness) (peer, error) {
	p, err := startOwnMitm(ctx, h, h.bins.tlsfloor)
	if err != nil {
		return nil, err
	}
	p.version = "bench/tlsfloor"
	p.setup = "about the least a TLS-intercepting HTTP/1.1 proxy in Go does: ECDSA leaves kept per host, one goroutine and one origin connection per client connection, heads passed on as received, bodies framed by Content-Length; no HTTP/2, no decision, no log"
	return p, nil
}

func (p *ownMitmPeer) command(_ scenario, lg []string) ([]string, []string, func(), error) {
	argv := append(lg, "-proxy", "http://"+p.addr, "-ca", p.ca, "-watch-pid", strconv.Itoa(p.d.cmd.Process.Pid))
	return argv, os.Environ(), func() {}, nil
}

func (p *ownMitmPeer) describe() (string, string) { return p.version, p.setup }

func (p *ownMitmPeer) stop() { p.d.stop() }

// mitmproxyPeer is mitmdump, explicit proxy, verifying the origin with
// its CA; the client trusts mitmproxy's CA.
type mitmproxyPeer struct {
	h       *harness
	d       *daemon
	addr    string
	ca      string
	version string
}

func startMitmproxy(ctx context.Context, h *harness) (peer, error) {
	bin, err := exec.LookPath("mitmdump")
	if err != nil {
		return nil, errors.New("mitmdump not installed (Debian package mitmproxy)")
	}
	dir := filepath.Join(h.tmp, "mitmproxy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &mitmproxyPeer{h: h, addr: "127.0.0.1:" + strconv.Itoa(port), ca: filepath.Join(dir, "mitmproxy-ca-cert.pem")}
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		p.version = firstLine(string(out))
	}
	p.d, err = startDaemon([]string{bin, "-q",
		"--listen-host", "127.0.0.1", "--listen-port", strconv.Itoa(port),
		"--set", "confdir=" + dir,
		"--set", "ssl_verify_upstream_trusted_ca=" + h.origin.CAFile,
		// Pass large bodies through instead of buffering them whole.
		"--set", "stream_large_bodies=1m",
		"--set", "termlog_verbosity=error",
	}, dir, filepath.Join(dir, "mitmdump.log"))
	if err != nil {
		return nil, err
	}
	if err := p.d.waitListening(ctx, p.addr, 60*time.Second); err != nil {
		p.d.stop()
		return nil, fmt.Errorf("mitmdump: %w", err)
	}
	if _, err := os.Stat(p.ca); err != nil {
		p.d.stop()
		return nil, fmt.Errorf("mitmdump: no CA: %w", err)
	}
	return p, nil
}

func (p *mitmproxyPeer) command(_ scenario, lg []string) ([]string, []string, func(), error) {
	argv := append(lg, "-proxy", "http://"+p.addr, "-ca", p.ca, "-watch-pid", strconv.Itoa(p.d.cmd.Process.Pid), "-watch-tree")
	return argv, os.Environ(), func() {}, nil
}

func (p *mitmproxyPeer) describe() (string, string) {
	return p.version, "mitmdump -q, stream_large_bodies=1m, ssl_verify_upstream_trusted_ca=<origin CA>"
}

func (p *mitmproxyPeer) stop() { p.d.stop() }

// squidPeer is Squid with ssl-bump (peek at step 1, then bump), its own CA
// and certificate generator database, no cache, no access log.
type squidPeer struct {
	h       *harness
	d       *daemon
	addr    string
	ca      string
	version string
}

const squidCertgen = "/usr/lib/squid/security_file_certgen"

func startSquid(ctx context.Context, h *harness) (peer, error) {
	bin, err := exec.LookPath("squid")
	if err != nil {
		return nil, errors.New("squid not installed (Debian package squid-openssl)")
	}
	if _, err := os.Stat(squidCertgen); err != nil {
		return nil, errors.New("squid has no security_file_certgen: install squid-openssl")
	}
	dir := filepath.Join(h.tmp, "squid")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &squidPeer{h: h, addr: "127.0.0.1:" + strconv.Itoa(port), ca: filepath.Join(dir, "squid-ca.pem")}
	if out, err := exec.CommandContext(ctx, bin, "-v").Output(); err == nil {
		p.version = firstLine(string(out))
	}
	key := filepath.Join(dir, "squid-ca.key")
	gen := exec.CommandContext(ctx, "openssl", "req", "-new", "-x509", "-nodes", "-sha256", "-days", "7",
		"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-subj", "/CN=Chaperone bench squid CA",
		"-addext", "basicConstraints=critical,CA:TRUE",
		"-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
		"-keyout", key, "-out", p.ca)
	if out, err := gen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("squid ca: %w: %s", err, tail(string(out), 300))
	}
	db := filepath.Join(dir, "ssl_db")
	if out, err := exec.CommandContext(ctx, squidCertgen, "-c", "-s", db, "-M", "16MB").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("squid certgen db: %w: %s", err, tail(string(out), 300))
	}
	conf := filepath.Join(dir, "squid.conf")
	cfg := strings.Join([]string{
		"http_port " + p.addr + " ssl-bump tls-cert=" + p.ca + " tls-key=" + key +
			" generate-host-certificates=on dynamic_cert_mem_cache_size=16MB",
		"sslcrtd_program " + squidCertgen + " -s " + db + " -M 16MB",
		"sslcrtd_children 4 startup=1 idle=1",
		"acl step1 at_step SslBump1",
		"ssl_bump peek step1",
		"ssl_bump bump all",
		"tls_outgoing_options cafile=" + h.origin.CAFile,
		"http_access allow all", // it listens on loopback only
		"cache deny all",
		"cache_mem 8 MB",
		"access_log none",
		"cache_log " + filepath.Join(dir, "cache.log"),
		"pid_filename " + filepath.Join(dir, "squid.pid"),
		"coredump_dir " + dir,
		"max_filedescriptors 262144",
		"shutdown_lifetime 1 seconds",
		"client_idle_pconn_timeout 10 minutes",
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	// Squid started as root runs as the proxy user: its files must be its.
	if u, err := user.Lookup("proxy"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
			if err == nil {
				os.Lchown(path, uid, gid)
			}
			return nil
		})
	}
	p.d, err = startDaemon([]string{bin, "-N", "-f", conf}, dir, filepath.Join(dir, "squid.out"))
	if err != nil {
		return nil, err
	}
	if err := p.d.waitListening(ctx, p.addr, 60*time.Second); err != nil {
		cl, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		p.d.stop()
		return nil, fmt.Errorf("squid: %w; cache.log: %s", err, tail(string(cl), 500))
	}
	return p, nil
}

func (p *squidPeer) command(_ scenario, lg []string) ([]string, []string, func(), error) {
	argv := append(lg, "-proxy", "http://"+p.addr, "-ca", p.ca, "-watch-pid", strconv.Itoa(p.d.cmd.Process.Pid), "-watch-tree")
	return argv, os.Environ(), func() {}, nil
}

func (p *squidPeer) describe() (string, string) {
	return p.version, "squid -N, ssl-bump (peek step1, bump all), security_file_certgen, cache deny all, access_log none"
}

func (p *squidPeer) stop() { p.d.stop() }

// chaperonePeer runs each scenario as its own session: loadgen is the
// session's agent and gets the proxy and trust settings from Chaperone.
type chaperonePeer struct {
	h           *harness
	transparent bool
	state       string
	version     string
}

func newChaperonePeer(h *harness, transparent bool) (peer, error) {
	mode := "proxy"
	if transparent {
		mode = "transparent"
		if os.Geteuid() != 0 {
			return nil, errors.New("transparent mode needs root")
		}
	}
	state := filepath.Join(h.tmp, "chaperone-"+mode)
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	p := &chaperonePeer{h: h, transparent: transparent, state: state}
	if out, err := exec.Command("git", "-C", h.o.moduleDir, "describe", "--always", "--dirty").Output(); err == nil {
		p.version = "chaperone " + strings.TrimSpace(string(out))
	}
	return p, nil
}

func (p *chaperonePeer) command(s scenario, lg []string) ([]string, []string, func(), error) {
	mode := "proxy"
	if p.transparent {
		mode = "transparent"
	}
	audit := filepath.Join(p.h.tmp, "audit-"+mode+"-"+s.id+".jsonl")
	argv := []string{p.h.bins.chaperone, "run", "--mode", mode,
		"--upstream-ca", p.h.origin.CAFile, "--state-dir", p.state, "--log", audit}
	if p.transparent {
		// The loadgen resolves nothing; keep the session's resolver off
		// the machine's.
		argv = append(argv, "--dns-upstream", "127.0.0.1:1")
	}
	argv = append(argv, "--")
	argv = append(argv, lg...)
	argv = append(argv, "-watch-ancestor", "chaperone")
	if p.transparent {
		argv = append(argv, "-direct") // the connection is redirected, not proxied
	}
	cleanup := func() {
		if !p.h.o.keep {
			os.Remove(audit)
		}
	}
	return argv, os.Environ(), cleanup, nil
}

func (p *chaperonePeer) describe() (string, string) {
	mode := "--mode proxy (HTTPS_PROXY)"
	if p.transparent {
		mode = "--mode transparent (eBPF redirect)"
	}
	return p.version, "chaperone run " + mode + ", built-in policy, audit log on, defaults otherwise; loadgen is the session's agent"
}

func (p *chaperonePeer) stop() {}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

// h2loadRPS runs nghttp2's h2load against url (h2, one connection, one
// stream) for d and returns its requests per second: a check that loadgen
// itself is not what limits the direct figures.
func h2loadRPS(ctx context.Context, url string, d time.Duration) (float64, error) {
	bin, err := exec.LookPath("h2load")
	if err != nil {
		return 0, errors.New("h2load not installed")
	}
	secs := strconv.Itoa(max(1, int(d.Seconds())))
	out, err := exec.CommandContext(ctx, bin, "-c", "1", "-m", "1", "-D", secs, "--warm-up-time=1", url).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("h2load: %w: %s", err, tail(string(out), 300))
	}
	m := regexp.MustCompile(`finished in [^,]+, ([0-9.]+) req/s`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("h2load: no rate in %q", tail(string(out), 300))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
