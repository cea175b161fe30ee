// Package dns owns a session's resolver: the server that the session's
// port-53 traffic (UDP and TCP) reaches in transparent mode. It answers
// static names from the configuration, forwards the rest to upstream
// resolvers, asks a Decider about every query, publishes one dns event per
// query, and remembers the names each answered address was looked up as,
// and by which processes, so that a later connection to a bare IP can be
// named: by the name its own process looked the address up as
// (NameForProcess), and checked against every name the session resolved to
// it (Resolved). An address answers for many names (a CDN's does): the
// last lookup of it by anyone (NameFor) names no other connection.
//
// Guarantees:
//   - Fail closed: a query is forwarded or answered only when the Decider
//     allows it (allow or rewrite). Any other verdict, including ask (no one
//     can be asked on this path), an unknown action and a Decider that
//     panics, answers Options.DenyRcode, and no upstream is asked.
//   - Every well-formed query with one question produces exactly one event,
//     published before the reply is sent, carrying the verdict applied, the
//     reply's rcode, the A/AAAA addresses of its answer and the process
//     that Options.Process found for the client's address (set before the
//     Decider is asked). Responses and packets shorter than a header are
//     dropped; other bytes that do not parse, and queries with other than
//     one question, get FORMERR, other opcodes NOTIMP, all without an event
//     since they name nothing to decide, and nothing is forwarded for them
//     nor any process looked up.
//   - Static names are authoritative: they are never forwarded, and a type
//     they have no record for gets NOERROR with an empty answer.
//   - UDP replies respect the client's advertised size (512 without EDNS0)
//     and set TC when cut; a truncated UDP answer from an upstream is asked
//     again over TCP.
//   - Name memory is bounded (an LRU of recent addresses, the most recent
//     names of each, the most recent processes of each name) and entries
//     expire; NameFor, NameForProcess and Resolved are safe for concurrent
//     use.
//   - Close works after a partial start, stops the listeners, connections
//     and in-flight upstream exchanges, and returns once no goroutine of the
//     Server is left.
//
// This package imports event, the standard library and github.com/miekg/dns;
// it must not import policy, proxy or the kernel layer.
package dns
