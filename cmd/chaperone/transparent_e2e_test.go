//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/redirect"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// needTransparent skips unless this machine can run transparent sessions:
// root, cgroup v2 and the eBPF cgroup hooks.
func needTransparent(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("transparent mode needs root")
	}
	if _, err := redirect.CgroupRoot(); err != nil {
		t.Skipf("no cgroup v2: %v", err)
	}
	r, err := redirect.Load(redirect.Config{ProxyV4: netipMust("127.0.0.1:9")})
	if errors.Is(err, redirect.ErrNotPermitted) || errors.Is(err, redirect.ErrNotSupported) {
		t.Skipf("eBPF cgroup hooks unavailable: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// transparent runs agent in a transparent session of w, with the exfil
// host's address denied.
func (w *world) transparent(extra []string, agent ...string) result {
	w.t.Helper()
	args := append([]string{"run", "--mode", "transparent",
		"--dns-upstream", fakeDNSUpstream(w.t).String(),
		"--upstream-ca", w.caFile,
		"--deny-host", w.exfil.Addr.Addr().String(),
		"--log", w.log}, extra...)
	return w.chaperone(nil, append(append(args, "--"), agent...)...)
}

func TestTransparentCurlNoProxy(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	port := strconv.Itoa(int(w.api.Addr.Port()))
	r := w.transparent(nil, "sh", "-c", `env | grep -i '_proxy=' && exit 9
curl -sS --noproxy '*' --resolve "api.e2e.test:$1:127.0.0.2" -w ' [%{remote_ip}]' "https://api.e2e.test:$1/tp"`, "sh", port)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from api.e2e.test") || !strings.HasSuffix(r.stdout, "[127.0.0.2]") {
		t.Errorf("curl printed %q", r.stdout)
	}
	reqs := w.api.Requests()
	if len(reqs) != 1 || reqs[0].ServerName != "api.e2e.test" {
		t.Fatalf("upstream received %+v", reqs)
	}
	rec := w.checkSessionLog(t, "/tp", "curl")
	if rec.Process.PPID != w.sessionStart().RootPID {
		t.Errorf("curl's parent %d, want the session's root %d", rec.Process.PPID, w.sessionStart().RootPID)
	}
	// sh may be a link to another shell: compare with what runs as sh.
	shell, _ := filepath.EvalSymlinks("/bin/sh")
	if l := rec.Process.Lineage; len(l) != 2 || l[1] != "curl" || (shell != "" && l[0] != filepath.Base(shell)) {
		t.Errorf("lineage %q, want [%s curl]", l, filepath.Base(shell))
	}
	if !strings.HasPrefix(rec.Process.Digest, "sha256:") {
		t.Errorf("no executable digest in %+v", rec.Process)
	}
	for _, r := range w.records() {
		if r.Kind == event.KindConnect && r.Via != "transparent" {
			t.Errorf("connect record via %q, want transparent", r.Via)
		}
	}
}

// pythonClient connects with a raw socket (no proxy support at all), does
// TLS for name, sends one GET and prints getpeername and the status line.
const pythonClient = `
import socket, ssl, sys
family, addr, port, name, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if family == "6":
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.connect((addr, port))
else:
    s = socket.create_connection((addr, port))
peer = s.getpeername()
ctx = ssl.create_default_context()
t = ctx.wrap_socket(s, server_hostname=name)
t.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (path, name, port)).encode())
data = b""
while True:
    chunk = t.recv(65536)
    if not chunk:
        break
    data += chunk
print("peer", peer[0], peer[1])
print(data.split(b"\r\n")[0].decode())
print(data.split(b"\r\n\r\n", 1)[1].decode().strip())
`

func TestTransparentPythonRawSockets(t *testing.T) {
	needTransparent(t)
	need(t, "python3")
	w := newWorld(t)
	port := strconv.Itoa(int(w.api.Addr.Port()))
	tests := []struct {
		name, family, addr, wantPeer string
	}{
		{"ipv4", "4", "127.0.0.2", "peer 127.0.0.2 " + port},
		{"v4-mapped ipv6", "6", "::ffff:127.0.0.2", "peer ::ffff:127.0.0.2 " + port},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.log = filepath.Join(t.TempDir(), "audit.jsonl") // one session per log
			r := w.transparent(nil, "python3", "-c", pythonClient, tt.family, tt.addr, port, "api.e2e.test", "/raw-"+tt.family)
			mustSucceed(t, r)
			for _, want := range []string{tt.wantPeer, "HTTP/1.1 200", "hello from api.e2e.test"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("python printed %q, want %q in it", r.stdout, want)
				}
			}
			w.checkSessionLog(t, "/raw-"+tt.family, "python3")
		})
	}

	t.Run("denied address", func(t *testing.T) {
		r := w.transparent(nil, "python3", "-c", pythonClient, "4", w.exfil.Addr.Addr().String(),
			strconv.Itoa(int(w.exfil.Addr.Port())), "exfil.e2e.test", "/upload")
		mustSucceed(t, r)
		if !strings.Contains(r.stdout, "HTTP/1.1 403") || !strings.Contains(r.stdout, "deny_hosts") {
			t.Errorf("python printed %q, want a 403 naming deny_hosts", r.stdout)
		}
		if n := len(w.exfil.Requests()); n != 0 {
			t.Errorf("the denied upstream received %d requests", n)
		}
	})
}

// A client that pins the server's certificate (curl trusting only the
// upstream's CA) works through a tls_passthrough host and fails elsewhere.
func TestTransparentTLSPassthrough(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	port := strconv.Itoa(int(w.api.Addr.Port()))
	script := `curl -sS --noproxy '*' --cacert "$2" --resolve "api.e2e.test:$1:127.0.0.2" "https://api.e2e.test:$1/pinned" && echo " pinned ok"`
	r := w.transparent([]string{"--tls-passthrough", "api.e2e.test"}, "sh", "-c", script, "sh", port, w.caFile)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "pinned ok") {
		t.Errorf("curl through passthrough printed %q", r.stdout)
	}
	intercepted := false
	for _, rec := range w.records() {
		intercepted = intercepted || (rec.Kind == event.KindTLS && rec.Intercepted)
	}
	if intercepted {
		t.Error("the passthrough host's TLS was intercepted")
	}
	w.log = filepath.Join(t.TempDir(), "audit.jsonl")
	if r := w.transparent(nil, "sh", "-c", script, "sh", port, w.caFile); strings.Contains(r.stdout, "pinned ok") {
		t.Errorf("a pinning client accepted Chaperone's certificate: %q", r.stdout)
	}
}

func TestTransparentCurlPlainHTTPAndNetcat(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	plain := startUpstream(t, upstream.Options{Name: "plain.e2e.test", Addr: "127.0.0.4:0"})
	port := strconv.Itoa(int(plain.Addr.Port()))
	script := `curl -sS --noproxy '*' "http://127.0.0.4:$1/curl-plain"; echo
if command -v nc >/dev/null; then printf 'GET /nc HTTP/1.1\r\nHost: plain.e2e.test\r\nConnection: close\r\n\r\n' | nc 127.0.0.4 "$1"; fi`
	// nc names the host: the session must know it for that address (a
	// request to an address may name only it, or a name the session
	// resolved to it).
	r := w.transparent([]string{"--resolve", "plain.e2e.test:127.0.0.4"}, "sh", "-c", script, "sh", port)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "hello from plain.e2e.test") {
		t.Errorf("printed %q", r.stdout)
	}
	want := []string{"/curl-plain"}
	if _, err := exec.LookPath("nc"); err == nil {
		want = append(want, "/nc")
	} else {
		t.Log("nc is not installed: only curl ran")
	}
	var got []string
	for _, rq := range plain.Requests() {
		got = append(got, rq.Path)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("upstream received %v, want %v", got, want)
	}
	w.checkSessionLogFor(t, "127.0.0.4", "/curl-plain", "curl")
}

func TestTransparentBashDevTCP(t *testing.T) {
	needTransparent(t)
	need(t, "bash")
	w := newWorld(t)
	plain := startUpstream(t, upstream.Options{Name: "plain.e2e.test", Addr: "127.0.0.4:0"})
	// The Host names the address only through --resolve: a request to an
	// address must name it, or a name the session knows for it.
	r := w.transparent([]string{"--resolve", "plain.e2e.test:127.0.0.4"}, "bash", "-c", `exec 3<>"/dev/tcp/127.0.0.4/$1"
printf 'GET /devtcp HTTP/1.1\r\nHost: plain.e2e.test\r\nConnection: close\r\n\r\n' >&3
cat <&3`, "bash", strconv.Itoa(int(plain.Addr.Port())))
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "200 OK") || !strings.Contains(r.stdout, "hello from plain.e2e.test") {
		t.Errorf("bash read %q", r.stdout)
	}
	if reqs := plain.Requests(); len(reqs) != 1 || reqs[0].Path != "/devtcp" {
		t.Errorf("upstream received %+v", reqs)
	}
}

// A grandchild that leaves its parent (setsid, double fork) is still in the
// session: its connection goes through the proxy and is attributed to it.
func TestTransparentOrphanedGrandchild(t *testing.T) {
	needTransparent(t)
	need(t, "python3")
	w := newWorld(t)
	pidFile := filepath.Join(w.dir, "grandchild.pid")
	script := `
import os, socket, ssl, sys, time
if os.fork() > 0:
    sys.exit(0)
os.setsid()
if os.fork() > 0:
    os._exit(0)
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(0.3)  # the session's root has exited by now
s = ssl.create_default_context().wrap_socket(socket.create_connection(("127.0.0.2", int(sys.argv[2]))), server_hostname="api.e2e.test")
s.sendall(b"GET /orphan HTTP/1.1\r\nHost: api.e2e.test\r\nConnection: close\r\n\r\n")
s.recv(100)
`
	r := w.transparent([]string{"--kill-on-exit=false"}, "python3", "-c", script, pidFile, strconv.Itoa(int(w.api.Addr.Port())))
	mustSucceed(t, r)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := strconv.Atoi(string(b))
	if reqs := w.api.Requests(); len(reqs) != 1 || reqs[0].Path != "/orphan" {
		t.Fatalf("upstream received %+v", reqs)
	}
	rec := w.checkSessionLog(t, "/orphan", "python3")
	if rec.Process.PID != want {
		t.Errorf("request attributed to pid %d, want the grandchild %d", rec.Process.PID, want)
	}
}

// When Chaperone dies, the hooks stay on the session's cgroup: the agent's
// next connection fails instead of going out directly. (With file and exec
// mediation, its execs fail too: this test looks at the network alone.)
func TestTransparentFailsClosedWhenChaperoneDies(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	ready := filepath.Join(w.dir, "ready")
	done := filepath.Join(w.dir, "done")
	cmd := exec.Command(binary, "run", "--mode", "transparent", "--mediate-files=false", "--dns-upstream", fakeDNSUpstream(t).String(), "--upstream-ca", w.caFile, "--log", w.log, "--",
		"sh", "-c", `touch "$1"; while [ ! -e "$1.go" ]; do sleep 0.02; done
curl -sS --max-time 5 --noproxy '*' --resolve "api.e2e.test:$2:127.0.0.2" "https://api.e2e.test:$2/after" >/dev/null 2>&1
echo $? > "$3.tmp"; mv "$3.tmp" "$3"`, "sh", ready, strconv.Itoa(int(w.api.Addr.Port())), done)
	cmd.Env = baseEnv(w.dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, ready)
	session := sessionCgroupOf(t, w.log)
	if _, err := os.Stat(session); err != nil {
		t.Fatalf("session cgroup: %v", err)
	}
	t.Cleanup(func() { cleanupCgroup(t, session) })
	cmd.Process.Kill()
	cmd.Wait()
	os.WriteFile(ready+".go", nil, 0o644)
	waitFile(t, done)
	b, _ := os.ReadFile(done)
	if code := strings.TrimSpace(string(b)); code == "0" {
		t.Errorf("curl succeeded after Chaperone died")
	}
	if n := len(w.api.Requests()); n != 0 {
		t.Errorf("upstream received %d requests after Chaperone died", n)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionCgroupOf finds the cgroup of the session whose start the audit
// log at path records.
func sessionCgroupOf(t *testing.T, path string) string {
	t.Helper()
	root, err := redirect.CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if f, err := os.Open(path); err == nil {
			var id string
			telemetry.ReadRecords(f, telemetry.Filter{Kinds: []event.Kind{event.KindSessionStart}}, func(r telemetry.Record) error {
				id = r.Session
				return nil
			})
			f.Close()
			if id != "" {
				return filepath.Join(root, session.CgroupParent, "session-"+id)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no session_start in %s", path)
	return ""
}

// cleanupCgroup kills what is left in a session cgroup that Chaperone could
// not remove (it was killed) and removes it, which detaches the hooks.
func cleanupCgroup(t *testing.T, path string) {
	os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if err := syscall.Rmdir(path); err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("could not remove %s", path)
}

func netipMust(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// Started with sudo, the agent runs as the invoking user, without
// capabilities and with no_new_privs: it cannot read the CA key or detach
// the hooks, and its traffic still goes through the proxy.
func TestTransparentAgentCannotTurnItOff(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	key := filepath.Join(w.dir, "state", "ca-key.pem")
	root, err := redirect.CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(root, session.CgroupParent) // escaping to it would leave the hooks behind
	port := strconv.Itoa(int(w.api.Addr.Port()))
	r := w.chaperone([]string{"SUDO_UID=65534", "SUDO_GID=65534", "SUDO_USER=nobody"},
		"run", "--mode", "transparent", "--dns-upstream", fakeDNSUpstream(t).String(), "--upstream-ca", w.caFile, "--log", w.log, "--",
		"sh", "-c", `echo "uid $(id -u)"
grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status
cat "$1" >/dev/null 2>&1 && echo "read the CA key"
echo $$ > "$3/cgroup.procs" 2>/dev/null && echo "left the cgroup"
curl -sS --noproxy '*' --resolve "api.e2e.test:$2:127.0.0.2" "https://api.e2e.test:$2/nobody"`, "sh", key, port, parent)
	mustSucceed(t, r)
	for _, want := range []string{"uid 65534", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "hello from api.e2e.test"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("agent printed %q, want %q in it", r.stdout, want)
		}
	}
	for _, bad := range []string{"read the CA key", "left the cgroup"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("the agent %s", bad)
		}
	}
	rec := w.checkSessionLog(t, "/nobody", "curl")
	if rec.Process.PID == 0 {
		t.Errorf("no process in %+v", rec)
	}
}

func TestAutoModeChoosesTransparentWhenPrivileged(t *testing.T) {
	needTransparent(t)
	w := newWorld(t)
	r := w.chaperone(nil, "run", "--dns-upstream", fakeDNSUpstream(t).String(), "--log", w.log, "--", "sh", "-c", `env | grep -ci '_proxy=' || true`)
	mustSucceed(t, r)
	if start := w.sessionStart(); start.Mode != "transparent" {
		t.Errorf("auto mode as root chose %q, want transparent\n%s", start.Mode, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("the agent has proxy variables in transparent mode: %q", r.stdout)
	}
	if strings.Contains(r.stderr, "proxy mode") {
		t.Errorf("stderr warns of proxy mode:\n%s", r.stderr)
	}
}

// fakeDNSUpstream starts a resolver on 127.0.0.x that knows no names, for
// sessions to forward to: tests never ask the machine's resolver.
func fakeDNSUpstream(t *testing.T) netip.AddrPort {
	t.Helper()
	return fakeDNSUpstreamAt(t, "127.0.0.9")
}

// fakeDNSUpstreamAt is fakeDNSUpstream on the loopback address ip.
func fakeDNSUpstreamAt(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	srv, err := dns.New(dns.Options{Decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict {
		return event.Verdict{Action: event.Allow}
	})})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeUDP(pc)
	t.Cleanup(func() { srv.Close() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Names resolve through the session's resolver: --resolve names answer,
// denied names do not, and the connection to the answer carries the name.
func TestTransparentDNS(t *testing.T) {
	needTransparent(t)
	need(t, "python3")
	w := newWorld(t)
	port := strconv.Itoa(int(w.api.Addr.Port()))
	script := `
import socket, ssl, sys
port = int(sys.argv[1])
try:
    socket.getaddrinfo("exfil.e2e.test", port, socket.AF_INET)
    print("exfil resolved")
except socket.gaierror as e:
    print("exfil not resolved")
addr = socket.getaddrinfo("api.e2e.test", port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
print("api is", addr[0])
s = ssl.create_default_context().wrap_socket(socket.create_connection(addr), server_hostname="api.e2e.test")
s.sendall(b"GET /named HTTP/1.1\r\nHost: api.e2e.test\r\nConnection: close\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
`
	r := w.transparent([]string{
		"--resolve", "api.e2e.test:127.0.0.2",
		"--resolve", "exfil.e2e.test:127.0.0.3",
		"--deny-host", "exfil.e2e.test",
	}, "python3", "-c", script, port)
	mustSucceed(t, r)
	for _, want := range []string{"exfil not resolved", "api is 127.0.0.2", "HTTP/1.1 200"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("python printed %q, want %q in it", r.stdout, want)
		}
	}
	var sawDenied, sawAnswer, sawNamed bool
	for _, rec := range w.records() {
		switch {
		case rec.Kind == event.KindDNS && rec.Name == "exfil.e2e.test" && rec.Verdict == event.Deny:
			sawDenied = true
		case rec.Kind == event.KindDNS && rec.Name == "api.e2e.test" && slicesContains(rec.Answers, "127.0.0.2"):
			sawAnswer = true
			if rec.Process == nil || !strings.HasPrefix(filepath.Base(rec.Process.Exe), "python3") {
				t.Errorf("dns record's process = %+v, want the python3 that asked", rec.Process)
			}
		case rec.Kind == event.KindConnect && rec.Host == "api.e2e.test" && rec.Via == "transparent":
			sawNamed = true
		}
	}
	if !sawDenied || !sawAnswer || !sawNamed {
		t.Errorf("audit log: denied dns %v, answered dns %v, connect named by dns %v\n%+v", sawDenied, sawAnswer, sawNamed, w.records())
	}
	w.checkSessionLog(t, "/named", "python3")
}

func slicesContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestBenchClient is not a test: BenchmarkTransparentHTTPS runs the test
// binary as the client, in a session or directly, through it.
func TestBenchClient(t *testing.T) {
	url := os.Getenv("BENCH_CLIENT_URL")
	if url == "" {
		t.Skip("only a client for BenchmarkTransparentHTTPS")
	}
	n, _ := strconv.Atoi(os.Getenv("BENCH_CLIENT_N"))
	dial := os.Getenv("BENCH_CLIENT_DIAL") // the upstream's address: no DNS
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dial)
	}}
	c := &http.Client{Transport: tr}
	get := func() {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	get() // connection and certificate warm
	start := time.Now()
	for range n {
		get()
	}
	fmt.Printf("ns/op=%d\n", time.Since(start).Nanoseconds()/int64(n))
}

// BenchmarkTransparentHTTPS measures a kept-alive HTTPS GET of 1 KB made
// by a real process in a transparent session against the same process
// making it directly, in one run: the ratio is what transparent capture
// and interception cost a request.
func BenchmarkTransparentHTTPS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("transparent mode needs root")
	}
	dir := b.TempDir()
	ca, err := upstream.NewCA("bench-upstream")
	if err != nil {
		b.Fatal(err)
	}
	caFile, err := ca.WriteFile(dir)
	if err != nil {
		b.Fatal(err)
	}
	up, err := upstream.Start(upstream.Options{Name: "bench.e2e.test", Addr: "127.0.0.2:0", CA: ca, HTTP1Only: true,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(make([]byte, 1024)) })})
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 200)
	client := func(t []string, env ...string) float64 {
		cmd := exec.Command(t[0], append(t[1:], self, "-test.run=^TestBenchClient$", "-test.v=false")...)
		cmd.Env = append(baseEnv(dir), append(env,
			"BENCH_CLIENT_URL="+up.URL+"/1k",
			"BENCH_CLIENT_DIAL="+up.Addr.String(),
			"BENCH_CLIENT_N="+strconv.Itoa(n))...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%v: %v\n%s", t, err, out)
		}
		i := strings.Index(string(out), "ns/op=")
		if i < 0 {
			b.Fatalf("no figure in %s", out)
		}
		v, _ := strconv.ParseFloat(strings.Fields(string(out)[i+6:])[0], 64)
		return v
	}
	direct := client([]string{"env"}, "SSL_CERT_FILE="+caFile)
	viaProxy := client([]string{binary, "run", "--mode", "transparent", "--dns-upstream", "127.0.0.9:1",
		"--upstream-ca", caFile, "--log", filepath.Join(dir, "audit.jsonl"), "--"})
	b.ReportMetric(direct, "direct-ns/req")
	b.ReportMetric(viaProxy, "transparent-ns/req")
	b.ReportMetric(viaProxy/direct, "x-direct-time")
}

// Without privileges, --mode transparent fails and says what is missing;
// auto falls back to the explicit proxy and says why.
func TestTransparentNeedsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start chaperone as another user")
	}
	dir, err := os.MkdirTemp("", "chaperone-nobody-") // t.TempDir's parent is closed to others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	run := func(mode string) (string, error) {
		cmd := exec.Command(binary, "run", "--mode", mode, "--", "true")
		cmd.Env = append(baseEnv(dir), "CHAPERONE_STATE_DIR="+filepath.Join(dir, "state-"+mode), "HOME="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("transparent")
	if err == nil || !strings.Contains(out, "transparent mode needs root") {
		t.Errorf("--mode transparent as nobody: %v\n%s", err, out)
	}
	out, err = run("auto")
	if err != nil || !strings.Contains(out, "transparent mode needs root") || !strings.Contains(out, "proxy mode") {
		t.Errorf("--mode auto as nobody: %v\n%s", err, out)
	}
}

// DNS over TCP and UDP both reach the session's resolver, whatever server
// the program names.
func TestTransparentDig(t *testing.T) {
	needTransparent(t)
	need(t, "dig")
	w := newWorld(t)
	r := w.transparent([]string{"--resolve", "api.e2e.test:127.0.0.2"}, "sh", "-c",
		`echo "udp $(dig +short +time=5 +tries=1 @127.0.0.53 api.e2e.test)"; echo "tcp $(dig +tcp +short +time=5 +tries=1 @127.0.0.53 api.e2e.test)"`)
	mustSucceed(t, r)
	for _, want := range []string{"udp 127.0.0.2", "tcp 127.0.0.2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dig printed %q, want %q", r.stdout, want)
		}
	}
	n := 0
	for _, rec := range w.records() {
		if rec.Kind == event.KindDNS && rec.Name == "api.e2e.test" {
			n++
			if rec.Process == nil || filepath.Base(rec.Process.Exe) != "dig" {
				t.Errorf("dns record's process %+v, want dig", rec.Process)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d dns records for api.e2e.test, want one per transport", n)
	}
}

// QUIC (UDP to port 443) with --quic refuse is refused and the refusals
// are reported when the session ends; with --quic allow it passes
// (TestTransparentHTTP3 covers the default, intercept).
func TestTransparentQUIC(t *testing.T) {
	needTransparent(t)
	need(t, "python3")
	pc, err := net.ListenPacket("udp4", "127.0.0.8:443")
	if err != nil {
		t.Skipf("cannot listen on UDP 127.0.0.8:443: %v", err)
	}
	defer pc.Close()
	w := newWorld(t)
	script := `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"quic initial", ("127.0.0.8", 443))
    print("sent")
except PermissionError:
    print("refused")
`
	r := w.transparent([]string{"--quic", "refuse"}, "python3", "-c", script)
	mustSucceed(t, r)
	if strings.TrimSpace(r.stdout) != "refused" || !strings.Contains(r.stderr, "refused 1 QUIC datagrams") {
		t.Errorf("--quic refuse: stdout %q, stderr:\n%s", r.stdout, r.stderr)
	}
	r = w.transparent([]string{"--quic", "allow"}, "python3", "-c", script)
	mustSucceed(t, r)
	if strings.TrimSpace(r.stdout) != "sent" {
		t.Errorf("--quic allow: stdout %q", r.stdout)
	}
	pc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "quic initial" {
		t.Errorf("the allowed datagram did not arrive: %q, %v", buf[:n], err)
	}
}
