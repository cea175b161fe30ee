//go:build linux

package redirect

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestConfigKernel(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    redirectConfig
		wantErr bool
	}{
		{
			name: "both",
			cfg:  Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:8080"), ProxyV6: netip.MustParseAddrPort("[::1]:8081")},
			want: redirectConfig{
				Proxy4Ip: words(netip.MustParseAddr("::ffff:127.0.0.1").As16())[3], Proxy4Port: 8080, Has4: 1,
				Proxy6Ip: words(netip.IPv6Loopback().As16()), Proxy6Port: 8081, Has6: 1,
			},
		},
		{
			name: "v4 only, given mapped",
			cfg:  Config{ProxyV4: netip.MustParseAddrPort("[::ffff:127.0.0.1]:80")},
			want: redirectConfig{Proxy4Ip: words(netip.MustParseAddr("::ffff:127.0.0.1").As16())[3], Proxy4Port: 80, Has4: 1},
		},
		{
			name: "resolvers, QUIC and UDP",
			cfg: Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:80"), DNSV4: netip.MustParseAddrPort("127.0.0.1:5353"),
				DNSV6: netip.MustParseAddrPort("[::1]:5354"), AllowQUIC: true, AllowUDP: true},
			want: redirectConfig{Proxy4Ip: words(netip.MustParseAddr("::ffff:127.0.0.1").As16())[3], Proxy4Port: 80, Has4: 1,
				Dns4Ip: words(netip.MustParseAddr("::ffff:127.0.0.1").As16())[3], Dns4Port: 5353, HasDns4: 1,
				Dns6Ip: words(netip.IPv6Loopback().As16()), Dns6Port: 5354, HasDns6: 1, AllowQuic: 1, AllowUdp: 1},
		},
		{name: "none", cfg: Config{}, wantErr: true},
		{name: "resolver only", cfg: Config{DNSV4: netip.MustParseAddrPort("127.0.0.1:53")}, wantErr: true},
		{name: "v6 resolver in v4 slot", cfg: Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:80"), DNSV4: netip.MustParseAddrPort("[::1]:53")}, wantErr: true},
		{name: "mapped resolver in v6 slot", cfg: Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:80"), DNSV6: netip.MustParseAddrPort("[::ffff:127.0.0.1]:53")}, wantErr: true},
		{name: "resolver port zero", cfg: Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:80"), DNSV4: netip.MustParseAddrPort("127.0.0.1:0")}, wantErr: true},
		{name: "v6 in v4 slot", cfg: Config{ProxyV4: netip.MustParseAddrPort("[::1]:80")}, wantErr: true},
		{name: "v4 in v6 slot", cfg: Config{ProxyV6: netip.MustParseAddrPort("127.0.0.1:80")}, wantErr: true},
		{name: "mapped in v6 slot", cfg: Config{ProxyV6: netip.MustParseAddrPort("[::ffff:127.0.0.1]:80")}, wantErr: true},
		{name: "zone", cfg: Config{ProxyV6: netip.MustParseAddrPort("[fe80::1%lo]:80")}, wantErr: true},
		{name: "port zero", cfg: Config{ProxyV4: netip.MustParseAddrPort("127.0.0.1:0")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.kernel()
			if (err != nil) != tt.wantErr {
				t.Fatalf("kernel() error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(redirectConfig{})); diff != "" {
				t.Errorf("kernel() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLocalKey(t *testing.T) {
	tests := []struct {
		name   string
		client netip.AddrPort
		want   [16]byte
	}{
		{"v4", netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddr("::ffff:127.0.0.1").As16()},
		{"v4-mapped", netip.MustParseAddrPort("[::ffff:127.0.0.1]:40000"), netip.MustParseAddr("::ffff:127.0.0.1").As16()},
		{"v6", netip.MustParseAddrPort("[::1]:40000"), netip.IPv6Loopback().As16()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, proto := range []uint8{ipprotoTCP, ipprotoUDP} {
				got := localKey(tt.client, proto)
				want := redirectLocalKey{Ip6: words(tt.want), Port: 40000, Proto: proto}
				if diff := cmp.Diff(want, got, cmp.AllowUnexported(redirectLocalKey{})); diff != "" {
					t.Errorf("localKey(%s, %d) (-want +got):\n%s", tt.client, proto, diff)
				}
			}
		})
	}
}

func TestOriginFromRecord(t *testing.T) {
	comm := func(s string) (c [16]int8) {
		for i := range len(s) {
			c[i] = int8(s[i])
		}
		return c
	}
	tests := []struct {
		name string
		rec  redirectOrigin
		want Origin
	}{
		{
			name: "connect4",
			rec: redirectOrigin{DstIp6: words(netip.MustParseAddr("::ffff:10.1.2.3").As16()), DstPort: 443, Family: afInet,
				Pid: 10, Tid: 11, Uid: 1000, Gid: 1001, CgroupId: 7, Cookie: 99, Comm: comm("curl")},
			want: Origin{Dst: netip.MustParseAddrPort("10.1.2.3:443"), PID: 10, TID: 11, UID: 1000, GID: 1001, CgroupID: 7, Cookie: 99, Comm: "curl"},
		},
		{
			name: "connect6 keeps the mapped form",
			rec:  redirectOrigin{DstIp6: words(netip.MustParseAddr("::ffff:10.1.2.3").As16()), DstPort: 80, Family: 10, Comm: comm("123456789012345")},
			want: Origin{Dst: netip.MustParseAddrPort("[::ffff:10.1.2.3]:80"), Comm: "123456789012345"},
		},
		{
			name: "connect6",
			rec:  redirectOrigin{DstIp6: words(netip.MustParseAddr("2001:db8::1").As16()), DstPort: 80, Family: 10},
			want: Origin{Dst: netip.MustParseAddrPort("[2001:db8::1]:80")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.rec.origin(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("origin() (-want +got):\n%s", diff)
			}
		})
	}
}

// The tests below load the programs into the kernel and start real
// processes in a cgroup of their own: they need root.

// loadRedirector loads a Redirector for the stand-in's addresses, or skips
// the test with the reason it cannot.
func loadRedirector(tb testing.TB, cfg Config) *Redirector {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("redirect: loading BPF programs needs root")
	}
	r, err := Load(cfg)
	if errors.Is(err, ErrNotPermitted) || errors.Is(err, ErrNotSupported) {
		tb.Skipf("redirect: this kernel or environment cannot load the programs: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// testLeaf is a cgroup v2 leaf made for one test.
type testLeaf struct {
	path string
	fd   int
	id   uint64
}

func newTestLeaf(tb testing.TB) testLeaf {
	tb.Helper()
	root, err := CgroupRoot()
	if errors.Is(err, errors.ErrUnsupported) {
		tb.Skipf("redirect: no cgroup v2 hierarchy: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "chaperone-redirect-test-")
	if err != nil {
		tb.Fatalf("create test cgroup: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		tb.Fatalf("open test cgroup: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		unix.Close(fd)
		// The last tasks may still be leaving after their parent reaped them.
		var err error
		for range 100 {
			if err = os.Remove(dir); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			tb.Errorf("remove test cgroup: %v", err)
		}
	})
	return testLeaf{path: dir, fd: fd, id: st.Ino}
}

// accepted is what the stand-in saw for one connection.
type accepted struct {
	listener string // "v4" or "v6"
	origin   Origin
	err      error
}

// standIn plays the proxy: it accepts on 127.0.0.1:0 and [::1]:0, looks up
// each connection's origin, records it, then sends "x" and closes.
type standIn struct {
	v4, v6   net.Listener
	results  chan accepted
	lookups  atomic.Int64
	failures atomic.Int64
	wg       sync.WaitGroup
}

func newStandIn(tb testing.TB) *standIn {
	tb.Helper()
	s := &standIn{results: make(chan accepted, 64)}
	var err error
	if s.v4, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	if s.v6, err = net.Listen("tcp6", "[::1]:0"); err != nil {
		s.v4.Close()
		tb.Skipf("redirect: no IPv6 loopback: %v", err)
	}
	tb.Cleanup(func() {
		s.v4.Close()
		s.v6.Close()
		s.wg.Wait()
	})
	return s
}

func (s *standIn) config() Config {
	return Config{ProxyV4: addrPort(s.v4.Addr()), ProxyV6: addrPort(s.v6.Addr())}
}

// serve starts the accept loops; lookup is nil for a plain listener.
func (s *standIn) serve(lookup func(netip.AddrPort) (Origin, error), record bool) {
	for name, ln := range map[string]net.Listener{"v4": s.v4, "v6": s.v6} {
		s.wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if lookup != nil {
					o, err := lookup(addrPort(c.RemoteAddr()))
					if err != nil {
						s.failures.Add(1)
					} else {
						s.lookups.Add(1)
					}
					if record {
						s.results <- accepted{listener: name, origin: o, err: err}
					}
				}
				// Answer, then drain until the client closes: closing with
				// unread data would reset the connection under the answer.
				c.Write([]byte("x"))
				c.(*net.TCPConn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
				c.Close()
			}
		})
	}
}

func addrPort(a net.Addr) netip.AddrPort {
	return a.(*net.TCPAddr).AddrPort()
}

// closedPort returns a port on which nothing listens on 127.0.0.2 now, so a
// connection there succeeds only when it is redirected.
func closedPort(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := addrPort(ln.Addr()).Port()
	ln.Close()
	return p
}

// upstream is a real server on 127.0.0.2 that answers "u": reaching it
// means the connection was not redirected.
func upstream(tb testing.TB) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("u"))
			c.Close()
		}
	})
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	return addrPort(ln.Addr())
}

// pyClient connects once and prints what it saw as JSON. Arguments:
// family (4, 6, or 4tfo for TCP Fast Open), host, port.
const pyClient = `
import json, os, socket, sys
fam = socket.AF_INET6 if sys.argv[1].startswith("6") else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
dst = (sys.argv[2], int(sys.argv[3]))
if sys.argv[1].endswith("tfo"):
    # TCP Fast Open connects in sendto, not connect.
    s.sendto(b"hi", socket.MSG_FASTOPEN, dst)
else:
    s.settimeout(10)
    s.connect(dst)
s.settimeout(10)
peer = s.getpeername()
data = s.recv(1).decode()
s.close()
comm = open("/proc/self/comm").read().strip()
print(json.dumps({"pid": os.getpid(), "comm": comm, "peer": "%s|%d" % (peer[0], peer[1]), "data": data}))
`

// pyLoop connects n times, waiting for the server's byte each time.
const pyLoop = `
import socket, sys
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(n):
    s = socket.create_connection((host, port), timeout=10)
    if s.recv(1) != b"x":
        sys.exit("connection %d: not the stand-in" % i)
    s.close()
print(n)
`

// clientReport is what a client process saw.
type clientReport struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	Peer string `json:"peer"` // python's getpeername(), host|port
	Data string `json:"data"` // "x": the stand-in, "u": the upstream
}

// runClient runs a client process, inside leaf when it is not nil.
func runClient(tb testing.TB, leaf *testLeaf, name string, args ...string) clientReport {
	tb.Helper()
	cmd := exec.Command(name, args...)
	if leaf != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = ee.Stderr
		}
		tb.Fatalf("%s %q: %v\n%s", name, args, err, stderr)
	}
	var rep clientReport
	if name == "bash" {
		// bash prints "pid comm data".
		f := strings.Fields(string(out))
		if len(f) != 3 {
			tb.Fatalf("bash printed %q", out)
		}
		rep.PID, _ = strconv.Atoi(f[0])
		rep.Comm, rep.Data = f[1], f[2]
	} else if err := json.Unmarshal(out, &rep); err != nil {
		tb.Fatalf("client printed %q: %v", out, err)
	}
	if rep.PID != cmd.Process.Pid {
		tb.Errorf("client reports pid %d, started as %d", rep.PID, cmd.Process.Pid)
	}
	return rep
}

func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("redirect: %s not installed", name)
	}
	return p
}

func TestRedirect(t *testing.T) {
	python := lookPath(t, "python3")
	lookPath(t, "bash")
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	s.serve(r.Lookup, true)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })

	closed := closedPort(t)
	up := upstream(t)
	p4, p6 := s.config().ProxyV4.Port(), s.config().ProxyV6.Port()
	port := strconv.Itoa(int(closed))
	bashScript := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.2/%d && read -r -n1 x <&3 && read -r c </proc/$$/comm && echo "$$ $c $x"`, closed)

	// want is what the test expects; the pid, comm and origin ids are
	// checked separately against the client's own report.
	type want struct {
		Listener string // "" when the stand-in must see nothing
		Dst      string // Origin.Dst; "" when the lookup must fail
		Peer     string // python's getpeername
		Data     string
	}
	tests := []struct {
		name   string
		inside bool
		cmd    []string
		want   want
	}{
		{
			name: "v4", inside: true,
			cmd:  []string{python, "-c", pyClient, "4", "127.0.0.2", port},
			want: want{Listener: "v4", Dst: "127.0.0.2:" + port, Peer: "127.0.0.2|" + port, Data: "x"},
		},
		{
			name: "v6", inside: true,
			cmd:  []string{python, "-c", pyClient, "6", "::1", port},
			want: want{Listener: "v6", Dst: "[::1]:" + port, Peer: "::1|" + port, Data: "x"},
		},
		{
			name: "v4-mapped on a dual-stack socket", inside: true,
			cmd:  []string{python, "-c", pyClient, "6", "::ffff:127.0.0.3", port},
			want: want{Listener: "v4", Dst: "[::ffff:127.0.0.3]:" + port, Peer: "::ffff:127.0.0.3|" + port, Data: "x"},
		},
		{
			name: "TCP Fast Open", inside: true,
			cmd:  []string{python, "-c", pyClient, "4tfo", "127.0.0.2", port},
			want: want{Listener: "v4", Dst: "127.0.0.2:" + port, Peer: "127.0.0.2|" + port, Data: "x"},
		},
		{
			name: "bash /dev/tcp", inside: true,
			cmd:  []string{"bash", "-c", bashScript},
			want: want{Listener: "v4", Dst: "127.0.0.2:" + port, Data: "x"},
		},
		{
			name: "outside the cgroup", inside: false,
			cmd:  []string{python, "-c", pyClient, "4", up.Addr().String(), strconv.Itoa(int(up.Port()))},
			want: want{Peer: fmt.Sprintf("%s|%d", up.Addr(), up.Port()), Data: "u"},
		},
		{
			name: "to the proxy v4", inside: true,
			cmd:  []string{python, "-c", pyClient, "4", "127.0.0.1", strconv.Itoa(int(p4))},
			want: want{Listener: "v4", Peer: fmt.Sprintf("127.0.0.1|%d", p4), Data: "x"},
		},
		{
			name: "to the proxy v6", inside: true,
			cmd:  []string{python, "-c", pyClient, "6", "::1", strconv.Itoa(int(p6))},
			want: want{Listener: "v6", Peer: fmt.Sprintf("::1|%d", p6), Data: "x"},
		},
		{
			name: "to the proxy v4-mapped", inside: true,
			cmd:  []string{python, "-c", pyClient, "6", "::ffff:127.0.0.1", strconv.Itoa(int(p4))},
			want: want{Listener: "v4", Peer: fmt.Sprintf("::ffff:127.0.0.1|%d", p4), Data: "x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in *testLeaf
			if tt.inside {
				in = &leaf
			}
			rep := runClient(t, in, tt.cmd[0], tt.cmd[1:]...)
			got := want{Peer: rep.Peer, Data: rep.Data}
			var acc accepted
			// The stand-in records before it answers, so the result is
			// there once the client has its answer.
			select {
			case acc = <-s.results:
				got.Listener = acc.listener
				if acc.err == nil {
					got.Dst = acc.origin.Dst.String()
				} else if !errors.Is(acc.err, ErrNotFound) {
					t.Errorf("Lookup: %v, want ErrNotFound", acc.err)
				}
			default:
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Dst == "" {
				return
			}
			o := acc.origin
			wantIDs := Origin{Dst: o.Dst, PID: uint32(rep.PID), TID: uint32(rep.PID), UID: uint32(os.Getuid()),
				GID: uint32(os.Getgid()), CgroupID: leaf.id, Cookie: o.Cookie, Comm: rep.Comm}
			if diff := cmp.Diff(wantIDs, o, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("Origin (-want +got):\n%s", diff)
			}
			if o.Cookie == 0 {
				t.Error("Origin.Cookie is zero")
			}
		})
	}
}

func TestAttachCloseStopsRedirecting(t *testing.T) {
	python := lookPath(t, "python3")
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	s.serve(r.Lookup, false)
	leaf := newTestLeaf(t)
	up := upstream(t)
	args := []string{"-c", pyClient, "4", up.Addr().String(), strconv.Itoa(int(up.Port()))}

	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	if got := runClient(t, &leaf, python, args...).Data; got != "x" {
		t.Fatalf("attached: client reached %q, want the stand-in (x)", got)
	}
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := runClient(t, &leaf, python, args...).Data; got != "u" {
		t.Fatalf("detached: client reached %q, want the upstream (u)", got)
	}

	// Close of the Redirector detaches what is still attached.
	if _, err := r.Attach(leaf.path); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runClient(t, &leaf, python, args...).Data; got != "u" {
		t.Fatalf("after Redirector.Close: client reached %q, want the upstream (u)", got)
	}
}

func TestLookupUnknown(t *testing.T) {
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	_, err := r.Lookup(netip.MustParseAddrPort("127.0.0.1:1"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of an unknown client: %v, want ErrNotFound", err)
	}
}

// TestRecordsDeletedOnLookup makes 10,000 connections from inside the
// cgroup: every one must be looked up, and no record may remain.
func TestRecordsDeletedOnLookup(t *testing.T) {
	python := lookPath(t, "python3")
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	s.serve(r.Lookup, false)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()

	const n = 10000
	cmd := exec.Command(python, "-c", pyLoop, strconv.Itoa(n), "127.0.0.2", strconv.Itoa(int(closedPort(t))))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if got, fails := s.lookups.Load(), s.failures.Load(); got != n || fails != 0 {
		t.Errorf("stand-in found %d origins and missed %d, want %d and 0", got, fails, n)
	}
	left, err := r.MapLen()
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("MapLen after %d looked-up connections = %d, want 0", n, left)
	}
	if got := r.objs.OriginByLocal.MaxEntries(); got != 65536 {
		t.Errorf("origin_by_local holds up to %d records, want the bound 65536", got)
	}
}

// TestMapLenCountsUnread checks that MapLen sees records the proxy has not
// read, so the leak test above can fail.
func TestMapLenCountsUnread(t *testing.T) {
	python := lookPath(t, "python3")
	s := newStandIn(t)
	r := loadRedirector(t, s.config())
	s.serve(nil, false) // accepts without looking up
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()

	const n = 5
	cmd := exec.Command(python, "-c", pyLoop, strconv.Itoa(n), "127.0.0.2", strconv.Itoa(int(closedPort(t))))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if got, err := r.MapLen(); err != nil || got != n {
		t.Fatalf("MapLen = %d, %v; want %d", got, err, n)
	}
}

// BenchmarkConnect measures connect() from a process in a cgroup, with
// (redirected) and without (plain) the programs attached, in one run. The
// benchmark moves its own process into a fresh cgroup for each case, so
// only the programs differ: cgroup membership is per process and sockets
// take their cgroup when created, so every socket the loop creates is
// covered. Both cases connect to the same stand-in listener: plain dials it
// directly, redirected dials a closed port on 127.0.0.2 and is sent there.
// The stand-in looks up each connection in both cases (plain ones miss), so
// the server side costs the same; Go's dial also calls getpeername, so the
// getpeername hook is measured too.
func BenchmarkConnect(b *testing.B) {
	s := newStandIn(b)
	r := loadRedirector(b, s.config())
	s.serve(r.Lookup, false)
	closed := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), closedPort(b))
	for _, bc := range []struct {
		name   string
		attach bool
		dst    netip.AddrPort
	}{
		{"plain", false, s.config().ProxyV4},
		{"redirected", true, closed},
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
			d := net.Dialer{}
			for b.Loop() {
				c, err := d.Dial("tcp4", bc.dst.String())
				if err != nil {
					b.Fatal(err)
				}
				// No TIME_WAIT left behind to exhaust the ports.
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		})
	}
}

// moveSelf moves the test process into the cgroup at dir until the
// benchmark ends, then back where it was.
func moveSelf(b *testing.B, dir string) {
	b.Helper()
	root, err := CgroupRoot()
	if err != nil {
		b.Fatal(err)
	}
	from, err := ownCgroup(root)
	if err != nil {
		b.Fatal(err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		b.Fatalf("move into the test cgroup: %v", err)
	}
	b.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(from, "cgroup.procs"), pid, 0); err != nil {
			b.Errorf("move back to %s: %v", from, err)
		}
	})
}

// ownCgroup returns the directory of this process's cgroup v2.
func ownCgroup(root string) (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return filepath.Join(root, rest), nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

// TestWithoutIPv6Proxy checks that, with no IPv6 listener, IPv6
// connections fail rather than leave directly, while v4-mapped ones still
// reach the IPv4 proxy.
func TestWithoutIPv6Proxy(t *testing.T) {
	python := lookPath(t, "python3")
	s := newStandIn(t)
	r := loadRedirector(t, Config{ProxyV4: s.config().ProxyV4})
	s.serve(r.Lookup, false)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	// A real IPv6 upstream: reaching it would be a leak.
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	const script = `
import errno, socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", s.recv(1).decode())
except OSError as e:
    print(errno.errorcode[e.errno])
`
	port := strconv.Itoa(int(addrPort(ln.Addr()).Port()))
	for _, tt := range []struct{ host, want string }{
		{"::1", "EPERM"},
		{"::ffff:127.0.0.2", "connected x"},
	} {
		t.Run(tt.host, func(t *testing.T) {
			cmd := exec.Command(python, "-c", script, tt.host, port)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("connect to [%s]:%s: %q, want %q", tt.host, port, got, tt.want)
			}
		})
	}
}
