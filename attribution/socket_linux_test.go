package attribution

import (
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
)

// TestSockDiagMatchesProcNet checks that sock_diag and /proc/net give the
// same inode for the same real socket, in every form a client socket takes.
func TestSockDiagMatchesProcNet(t *testing.T) {
	requireSockDiag(t)
	tbl := realTable(t)
	type socket struct{ local, remote netip.AddrPort }
	sockets := map[string]func(t *testing.T) socket{
		"ipv4 client": func(t *testing.T) socket {
			ln, c, _ := loopbackPair(t, "127.0.0.1:0")
			return socket{addrPort(t, c.LocalAddr()), addrPort(t, ln.Addr())}
		},
		"ipv4 server side": func(t *testing.T) socket {
			_, _, srv := loopbackPair(t, "127.0.0.1:0")
			return socket{addrPort(t, srv.LocalAddr()), addrPort(t, srv.RemoteAddr())}
		},
		"ipv4 asked v4-mapped": func(t *testing.T) socket {
			ln, c, _ := loopbackPair(t, "127.0.0.1:0")
			mapped := func(ap netip.AddrPort) netip.AddrPort {
				return netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
			}
			return socket{mapped(addrPort(t, c.LocalAddr())), mapped(addrPort(t, ln.Addr()))}
		},
		"ipv6 client": func(t *testing.T) socket {
			ln, c, _ := loopbackPair(t, "[::1]:0")
			return socket{addrPort(t, c.LocalAddr()), addrPort(t, ln.Addr())}
		},
		"ipv6 server side": func(t *testing.T) socket {
			_, _, srv := loopbackPair(t, "[::1]:0")
			return socket{addrPort(t, srv.LocalAddr()), addrPort(t, srv.RemoteAddr())}
		},
		"child af_inet": func(t *testing.T) socket {
			c := startPythonClient(t, pyAFInet)
			return socket{c.local, c.remote}
		},
		"child af_inet6 v4-mapped": func(t *testing.T) socket {
			c := startPythonClient(t, pyAFInet6Mapped)
			requireMappedInTCP6(t, c.local, c.remote)
			return socket{c.local, c.remote}
		},
	}
	for name, open := range sockets {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			want, err := tbl.procNetInode(s.local, s.remote)
			if err != nil {
				t.Fatalf("procNetInode(%v, %v): %v", s.local, s.remote, err)
			}
			got, err := SockDiag(s.local, s.remote)
			if err != nil || got != want {
				t.Errorf("SockDiag(%v, %v) = %d, %v; want /proc/net's %d", s.local, s.remote, got, err, want)
			}
			if !s.local.Addr().Unmap().Is4() {
				return
			}
			// The kernel finds an IPv4 pair in either request form, whatever
			// the socket's family; SockDiag's second form is a fallback.
			l, r := normalize(s.local), normalize(s.remote)
			for _, family := range []uint8{linuxAFInet, linuxAFInet6} {
				if got, err := sockDiag(l, r, []uint8{family}); err != nil || got != want {
					t.Errorf("sockDiag(%v, %v) as family %d = %d, %v; want %d", l, r, family, got, err, want)
				}
			}
		})
	}
}

func TestSockDiagNotFound(t *testing.T) {
	requireSockDiag(t)
	ln, c, _ := loopbackPair(t, "127.0.0.1:0")
	lnAddr, client := addrPort(t, ln.Addr()), addrPort(t, c.LocalAddr())
	tests := []struct {
		name          string
		local, remote netip.AddrPort
	}{
		// The kernel's exact lookup falls back to the listener on the
		// local port; that is not the socket asked for.
		{"only a listener on the local port", lnAddr, netip.MustParseAddrPort("127.0.0.1:1")},
		{"no socket", client, client},
		{"families mixed", client, netip.MustParseAddrPort("[::1]:1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ino, err := SockDiag(tt.local, tt.remote); !errors.Is(err, ErrNotFound) {
				t.Errorf("SockDiag(%v, %v) = %d, %v; want ErrNotFound", tt.local, tt.remote, ino, err)
			}
		})
	}
}

// TestRealSocketLookupFallback checks that a Table whose lookup fails still
// finds a real socket through /proc/net.
func TestRealSocketLookupFallback(t *testing.T) {
	realTable(t)
	ln, c, _ := loopbackPair(t, "127.0.0.1:0")
	local, remote := addrPort(t, c.LocalAddr()), addrPort(t, ln.Addr())
	for _, fail := range []error{errors.ErrUnsupported, ErrNotFound} {
		t.Run(fail.Error(), func(t *testing.T) {
			var calls atomic.Int32
			tbl := NewTable(OSProc(), WithSocketLookup(func(netip.AddrPort, netip.AddrPort) (uint64, error) {
				calls.Add(1)
				return 0, fail
			}))
			got, err := tbl.SocketOwner(local, remote, nil)
			if err != nil || got != os.Getpid() {
				t.Errorf("SocketOwner = %d, %v; want %d", got, err, os.Getpid())
			}
			if calls.Load() != 1 {
				t.Errorf("lookup called %d times, want 1", calls.Load())
			}
		})
	}
}
