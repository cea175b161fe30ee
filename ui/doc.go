// Package ui is the live view: a web app on loopback over the audit logs
// and the sessions' ask sockets. It lists the sessions, pages through a
// session's events, streams new ones (server-sent events), and answers
// the questions (asks) the sessions hold.
//
// Guarantees:
//   - It listens on loopback only (Listen refuses anything else), and
//     answers only requests whose Host is its own address (a rebound DNS
//     name is refused 421) carrying the cookie that the one-time token of
//     URL set; a POST also needs its own Origin.
//   - Every event field is untrusted and is served as JSON, never as
//     HTML; every response carries a Content-Security-Policy that forbids
//     inline script.
//   - The logs are read incrementally (telemetry.LogIndex): a session of
//     100,000 events is served a page at a time from disk.
//   - A slow page never slows the reading of the logs: each page's stream
//     has a bounded queue, and a page that falls behind is dropped (and
//     counted), to reconnect.
//   - While at least one page is connected to the stream, the server
//     watches the ask sockets (ask.Watch), which counts as somebody who
//     can answer; answers go through the sessions' control sockets
//     (ask.Send), whose own checks apply.
//
// It imports event, telemetry, internal/ask and the standard library.
package ui
