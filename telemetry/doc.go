// Package telemetry owns what Chaperone reports about sessions: for now the
// audit log, a JSON Lines file with one Record per event; OpenTelemetry
// traces per session will join it here.
//
// Guarantees:
//   - The audit log is the bus's Lossless subscriber: AuditLog.Run writes
//     every event it receives, in the order received, one line each, and
//     flushes whenever its queue is momentarily empty so that a follower
//     sees entries promptly.
//   - A Record never holds HTTP header values or other secrets: only the
//     fields listed on Record, whose producers already strip credentials.
//   - Readers never panic on malformed input: a bad line is an error naming
//     its line number.
//
// This package imports event and the standard library; it must not import
// the proxy, policy or any package on the data path.
package telemetry
