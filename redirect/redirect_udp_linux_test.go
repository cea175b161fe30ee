//go:build linux

package redirect

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// upstreamUDPHost is where the UDP tests' real servers listen: a datagram
// that reaches one of them was not redirected.
const upstreamUDPHost = "127.83.0.1"

// query is what the resolver stand-in received, and what LookupUDP said
// about its sender.
type query struct {
	listener string // "v4" or "v6"
	from     netip.AddrPort
	origin   Origin
	err      error
}

// resolverStandIn plays the session's resolver on 127.0.0.1:0 and [::1]:0:
// it looks up each datagram's origin, records it, then answers a DNS query
// with NXDOMAIN.
type resolverStandIn struct {
	v4, v6  *net.UDPConn
	queries chan query
}

func newResolverStandIn(tb testing.TB) *resolverStandIn {
	tb.Helper()
	s := &resolverStandIn{queries: make(chan query, 64)}
	var err error
	if s.v4, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0"))); err != nil {
		tb.Fatal(err)
	}
	if s.v6, err = net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[::1]:0"))); err != nil {
		s.v4.Close()
		tb.Skipf("redirect: no IPv6 loopback: %v", err)
	}
	tb.Cleanup(func() {
		s.v4.Close()
		s.v6.Close()
	})
	return s
}

func (s *resolverStandIn) addrs() (v4, v6 netip.AddrPort) {
	return s.v4.LocalAddr().(*net.UDPAddr).AddrPort(), s.v6.LocalAddr().(*net.UDPAddr).AddrPort()
}

// serve answers until the test ends; lookup may be set later than the
// stand-in is made, since the Redirector needs its addresses first.
func (s *resolverStandIn) serve(tb testing.TB, lookup func(netip.AddrPort) (Origin, error)) {
	done := make(chan struct{}, 2)
	for name, c := range map[string]*net.UDPConn{"v4": s.v4, "v6": s.v6} {
		go func() {
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 1500)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				o, err := lookup(from)
				s.queries <- query{listener: name, from: from, origin: o, err: err}
				c.WriteToUDPAddrPort(dnsReply(buf[:n]), from)
			}
		}()
	}
	tb.Cleanup(func() {
		s.v4.Close()
		s.v6.Close()
		<-done
		<-done
	})
}

// dnsReply answers a DNS query without EDNS with NXDOMAIN: the query with
// QR, RA and the rcode set.
func dnsReply(q []byte) []byte {
	if len(q) < 12 {
		return []byte("?")
	}
	r := bytes.Clone(q)
	r[2] |= 0x80 // QR
	r[3] = 0x83  // RA, NXDOMAIN
	return r
}

// udpUpstream is a real UDP server at addr that answers "u".
func udpUpstream(tb testing.TB, addr string) netip.AddrPort {
	tb.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		tb.Skipf("redirect: cannot listen on %s for the upstream: %v", addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			_, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort([]byte("u"), from)
		}
	}()
	tb.Cleanup(func() { c.Close(); <-done })
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// pyUDP sends one DNS query and prints what it saw as JSON. Arguments:
// family (4 or 6), mode (sendto, or connect then send), host, port.
const pyUDP = `
import errno, json, os, socket, sys
fam = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.settimeout(10)
dst = (sys.argv[3], int(sys.argv[4]))
# id 0x1234, RD, one question: example.test A IN
q = bytes.fromhex("123401000001000000000000") + b"\x07example\x04test\x00" + bytes.fromhex("00010001")
out = {"pid": os.getpid(), "comm": open("/proc/self/comm").read().strip()}
try:
    if sys.argv[2] == "connect":
        s.connect(dst)
        p = s.getpeername()
        out["peer"] = "%s|%d" % (p[0], p[1])
        s.send(q)
    else:
        s.sendto(q, dst)
    data, src = s.recvfrom(1500)
    out["src"] = "%s|%d" % (src[0], src[1])
    out["data"] = "r" if data[:2] == q[:2] and data[2] & 0x80 else data.decode(errors="replace")
except OSError as e:
    out["err"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out))
`

// udpReport is what a pyUDP process saw.
type udpReport struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Peer string `json:"peer"` // getpeername() after connect, host|port
	Src  string `json:"src"`  // the reply's source from recvfrom, host|port
	Data string `json:"data"` // "r": the resolver, "u": an upstream
	Err  string `json:"err"`  // errno name
}

// sendFromNewLeaf runs the UDP client with args in a new test cgroup that
// r is attached to, and returns its report, the cgroup, and what it got:
// the data it received, else its error.
func sendFromNewLeaf(t *testing.T, r *Redirector, python string, args ...string) (udpReport, testLeaf, string) {
	t.Helper()
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rep := runUDPClient(t, &leaf, python, args...)
	if rep.Err != "" {
		return rep, leaf, rep.Err
	}
	return rep, leaf, rep.Data
}

func runUDPClient(tb testing.TB, leaf *testLeaf, python string, args ...string) udpReport {
	tb.Helper()
	cmd := exec.Command(python, append([]string{"-c", pyUDP}, args...)...)
	if leaf != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = ee.Stderr
		}
		tb.Fatalf("python %q: %v\n%s", args, err, stderr)
	}
	var rep udpReport
	if err := json.Unmarshal(out, &rep); err != nil {
		tb.Fatalf("client printed %q: %v", out, err)
	}
	if rep.PID != cmd.Process.Pid {
		tb.Errorf("client reports pid %d, started as %d", rep.PID, cmd.Process.Pid)
	}
	return rep
}

// nextQuery returns what the resolver received, if anything. The stand-in
// records before it answers, so a query is there once its client has the
// answer (or has given up).
func nextQuery(s *resolverStandIn) (query, bool) {
	select {
	case q := <-s.queries:
		return q, true
	default:
		return query{}, false
	}
}

// checkOrigin compares o with the client's own report.
func checkOrigin(tb testing.TB, o Origin, pid int, comm string, leaf testLeaf) {
	tb.Helper()
	want := Origin{Dst: o.Dst, PID: uint32(pid), TID: uint32(pid), UID: uint32(os.Getuid()),
		GID: uint32(os.Getgid()), CgroupID: leaf.id, Cookie: o.Cookie, Comm: comm}
	if diff := cmp.Diff(want, o, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		tb.Errorf("Origin (-want +got):\n%s", diff)
	}
	if o.Cookie == 0 {
		tb.Error("Origin.Cookie is zero")
	}
}

func TestUDP(t *testing.T) {
	python := lookPath(t, "python3")
	res := newResolverStandIn(t)
	dns4, dns6 := res.addrs()
	s := newStandIn(t)
	cfg := s.config()
	cfg.DNSV4, cfg.DNSV6 = dns4, dns6
	r := loadRedirector(t, cfg)
	res.serve(t, r.LookupUDP)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })

	udpUpstream(t, upstreamUDPHost+":53")
	up443 := udpUpstream(t, upstreamUDPHost+":443")
	upOther := udpUpstream(t, upstreamUDPHost+":0")
	other := strconv.Itoa(int(upOther.Port()))

	type want struct {
		Listener string // the resolver's listener that got the query; "" for none
		Dst      string // LookupUDP's Origin.Dst
		Peer     string
		Src      string
		Data     string
		Err      string
	}
	tests := []struct {
		name    string
		inside  bool
		args    []string
		want    want
		refused uint64 // QUICRefused must grow by this
	}{
		{
			name: "sendto v4", inside: true,
			args: []string{"4", "sendto", "127.0.0.53", "53"},
			want: want{Listener: "v4", Dst: "127.0.0.53:53", Src: "127.0.0.53|53", Data: "r"},
		},
		{
			name: "sendto v4 with an upstream listening", inside: true,
			args: []string{"4", "sendto", upstreamUDPHost, "53"},
			want: want{Listener: "v4", Dst: upstreamUDPHost + ":53", Src: upstreamUDPHost + "|53", Data: "r"},
		},
		{
			name: "sendto v6", inside: true,
			args: []string{"6", "sendto", "::1", "53"},
			want: want{Listener: "v6", Dst: "[::1]:53", Src: "::1|53", Data: "r"},
		},
		{
			name: "sendto v4-mapped on a dual-stack socket", inside: true,
			args: []string{"6", "sendto", "::ffff:127.0.0.53", "53"},
			want: want{Listener: "v4", Dst: "[::ffff:127.0.0.53]:53", Src: "::ffff:127.0.0.53|53", Data: "r"},
		},
		{
			name: "connect v4", inside: true,
			args: []string{"4", "connect", "127.0.0.53", "53"},
			want: want{Listener: "v4", Dst: "127.0.0.53:53", Peer: "127.0.0.53|53", Src: "127.0.0.53|53", Data: "r"},
		},
		{
			name: "connect v6", inside: true,
			args: []string{"6", "connect", "::1", "53"},
			want: want{Listener: "v6", Dst: "[::1]:53", Peer: "::1|53", Src: "::1|53", Data: "r"},
		},
		{
			name: "connect v4-mapped on a dual-stack socket", inside: true,
			args: []string{"6", "connect", "::ffff:127.0.0.53", "53"},
			want: want{Listener: "v4", Dst: "[::ffff:127.0.0.53]:53", Peer: "::ffff:127.0.0.53|53", Src: "::ffff:127.0.0.53|53", Data: "r"},
		},
		{
			name: "QUIC sendto v4", inside: true,
			args:    []string{"4", "sendto", upstreamUDPHost, "443"},
			want:    want{Err: "EPERM"},
			refused: 1,
		},
		{
			name: "QUIC connect v6", inside: true,
			args:    []string{"6", "connect", "::1", "443"},
			want:    want{Err: "EPERM"},
			refused: 1,
		},
		{
			name: "QUIC sendto v4-mapped", inside: true,
			args:    []string{"6", "sendto", "::ffff:" + upstreamUDPHost, "443"},
			want:    want{Err: "EPERM"},
			refused: 1,
		},
		{
			name: "other port refused", inside: true,
			args: []string{"4", "sendto", upstreamUDPHost, other},
			want: want{Err: "EPERM"},
		},
		{
			name: "other port connected refused", inside: true,
			args: []string{"4", "connect", upstreamUDPHost, other},
			want: want{Err: "EPERM"},
		},
		{
			name: "DNS outside the cgroup", inside: false,
			args: []string{"4", "sendto", upstreamUDPHost, "53"},
			want: want{Src: upstreamUDPHost + "|53", Data: "u"},
		},
		{
			name: "QUIC outside the cgroup", inside: false,
			args: []string{"4", "sendto", upstreamUDPHost, strconv.Itoa(int(up443.Port()))},
			want: want{Src: upstreamUDPHost + "|443", Data: "u"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in *testLeaf
			if tt.inside {
				in = &leaf
			}
			before, err := r.QUICRefused()
			if err != nil {
				t.Fatal(err)
			}
			rep := runUDPClient(t, in, python, tt.args...)
			got := want{Peer: rep.Peer, Src: rep.Src, Data: rep.Data, Err: rep.Err}
			q, ok := nextQuery(res)
			if ok {
				got.Listener = q.listener
				if q.err == nil {
					got.Dst = q.origin.Dst.String()
				} else if !errors.Is(q.err, ErrNotFound) {
					t.Errorf("LookupUDP: %v, want ErrNotFound", q.err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			after, err := r.QUICRefused()
			if err != nil {
				t.Fatal(err)
			}
			if after-before != tt.refused {
				t.Errorf("QUICRefused grew by %d, want %d", after-before, tt.refused)
			}
			if got.Dst == "" {
				return
			}
			checkOrigin(t, q.origin, rep.PID, rep.Comm, leaf)
			// The record stays for the socket's next query.
			again, err := r.LookupUDP(q.from)
			if err != nil {
				t.Fatalf("second LookupUDP(%s): %v", q.from, err)
			}
			if diff := cmp.Diff(q.origin, again, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("second LookupUDP (-first +second):\n%s", diff)
			}
		})
	}
}

// TestUDPConfig covers what the configuration changes: DNS without a
// resolver, DNS with a resolver for one family only, and QUIC allowed
// (TestRefusalsConfig covers UDP allowed).
func TestUDPConfig(t *testing.T) {
	python := lookPath(t, "python3")
	res := newResolverStandIn(t)
	dns4, _ := res.addrs()
	udpUpstream(t, upstreamUDPHost+":53")
	udpUpstream(t, upstreamUDPHost+":443")
	// Each case loads its own Redirector; the stand-in asks the current one.
	var current atomic.Pointer[Redirector]
	res.serve(t, func(a netip.AddrPort) (Origin, error) { return current.Load().LookupUDP(a) })
	proxy := newStandIn(t).config()

	tests := []struct {
		name     string
		cfg      Config
		args     []string
		wantData string // "r", "u", or the errno
	}{
		{"no resolver, UDP allowed: DNS untouched", Config{AllowUDP: true}, []string{"4", "sendto", upstreamUDPHost, "53"}, "u"},
		{"no resolver: DNS refused as UDP", Config{}, []string{"4", "sendto", upstreamUDPHost, "53"}, "EPERM"},
		{"no resolver: QUIC still refused", Config{}, []string{"4", "sendto", upstreamUDPHost, "443"}, "EPERM"},
		{"v4 resolver only: v4 DNS", Config{DNSV4: dns4}, []string{"4", "sendto", upstreamUDPHost, "53"}, "r"},
		{"v4 resolver only: v6 DNS refused", Config{DNSV4: dns4}, []string{"6", "sendto", "::1", "53"}, "EPERM"},
		{"v4 resolver only: v6 connect refused", Config{DNSV4: dns4}, []string{"6", "connect", "::1", "53"}, "EPERM"},
		{"v4 resolver only: v4-mapped DNS", Config{DNSV4: dns4}, []string{"6", "sendto", "::ffff:" + upstreamUDPHost, "53"}, "r"},
		{"QUIC allowed", Config{AllowQUIC: true}, []string{"4", "sendto", upstreamUDPHost, "443"}, "u"},
		{"QUIC allowed connected", Config{AllowQUIC: true}, []string{"4", "connect", upstreamUDPHost, "443"}, "u"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.ProxyV4, cfg.ProxyV6 = proxy.ProxyV4, proxy.ProxyV6
			r := loadRedirector(t, cfg)
			current.Store(r)
			rep, leaf, got := sendFromNewLeaf(t, r, python, tt.args...)
			if got != tt.wantData {
				t.Errorf("client got %q, want %q (%+v)", got, tt.wantData, rep)
			}
			q, ok := nextQuery(res)
			if ok != (tt.wantData == "r") {
				t.Errorf("resolver received a query: %v, want %v", ok, tt.wantData == "r")
			}
			if ok {
				if q.err != nil {
					t.Fatalf("LookupUDP: %v", q.err)
				}
				checkOrigin(t, q.origin, rep.PID, rep.Comm, leaf)
			}
			refused, err := r.QUICRefused()
			if err != nil {
				t.Fatal(err)
			}
			wantRefused := uint64(0)
			if strings.HasSuffix(tt.args[3], "443") && tt.wantData == "EPERM" {
				wantRefused = 1
			}
			if refused != wantRefused {
				t.Errorf("QUICRefused = %d, want %d", refused, wantRefused)
			}
		})
	}
}

// TestDig runs dig, a real resolver client that checks the reply's source,
// against the resolver stand-in through the redirection.
func TestDig(t *testing.T) {
	dig := lookPath(t, "dig")
	res := newResolverStandIn(t)
	dns4, dns6 := res.addrs()
	cfg := newStandIn(t).config()
	cfg.DNSV4, cfg.DNSV6 = dns4, dns6
	r := loadRedirector(t, cfg)
	res.serve(t, r.LookupUDP)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()

	for _, server := range []string{"127.0.0.53", "::1"} {
		t.Run(server, func(t *testing.T) {
			// No EDNS: the stand-in's answer is the query turned around.
			cmd := exec.Command(dig, "+noedns", "+notcp", "+tries=1", "+time=5", "@"+server, "example.test", "A")
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("dig: %v\n%s", err, out)
			}
			for _, w := range []string{"status: NXDOMAIN", "SERVER: " + server + "#53"} {
				if !strings.Contains(string(out), w) {
					t.Errorf("dig output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "unexpected source") {
				t.Errorf("dig saw the resolver's own address:\n%s", out)
			}
			q, ok := nextQuery(res)
			if !ok {
				t.Fatal("the resolver received no query")
			}
			if q.err != nil {
				t.Fatalf("LookupUDP: %v", q.err)
			}
			wantDst := netip.AddrPortFrom(netip.MustParseAddr(server), 53)
			if q.origin.Dst != wantDst || q.origin.PID != uint32(cmd.Process.Pid) || q.origin.CgroupID != leaf.id {
				t.Errorf("Origin = %+v, want Dst %s, PID %d, CgroupID %d", q.origin, wantDst, cmd.Process.Pid, leaf.id)
			}
		})
	}
}

func TestLookupUDPUnknown(t *testing.T) {
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	if _, err := r.LookupUDP(netip.MustParseAddrPort("127.0.0.1:1")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LookupUDP of an unknown client: %v, want ErrNotFound", err)
	}
	if n, err := r.QUICRefused(); err != nil || n != 0 {
		t.Fatalf("QUICRefused after Load = %d, %v; want 0", n, err)
	}
}

// BenchmarkDNSQuery measures a query and its answer over one unconnected
// UDP socket from a process in a cgroup, with (redirected) and without
// (plain) the programs attached, in one run: plain sends to the resolver
// stand-in directly, redirected to 127.0.0.53:53 and is sent there, so
// sendmsg4, egress and recvmsg4 are measured. The stand-in looks up every
// query in both cases (plain ones miss). See BenchmarkConnect for why the
// benchmark moves its own process.
func BenchmarkDNSQuery(b *testing.B) {
	res := newResolverStandIn(b)
	dns4, dns6 := res.addrs()
	cfg := newStandIn(b).config()
	cfg.DNSV4, cfg.DNSV6 = dns4, dns6
	r := loadRedirector(b, cfg)
	// Registered first, so it stops after the stand-in.
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	go func() { // nobody reads the queries here
		for {
			select {
			case <-res.queries:
			case <-stop:
				return
			}
		}
	}()
	res.serve(b, r.LookupUDP)
	q := append([]byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, "\x07example\x04test\x00\x00\x01\x00\x01"...)
	for _, bc := range []struct {
		name   string
		attach bool
		dst    netip.AddrPort
	}{
		{"plain", false, dns4},
		{"redirected", true, netip.MustParseAddrPort("127.0.0.53:53")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			leaf := newTestLeaf(b)
			if bc.attach {
				closer, err := r.Attach(leaf.path)
				if err != nil {
					b.Fatal(err)
				}
				defer closer.Close()
			}
			moveSelf(b, leaf.path)
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 1500)
			for b.Loop() {
				if _, err := c.WriteToUDPAddrPort(q, bc.dst); err != nil {
					b.Fatal(err)
				}
				_, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					b.Fatal(err)
				}
				if from != bc.dst {
					b.Fatalf("answer from %s, want %s", from, bc.dst)
				}
			}
		})
	}
}
