// Package proxy owns Chaperone's network data path: the explicit-proxy
// listener (HTTP CONNECT and absolute-URI requests), the tunnel logic shared
// with transparent mode (protocol sniffing, TLS interception, HTTP/1.1,
// HTTP/2 and WebSocket forwarding, requests for relays, passthrough of
// other TCP), and applying the verdicts a Decider returns to connect, tls
// and http events.
//
// Guarantees:
//   - Fail closed: an event is published with the verdict that was applied.
//     A verdict that is not allow or rewrite (deny, ask, unknown, a Decider
//     that panics) refuses: 403 for a request, a closed connection for a
//     ClientHello. A denied CONNECT is answered 200 and the tunnel is kept
//     only to answer each HTTP(S) request in it with the 403 that names the
//     rule (clients hide a CONNECT response's body; an agent must read why);
//     a denied tunnel carrying anything else is closed. A ClientHello that
//     cannot be parsed closes the connection; it is never passed through
//     uninspected.
//   - Not an open proxy: every explicit-proxy request must carry
//     Proxy-Authorization for user "chaperone" with the token of a current
//     session (compared in constant time, never logged), else 407. A tunnel
//     whose session is unknown or removed is closed. Proxy-Authorization and
//     Proxy-Connection never reach an upstream.
//   - Nothing is dialled for a denied connection or request, and a request
//     whose Host differs from its tunnel's destination (domain fronting) is
//     refused with 421; on a tunnel to an address without a name, the Host
//     must be the address or a name the session's resolver answered with
//     it (Options.Names).
//   - A request for a relay at the far end of a tunnel (a CONNECT in any
//     spelling a permissive proxy reads, a SOCKS4, 4a or 5 request, a
//     request in absolute form for another host) is decided as a connect
//     event for its target (Via "relay") before the relay is told
//     anything; allowed, the proxy asks the relay itself, for the target as
//     decided, and every upstream connection of the tunnel that follows
//     goes through the relay, never on a pooled connection that does not.
//   - In a session with Rewrites, a request's header, query and body
//     (decoded) are searched for secrets before its http event is decided
//     (secrets.go); a body too large to hold is searched as it streams, and
//     one that turns out to carry a secret the policy refuses is stopped
//     before its end reaches the upstream. A body that cannot be decoded is
//     refused (undecodable_body), never sent unchecked.
//   - Upstream certificates are always verified against Options.UpstreamRoots
//     (or the system roots); verification is never turned off.
//   - Events are published when their verdict is applied. An allowed
//     request's http event waits for the end of its response (body copied,
//     or failed: HTTP.Error says which side, after how many bytes), then
//     its llm event follows; a protocol switch's is published at the 101.
//     Publish is called from the data path and must not block for long.
//   - No wait is unbounded: a client's request header (ReadHeaderTimeout),
//     ClientHello and handshake (HandshakeTimeout) and an upstream's
//     response header (UpstreamHeaderTimeout, then 504) each have a limit,
//     and headers over MaxHeaderBytes get 431 (a client's) or 502 (an
//     upstream's). A client's header that times out or is refused gets an
//     http event (rules header_timeout, header_too_large), also when the
//     connection ends before any handler runs. A failing connection or
//     request never stops others.
//   - Close works after a partial start, closes listeners, tunnels and
//     upstream connections, and leaves no goroutine behind.
//
// Decrypted and plain HTTP/1 requests from a tunnel are served by a loop
// of its own on the connection (h1.Server: plain requests parsed by our own
// reader, any other by http.ReadRequest, a lean ResponseWriter, no buffer
// held while idle); HTTP/2 (by ALPN) and h2c (by
// prior knowledge) by a server of its own too (h2.Server: x/net's framer and
// HPACK, handlers on long-lived workers that write their own frames).
// Either way each connection carries its tunnel, so requests find it in
// their context without a lookup table. Allowed
// requests go upstream over HTTP/1.1 on pooled kept-alive connections,
// written and read on the handler's own goroutine (h1.Transport), except an
// HTTP/2 client's gRPC requests, which go through an http.Transport that
// speaks HTTP/2 when the upstream offers it; never through an environment
// proxy, without hop-by-hop headers, and their responses stream back:
// every write is flushed at once, except the one that completes a body of
// known length, which leaves with the handler's return, so nothing is
// held.
// QUIC connections redirected in transparent mode (ServeQUIC) are
// terminated by proxy/internal/h3 (quic-go) and their HTTP/3 requests
// served by the same handler; a request goes upstream over HTTP/3 when its
// client came over QUIC or its origin advertised h3 (Alt-Svc, remembered
// per host:port), over TCP when QUIC cannot reach the origin
// (upstream_h3.go).
// A WebSocket upgrade (over HTTP/1.1, or an extended CONNECT on an HTTP/2
// stream, RFC 8441) goes to serveSocket, which makes both handshakes and
// runs proxy/internal/ws's relay with a handler per connection: in a
// session with rewrites, to an LLM API, the LLM handler
// (websocket_llm.go), which decides and redacts each client message as an
// llm event and restores the placeholders of the server's; to any other
// host, the message handler (websocket_msg.go), which decides and records
// each data message either way as a ws event. A refused message closes
// the connection with 1008 and the reason to the client, 1001 to the
// server. Other protocol switches go through httputil.ReverseProxy.
//
// This package imports event, tls, rewrite, proxy/internal/ws (the
// WebSocket message layer) and proxy/internal/h3 (QUIC and HTTP/3), which
// import nothing of the project, and the standard library; it must not
// import cmd, certs, redirect, internal/upstream or any package above it.
// Policy, attribution and rewriting reach it through the Decider,
// ProcessFinder and Publish options.
package proxy
