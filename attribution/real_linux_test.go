package attribution

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// Tests against the real /proc of the machine running them.

func realTable(t testing.TB) *Table {
	t.Helper()
	if _, err := os.ReadFile("/proc/self/stat"); err != nil {
		t.Skipf("no readable /proc: %v", err)
	}
	return NewTable(OSProc())
}

func addrPort(t testing.TB, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatalf("parse %v: %v", a, err)
	}
	return ap
}

func TestRealProcessSelf(t *testing.T) {
	tbl := realTable(t)
	p, err := tbl.Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || p.UID != os.Getuid() || p.Exe != exe || p.Cwd != wd {
		t.Errorf("Process(self) = pid %d ppid %d uid %d exe %q cwd %q; want %d %d %d %q %q",
			p.PID, p.PPID, p.UID, p.Exe, p.Cwd, os.Getpid(), os.Getppid(), os.Getuid(), exe, wd)
	}
	if diff := cmp.Diff(os.Args, p.Argv); diff != "" {
		t.Errorf("Argv (-want +got):\n%s", diff)
	}
	if len(p.Lineage) == 0 || p.Lineage[0] != os.Getppid() {
		t.Errorf("Lineage = %v, want it to start with the parent %d", p.Lineage, os.Getppid())
	}
}

func TestRealProcessChild(t *testing.T) {
	tbl := realTable(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	wantExe, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	before := time.Now()
	cmd := exec.Command(sleep, "30")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil { // returns once the exec has succeeded
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// Start returns when the exec has closed the child's descriptors, which
	// the kernel does before it sets up the new arguments: until then
	// cmdline is empty (and is not cached).
	var p *event.Process
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if p, err = tbl.Process(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if len(p.Argv) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if p.PID != cmd.Process.Pid || p.PPID != os.Getpid() || p.Exe != wantExe || p.Cwd != dir || p.UID != os.Getuid() {
		t.Errorf("Process(child) = pid %d ppid %d exe %q cwd %q uid %d; want %d %d %q %q %d",
			p.PID, p.PPID, p.Exe, p.Cwd, p.UID, cmd.Process.Pid, os.Getpid(), wantExe, dir, os.Getuid())
	}
	if diff := cmp.Diff([]string{sleep, "30"}, p.Argv); diff != "" {
		t.Errorf("Argv (-want +got):\n%s", diff)
	}
	if len(p.Lineage) == 0 || p.Lineage[0] != os.Getpid() {
		t.Errorf("Lineage = %v, want it to start with the test process %d", p.Lineage, os.Getpid())
	}
	if !slices.Contains(p.Lineage, os.Getppid()) {
		t.Errorf("Lineage = %v, want it to hold the test's parent %d", p.Lineage, os.Getppid())
	}
	// Boot time plus ticks at 100/s must land near the moment the child
	// started; a wrong tick rate or field would be off by far more.
	if d := p.StartTime.Sub(before); d < -5*time.Second || d > time.Minute {
		t.Errorf("StartTime = %v, %v from just before the start", p.StartTime, d)
	}
	if !tbl.IsDescendant(cmd.Process.Pid, os.Getpid()) {
		t.Errorf("IsDescendant(child, self) = false")
	}
	if tbl.IsDescendant(os.Getpid(), cmd.Process.Pid) {
		t.Errorf("IsDescendant(self, child) = true")
	}
	if d := tbl.Descendants(os.Getpid()); len(d) == 0 || d[0] != os.Getpid() || !slices.Contains(d, cmd.Process.Pid) {
		t.Errorf("Descendants(self) = %v, want self first and the child %d", d, cmd.Process.Pid)
	}

	// Once the child is gone, it is not found.
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := tbl.Process(cmd.Process.Pid); !errors.Is(err, ErrNotFound) {
		t.Errorf("Process(reaped child) error = %v, want ErrNotFound", err)
	}
}

// realTables are the ways a Table over the real /proc finds a socket's
// inode: /proc/net only, and sock_diag first.
var realTables = []struct {
	name string
	new  func(t testing.TB) *Table
}{
	{"procnet", realTable},
	{"netlink", func(t testing.TB) *Table {
		requireSockDiag(t)
		return NewTable(OSProc(), WithSocketLookup(SockDiag))
	}},
}

// requireSockDiag skips when the kernel has no sock_diag for this process.
func requireSockDiag(t testing.TB) {
	t.Helper()
	realTable(t)
	_, err := SockDiag(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:1"))
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no sock_diag: %v", err)
	}
}

// loopbackPair connects a client to a server listening on addr (127.0.0.1:0
// or [::1]:0), both in this process. It skips when the family has no
// loopback.
func loopbackPair(t testing.TB, addr string) (ln net.Listener, client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s (no loopback for this family?): %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close() })
	return ln, client, server
}

func TestRealSocketOwnerSelf(t *testing.T) {
	for _, rt := range realTables {
		for _, network := range []struct{ name, addr string }{
			{"ipv4", "127.0.0.1:0"},
			{"ipv6", "[::1]:0"},
		} {
			t.Run(rt.name+"/"+network.name, func(t *testing.T) {
				tbl := rt.new(t)
				ln, c, srv := loopbackPair(t, network.addr)
				self := func() []int { return []int{os.Getpid()} }
				for _, tc := range []struct {
					name          string
					local, remote net.Addr
					candidates    func() []int
				}{
					{"client side, full scan", c.LocalAddr(), ln.Addr(), nil},
					{"client side, candidates", c.LocalAddr(), ln.Addr(), self},
					{"server side", srv.LocalAddr(), srv.RemoteAddr(), self},
				} {
					got, err := tbl.SocketOwner(addrPort(t, tc.local), addrPort(t, tc.remote), tc.candidates)
					if err != nil || got != os.Getpid() {
						t.Errorf("%s: SocketOwner(%v, %v) = %d, %v; want %d", tc.name, tc.local, tc.remote, got, err, os.Getpid())
					}
				}
				for range 2 { // the second finds the first's owner first
					got, err := tbl.SessionSocketOwner(addrPort(t, c.LocalAddr()), addrPort(t, ln.Addr()), os.Getpid())
					if err != nil || got != os.Getpid() {
						t.Errorf("SessionSocketOwner(%v, %v) = %d, %v; want %d", c.LocalAddr(), ln.Addr(), got, err, os.Getpid())
					}
				}
				if _, err := tbl.SocketOwner(addrPort(t, c.LocalAddr()), addrPort(t, c.LocalAddr()), nil); !errors.Is(err, ErrNotFound) {
					t.Errorf("SocketOwner(no such socket) error = %v, want ErrNotFound", err)
				}
			})
		}
	}
}

// pythonClient is a python3 child connected to a listener of this process.
type pythonClient struct {
	pid int
	// local is the child's address as the listener sees it; remote is the
	// listener's.
	local, remote netip.AddrPort
}

// Scripts that connect to 127.0.0.1:PORT and then sleep.
const (
	pyAFInet = "s = socket.create_connection(('127.0.0.1', PORT))\n"
	// The socket is AF_INET6, so the kernel lists it in tcp6 as
	// ::ffff:127.0.0.1 while the listener sees 127.0.0.1.
	pyAFInet6Mapped = "s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n" +
		"s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n" +
		"s.connect(('::ffff:127.0.0.1', PORT))\n"
)

// startPythonClient runs script in a python3 child and waits until it has
// connected to a listener on 127.0.0.1. Child and connection end with the
// test.
func startPythonClient(t testing.TB, script string) pythonClient {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	cmd := exec.Command(python, "-c", "import socket, time\n"+strings.ReplaceAll(script, "PORT", port)+"time.sleep(60)\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	var conn net.Conn
	select {
	case conn = <-accepted:
	case err := <-exited:
		exited <- err
		t.Fatalf("child exited before connecting: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not connect within 30s")
	}
	t.Cleanup(func() { conn.Close() })
	return pythonClient{pid: cmd.Process.Pid, local: addrPort(t, conn.RemoteAddr()), remote: addrPort(t, ln.Addr())}
}

func TestRealSocketOwnerChild(t *testing.T) {
	tests := []struct {
		name   string
		script string
		mapped bool
	}{
		{name: "af_inet", script: pyAFInet},
		{name: "af_inet6 v4-mapped", script: pyAFInet6Mapped, mapped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			child := startPythonClient(t, tt.script)
			if tt.mapped {
				requireMappedInTCP6(t, child.local, child.remote)
			}
			for _, rt := range realTables {
				t.Run(rt.name, func(t *testing.T) {
					tbl := rt.new(t)
					got, err := tbl.SocketOwner(child.local, child.remote, func() []int { return tbl.Descendants(os.Getpid()) })
					if err != nil || got != child.pid {
						t.Fatalf("SocketOwner(%v, %v) = %d, %v; want the child %d", child.local, child.remote, got, err, child.pid)
					}
					if got, err := tbl.SessionSocketOwner(child.local, child.remote, os.Getpid()); err != nil || got != child.pid {
						t.Fatalf("SessionSocketOwner(%v, %v) = %d, %v; want the child %d", child.local, child.remote, got, err, child.pid)
					}
					p, err := tbl.Process(got)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(p.Lineage, os.Getpid()) {
						t.Errorf("child's Lineage = %v, want it to hold the test process %d", p.Lineage, os.Getpid())
					}
					if len(p.Argv) < 2 || p.Argv[1] != "-c" {
						t.Errorf("child's Argv = %q, want python's -c", p.Argv)
					}
				})
			}
		})
	}
}

// requireMappedInTCP6 checks that the kernel lists the socket (local,
// remote) in tcp6 in its v4-mapped form, so the test exercises that form.
func requireMappedInTCP6(t *testing.T, local, remote netip.AddrPort) {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp6")
	if err != nil {
		t.Skipf("no /proc/net/tcp6: %v", err)
	}
	mapped := func(ap netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
	}
	found := false
	parseNetTCP(data, func(l, r netip.AddrPort, _ uint64) bool {
		found = l == mapped(local) && r == mapped(remote)
		return !found
	})
	if !found {
		t.Fatalf("socket %v -> %v is not in /proc/net/tcp6 as v4-mapped", local, remote)
	}
}

// BenchmarkSocketOwner compares the ways of finding a socket's inode
// (/proc/net against sock_diag) crossed with the ways of finding its owner:
// among the caller's candidates (this process alone, or Descendants of this
// process read on each call), by SessionSocketOwner, or by scanning every
// process.
func BenchmarkSocketOwner(b *testing.B) {
	realTable(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	local, remote := addrPort(b, c.LocalAddr()), addrPort(b, ln.Addr())
	pid := os.Getpid()

	for _, rt := range realTables {
		b.Run(rt.name, func(b *testing.B) {
			tbl := rt.new(b)
			for _, bc := range []struct {
				name  string
				owner func() (int, error)
			}{
				{"candidates=self", func() (int, error) {
					return tbl.SocketOwner(local, remote, func() []int { return []int{pid} })
				}},
				{"candidates=Descendants", func() (int, error) {
					return tbl.SocketOwner(local, remote, func() []int { return tbl.Descendants(pid) })
				}},
				{"session", func() (int, error) { return tbl.SessionSocketOwner(local, remote, pid) }},
				{"fullscan", func() (int, error) { return tbl.SocketOwner(local, remote, nil) }},
			} {
				b.Run(bc.name, func(b *testing.B) {
					for b.Loop() {
						got, err := bc.owner()
						if err != nil || got != pid {
							b.Fatalf("SocketOwner = %d, %v; want %d", got, err, pid)
						}
					}
				})
			}
		})
	}
}

// BenchmarkSocketInode compares finding a socket's inode in /proc/net with
// asking sock_diag, without the search for its owner.
func BenchmarkSocketInode(b *testing.B) {
	requireSockDiag(b)
	ln, c, _ := loopbackPair(b, "127.0.0.1:0")
	local, remote := addrPort(b, c.LocalAddr()), addrPort(b, ln.Addr())
	tbl := realTable(b)
	for _, bc := range []struct {
		name  string
		inode func() (uint64, error)
	}{
		{"procnet", func() (uint64, error) { return tbl.procNetInode(local, remote) }},
		{"netlink", func() (uint64, error) { return SockDiag(local, remote) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.inode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
