// Package origin is the benchmarks' HTTPS upstream: a server on a loopback
// address with a certificate from a CA made at start, offering h2 and
// http/1.1, serving bodies of fixed sizes generated on the fly.
//
// Guarantees:
//   - It listens only on 127.0.0.0/8 or ::1; Start refuses other addresses.
//   - The CA's key stays in memory; only its certificate is written (for
//     the proxies and clients that must trust it).
//   - Close stops the listener and closes every connection; it is safe to
//     call more than once.
//
// It imports only the standard library; no Chaperone package imports it.
package origin
