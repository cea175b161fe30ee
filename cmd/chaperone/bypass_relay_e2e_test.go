//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// Addresses of the relay suite, all loopback and its own.
const (
	relaySuiteHTTP   = "127.0.0.40" // the HTTP proxy daemon
	relaySuiteSOCKS  = "127.0.0.41" // the SOCKS server
	relaySuiteCanary = "127.0.0.42" // the denied canary
	relaySuiteTarget = "127.0.0.43" // allowed targets behind the relays
	relaySuiteIPHost = "127.0.0.44" // plain HTTP reached by address
	relaySuiteIPTLS  = "127.0.0.45" // HTTPS reached by address
	relaySuiteDNS    = "127.0.0.46" // the resolver the session forwards to
)

// TestBypassRelays is the bypass suite for relays: a transparent session
// whose agent (testdata/bypass_relay/agent.sh) reaches relay daemons
// outside the session (an HTTP proxy, a SOCKS server) and asks them for a
// denied canary in every spelling it knows, then for allowed targets. Each
// request for the canary must be decided on the canary (a connect event
// naming the process, via the relay) and refused, the canary must receive
// nothing and the relays nothing that names it; each allowed target must
// be reached, its request an http event for the target. The same session
// checks that a request to an address names that address (421 otherwise),
// and that HTTPS to an address without a name verifies. As root, and as an
// ordinary user.
func TestBypassRelays(t *testing.T) {
	needTransparent(t)
	need(t, "bash", "python3", "curl")
	for _, user := range []string{"", "nobody"} {
		name := "root"
		if user != "" {
			name = user
		}
		t.Run(name, func(t *testing.T) { testBypassRelays(t, user) })
	}
}

func testBypassRelays(t *testing.T, user string) {
	w := newWorld(t)
	canary := startSink(t, relaySuiteCanary)
	target := startUpstream(t, upstream.Options{Name: "target.e2e.test", Addr: relaySuiteTarget + ":0", CA: w.ca})
	plain := startUpstream(t, upstream.Options{Name: "plain.e2e.test", Addr: relaySuiteTarget + ":0"})
	ipHost := startUpstream(t, upstream.Options{Addr: relaySuiteIPHost + ":0"})
	ipTLS := startUpstream(t, upstream.Options{Addr: relaySuiteIPTLS + ":0", CA: w.ca})
	names := map[string]netip.Addr{
		"target.e2e.test": target.Addr.Addr(), "plain.e2e.test": plain.Addr.Addr(),
		"canary.e2e.test": canary.addr.Addr(),
	}
	startRelay := func(ip string) *upstream.Relay {
		r, err := upstream.StartRelay(upstream.RelayOptions{Addr: ip + ":0", Names: names})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	httpRelay, socksRelay := startRelay(relaySuiteHTTP), startRelay(relaySuiteSOCKS)
	ipName := "ipname.e2e.test"
	dnsUp := startResolver(t, map[string][]netip.Addr{ipName: {ipHost.Addr.Addr()}}, []string{relaySuiteDNS + ":5300"}, nil)

	// Not t.TempDir: the agent may run as nobody, and must reach it.
	dir, err := os.MkdirTemp("", "chaperone-relays-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o777)
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Fatal(err)
		}
	}
	targets := filepath.Join(dir, "targets.env")
	env := fmt.Sprintf("HTTPRELAY=%s\nSOCKS=%s\nCANARY=%s\nCPORT=%d\nCNAME=canary.e2e.test\nTARGET=target.e2e.test\nTPORT=%d\n"+
		"PLAIN=plain.e2e.test\nPPORT=%d\nIPHOST=%s\nIPPORT=%d\nIPNAME=%s\nIPTLS=%s\nIPTLSPORT=%d\nPY=%s\nWORK=%s\n",
		httpRelay.Addr, socksRelay.Addr, canary.addr.Addr(), canary.addr.Port(), target.Addr.Port(),
		plain.Addr.Port(), ipHost.Addr.Addr(), ipHost.Addr.Port(), ipName, ipTLS.Addr.Addr(), ipTLS.Addr.Port(), py, work)
	if err := os.WriteFile(targets, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	agent, err := filepath.Abs("testdata/bypass_relay/agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--mode", "transparent",
		"--dns-upstream", relaySuiteDNS + ":5300",
		"--upstream-ca", w.caFile,
		"--deny-host", relaySuiteCanary,
		"--deny-host", "canary.e2e.test",
		"--log", w.log}
	if user != "" {
		args = append(args, "--user", user)
	}
	r := w.chaperone(nil, append(args, "--", "bash", agent, targets)...)
	mustSucceed(t, r)
	t.Logf("agent:\n%s", r.stdout)
	lines := parseBypassLines(t, r.stdout)
	if _, ok := lines["done"]; !ok {
		t.Fatalf("the agent did not finish:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	wantUID := "uid=0"
	if user != "" {
		wantUID = "uid=65534"
	}
	if l := lines["whoami"]; l.outcome != wantUID {
		t.Errorf("the agent runs as %q, want %s", l.outcome, wantUID)
	}
	start := w.sessionStart()
	if start.Mode != "transparent" {
		t.Fatalf("session mode %q, want transparent", start.Mode)
	}
	recs := w.records()

	// Nothing reached the canary, and no relay was asked for it.
	if conns, _ := canary.received(); len(conns) > 0 {
		t.Errorf("BYPASS: the canary accepted %d connections: %q", len(conns), conns)
	}
	for _, rl := range []*upstream.Relay{httpRelay, socksRelay} {
		for _, req := range rl.Requests() {
			if strings.Contains(req.Target, relaySuiteCanary) || strings.Contains(req.Target, "canary") || req.Target == "/" {
				t.Errorf("BYPASS: relay %s was asked %+v", rl.Addr, req)
			}
		}
	}

	httpURL := "http://" + httpRelay.Addr.String()
	denied := []struct {
		name, exe, relay, host string
	}{
		{"curl-absolute", "curl", httpURL, ""},
		{"curl-connect", "curl", httpURL, ""},
		{"curl-connect-name", "curl", httpURL, "canary.e2e.test"},
		{"curl-socks5", "curl", "socks5://" + socksRelay.Addr.String(), ""},
		{"curl-socks5h", "curl", "socks5://" + socksRelay.Addr.String(), "canary.e2e.test"},
		{"curl-socks4", "curl", "socks4://" + socksRelay.Addr.String(), ""},
		{"curl-socks4a", "curl", "socks4://" + socksRelay.Addr.String(), "canary.e2e.test"},
		{"py-connect-two-spaces", "python3", httpURL, ""},
		{"py-connect-leading-crlf", "python3", httpURL, ""},
		{"py-connect-lowercase", "python3", httpURL, ""},
		{"py-connect-tab", "python3", httpURL, ""},
		{"py-connect-silent", "python3", httpURL, ""},
		{"py-absolute-two-spaces", "python3", httpURL, ""},
		{"py-absolute-leading-crlf", "python3", httpURL, ""},
		{"py-absolute-lowercase", "python3", httpURL, ""},
		{"py-absolute-tab", "python3", httpURL, ""},
		{"py-absolute-silent", "python3", httpURL, ""},
		{"py-socks5", "python3", "socks5://" + socksRelay.Addr.String(), ""},
		{"py-socks5-silent", "python3", "socks5://" + socksRelay.Addr.String(), ""},
	}
	for _, a := range denied {
		t.Run(a.name, func(t *testing.T) {
			l, ok := lines[a.name]
			if !ok || l.pid == 0 {
				t.Fatalf("the agent printed no line for %s", a.name)
			}
			if strings.Contains(l.outcome, "leaked") || strings.Contains(l.outcome, "-after") {
				t.Errorf("BYPASS: %s reached the canary: %s", a.name, l.outcome)
			}
			host := a.host
			if host == "" {
				host = relaySuiteCanary
			}
			rec, ok := findRelayed(recs, l.pid, host)
			if !ok {
				t.Fatalf("not decided on its target: no relayed connect record of pid %d for %s (agent: %s)\n%s", l.pid, host, l.outcome, dumpRelayed(recs))
			}
			if rec.Verdict != event.Deny || rec.Rule != "deny_hosts" || rec.Relay != a.relay || rec.Port != canary.addr.Port() {
				t.Errorf("BYPASS: connect record %+v: want deny by deny_hosts of port %d through %s", rec, canary.addr.Port(), a.relay)
			}
			if rec.Session != start.Session || rec.Process == nil || !strings.HasPrefix(filepath.Base(rec.Process.Exe), a.exe) {
				t.Errorf("connect record in session %q by %+v, want %s in %s", rec.Session, rec.Process, a.exe, start.Session)
			}
		})
	}

	allowed := []struct {
		name, exe, relay, host, want string
		srv                          *upstream.Server
	}{
		{"ok-connect", "curl", httpURL, "target.e2e.test", "hello from target.e2e.test", target},
		{"ok-absolute", "curl", httpURL, "plain.e2e.test", "hello from plain.e2e.test", plain},
		{"ok-socks5h", "curl", "socks5://" + socksRelay.Addr.String(), "target.e2e.test", "hello from target.e2e.test", target},
		{"ok-socks4a", "curl", "socks4://" + socksRelay.Addr.String(), "target.e2e.test", "hello from target.e2e.test", target},
		{"ok-connect-odd", "python3", httpURL, "target.e2e.test", "hello from target.e2e.test", target},
	}
	for _, a := range allowed {
		t.Run(a.name, func(t *testing.T) {
			l := lines[a.name]
			if !strings.Contains(l.outcome, a.want) {
				t.Fatalf("the agent got %q, want %q", l.outcome, a.want)
			}
			rec, ok := findRelayed(recs, l.pid, a.host)
			if !ok || rec.Verdict != event.Allow || rec.Relay != a.relay {
				t.Errorf("connect record %+v (found %v), want allowed through %s", rec, ok, a.relay)
			}
			found := false
			for _, h := range recs {
				if h.Kind == event.KindHTTP && strings.HasSuffix(h.URL, "/"+a.name) && h.Process != nil && h.Process.PID == l.pid {
					found = true
					if h.Status != 200 || h.Verdict != event.Allow || !strings.HasPrefix(h.Host, a.host) {
						t.Errorf("http record %+v, want 200 and allow for %s", h, a.host)
					}
				}
			}
			if !found {
				t.Errorf("no http record of /%s by pid %d", a.name, l.pid)
			}
			seen := false
			for _, req := range a.srv.Requests() {
				seen = seen || req.Path == "/"+a.name
			}
			if !seen {
				t.Errorf("the target did not receive /%s", a.name)
			}
		})
	}

	// A request to an address names it, or a name the session's resolver
	// answered with it: any other host is refused with 421 and an event.
	t.Run("ip-host", func(t *testing.T) {
		if l := lines["ip-host-ok"]; !strings.Contains(l.outcome, "hello from "+relaySuiteIPHost) {
			t.Errorf("a request naming the address: %q", l.outcome)
		}
		if l := lines["ip-host-fronted"]; !strings.Contains(l.outcome, "domain_fronting") {
			t.Errorf("a request naming another host: %q, want refused by domain_fronting", l.outcome)
		}
		l := lines["ip-host-named"]
		for _, want := range []string{"ip='HTTP/1.1 200", "resolved=" + relaySuiteIPHost, "named='HTTP/1.1 200", "other='HTTP/1.1 421"} {
			if !strings.Contains(l.outcome, want) {
				t.Errorf("kept-alive requests to the address: %q, want %q", l.outcome, want)
			}
		}
		var paths []string
		for _, req := range ipHost.Requests() {
			paths = append(paths, req.Path)
		}
		if got := strings.Join(paths, " "); got != "/ip-host-ok /ip-host-first /ip-host-named" {
			t.Errorf("BYPASS: the server at the address received %q", got)
		}
		for _, name := range []string{"ip-host-fronted", "ip-host-named"} {
			pid := lines[name].pid
			found := false
			for _, h := range recs {
				if h.Kind == event.KindHTTP && h.Process != nil && h.Process.PID == pid && h.Status == 421 {
					found = true
					if h.Verdict != event.Deny || h.Rule != "domain_fronting" || !strings.HasPrefix(h.Host, "api.e2e.test") {
						t.Errorf("http record %+v, want denied by domain_fronting", h)
					}
				}
			}
			if !found {
				t.Errorf("no 421 http record of pid %d (%s)", pid, name)
			}
		}
		if asked := dnsUp.asked(); !slicesContains(asked, ipName) {
			t.Errorf("the session's resolver forwarded %q, want %s", asked, ipName)
		}
	})

	t.Run("ip-cert", func(t *testing.T) {
		if l := lines["ip-cert"]; !strings.Contains(l.outcome, "hello from "+relaySuiteIPTLS) || !strings.Contains(l.outcome, "rc=0") {
			t.Errorf("HTTPS to an address: %q, want it verified and answered", l.outcome)
		}
		for _, h := range recs {
			if h.Kind == event.KindTLS && h.Process != nil && h.Process.PID == lines["ip-cert"].pid && !h.Intercepted {
				t.Errorf("tls record %+v: want intercepted", h)
			}
		}
	})
}

// findRelayed returns the connect record of pid through a relay for host.
func findRelayed(recs []telemetry.Record, pid int, host string) (telemetry.Record, bool) {
	for _, rec := range recs {
		if rec.Kind == event.KindConnect && rec.Via == "relay" && rec.Process != nil && rec.Process.PID == pid && rec.Host == host {
			return rec, true
		}
	}
	return telemetry.Record{}, false
}

func dumpRelayed(recs []telemetry.Record) string {
	var b strings.Builder
	for _, rec := range recs {
		if rec.Kind == event.KindConnect {
			pid := 0
			if rec.Process != nil {
				pid = rec.Process.PID
			}
			fmt.Fprintf(&b, "  connect pid=%d via=%s relay=%s host=%s dst=%s verdict=%s rule=%s\n",
				pid, rec.Via, rec.Relay, rec.Host, rec.Dst, rec.Verdict, rec.Rule)
		}
	}
	return b.String()
}
