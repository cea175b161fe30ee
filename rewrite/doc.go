// Package rewrite owns what Chaperone reads and changes in the bodies of LLM
// API calls: recognising a call by host and path (DetectAPI), reading a
// request for its model, streaming flag and the agent's current task
// (Inspect), rewriting the string values of a JSON body in place
// (RewriteStrings), replacing a request body's secrets with placeholders,
// in its strings, in JSON inside them and in escaped text, and wherever
// else a secret found once occurs (RedactBody, with a Redactor such as
// rewrite/secrets'), undoing and redoing
// Content-Encoding, stacked codings included, whole or as a stream (Decode,
// Encoding.Encode, Encoding.NewReader), checking a body too large to hold
// as it streams, window by window, giving out only what has been checked
// (StreamScanner), and passing a response through as
// it streams while parsing its usage, finish reasons and tool calls and
// restoring redacted placeholders (ResponseReader). Secret detection lives in
// rewrite/secrets, credential injection and identity headers in
// rewrite/inject.
//
// It is pure logic: no network, no files, no clocks, no logging. Errors never
// carry body content, so they never carry a secret. Everything is safe for
// concurrent use except a ResponseReader or a StreamScanner, which belong to
// one response or request.
//
// It imports only the standard library, github.com/klauspost/compress/zstd and
// github.com/andybalholm/brotli; of the project, at most event.
package rewrite
