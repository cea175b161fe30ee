//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/chaperone-dev/chaperone/dns"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// sink is a denied host: it counts every TCP connection and UDP datagram
// that reaches it, and answers them, so that a leak shows on both sides.
type sink struct {
	addr  netip.AddrPort
	mu    sync.Mutex
	conns []string // remote address and the first bytes received
	grams []string // UDP: remote address and payload
	lite  bool     // also listens for UDP-Lite
}

func (s *sink) received() (conns, grams []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.conns...), append([]string(nil), s.grams...)
}

// startSink listens for TCP and UDP on ip, on one port number for both.
func startSink(t *testing.T, ip string) *sink {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("denied host on %s: %v", ip, err)
		}
		ap := ln.Addr().(*net.TCPAddr).AddrPort()
		pc, err := net.ListenPacket("udp", ap.String())
		if err != nil {
			ln.Close()
			continue // the UDP port is taken: another pair
		}
		s := &sink{addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
		t.Cleanup(func() { ln.Close(); pc.Close() })
		go s.serveTCP(ln)
		go s.serveUDP(pc)
		return s
	}
	t.Fatalf("no port free for both TCP and UDP on %s", ip)
	return nil
}

// listenUDPLite adds a UDP-Lite listener on the sink's address and port:
// another protocol number, which the standard library does not open.
func (s *sink) listenUDPLite(t *testing.T) {
	t.Helper()
	const ipprotoUDPLite = 136
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, ipprotoUDPLite)
	if err != nil {
		t.Logf("no UDP-Lite listener: %v", err)
		return
	}
	f := os.NewFile(uintptr(fd), "udplite")
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(s.addr.Port()), Addr: s.addr.Addr().As4()}); err != nil {
		t.Fatalf("UDP-Lite listener on %s: %v", s.addr, err)
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		t.Fatalf("UDP-Lite listener: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	s.lite = true
	go s.serveUDP(pc)
}

// startUDPSink listens for UDP only, on a fixed address (port 53 or 443).
func startUDPSink(t *testing.T, addr string) *sink {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("denied host on udp %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &sink{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort()}
	go s.serveUDP(pc)
	return s
}

func (s *sink) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// Recorded on accept, so that a connection that sends nothing
		// counts too; its first bytes (up to a request's end) are added.
		s.mu.Lock()
		i := len(s.conns)
		s.conns = append(s.conns, c.RemoteAddr().String())
		s.mu.Unlock()
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var got []byte
			buf := make([]byte, 512)
			for len(got) < 512 && !strings.Contains(string(got), "\r\n\r\n") {
				n, err := c.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					break
				}
			}
			s.mu.Lock()
			s.conns[i] = fmt.Sprintf("%s %q", c.RemoteAddr(), got)
			s.mu.Unlock()
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nleaked\n")
		}()
	}
}

func (s *sink) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.grams = append(s.grams, fmt.Sprintf("%s %q", from, buf[:n]))
		s.mu.Unlock()
		pc.WriteTo([]byte("leaked"), from)
	}
}

// fakeResolver is a DNS server of the test's that records the names it was
// asked.
type fakeResolver struct {
	mu    sync.Mutex
	names []string
}

func (r *fakeResolver) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

// startResolver serves static on each UDP and TCP address given.
func startResolver(t *testing.T, static map[string][]netip.Addr, udp, tcp []string) *fakeResolver {
	t.Helper()
	r := &fakeResolver{}
	srv, err := dns.New(dns.Options{
		Static: static,
		Decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict {
			return event.Verdict{Action: event.Allow}
		}),
		Publish: func(e *event.Event) {
			r.mu.Lock()
			r.names = append(r.names, e.DNS.Name)
			r.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, a := range udp {
		pc, err := net.ListenPacket("udp", a)
		if err != nil {
			t.Fatalf("resolver on udp %s: %v", a, err)
		}
		go srv.ServeUDP(pc)
	}
	for _, a := range tcp {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("resolver on tcp %s: %v", a, err)
		}
		go srv.ServeTCP(ln)
	}
	return r
}

// dohHandler answers DNS over HTTPS (RFC 8484: POST, or GET with ?dns=)
// with A records from names.
func dohHandler(names map[string]netip.Addr) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wire []byte
		var err error
		switch r.Method {
		case http.MethodPost:
			wire, err = io.ReadAll(io.LimitReader(r.Body, 4096))
		case http.MethodGet:
			wire, err = base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
		default:
			http.Error(w, "method", http.StatusMethodNotAllowed)
			return
		}
		var q mdns.Msg
		if err != nil || q.Unpack(wire) != nil || len(q.Question) != 1 {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		m := new(mdns.Msg)
		m.SetReply(&q)
		qq := q.Question[0]
		if a, ok := names[strings.ToLower(qq.Name)]; ok && qq.Qtype == mdns.TypeA {
			m.Answer = append(m.Answer, &mdns.A{
				Hdr: mdns.RR_Header{Name: qq.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A:   a.AsSlice(),
			})
		} else {
			m.Rcode = mdns.RcodeNameError
		}
		out, err := m.Pack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/dns-message")
		w.Write(out)
	})
}

// bypassLine is what the agent printed about one attempt.
type bypassLine struct {
	pid     int
	outcome string
}

var bypassLineRE = regexp.MustCompile(`^BYPASS (\S+) pid=(\d+) ?(.*)$`)

func parseBypassLines(t *testing.T, stdout string) map[string]bypassLine {
	t.Helper()
	lines := map[string]bypassLine{}
	for _, l := range strings.Split(stdout, "\n") {
		m := bypassLineRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		if _, dup := lines[m[1]]; dup {
			t.Errorf("attempt %s printed twice", m[1])
		}
		lines[m[1]] = bypassLine{pid: pid, outcome: m[3]}
	}
	return lines
}

// Addresses of the suite, all loopback: the denied hosts are 127.0.0.3 and
// ::1; the rest must not be 127.0.0.1 (the session's proxy and resolver
// listen there) nor collide with the other end-to-end tests.
const (
	bypassDeny4    = "127.0.0.3"
	bypassDoH      = "127.0.0.13"
	bypassOutside  = "127.0.0.112" // a resolver the agent asks directly
	bypassUpstream = "127.0.0.113" // the resolver Chaperone forwards to
)

// TestBypass is the bypass suite: one transparent session whose agent
// (testdata/bypass/agent.sh) tries every way it knows to reach hosts the
// policy denies. Each attempt must be seen (an event in the audit log),
// attributed (to the process that made it, in the session) and denied (the
// denied host receives nothing). docs/security.md lists the paths.
func TestBypass(t *testing.T) {
	needTransparent(t)
	need(t, "bash", "python3", "curl", "env", "timeout")
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	w := newWorld(t)
	deny4 := startSink(t, bypassDeny4)
	deny4.listenUDPLite(t)
	deny6 := startSink(t, "::1")
	deny53 := startUDPSink(t, bypassDeny4+":53")
	deny443 := startUDPSink(t, bypassDeny4+":443")
	leak := netip.MustParseAddr(bypassDeny4)
	outsideNames := map[string][]netip.Addr{"outside.e2e.test": {leak}, "exfil.e2e.test": {leak}}
	outside := startResolver(t, outsideNames, []string{bypassOutside + ":53"}, []string{bypassOutside + ":53"})
	outside5353 := startResolver(t, outsideNames, []string{bypassOutside + ":5353"}, nil)
	forwarded := startResolver(t, nil, []string{bypassUpstream + ":5300"}, nil)
	doh := startUpstream(t, upstream.Options{Name: "doh.e2e.test", Addr: bypassDoH + ":0", CA: w.ca,
		Handler: dohHandler(map[string]netip.Addr{"exfil-doh.e2e.test.": leak})})

	work := filepath.Join(w.dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	targets := filepath.Join(w.dir, "targets.env")
	err := os.WriteFile(targets, fmt.Appendf(nil, "DENY4=%s\nPORT4=%d\nPORT6=%d\nAPI=%s\nAPIPORT=%d\nOUTSIDE=%s\nDOHURL=%s\nWORK=%s\n",
		bypassDeny4, deny4.addr.Port(), deny6.addr.Port(), w.api.Addr.Addr(), w.api.Addr.Port(),
		bypassOutside, doh.URL+"/dns-query", work), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := filepath.Abs("testdata/bypass/agent.sh")
	if err != nil {
		t.Fatal(err)
	}

	r := w.chaperone(nil, "run", "--mode", "transparent",
		"--dns-upstream", bypassUpstream+":5300",
		"--upstream-ca", w.caFile,
		"--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(),
		"--resolve", "doh.e2e.test:"+bypassDoH,
		"--resolve", "exfil.e2e.test:"+bypassDeny4,
		"--deny-host", bypassDeny4,
		"--deny-host", "::1",
		"--deny-host", "exfil.e2e.test",
		"--log", w.log,
		"--", "bash", agent, targets)
	mustSucceed(t, r)
	t.Logf("agent:\n%s", r.stdout)
	lines := parseBypassLines(t, r.stdout)
	if _, ok := lines["done"]; !ok {
		t.Fatalf("the agent did not finish:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	start := w.sessionStart()
	if start.Mode != "transparent" {
		t.Fatalf("session mode %q, want transparent", start.Mode)
	}
	recs := w.records()

	// Denied: nothing reached the denied hosts over TCP, nor the denied
	// host's DNS and QUIC ports over UDP (other UDP: see below).
	for _, s := range []*sink{deny4, deny6} {
		if conns, _ := s.received(); len(conns) > 0 {
			t.Errorf("BYPASS: the denied host %s accepted %d TCP connections from the session: %q", s.addr, len(conns), conns)
		}
	}
	for _, s := range []*sink{deny53, deny443} {
		if _, grams := s.received(); len(grams) > 0 {
			t.Errorf("BYPASS: the denied host's UDP %s received %q", s.addr, grams)
		}
	}
	if reqs := w.exfil.Requests(); len(reqs) > 0 {
		t.Errorf("BYPASS: the denied upstream received %+v", reqs)
	}
	if l := lines["proxy-vars"]; l.outcome != "count=0" {
		t.Errorf("the agent has proxy variables in transparent mode: %q", l.outcome)
	}
	if l := lines["capabilities"]; l.outcome != "CapEff:0000000000000000" {
		t.Errorf("the agent has capabilities: %q", l.outcome)
	}

	// Seen, attributed and denied: each TCP attempt has a connect record
	// of the process that made it, to the denied address, denied by the
	// host list, in the session.
	tcpAttempts := []struct {
		name, exe string
		dst       netip.AddrPort
		orphan    bool // reparented: its lineage no longer reaches the root
	}{
		{name: "curl-plain", exe: "curl", dst: deny4.addr},
		{name: "curl-noproxy", exe: "curl", dst: deny4.addr},
		{name: "curl-proxyvar", exe: "curl", dst: deny4.addr},
		{name: "hardcoded-ip", exe: "curl", dst: deny4.addr},
		{name: "python-raw4", exe: "python3", dst: deny4.addr},
		{name: "bash-devtcp", exe: "bash", dst: deny4.addr},
		{name: "python-ipv6", exe: "python3", dst: deny6.addr},
		{name: "python-v4mapped", exe: "python3", dst: deny4.addr},
		{name: "bash-devtcp6", exe: "bash", dst: deny6.addr},
		{name: "python-tfo", exe: "python3", dst: deny4.addr},
		{name: "python-mptcp", exe: "python3", dst: deny4.addr},
		{name: "env-i-python", exe: "python3", dst: deny4.addr},
		{name: "env-i-bash", exe: "bash", dst: deny4.addr},
		{name: "daemon", exe: "python3", dst: deny4.addr, orphan: true},
		{name: "connect-helper", exe: "python3", dst: deny4.addr},
		{name: "doh", exe: "python3", dst: deny4.addr},
		{name: "cgroup-escape", exe: "bash", dst: deny4.addr},
	}
	for _, a := range tcpAttempts {
		t.Run(a.name, func(t *testing.T) {
			l, ok := lines[a.name]
			if !ok || l.pid == 0 {
				t.Fatalf("the agent printed no line for %s", a.name)
			}
			if strings.Contains(l.outcome, "leaked") {
				t.Errorf("BYPASS: %s read the denied host's answer: %s", a.name, l.outcome)
			}
			rec, ok := findConnect(recs, l.pid, a.dst)
			if !ok {
				t.Fatalf("not seen: no connect record of pid %d to %s (agent: %s)\n%s", l.pid, a.dst, l.outcome, dumpConnects(recs))
			}
			checkDenied(t, rec, start, a.exe, !a.orphan)
		})
	}

	t.Run("cgroup-escape left the session", func(t *testing.T) {
		if l := lines["cgroup-escape"]; strings.Contains(l.outcome, "left=") {
			t.Errorf("BYPASS: pid %d (uid 0 without capabilities) wrote itself into the cgroup v2 root's cgroup.procs, left the session's cgroup and its hooks, and connected directly: %s",
				l.pid, l.outcome)
		}
	})

	t.Run("daemon left its parents", func(t *testing.T) {
		l := lines["daemon"]
		m := regexp.MustCompile(`launcher=(\d+) oldsid=(\d+) ppid=(\d+) sid=(\d+)`).FindStringSubmatch(l.outcome)
		if m == nil || m[3] == m[1] || m[3] == m[4] || m[4] == m[2] {
			t.Errorf("the daemon did not leave its parents and the agent's session: %q", l.outcome)
		}
	})

	// The agent's own relay: curl's CONNECT to it is decided on its
	// target (via relay) and refused before the relay hears of it; a
	// client in the relay's own protocol reaches it, and the relay's own
	// connection is the one denied above (connect-helper).
	t.Run("connect-helper-client", func(t *testing.T) {
		l := lines["connect-helper-client"]
		rec, ok := findConnect(recs, l.pid, deny4.addr)
		if !ok {
			t.Fatalf("curl's CONNECT through the helper (pid %d) was not decided on its target\n%s", l.pid, dumpConnects(recs))
		}
		if rec.Via != "relay" || !strings.HasPrefix(rec.Relay, "http://127.0.0.1:") {
			t.Errorf("curl's CONNECT through the helper: via %q relay %q, want via relay, relay http://127.0.0.1:PORT", rec.Via, rec.Relay)
		}
		if rec.Verdict != event.Deny || rec.Rule != "deny_hosts" || rec.Session != start.Session ||
			rec.Process == nil || !strings.HasPrefix(filepath.Base(rec.Process.Exe), "curl") {
			t.Errorf("BYPASS: curl's CONNECT through the helper: %+v, want denied by deny_hosts, curl's, in the session", rec)
		}
		if h, ok := lines["connect-helper-http"]; ok {
			t.Errorf("BYPASS: curl's CONNECT reached the agent's relay: %q", h.outcome)
		}
		if !strings.Contains(lines["connect-helper"].outcome, "helper-dial=") {
			t.Errorf("the helper was not asked in its own protocol: %q", lines["connect-helper"].outcome)
		}
		if strings.Contains(lines["connect-helper-raw"].outcome, "leaked") {
			t.Errorf("BYPASS: the helper's client read the denied host's answer: %q", lines["connect-helper-raw"].outcome)
		}
	})

	// DNS over HTTPS is an http request like any other: seen, attributed,
	// allowed (the DoH server is not denied); the address it gave is denied
	// on its own (above).
	t.Run("doh request", func(t *testing.T) {
		l := lines["doh"]
		if !strings.Contains(l.outcome, "doh-answer="+bypassDeny4) {
			t.Fatalf("the DoH lookup did not answer: %q", l.outcome)
		}
		if reqs := doh.Requests(); len(reqs) != 1 || reqs[0].Path != "/dns-query" || reqs[0].Method != "POST" {
			t.Errorf("DoH server received %+v, want one POST /dns-query", reqs)
		}
		found := false
		for _, rec := range w.httpRecords("doh.e2e.test") {
			if rec.Method == "POST" && strings.HasSuffix(rec.URL, "/dns-query") && rec.Process != nil && rec.Process.PID == l.pid {
				found = true
				if rec.Verdict != event.Allow || rec.Session != start.Session {
					t.Errorf("DoH http record %+v: want allow in session %s", rec, start.Session)
				}
			}
		}
		if !found {
			t.Errorf("no http record of the DoH POST by pid %d", l.pid)
		}
	})

	// DNS to another resolver reaches the session's resolver instead: it is
	// a dns event of the asking process, answered from the session's names
	// and upstreams; the other resolver hears nothing on port 53.
	dnsAttempts := []struct {
		name, qname string
		verdict     event.Action
		rcode       string // what the agent got: 3 NXDOMAIN (denied), 2 SERVFAIL (the upstream knows nothing)
	}{
		{"dns-outside-udp", "outside.e2e.test", event.Allow, "rcode=2"},
		{"dns-outside-tcp", "outside.e2e.test", event.Allow, "rcode=2"},
		{"dns-outside-denied", "exfil.e2e.test", event.Deny, "rcode=3"},
		{"udp-dns", "exfil.e2e.test", event.Deny, "rcode=3"},
	}
	for _, a := range dnsAttempts {
		t.Run(a.name, func(t *testing.T) {
			l := lines[a.name]
			if !strings.Contains(l.outcome, a.rcode+" ") || strings.Contains(l.outcome, "answers="+bypassDeny4) {
				t.Errorf("the agent got %q, want %s and no answer from the other resolver", l.outcome, a.rcode)
			}
			found := false
			for _, rec := range recs {
				if rec.Kind != event.KindDNS || rec.Name != a.qname || rec.Process == nil || rec.Process.PID != l.pid {
					continue
				}
				found = true
				if rec.Verdict != a.verdict || rec.Session != start.Session || !strings.HasPrefix(filepath.Base(rec.Process.Exe), "python3") {
					t.Errorf("dns record %+v: want %s by python3 in session %s", rec, a.verdict, start.Session)
				}
			}
			if !found {
				t.Errorf("not seen: no dns record of %s by pid %d", a.qname, l.pid)
			}
		})
	}
	t.Run("resolvers", func(t *testing.T) {
		if asked := outside.asked(); len(asked) > 0 {
			t.Errorf("BYPASS: the outside resolver was asked %q on port 53", asked)
		}
		fw := forwarded.asked()
		if !slicesContains(fw, "outside.e2e.test") {
			t.Errorf("the configured upstream was asked %q, want outside.e2e.test forwarded", fw)
		}
		if slicesContains(fw, "exfil.e2e.test") {
			t.Errorf("a denied name was forwarded: %q", fw)
		}
	})

	// QUIC is intercepted (the default): the datagram goes to the proxy's
	// QUIC listener, which drops what is not a QUIC Initial; the denied
	// host's port 443 received nothing (checked above), nothing refused.
	t.Run("udp-quic", func(t *testing.T) {
		if l := lines["udp-quic"]; strings.Contains(l.outcome, "error=") {
			t.Errorf("UDP to port 443 was not sent to the proxy: %q", l.outcome)
		}
		if strings.Contains(r.stderr, "QUIC datagrams") {
			t.Errorf("QUIC was refused, want intercepted:\n%s", r.stderr)
		}
	})

	// Raw sockets need CAP_NET_RAW, which the agent does not have.
	t.Run("raw-ip", func(t *testing.T) {
		if l := lines["raw-ip"]; !strings.Contains(l.outcome, "error=PermissionError") {
			t.Errorf("a raw IP socket was allowed: %q", l.outcome)
		}
		_, grams := deny4.received()
		for _, g := range grams {
			if strings.Contains(g, "udp-bypass raw-ip") {
				t.Errorf("BYPASS: a hand-built datagram reached the denied host: %s", g)
			}
		}
	})

	// UDP to ports other than 53 and 443 is refused in the kernel (EPERM),
	// UDP-Lite at socket(): each refusal is a denied connect record of the
	// process that tried, and nothing reaches the denied host, nor the
	// outside resolver on port 5353.
	udpAttempts := []struct {
		name, rule, transport string
		dst                   netip.AddrPort // invalid: refused at socket(), no destination
		sink                  *sink
	}{
		{name: "udp-plain4", rule: "udp_refused", transport: "udp", dst: deny4.addr, sink: deny4},
		{name: "udp-v4mapped", rule: "udp_refused", transport: "udp", dst: deny4.addr, sink: deny4},
		{name: "udp-plain6", rule: "udp_refused", transport: "udp", dst: deny6.addr, sink: deny6},
		{name: "udplite", rule: "socket_refused", transport: "udplite", sink: deny4},
		{name: "dns-outside-5353", rule: "udp_refused", transport: "udp", dst: netip.MustParseAddrPort(bypassOutside + ":5353")},
	}
	for _, a := range udpAttempts {
		t.Run(a.name, func(t *testing.T) {
			if a.name == "udplite" && !deny4.lite {
				t.Skip("the kernel has no UDP-Lite")
			}
			l, ok := lines[a.name]
			if !ok || l.pid == 0 {
				t.Fatalf("the agent printed no line for %s", a.name)
			}
			if !strings.Contains(l.outcome, "error=PermissionError") {
				t.Errorf("BYPASS: %s was not refused: %q", a.name, l.outcome)
			}
			if a.sink != nil {
				_, grams := a.sink.received()
				for _, g := range grams {
					if strings.Contains(g, "udp-bypass "+a.name) {
						t.Errorf("BYPASS: %s reached the denied host: %s", a.name, g)
					}
				}
			}
			var rec telemetry.Record
			if a.dst.IsValid() {
				rec, ok = findConnect(recs, l.pid, a.dst)
			} else {
				for _, r := range recs {
					if r.Kind == event.KindConnect && r.Process != nil && r.Process.PID == l.pid && r.Rule == a.rule {
						rec, ok = r, true
					}
				}
			}
			if !ok {
				t.Fatalf("not seen: no connect record of pid %d (%s, %s) (agent: %s)\n%s", l.pid, a.dst, a.rule, l.outcome, dumpConnects(recs))
			}
			if rec.Verdict != event.Deny || rec.Rule != a.rule || rec.Transport != a.transport || rec.Reason == "" {
				t.Errorf("connect record %+v: want deny by %s over %s, with a reason", rec, a.rule, a.transport)
			}
			if rec.Session != start.Session || rec.Via != "transparent" {
				t.Errorf("connect record in session %q via %q, want %q via transparent", rec.Session, rec.Via, start.Session)
			}
			// A datagram's sender may be gone before it is looked up
			// (on a busy machine): then its thread's comm names it.
			name := filepath.Base(rec.Process.Exe)
			if rec.Process.Exe == "" && len(rec.Process.Argv) > 0 {
				name = rec.Process.Argv[0]
			}
			if !strings.HasPrefix(name, "python3") {
				t.Errorf("attributed to exe %q argv %q, want python3", rec.Process.Exe, rec.Process.Argv)
			}
		})
	}
	t.Run("resolver-5353", func(t *testing.T) {
		if asked := outside5353.asked(); len(asked) > 0 {
			t.Errorf("BYPASS: the outside resolver was asked %q on port 5353", asked)
		}
	})

	// Straight to the proxy's listener: no redirect record, so the proxy
	// refuses it. Refused is not enough: the record must say which session
	// (the listener is the session's own) and which process (the client
	// socket is in /proc like any other) tried.
	t.Run("proxy-direct", func(t *testing.T) {
		l := lines["proxy-direct"]
		if !strings.Contains(l.outcome, "proxy=127.0.0.1:") || strings.Contains(l.outcome, " 200 ") {
			t.Errorf("agent: %q, want the proxy found and no tunnel", l.outcome)
		}
		var rec *telemetry.Record
		for i := range recs {
			if recs[i].Kind == event.KindConnect && recs[i].Rule == "unknown_origin" {
				rec = &recs[i]
			}
		}
		if rec == nil {
			t.Fatalf("not seen: no unknown_origin connect record\n%s", dumpConnects(recs))
		}
		if rec.Verdict != event.Deny {
			t.Errorf("BYPASS: a connection without a record was %s", rec.Verdict)
		}
		if rec.Session != start.Session || rec.Process == nil || rec.Process.PID != l.pid {
			t.Errorf("seen but not attributed: the refused connection's record has session %q and process %+v, want session %s and pid %d "+
				"(proxy/transparent.go publishes the no-origin event without either)", rec.Session, rec.Process, start.Session, l.pid)
		}
	})
}

func findConnect(recs []telemetry.Record, pid int, dst netip.AddrPort) (telemetry.Record, bool) {
	return findConnectTo(recs, pid, func(ap netip.AddrPort) bool {
		return ap.Addr().Unmap() == dst.Addr().Unmap() && ap.Port() == dst.Port()
	})
}

func findConnectTo(recs []telemetry.Record, pid int, match func(netip.AddrPort) bool) (telemetry.Record, bool) {
	for _, rec := range recs {
		if rec.Kind != event.KindConnect || rec.Process == nil || rec.Process.PID != pid {
			continue
		}
		if ap, err := netip.ParseAddrPort(rec.Dst); err == nil && match(ap) {
			return rec, true
		}
	}
	return telemetry.Record{}, false
}

// checkDenied asserts rec is a transparent connect denied by the host list,
// in the session, by a process whose executable is exe, and (withLineage)
// whose lineage starts at the session's root.
func checkDenied(t *testing.T, rec telemetry.Record, start telemetry.Record, exe string, withLineage bool) {
	t.Helper()
	if rec.Verdict != event.Deny || rec.Rule != "deny_hosts" {
		t.Errorf("BYPASS: connect record %+v: verdict %s by %q, want deny by deny_hosts", rec, rec.Verdict, rec.Rule)
	}
	if rec.Session != start.Session || rec.Via != "transparent" {
		t.Errorf("connect record in session %q via %q, want %q via transparent", rec.Session, rec.Via, start.Session)
	}
	if !strings.HasPrefix(filepath.Base(rec.Process.Exe), exe) {
		t.Errorf("attributed to %s, want %s", rec.Process.Exe, exe)
	}
	if !withLineage {
		return
	}
	if l := rec.Process.Lineage; len(l) < 2 || l[0] != "bash" || !strings.HasPrefix(l[len(l)-1], exe) {
		t.Errorf("lineage %q, want the session's root bash first and %s last", l, exe)
	}
}

func dumpConnects(recs []telemetry.Record) string {
	var b strings.Builder
	for _, rec := range recs {
		if rec.Kind == event.KindConnect {
			pid := 0
			if rec.Process != nil {
				pid = rec.Process.PID
			}
			fmt.Fprintf(&b, "  connect pid=%d dst=%s verdict=%s rule=%s\n", pid, rec.Dst, rec.Verdict, rec.Rule)
		}
	}
	return b.String()
}
