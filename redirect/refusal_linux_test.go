//go:build linux

package redirect

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRefusalFromRecord(t *testing.T) {
	comm := func(s string) (c [16]int8) {
		for i := range len(s) {
			c[i] = int8(s[i])
		}
		return c
	}
	tests := []struct {
		name string
		rec  redirectRefusal
		want Refusal
	}{
		{
			name: "udp sendmsg4",
			rec: redirectRefusal{DstIp6: words(netip.MustParseAddr("::ffff:10.1.2.3").As16()), DstPort: 9999, Kind: 2, Call: 2,
				Family: afInet, Type: 2, Protocol: 17, Pid: 10, Tid: 11, Uid: 1000, Gid: 1001, CgroupId: 7, Comm: comm("nc")},
			want: Refusal{Kind: RefusalUDP, Call: CallSendmsg, Dst: netip.MustParseAddrPort("10.1.2.3:9999"), Family: 2, Type: 2, Protocol: 17,
				PID: 10, TID: 11, UID: 1000, GID: 1001, CgroupID: 7, Comm: "nc"},
		},
		{
			name: "quic from a dual-stack socket keeps the mapped form",
			rec:  redirectRefusal{DstIp6: words(netip.MustParseAddr("::ffff:10.1.2.3").As16()), DstPort: 443, Kind: 1, Call: 1, Family: 10, Type: 2, Protocol: 17},
			want: Refusal{Kind: RefusalQUIC, Call: CallConnect, Dst: netip.MustParseAddrPort("[::ffff:10.1.2.3]:443"), Family: 10, Type: 2, Protocol: 17},
		},
		{
			name: "socket has no destination",
			rec:  redirectRefusal{Kind: 3, Call: 3, Family: 10, Type: 2, Protocol: 58, Comm: comm("123456789012345")},
			want: Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 10, Type: 2, Protocol: 58, Comm: "123456789012345"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.rec.refusal(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("refusal() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRefusalNames(t *testing.T) {
	tests := []struct {
		r                      Refusal
		kind, call, proto, typ string
	}{
		{Refusal{Kind: RefusalUDP, Call: CallSendmsg, Type: 2, Protocol: 17}, "udp", "sendmsg", "udp", "UDP datagram socket"},
		{Refusal{Kind: RefusalQUIC, Call: CallConnect, Type: 2, Protocol: 17}, "quic", "connect", "udp", "UDP datagram socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 2, Protocol: 136}, "socket", "socket", "udplite", "UDP-Lite datagram socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 2, Protocol: 1}, "socket", "socket", "icmp", "ICMP ping socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 2, Protocol: 58}, "socket", "socket", "icmpv6", "ICMPv6 ping socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 3, Protocol: 255}, "socket", "socket", "raw", "raw IP socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 1, Protocol: 132}, "socket", "socket", "sctp", "SCTP stream socket"},
		{Refusal{Kind: RefusalSocket, Call: CallSocket, Type: 5, Protocol: 132}, "socket", "socket", "sctp", "SCTP seqpacket socket"},
		{Refusal{Kind: RefusalFailClosed, Call: CallConnect, Type: 1, Protocol: 262}, "fail_closed", "connect", "mptcp", "MPTCP stream socket"},
		{Refusal{Kind: 9, Call: 9, Type: 10, Protocol: 99}, "refusal(9)", "call(9)", "ipproto-99", "protocol 99 socket of type 10"},
	}
	for _, tt := range tests {
		got := []string{tt.r.Kind.String(), tt.r.Call.String(), tt.r.ProtocolName(), tt.r.SocketName()}
		if diff := cmp.Diff([]string{tt.kind, tt.call, tt.proto, tt.typ}, got); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", tt.r, diff)
		}
	}
}

// pyRefuse makes one attempt and prints what it saw as JSON, then makes a
// raw ICMP socket, which the programs always refuse and report: its report
// comes after every report of the attempt. Arguments: mode, family (4 or
// 6), host, port. Modes: sendto or connect (UDP, then wait for a reply),
// tcp or mptcp (connect, then read a byte), socket (host is TYPE/PROTO;
// port 1 first moves to a network namespace of its own where ping sockets
// are allowed, so only the programs can refuse one).
const pyRefuse = `
import ctypes, errno, json, os, socket, sys
mode, host, port = sys.argv[1], sys.argv[3], int(sys.argv[4])
fam = socket.AF_INET6 if sys.argv[2] == "6" else socket.AF_INET
out = {"pid": os.getpid(), "comm": open("/proc/self/comm").read().strip()}
def name(e):
    return errno.errorcode.get(e.errno, str(e))
try:
    if mode in ("sendto", "connect"):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(5)
        if mode == "connect":
            s.connect((host, port))
            s.send(b"hi")
        else:
            s.sendto(b"hi", (host, port))
        out["data"] = s.recv(64).decode(errors="replace")[:1]
    elif mode in ("tcp", "mptcp"):
        s = socket.socket(fam, socket.SOCK_STREAM, 262 if mode == "mptcp" else 0)
        s.settimeout(5)
        s.connect((host, port))
        out["data"] = s.recv(1).decode()
    elif mode == "socket":
        typ, proto = (int(x) for x in host.split("/"))
        if port == 1:
            if ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
            with open("/proc/sys/net/ipv4/ping_group_range", "w") as f:
                f.write("0 2147483647")
        socket.socket(fam, typ, proto).close()
        out["data"] = "created"
except OSError as e:
    out["err"] = name(e)
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    out["mark"] = "created"
except OSError as e:
    out["mark"] = name(e)
print(json.dumps(out))
`

// refuseReport is what a pyRefuse process saw.
type refuseReport struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Data string `json:"data"` // "u": an upstream, "x": the proxy stand-in, "?": the resolver stand-in, "created"
	Err  string `json:"err"`  // errno name
	Mark string `json:"mark"` // the marker's outcome: EPERM inside the cgroup
}

func runRefuse(tb testing.TB, leaf *testLeaf, python string, args ...string) refuseReport {
	tb.Helper()
	cmd := exec.Command(python, append([]string{"-c", pyRefuse}, args...)...)
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
	var rep refuseReport
	if err := json.Unmarshal(out, &rep); err != nil {
		tb.Fatalf("client printed %q: %v", out, err)
	}
	if rep.PID != cmd.Process.Pid {
		tb.Errorf("client reports pid %d, started as %d", rep.PID, cmd.Process.Pid)
	}
	return rep
}

func isMarker(r Refusal) bool {
	return r.Kind == RefusalSocket && r.Call == CallSocket && r.Type == 3 && r.Protocol == 1
}

// refusalsBefore returns pid's refusals reported before its marker.
// Reports of other processes (earlier cases) are skipped.
func refusalsBefore(tb testing.TB, ch <-chan Refusal, pid int) []Refusal {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	var got []Refusal
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				tb.Fatal("Refusals channel closed")
			}
			if r.PID != uint32(pid) {
				continue
			}
			if isMarker(r) {
				return got
			}
			got = append(got, r)
		case <-timeout:
			tb.Fatalf("no marker reported for pid %d (got %+v)", pid, got)
		}
	}
}

func TestRefusals(t *testing.T) {
	python := lookPath(t, "python3")
	res := newResolverStandIn(t)
	dns4, dns6 := res.addrs()
	s := newStandIn(t)
	cfg := s.config()
	cfg.DNSV4, cfg.DNSV6 = dns4, dns6
	r := loadRedirector(t, cfg)
	res.serve(t, r.LookupUDP)
	s.serve(r.Lookup, true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	refusals, err := r.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })

	up := udpUpstream(t, upstreamUDPHost+":0")
	port := strconv.Itoa(int(up.Port()))
	closed := strconv.Itoa(int(closedPort(t)))
	dst := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

	// want is the client's outcome and the refusal reported for it, if
	// any; the task fields are checked against the client's report.
	type want struct {
		Data, Err string
		Refusal   *Refusal
	}
	tests := []struct {
		name   string
		inside bool
		args   []string
		want   want
		// unsupported: the client's error when the kernel lacks the
		// protocol, which skips the case.
		unsupported string
		dnsQuery    bool // the resolver stand-in must receive it
	}{
		{
			name: "udp sendto v4", inside: true,
			args: []string{"sendto", "4", upstreamUDPHost, port},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallSendmsg, Dst: dst(upstreamUDPHost + ":" + port), Family: 2, Type: 2, Protocol: 17}},
		},
		{
			name: "udp connect v4", inside: true,
			args: []string{"connect", "4", upstreamUDPHost, port},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallConnect, Dst: dst(upstreamUDPHost + ":" + port), Family: 2, Type: 2, Protocol: 17}},
		},
		{
			name: "udp sendto v6", inside: true,
			args: []string{"sendto", "6", "::1", port},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallSendmsg, Dst: dst("[::1]:" + port), Family: 10, Type: 2, Protocol: 17}},
		},
		{
			name: "udp connect v6", inside: true,
			args: []string{"connect", "6", "::1", port},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallConnect, Dst: dst("[::1]:" + port), Family: 10, Type: 2, Protocol: 17}},
		},
		{
			name: "udp sendto v4-mapped", inside: true,
			args: []string{"sendto", "6", "::ffff:" + upstreamUDPHost, port},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallSendmsg, Dst: dst("[::ffff:" + upstreamUDPHost + "]:" + port), Family: 10, Type: 2, Protocol: 17}},
		},
		{
			name: "udp port 5353", inside: true,
			args: []string{"sendto", "4", upstreamUDPHost, "5353"},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalUDP, Call: CallSendmsg, Dst: dst(upstreamUDPHost + ":5353"), Family: 2, Type: 2, Protocol: 17}},
		},
		{
			name: "quic", inside: true,
			args: []string{"sendto", "4", upstreamUDPHost, "443"},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalQUIC, Call: CallSendmsg, Dst: dst(upstreamUDPHost + ":443"), Family: 2, Type: 2, Protocol: 17}},
		},
		{
			name: "dns still redirected", inside: true,
			args:     []string{"sendto", "4", upstreamUDPHost, "53"},
			want:     want{Data: "?"},
			dnsQuery: true,
		},
		{
			name: "the resolver's own address", inside: true,
			args:     []string{"sendto", "4", dns4.Addr().String(), strconv.Itoa(int(dns4.Port()))},
			want:     want{Data: "?"},
			dnsQuery: true,
		},
		{
			name: "tcp still redirected", inside: true,
			args: []string{"tcp", "4", "127.0.0.2", closed},
			want: want{Data: "x"},
		},
		{
			name: "mptcp redirected", inside: true,
			args:        []string{"mptcp", "4", "127.0.0.2", closed},
			want:        want{Data: "x"},
			unsupported: "EPROTONOSUPPORT",
		},
		{
			name: "udplite socket", inside: true,
			args:        []string{"socket", "4", "2/136", "0"},
			want:        want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 2, Type: 2, Protocol: 136}},
			unsupported: "EPROTONOSUPPORT",
		},
		{
			name: "udplite socket v6", inside: true,
			args:        []string{"socket", "6", "2/136", "0"},
			want:        want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 10, Type: 2, Protocol: 136}},
			unsupported: "EPROTONOSUPPORT",
		},
		{
			name: "icmp ping socket", inside: true,
			args: []string{"socket", "4", "2/1", "1"},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 2, Type: 2, Protocol: 1}},
		},
		{
			name: "icmpv6 ping socket", inside: true,
			args:        []string{"socket", "6", "2/58", "1"},
			want:        want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 10, Type: 2, Protocol: 58}},
			unsupported: "EAFNOSUPPORT",
		},
		{
			name: "raw udp socket", inside: true,
			args: []string{"socket", "4", "3/17", "0"},
			want: want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 2, Type: 3, Protocol: 17}},
		},
		{
			name: "sctp socket", inside: true,
			args:        []string{"socket", "4", "1/132", "0"},
			want:        want{Err: "EPERM", Refusal: &Refusal{Kind: RefusalSocket, Call: CallSocket, Family: 2, Type: 1, Protocol: 132}},
			unsupported: "EPROTONOSUPPORT",
		},
		{
			name: "udp socket with protocol 0", inside: true,
			args: []string{"socket", "4", "2/0", "0"},
			want: want{Data: "created"},
		},
		{
			// Shows that the ping socket cases above are refused by the
			// programs, not by the namespace's settings.
			name: "icmp ping socket outside the cgroup", inside: false,
			args: []string{"socket", "4", "2/1", "1"},
			want: want{Data: "created"},
		},
		{
			name: "udp outside the cgroup", inside: false,
			args: []string{"sendto", "4", upstreamUDPHost, port},
			want: want{Data: "u"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in *testLeaf
			if tt.inside {
				in = &leaf
			}
			rep := runRefuse(t, in, python, tt.args...)
			if tt.unsupported != "" && rep.Err == tt.unsupported {
				t.Skipf("this kernel lacks it: %s", rep.Err)
			}
			var got want
			got.Data, got.Err = rep.Data, rep.Err
			if tt.inside {
				if rep.Mark != "EPERM" {
					t.Fatalf("the marker socket: %q, want EPERM", rep.Mark)
				}
				rs := refusalsBefore(t, refusals, rep.PID)
				if len(rs) > 1 {
					t.Errorf("%d refusals reported, want at most one: %+v", len(rs), rs)
				}
				if len(rs) > 0 {
					got.Refusal = &rs[0]
				}
			}
			if tt.want.Refusal != nil {
				w := *tt.want.Refusal
				w.PID, w.TID, w.UID, w.GID = uint32(rep.PID), uint32(rep.PID), uint32(os.Getuid()), uint32(os.Getgid())
				w.CgroupID, w.Comm = leaf.id, rep.Comm
				tt.want.Refusal = &w
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			q, ok := nextQuery(res)
			if ok != tt.dnsQuery {
				t.Errorf("the resolver received a datagram: %v, want %v (%+v)", ok, tt.dnsQuery, q)
			}
		})
	}
	// The stand-in answered the TCP cases with their origins.
	for range 2 {
		select {
		case acc := <-s.results:
			if acc.err != nil {
				t.Errorf("proxy stand-in Lookup: %v", acc.err)
			}
		default:
		}
	}
}

// TestRefusalsConfig covers what the configuration changes: UDP allowed,
// and DNS without a resolver, which is UDP like any other.
func TestRefusalsConfig(t *testing.T) {
	python := lookPath(t, "python3")
	upOther := udpUpstream(t, upstreamUDPHost+":0")
	udpUpstream(t, upstreamUDPHost+":53")
	udpUpstream(t, upstreamUDPHost+":443")
	proxy := newStandIn(t).config()
	other := strconv.Itoa(int(upOther.Port()))

	tests := []struct {
		name     string
		cfg      Config
		args     []string
		wantData string      // "u", or the errno
		wantKind RefusalKind // 0: no refusal
	}{
		{"udp allowed", Config{AllowUDP: true}, []string{"sendto", "4", upstreamUDPHost, other}, "u", 0},
		{"udp allowed connected v6-mapped", Config{AllowUDP: true}, []string{"connect", "6", "::ffff:" + upstreamUDPHost, other}, "u", 0},
		{"udp allowed, quic still refused", Config{AllowUDP: true}, []string{"sendto", "4", upstreamUDPHost, "443"}, "EPERM", RefusalQUIC},
		{"quic allowed, udp still refused", Config{AllowQUIC: true}, []string{"sendto", "4", upstreamUDPHost, other}, "EPERM", RefusalUDP},
		{"no resolver: DNS refused as UDP", Config{}, []string{"sendto", "4", upstreamUDPHost, "53"}, "EPERM", RefusalUDP},
		{"no resolver, udp allowed: DNS untouched", Config{AllowUDP: true}, []string{"sendto", "4", upstreamUDPHost, "53"}, "u", 0},
		{"udp allowed: udplite still refused", Config{AllowUDP: true}, []string{"socket", "4", "2/136", "0"}, "EPERM", RefusalSocket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.ProxyV4, cfg.ProxyV6 = proxy.ProxyV4, proxy.ProxyV6
			r := loadRedirector(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			refusals, err := r.Refusals(ctx)
			if err != nil {
				t.Fatal(err)
			}
			leaf := newTestLeaf(t)
			closer, err := r.Attach(leaf.path)
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			rep := runRefuse(t, &leaf, python, tt.args...)
			if rep.Err == "EPROTONOSUPPORT" {
				t.Skipf("this kernel lacks it: %s", rep.Err)
			}
			got := rep.Data
			if rep.Err != "" {
				got = rep.Err
			}
			if got != tt.wantData {
				t.Errorf("client got %q, want %q (%+v)", got, tt.wantData, rep)
			}
			var kinds []RefusalKind
			for _, r := range refusalsBefore(t, refusals, rep.PID) {
				kinds = append(kinds, r.Kind)
			}
			var want []RefusalKind
			if tt.wantKind != 0 {
				want = []RefusalKind{tt.wantKind}
			}
			if diff := cmp.Diff(want, kinds, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("refusal kinds (-want +got):\n%s", diff)
			}
		})
	}
}

// pyFlood sends n datagrams to a refused port and prints how many failed
// with EPERM.
const pyFlood = `
import errno, socket, sys
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
refused = 0
for i in range(n):
    try:
        s.sendto(b"x", (host, port))
    except PermissionError:
        refused += 1
print(refused)
`

// TestRefusalsDropped floods the ring buffer with nobody reading: the
// reports that do not fit are dropped and counted, the calls are refused
// all the same, and the ones that fit are read later.
func TestRefusalsDropped(t *testing.T) {
	python := lookPath(t, "python3")
	r := loadRedirector(t, newStandIn(t).config())
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()

	const n = 8000 // more than the 256 KiB ring holds (72 bytes a report)
	cmd := exec.Command(python, "-c", pyFlood, strconv.Itoa(n), upstreamUDPHost, "9")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
	if got, _ := strconv.Atoi(string(out[:len(out)-1])); got != n {
		t.Fatalf("%d of %d datagrams refused, want all", got, n)
	}
	dropped, err := r.RefusalsDropped()
	if err != nil {
		t.Fatal(err)
	}
	if dropped == 0 || dropped >= n {
		t.Fatalf("RefusalsDropped = %d, want some of %d", dropped, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refusals, err := r.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := n - int(dropped)
	timeout := time.After(10 * time.Second)
	for got := 0; got < want; got++ {
		select {
		case rf := <-refusals:
			if rf.PID != uint32(cmd.Process.Pid) || rf.Kind != RefusalUDP {
				t.Fatalf("refusal %d: %+v, want UDP by pid %d", got, rf, cmd.Process.Pid)
			}
		case <-timeout:
			t.Fatalf("read %d refusals, want %d (%d of %d dropped)", got, want, dropped, n)
		}
	}
}

// TestRefusalsLifecycle: one reader at a time; its channel closes when its
// context ends, after the pending reports, or when the Redirector closes.
func TestRefusalsLifecycle(t *testing.T) {
	proxy := newStandIn(t).config()
	r := loadRedirector(t, proxy)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := r.Refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refusals(context.Background()); err == nil {
		t.Error("a second Refusals succeeded")
	}
	// Reports made before the context ends are still delivered.
	python := lookPath(t, "python3")
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rep := runRefuse(t, &leaf, python, "sendto", "4", upstreamUDPHost, "9")
	cancel()
	var pids []int
	for rf := range ch {
		pids = append(pids, int(rf.PID))
	}
	if diff := cmp.Diff([]int{rep.PID, rep.PID}, pids); diff != "" {
		t.Errorf("pids of the refusals delivered after cancel (-want +got):\n%s", diff)
	}
	waitClosed(t, ch, "after its context was canceled")

	r2 := loadRedirector(t, proxy)
	ch2, err := r2.Refusals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ch2, "after Close")
	if _, err := r2.Refusals(context.Background()); err == nil {
		t.Error("Refusals after Close succeeded")
	}
}

func waitClosed(t *testing.T, ch <-chan Refusal, when string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if ok {
			t.Errorf("a refusal arrived %s, want the channel closed", when)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the channel is still open %s", when)
	}
}
