package h3

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
)

// pinnedConn keeps each QUIC connection to the client address it started
// from: a short-header packet (one of an established connection) from an
// address that started no connection is dropped, so a connection cannot
// move to another address (migration, NAT rebinding), where the origin
// found at its first packet would no longer be the sender's. Long-header
// packets (a handshake) pass: a new connection's origin is looked up for
// its own address.
type pinnedConn struct {
	net.PacketConn
	mu    sync.Mutex
	known map[netip.AddrPort]int // connections started from each address
}

func newPinnedConn(pc net.PacketConn) *pinnedConn {
	return &pinnedConn{PacketConn: pc, known: make(map[netip.AddrPort]int)}
}

// pin counts a connection from addr until ctx, the connection's, ends.
func (c *pinnedConn) pin(ctx context.Context, addr netip.AddrPort) {
	c.mu.Lock()
	c.known[addr]++
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		if c.known[addr]--; c.known[addr] <= 0 {
			delete(c.known, addr)
		}
		c.mu.Unlock()
	})
}

func (c *pinnedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil || n == 0 || b[0]&0x80 != 0 {
			return n, addr, err
		}
		c.mu.Lock()
		_, ok := c.known[addrPortOf(addr)]
		c.mu.Unlock()
		if ok {
			return n, addr, nil
		}
	}
}

// SetReadBuffer and SetWriteBuffer let quic-go size the socket's buffers,
// as it does for a *net.UDPConn.
func (c *pinnedConn) SetReadBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return errors.New("h3: the packet connection has no read buffer to size")
}

func (c *pinnedConn) SetWriteBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return errors.New("h3: the packet connection has no write buffer to size")
}
