// Package secretcorpus generates labeled agent traffic for measuring secret
// redaction: request bodies of Anthropic Messages, OpenAI Chat and
// Responses (as Codex sends them), Gemini and Bedrock Converse, serialized
// as JavaScript, Python (ensure_ascii), Go (HTML escapes) and
// pretty-printing clients write them, in sessions that grow turn by turn.
// Fake secrets of every type the redactor's rules cover are planted in
// every place an agent's traffic holds them (system prompt, user text,
// assistant prose and its bare quotes of values seen earlier, tool input
// and output, file views with line numbers, JSON inside JSON strings) and
// laid out as .env files, YAML, TOML, Kubernetes manifests, PEM keys raw,
// escaped and indented, shell history, curl lines and URLs; beside them,
// hard negatives (UUIDs, hashes, images, signatures, encrypted reasoning,
// placeholders, documented example keys) that redaction must leave alone.
//
// Every body carries its labels: each planted secret (type, location,
// layout, the JSON pointer of the string that holds it) and each hard
// negative. Request.Check scores a redacted body against them and Tally
// adds the scores up.
//
// Guarantees: the same Options give the same bytes (nothing depends on
// the clock or crypto/rand; private keys are random bytes in the DER
// structure of real ones); every body is valid JSON; every label's value
// (or probes) is in the string its pointer names. Nothing generated is a
// live credential. Values are test data, but tests must still never print
// them: print a label's type, location and layout only.
//
// Secrets, the generator of fake secrets, is shared by the tests of
// rewrite/secrets (its labeled corpus) and this package's sessions.
//
// It is meant for tests and benchmarks. It imports the standard library
// only, and must not import rewrite/secrets or proxy (their tests import
// it).
package secretcorpus
