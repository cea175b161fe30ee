// Package h2 is the HTTP/2 machinery of Chaperone's proxy: Server serves
// a client connection's streams (h2 over TLS, or h2c with prior
// knowledge) to an http.Handler, each on a worker of Workers, with the
// framing, HPACK and header checks of golang.org/x/net/http2. An extended
// CONNECT for websocket (RFC 8441) reaches the handler as an HTTP/1.1
// upgrade request.
//
// Guarantees:
//   - At most 250 streams of a connection run at once, counted until
//     their handler returns; flow control holds a client to 1 MiB ahead
//     per stream and per connection.
//   - A header list over MaxHeader is answered 431, or ends the
//     connection when it is far over, and is reported as
//     FaultHeaderTooLarge; a preface that does not come within Preface is
//     FaultHeaderTimeout.
//   - A handler's panic resets its stream, not the connection.
//
// The package knows nothing of policy or events: the proxy reaches it
// through http.Handler and the Fault callback.
package h2
