package upstream

import (
	"net"
	"net/netip"
)

// ServeTCP listens on addr (an IP literal on loopback, port 0) and serves
// each connection with fn on a goroutine of its own, closing it after;
// the listener closes with the test. It returns the address it listens at.
func ServeTCP(t TB, addr string, fn func(c net.Conn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fn(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// TB is what ServeTCP needs of a test (testing.TB), without the testing
// package in the binaries that use this one (chaperone demo).
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}
