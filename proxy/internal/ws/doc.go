// Package ws is the WebSocket message layer of Chaperone's proxy: RFC 6455
// framing, the permessage-deflate extension (RFC 7692) and its
// negotiation, and Relay, which passes the messages of one connection
// between its two sides, each through a Handler chosen for the
// connection (the proxy's LLM handler for an LLM API, its message
// handler, which decides and records every message, for any other host).
//
// Each side is negotiated on its own: the relay is the server to the
// client and the client to the server, so it decompresses what it reads
// and compresses what it writes as each side agreed, context takeover
// included (read always; written unless the peer refused it), and a
// message changed by the handler never has to match a window the other
// side built.
//
// Guarantees:
//   - Nothing is passed on that was not read whole and valid as a frame:
//     a side that breaks the protocol (a reserved opcode or bit, a frame
//     masked the wrong way, a fragmented or oversized control frame, a
//     continuation out of place, a corrupt compressed message) ends the
//     connection, with close code 1002 to it and 1001 to the other side.
//   - Every data message reaches the Handler: held whole up to the bound
//     it chose, or streamed frame by frame (nothing held) and reported at
//     its end. Control frames pass as they are, between the fragments of
//     a message too; a close frame is passed on once, after what the
//     handler held back, and the relay waits for its answer a bounded time.
//   - A handler that closes the connection (a refused message) sends the
//     client its code and reason, and the server 1001.
//   - Relay returns only when both of its goroutines are done, and both
//     sides are closed by then.
//
// It imports only the standard library; never event or any package of
// the project: policy reaches it through the Handler.
package ws
