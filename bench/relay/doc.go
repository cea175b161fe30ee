// Package relay is an HTTP CONNECT proxy that only copies bytes: no TLS,
// no HTTP inside the tunnel, no decision, no log. The benchmarks run it as
// a column of their own to show what one more hop on the loopback
// interface costs by itself, apart from the work of an intercepting proxy.
//
// It opens tunnels to loopback addresses only (IP:port, no names), and
// must not import other chaperone packages.
package relay
