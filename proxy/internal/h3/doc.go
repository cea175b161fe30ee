// Package h3 is the HTTP/3 machinery of Chaperone's proxy: Server
// terminates QUIC on a packet connection and serves each connection's
// requests to an http.Handler, Client sends requests upstream over HTTP/3
// to the address the caller names, and ParseAltSvc reads the Alt-Svc
// header (RFC 7838) that says an origin offers HTTP/3.
//
// Guarantees:
//   - Server never accepts 0-RTT data, QUIC datagrams or WebTransport, and
//     serves only ALPN h3. A connection is admitted (Server.Admit) only
//     once its handshake has completed, so a refusal's CONNECTION_CLOSE
//     travels in 1-RTT packets and carries its reason phrase (in Initial
//     and Handshake packets QUIC allows no application reason).
//   - A connection stays on the client address it started from: packets of
//     an established connection from any other address are dropped, so a
//     client cannot migrate it (quic-go itself would follow a validated
//     new path), and whatever Start found for the address stays true.
//   - Client dials only the address it is given, verifies the server's
//     certificate against its TLS configuration's roots, and reports a
//     failure to reach the server (before any byte of the request left)
//     as an error that wraps ErrUnreachable, so the caller may send the
//     request another way.
//   - Close works after a partial start and leaves no goroutine behind.
//
// It imports quic-go and the standard library; never event, policy,
// rewrite or any other package of the project: policy reaches it through
// the Server's callbacks and the Handler.
package h3
