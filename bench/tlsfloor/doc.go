// Package tlsfloor is about the least a TLS-intercepting HTTP/1.1 proxy
// written in Go does, for the benchmarks to show what such a proxy costs on
// the machine before it does anything of its own. It answers CONNECT to a
// loopback IP:port, ends the client's TLS with a leaf its CA signs (one per
// host, kept), opens one TLS connection to the origin per client connection
// and sends each request and response on, head as received, body framed by
// Content-Length: one goroutine per connection, bufio and crypto/tls,
// HTTP/1.1 only. It decides nothing, logs nothing, and does not touch
// headers, not even hop-by-hop ones; what it cannot frame this way (chunked
// bodies, a response without Content-Length) ends the connection.
//
// It must not import other chaperone packages than bench/benchca.
package tlsfloor
