// Package gomitm is a bare elazarl/goproxy intercepting proxy: every
// CONNECT is answered with a leaf of its own CA (ECDSA P-256, one per host,
// kept in memory), requests go upstream through one http.Transport, and
// HTTP/2 is offered to clients. Nothing is decided, rewritten or logged.
// The benchmarks run it as a column of their own: it is the library
// Chaperone's proxy would otherwise be built on, and the figure its
// performance targets were set against.
//
// It must not import other chaperone packages than bench/benchca.
package gomitm
