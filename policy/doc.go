// Package policy decides what happens to each event: allow, deny, rewrite or
// ask.
//
// For now it holds the built-in policy: allow everything except the hosts
// listed in the configuration's deny_hosts. Rules with CEL conditions,
// plugins and the LLM judge build on the same Decide contract.
//
// Decide is synchronous and safe for concurrent use; it never returns an
// unset verdict for an action it cannot judge: it returns a deny.
//
// This package imports only event and the standard library.
package policy
