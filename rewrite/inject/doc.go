// Package inject owns what Chaperone adds to an agent's requests on its way
// out: real credentials in place of the placeholders the agent was given
// (credential brokering), and headers that say which session and agent made
// a request (identity headers for Chaperone, LiteLLM, Portkey, Helicone,
// Cloudflare AI Gateway and W3C Trace Context).
//
// Guarantees:
//   - A credential's value goes only into requests to the hosts it is bound
//     to; a placeholder seen on any other host is left in place and reported
//     as leaked, for the caller to deny.
//   - No value is ever returned, logged or put in an error: Credential and
//     Broker print and log without it.
//   - Identity header values are printable ASCII of bounded length, whatever
//     the names they come from; the agent cannot set or spoof them.
//   - Broker is immutable after NewBroker and safe for concurrent use; the
//     functions here keep no state.
//
// The package is pure logic (no network, no files, no clock; randomness is
// passed in) and imports only the standard library.
package inject
