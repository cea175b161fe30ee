// Package upstream provides real local servers that stand in for the
// internet: in Chaperone's end-to-end tests, its proxy tests and the offline
// `chaperone demo`.
//
// A Server is an HTTP server (HTTPS when given a CA, offering h2 and
// http/1.1 through ALPN) on a loopback address, answering for a host name
// such as "api.example.test". It records every request it receives, before
// its handler runs, so a test can check what actually reached the upstream
// after the proxy allowed, denied or rewrote it. The default handler serves a
// greeting, byte streams, echoes, chosen statuses, header dumps and a
// WebSocket echo; GitHandler serves bare Git repositories over smart HTTP;
// LLMHandler is a simple fake LLM API and WSLLM its WebSocket twin
// (Responses over WebSocket, Realtime, Gemini Live); ScriptedLLM speaks the
// APIs that Claude Code, Codex and Gemini CLI use closely enough that the
// real CLIs run a scripted turn against it (a shell tool call, then an
// answer that quotes the tool's output). A Server with AnyName answers TLS
// for every host name, so one server stands in for all the hosts a program
// contacts. A Resolver is a DNS server that names them, recording every
// question.
// A Relay is a permissive HTTP proxy and SOCKS4/4a/5 server that records
// what it was asked and opens connections to loopback addresses only.
//
// Guarantees:
//   - A Server or Resolver only ever listens on a loopback address
//     (127.0.0.0/8 or ::1); Start and StartResolver refuse any other
//     address, and host names are never resolved.
//   - Certificates come from an in-memory CA made for the purpose; nothing
//     touches the system trust store.
//   - Requests and WaitRequests are safe for concurrent use and return
//     copies in arrival order.
//   - A request is recorded with the first MaxRecordedBody bytes of its body,
//     read before the handler runs; the handler still reads the whole body.
//     A client that waits for a response before finishing a shorter body
//     therefore stalls: the recording is not meant for such exchanges.
//   - Requests are kept until Close, so a long benchmark grows the record.
//   - Close stops the listener and closes every connection, including
//     hijacked (WebSocket) ones; it is safe to call more than once.
//
// This package imports only the standard library, gorilla/websocket and
// miekg/dns; no other Chaperone package imports it except tests and the
// demo command.
package upstream
