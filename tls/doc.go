// Package tls owns what Chaperone does with TLS on the data path: reading a
// ClientHello (server name, ALPN, versions) without consuming it, the server
// configuration that terminates an intercepted connection with a leaf minted
// for the name the client asked for, and the roots that verify upstreams.
//
// Importers alias it (chtls) because it shadows crypto/tls, which this
// package imports as stdtls.
//
// Guarantees:
//   - Sniff and ParseClientHello never consume, modify or retain the bytes
//     they read, read at most SniffBufferSize bytes, and fail with an error
//     wrapping ErrNotClientHello or ErrTruncated rather than guess: a hello
//     they cannot parse is never treated as plain data.
//   - Upstream certificates are always verified: no Go file of the module
//     may name crypto/tls's option for skipping verification, and a test of
//     this package fails if one does.
//   - All functions are safe for concurrent use; a returned Config may be
//     shared by any number of connections.
//
// This package imports only the standard library and x/crypto's cryptobyte;
// it reaches certificates through the CertSource interface and must not
// import certs, proxy or any other Chaperone package.
package tls
