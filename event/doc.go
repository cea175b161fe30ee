// Package event owns Chaperone's event model: what happened (a session
// starting, a connection, a DNS query, a TLS ClientHello, an HTTP exchange, an
// LLM call, a file open, an exec), who did it (the process and its session),
// and what was decided about it (the Verdict).
//
// Every I/O path (network, file, exec) produces the same Event type, so the
// policy, the audit log and telemetry see one model.
//
// Fields is the event's one flat projection: each value of an event, its
// key in the audit log's records and in the events plugins are given, its
// variable in policy conditions and its attribute on a trace's span event.
// Flat copies events to and from the flat forms (telemetry.Record,
// plugin.Event). A member added to the event types without a Field fails
// TestFieldsCoverEvents.
//
// Guarantees:
//   - Verdict's zero value denies: a decision that was never reached fails
//     closed.
//   - An Event is immutable once published on a Bus; subscribers must not
//     modify it.
//   - The Bus never blocks a publisher on a lossy subscriber; a subscriber
//     opened with Lossless (the audit log) applies backpressure instead of
//     losing an entry.
//
// This package imports only the standard library.
package event
