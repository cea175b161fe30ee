// Package secrets finds secrets (API keys, tokens, private keys, passwords)
// in text bound for an LLM provider, and replaces them with placeholders that
// the responses can be restored from.
//
// It owns the detectors and their engine. The detectors are gitleaks' default
// rule set (github.com/zricethezav/gitleaks/v8/config: keywords, regexes,
// secret groups, entropy thresholds, allowlists) plus our own for what
// gitleaks misses: an AWS secret access key near its key id (in the same
// JSON object; never near a documentation key id) or after its name
// (aws-secret-access-key), the password of a database URL (database-url),
// environment variables whose name says secret, on .env and shell lines,
// set inline in a command or as name/value pairs (env-secret), keys of
// config files and code, flags and query parameters whose name says secret
// (named-secret), passwords given with their user to curl or in a URL
// (basic-auth), every value of a Kubernetes Secret's data and stringData
// (kubernetes-secret), Azure Storage account keys (azure-storage-account-key),
// PEM private keys whole in every layout agents' tools show them (private-key,
// replacing gitleaks' rule of that id) and the private key of a GCP
// service-account JSON (gcp-service-account). Rules scoped to file paths are
// not used: a prompt has no path. A value of gitleaks' rules ends at any byte
// that could not have been its token's last (a keyword assignment's also
// at an escaped quote, ',', '&', ')' and the like); placeholders
// (change-me, ${VAR}, <…>) are never the value of a rule that goes by
// names. A text that is wholly base64 is also searched decoded, and is a
// secret when what it decodes to holds one.
//
// The engine makes one pass of an Aho-Corasick automaton over the text for
// every rule's keywords (ASCII case-insensitive) and runs a rule's regex only
// where one of its keywords occurs: anchored at the keyword when every match
// starts there, otherwise in a window around it sized from the regex; a rule
// matched by hand (private keys, names that say secret) runs its matcher at
// the keyword. Rules without keywords run on the whole text.
//
// Guarantees:
//   - A Scanner is built once and is safe for concurrent use; Scan returns
//     findings sorted by Start and non-overlapping (of two overlapping
//     candidates the longer wins, then the more specific rule).
//   - Offsets are those of the secret itself (the rule's secret group).
//   - A Redactor belongs to one session and is safe for concurrent use. Its
//     placeholders are [REDACTED:<rule-id>:<hex>], the hex from an
//     HMAC-SHA256 of the secret under the session key (4 digits, more when
//     two secrets of the session would share one); Lookup restores only the
//     placeholders that Redactor made. It remembers what the rules found
//     in each text of at least 32 bytes it has searched (positions and rule
//     ids, by two hashes of the text under keys of its own), as agents
//     resend their history with each request; known values are searched
//     for each time. Redact allocates nothing when the text holds no
//     secret (but for a text that is wholly the base64 of text, which is
//     decoded, and the first search of a long text, which is remembered).
//   - A Known set belongs to one session (each Redactor has one) and is
//     safe for concurrent use: the secret values the session has shown,
//     found again in later texts also encoded (base64 at each alignment,
//     hex, percent-encoded, JSON-escaped); a match carries the rule id and
//     position, never the value. Bounded in values and their length.
//   - StreamOverlap is the context a scan of a stream must carry from one
//     window to the next so that no secret is cut.
//   - No secret is ever logged or put in an error.
//
// This package is pure logic: no I/O. It must not import any package of this
// module (it needs none; event is the only one it would be allowed), and
// outside the standard library only gitleaks' config package and viper (to
// parse gitleaks' embedded configuration).
package secrets
