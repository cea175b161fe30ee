package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// sharedDNSUpstream starts a resolver on 127.0.28.9 that answers each of
// names with addr, for sessions to forward to: a CDN's address, shared by
// several names.
func sharedDNSUpstream(t *testing.T, addr netip.Addr, names ...string) netip.AddrPort {
	t.Helper()
	static := map[string][]netip.Addr{}
	for _, n := range names {
		static[n] = []netip.Addr{addr}
	}
	srv, err := dns.New(dns.Options{Static: static, Decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict {
		return event.Verdict{Action: event.Allow}
	})})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.28.9:0")
	if err != nil {
		t.Skipf("127.0.28.9 is not available: %v", err)
	}
	go srv.ServeUDP(pc)
	t.Cleanup(func() { srv.Close() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// A transparent session looks two names up that resolve to one address,
// one of them denied: a connection to the other is named by its own SNI
// (or Host), whichever name the address was looked up as last and by
// whom, and is never refused for the denied one (issue 27, defect 1: after
// curl resolved a denied name to an address the agent's API also used,
// the agent's next request to its API was refused). A request for the
// denied name inside a tunnel to the other is still refused (domain
// fronting).
func TestTransparentSharedAddress(t *testing.T) {
	needTransparent(t)
	need(t, "curl", "python3")
	w := newWorld(t)
	api := startUpstream(t, upstream.Options{Name: "api.e2e.test", Addr: "127.0.28.1:0", CA: w.ca})
	plain := startUpstream(t, upstream.Options{Name: "api.e2e.test", Addr: "127.0.28.1:0"})
	resolver := sharedDNSUpstream(t, api.Addr.Addr(), "api.e2e.test", "denied.e2e.test")
	pol := filepath.Join(w.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`rules:
  - name: no-denied
    on: [connect, tls, http]
    when: host == "denied.e2e.test"
    action: deny
    reason: the test denies it
default: allow
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent (python3) looks its API's name up once and keeps the
	// address, as agents do; curl looks the denied name up, which the
	// resolver answers with the same address, and is refused; the agent's
	// next connections to the address it has are its API's.
	script := `
import socket, ssl, subprocess, sys
port, plain = int(sys.argv[1]), int(sys.argv[2])
def lookup(name):
    return socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
def tls(addr, path, host="api.e2e.test"):
    s = ssl.create_default_context().wrap_socket(socket.create_connection((addr, port)), server_hostname="api.e2e.test")
    s.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)).encode())
    return s.recv(200).split(b"\r\n")[0].decode()
def http(addr, path):
    s = socket.create_connection((addr, plain))
    s.sendall(("GET /%s HTTP/1.1\r\nHost: api.e2e.test:%d\r\nConnection: close\r\n\r\n" % (path, plain)).encode())
    return s.recv(200).split(b"\r\n")[0].decode()
api = lookup("api.e2e.test")
print("first", tls(api, "first"))
curl = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "https://denied.e2e.test:%d/denied" % port], capture_output=True, text=True)
print("curl", curl.stdout, curl.stderr.strip())
print("again", tls(api, "again"))
print("plain", http(api, "plain"))
# Now this process looks the denied name up too: its last lookup of the
# address is the denied name, and its connections are still named by
# their own SNI and Host.
den = lookup("denied.e2e.test")
print("same address", api == den)
print("after", tls(den, "after"))
# Domain fronting: the denied name's Host inside the API's tunnel.
print("fronted", tls(api, "fronted", host="denied.e2e.test"))
`
	port, plainPort := strconv.Itoa(int(api.Addr.Port())), strconv.Itoa(int(plain.Addr.Port()))
	r := w.chaperone(nil, "run", "--mode", "transparent", "--mediate-files=false",
		"--dns-upstream", resolver.String(), "--upstream-ca", w.caFile, "--policy", pol, "--log", w.log, "--",
		"python3", "-c", script, port, plainPort)
	mustSucceed(t, r)
	for _, want := range []string{"first HTTP/1.1 200", "curl 403", "again HTTP/1.1 200", "plain HTTP/1.1 200",
		"same address True", "after HTTP/1.1 200", "fronted HTTP/1.1 421"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	var got []string
	for _, req := range append(api.Requests(), plain.Requests()...) {
		got = append(got, req.Path)
	}
	if strings.Join(got, " ") != "/first /again /after /plain" {
		t.Errorf("upstreams received %q, want /first /again /after /plain", got)
	}
	for _, rec := range w.records() {
		if rec.Kind == event.KindConnect && rec.Verdict == event.Deny && rec.Host != "denied.e2e.test" {
			t.Errorf("connect to %s (%s) denied by %s: %s", rec.Host, rec.Dst, rec.Rule, rec.Reason)
		}
	}
}

// summaryLine is the first line of the summary a session prints when it
// ends.
func summaryLine(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "chaperone: session ") && strings.Contains(l, " ended, ") {
			return l
		}
	}
	t.Fatalf("no summary in stderr:\n%s", stderr)
	return ""
}

// git's libcurl asks the proxy without credentials first (anyauth) and
// again with them after the 407: the summary counts no denial for it, and
// the audit log names the process that asked (issue 27, defect 6).
func TestSummaryGitProxyAuthProbe(t *testing.T) {
	need(t, "git")
	w := newWorld(t)
	root := t.TempDir()
	head, err := upstream.InitRepo(root, "project")
	if err != nil {
		t.Fatal(err)
	}
	h, err := upstream.GitHandler(root)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("git http-backend is not installed: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	git := startUpstream(t, upstream.Options{Name: "git.e2e.test", Addr: "127.0.28.3:0", CA: w.ca, Handler: h})
	r := w.chaperone(nil, "run", "--mode", "proxy", "--upstream-ca", w.caFile, "--resolve", "git.e2e.test:127.0.28.3", "--log", w.log, "--",
		"git", "ls-remote", git.URL+"/project.git")
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, head) {
		t.Fatalf("git ls-remote printed %q, want head %s", r.stdout, head)
	}
	if l := summaryLine(t, r.stderr); !strings.HasSuffix(l, ", 0 denied") || strings.Contains(r.stderr, "connection denied") {
		t.Errorf("summary counts a denial:\n%s", r.stderr)
	}
	probes := 0
	for _, rec := range w.records() {
		if rec.Rule != "proxy_auth" {
			continue
		}
		probes++
		if rec.Process == nil || !strings.HasPrefix(filepath.Base(rec.Process.Exe), "git-remote-http") {
			t.Errorf("the proxy_auth record names process %+v, want git-remote-http", rec.Process)
		}
	}
	t.Logf("%d proxy_auth challenges", probes)
}

// Denied lookups are denials: a transparent session whose only refusals
// were DNS ones does not say "0 denied" (issue 27, defect 6).
func TestSummaryCountsDeniedLookups(t *testing.T) {
	needTransparent(t)
	need(t, "curl")
	w := newWorld(t)
	r := w.transparent([]string{"--mediate-files=false", "--resolve", "exfil.e2e.test:127.0.28.4", "--deny-host", "exfil.e2e.test"},
		"sh", "-c", `curl -sS --noproxy '*' https://exfil.e2e.test/x; echo "curl exit $?"`)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "curl exit 6") {
		t.Errorf("curl resolved the denied name:\n%s", r.stdout)
	}
	if l := summaryLine(t, r.stderr); !strings.HasSuffix(l, ", 1 denied") || !strings.Contains(r.stderr, "name lookup denied") {
		t.Errorf("summary does not count the denied lookup:\n%s", r.stderr)
	}
}
