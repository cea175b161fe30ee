// Package plugin is the wire format of Chaperone's policy plugins and a small
// library for writing one in Go.
//
// A plugin is a program that Chaperone starts and talks to over its stdin and
// stdout, one JSON object per line (docs/plugins.md describes the protocol
// for any language). Chaperone sends a Request for each event the plugin
// subscribed to; the plugin answers with a Response carrying the same id and
// a verdict: allow, deny, rewrite, ask or abstain. Several requests may be in
// flight at once, and answers may come in any order.
//
// A Go plugin is a main package that calls Serve:
//
//	func main() {
//		err := plugin.Serve(os.Stdin, os.Stdout, func(e plugin.Event) plugin.Verdict {
//			if e.Kind == event.KindHTTP && e.Method == "DELETE" {
//				return plugin.Verdict{Verdict: plugin.Deny, Reason: "no DELETE"}
//			}
//			return plugin.Verdict{Verdict: plugin.Abstain}
//		})
//		if err != nil {
//			log.Fatal(err) // stderr is logged by Chaperone
//		}
//	}
//
// Serve fails closed: a verdict it cannot send as given (empty or unknown
// word) goes out as a deny.
//
// This package imports only event and the standard library; the policy
// package imports it for the wire format.
package plugin
