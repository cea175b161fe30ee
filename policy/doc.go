// Package policy decides what happens to each event: allow, deny, rewrite
// or ask.
//
// A policy file holds a plain-language intent, rules whose conditions are
// CEL expressions over the event (first match wins, in the file's order),
// plugins (separate processes), an LLM judge that reads the intent, and a
// default. Parse and Load refuse a policy with any problem and report every
// one with its line and rule: Chaperone never runs half a policy. The
// built-in policy of deny_hosts (Builtin) and the embedded default policy
// live here too.
//
// Engine.Decide is synchronous and safe for concurrent use; it never
// returns an unset verdict: anything that fails denies, or gives the
// configured on_error. The judge's answers are cached by the event's
// decision-relevant fields; the judge's own requests never go through a
// session.
//
// This package imports event, plugin, cel-go, go.yaml.in/yaml/v3 and
// golang-lru; nothing of the I/O or kernel layers.
package policy
