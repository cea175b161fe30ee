// Command denyhost-plugin is an example Chaperone policy plugin: it denies
// connect and http events whose host is one of its arguments (or a
// subdomain of an argument written as *.domain) and abstains on everything
// else.
//
// In a policy file:
//
//	plugins:
//	  - name: denyhost
//	    command: [denyhost-plugin, evil.example, "*.paste.example"]
//	    on: [connect, http]
package main

import (
	"fmt"
	"log"
	"net"
	"os"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/plugin"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("denyhost-plugin: ")
	deny := newHosts(os.Args[1:])
	if err := plugin.Serve(os.Stdin, os.Stdout, deny.decide); err != nil {
		log.Fatal(err) // stderr goes to Chaperone's log
	}
}

// hosts is the list of denied names; it is read-only once built, so decide
// may run concurrently.
type hosts struct {
	exact    map[string]bool
	suffixes []string // ".paste.example" from "*.paste.example"
}

func newHosts(args []string) *hosts {
	h := &hosts{exact: map[string]bool{}}
	for _, a := range args {
		a = normal(a)
		if s, ok := strings.CutPrefix(a, "*."); ok {
			h.suffixes = append(h.suffixes, "."+s)
		} else if a != "" {
			h.exact[a] = true
		}
	}
	return h
}

func (h *hosts) decide(e plugin.Event) plugin.Verdict {
	if e.Kind != event.KindConnect && e.Kind != event.KindHTTP {
		return plugin.Verdict{Verdict: plugin.Abstain}
	}
	host := normal(e.Host)
	if host == "" && e.Dst != "" { // a connection known only by its address
		host = normal(e.Dst)
	}
	if h.denied(host) {
		return plugin.Verdict{Verdict: plugin.Deny, Rule: "denyhost", Reason: fmt.Sprintf("%s is on the deny list", host)}
	}
	return plugin.Verdict{Verdict: plugin.Abstain}
}

func (h *hosts) denied(host string) bool {
	if host == "" {
		return false
	}
	if h.exact[host] {
		return true
	}
	for _, s := range h.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// normal lowercases a host and strips a port, brackets and a final dot.
func normal(host string) string {
	host = strings.ToLower(strings.TrimSpace(host))
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.Trim(host, "[]"), ".")
}
