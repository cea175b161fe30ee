// Package h1 is the HTTP/1.1 machinery of Chaperone's proxy: Server serves
// a client connection's requests to an http.Handler with one loop and no
// goroutine per request, Transport sends requests upstream on the caller's
// goroutine from a pool of kept-alive connections, and the wire format
// both share (request lines, requests and responses read and written,
// header fields) is read by parsers of our own that fall back to
// net/http's wherever they are not sure.
//
// Guarantees:
//   - What the parsers take, net/http would read the same way (fuzzed
//     against http.ReadRequest and http.ReadResponse); what they do not
//     take is read by net/http.
//   - Server bounds a request header (MaxHeaderBytes: 431 and
//     FaultHeaderTooLarge), its arrival (ReadHeaderTimeout:
//     FaultHeaderTimeout), the wait between requests (IdleTimeout) and a
//     write that makes no progress (StallTimeout); no handler runs for a
//     fault. A body the handler left unread closes the connection.
//   - Transport sends a request again only when it may (no body,
//     idempotent) and only on a kept-alive connection that turned out
//     closed; it never pools connections of different Routes together.
//
// The package knows nothing of policy or events: the proxy reaches it
// through http.Handler, Route and the Fault callback.
package h1
