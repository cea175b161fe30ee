package netx

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"
)

// CloseWrite half-closes c when it supports it.
func CloseWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// IsTimeout reports whether err is a deadline's.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// NormalizeHost lowercases a host name, drops a trailing dot and brackets,
// and prints IP addresses canonically.
func NormalizeHost(h string) string {
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return strings.ToLower(h)
}

// CloseLinger bounds how long a connection closed with its request
// unread is drained first, so that the client reads the answer rather
// than a reset.
const CloseLinger = 500 * time.Millisecond

// Fault is what went wrong on a client connection before a handler ran:
// the connection's servers report it, the proxy makes it an event.
type Fault uint32

const (
	FaultNone           Fault = iota
	FaultHeaderTimeout        // no whole request header within the read header timeout
	FaultHeaderTooLarge       // a request header over the server's hard limit
)

// ClientConn is a client's connection as the protocol servers (HTTP/1,
// HTTP/2) take it.
type ClientConn struct {
	C   net.Conn // requests are read from it and answered on it: Raw, or TLS over it
	Raw net.Conn // the socket beneath, whose deadlines the server sets
	// Gatherer, beneath C's TLS, sends the records of one write as one;
	// nil for none.
	Gatherer Gatherer
	Context  context.Context // the parent of every request's context
	Fault    func(Fault)     // told what ended the connection before a handler ran; nil for nothing
}
