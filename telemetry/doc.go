// Package telemetry owns what Chaperone reports about sessions: the audit
// log, a JSON Lines file with one Record per event, and OpenTelemetry
// traces, one per session, exported over OTLP.
//
// The log writes each acting process once per session, in a record of kind
// KindProcess, before the first record that names it by ProcessID, and
// folds routine file reads (event.Routine) into one KindFileReads record
// per process unless SetFileReads(true); denials, asks, writes, execs and
// every other read are written whole. Readers (ReadRecords, Follow) put
// each record's process back in Record.Process and read logs written
// before process records as they were.
//
// LogIndex follows a log as it grows and indexes it by session (each
// session's summary, tree, and a few bytes per record), for the live view
// to serve a page of a long session from disk.
//
// Guarantees:
//   - The audit log is the bus's Lossless subscriber: AuditLog.Run writes
//     every event it receives, in the order received, one line each (a
//     routine read in its process's file_reads record, written within
//     FoldInterval, before its session's end and at Close), and
//     flushes within about FlushDelay (10 ms) of an entry so that a follower
//     sees entries promptly.
//   - A Record never holds HTTP header values or other secrets: only the
//     fields listed on Record, whose producers already strip credentials.
//   - Each line is written whole, and the file is fsynced at most every
//     SyncInterval and on Close: a crash loses at most the unsynced tail,
//     and a line cut short by it is skipped by readers (a torn line stays
//     torn in the middle of the file once a later session appends).
//   - Readers never panic on malformed input: any other bad line is an
//     error naming its line number.
//   - The Tracer is a lossy subscriber and never slows the data path: it
//     may miss events when it falls behind, and spans go to the exporter
//     through a bounded queue (Provider) that drops rather than waits;
//     both losses are counted (Tracer.Dropped). A collector that is down
//     costs spans, never a stall: Run returns when the bus closes, and
//     Shutdown returns when its context ends.
//   - Spans hold no header values, prompts or answers (events carry none),
//     and, unless CaptureContent is set, no command-line arguments beyond
//     the program and no URL query values.
//   - Span model (docs/telemetry.md): a root span invoke_agent per session;
//     under it a span per process, nested by lineage; under those an HTTP
//     client span per request and a chat span per LLM call, with an
//     execute_tool span per tool call the model made. Connect, DNS, TLS,
//     file and exec events are span events of their process's span, and
//     actions are linked to the tool call that most plausibly caused them
//     (trace_tools.go says how).
//
// This package imports event, the standard library and go.opentelemetry.io
// modules; it must not import the proxy, policy or any package on the data
// path.
package telemetry
