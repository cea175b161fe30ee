package main

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy"
)

// summary counts what a session did, for the lines printed when it ends.
type summary struct {
	sub  *event.Subscription
	done chan struct{}

	hosts map[string]*hostCount
	// challenged counts, by host, the proxy's 407s (proxy_auth) since the
	// last connection to the host with the session's credentials: libcurl
	// asks without them first (git's http.proxyAuthMethod anyauth), then
	// again with them. Those the client did not follow up are refusals.
	challenged map[string]int
}

// hostCount is what a session did with one host.
type hostCount struct {
	requests       int // http requests, allowed or not
	deniedRequests int
	deniedConnects int // connections (CONNECT, TLS) refused
	// deniedLookups counts refused DNS queries for it by type: a lookup
	// asks for A and AAAA at once, so the most of one type is the number
	// of lookups (lookups()).
	deniedLookups map[string]int
	rules         []string
}

func (h *hostCount) lookups() int {
	n := 0
	for _, c := range h.deniedLookups {
		n = max(n, c)
	}
	return n
}

func newSummary(sub *event.Subscription) *summary {
	s := &summary{sub: sub, done: make(chan struct{}), hosts: map[string]*hostCount{}, challenged: map[string]int{}}
	go s.run()
	return s
}

func (s *summary) run() {
	defer close(s.done)
	// Counts are read at the end only: wake at most every 10 ms.
	s.sub.Receive(10*time.Millisecond, s.add, nil)
}

// wait returns once the bus is closed and every event is counted.
func (s *summary) wait() { <-s.done }

func (s *summary) host(name string) *hostCount {
	h := s.hosts[name]
	if h == nil {
		h = &hostCount{}
		s.hosts[name] = h
	}
	return h
}

func (s *summary) add(e *event.Event) {
	denied := !e.Verdict.Allowed()
	var h *hostCount
	switch {
	case e.Connect != nil:
		name := e.Connect.Host
		if name == "" && e.Connect.Dst.IsValid() {
			name = e.Connect.Dst.Addr().String()
		}
		switch {
		case e.Session == "" && e.Verdict.Rule == proxy.RuleProxyAuth:
			s.challenged[name]++
			return // counted at the end if no request with credentials follows
		case e.Session != "":
			delete(s.challenged, name) // asked again, with the credentials
		}
		h = s.host(name)
		if denied {
			h.deniedConnects++
		}
	case e.HTTP != nil:
		h = s.host(hostname(e.HTTP.Host))
		h.requests++
		if denied {
			h.deniedRequests++
		}
	case e.TLS != nil && denied && e.TLS.ServerName != "":
		// A ClientHello refused on a connection that was allowed.
		h = s.host(e.TLS.ServerName)
		if h.deniedConnects == 0 {
			h.deniedConnects++
		}
	case e.DNS != nil && denied:
		h = s.host(e.DNS.Name)
		if h.deniedLookups == nil {
			h.deniedLookups = map[string]int{}
		}
		h.deniedLookups[e.DNS.Type]++
	default:
		return
	}
	if denied && e.Verdict.Rule != "" && !contains(h.rules, e.Verdict.Rule) {
		h.rules = append(h.rules, e.Verdict.Rule)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (s *summary) print(w io.Writer, session, auditLog string, code int) {
	names := make([]string, 0, len(s.hosts))
	requests, denied := 0, 0
	for n, c := range s.challenged {
		h := s.host(n)
		h.deniedConnects += c
		if !contains(h.rules, proxy.RuleProxyAuth) {
			h.rules = append(h.rules, proxy.RuleProxyAuth)
		}
	}
	clear(s.challenged)
	for n, h := range s.hosts {
		names = append(names, n)
		requests += h.requests
		denied += h.deniedRequests + h.lookups()
		if h.deniedRequests == 0 {
			denied += h.deniedConnects
		}
	}
	sort.Strings(names)
	fmt.Fprintf(w, "chaperone: session %s ended, exit status %d: %s to %s, %d denied\n",
		session, code, plural(requests, "request"), plural(len(names), "host"), denied)
	for _, n := range names {
		h := s.hosts[n]
		line := plural(h.requests, "request")
		if h.deniedRequests > 0 {
			line += fmt.Sprintf(", %d denied", h.deniedRequests)
		}
		if h.deniedConnects > 0 {
			line += ", connection denied"
		}
		if h.lookups() > 0 {
			line += ", name lookup denied"
		}
		if len(h.rules) > 0 {
			line += " (rule " + strings.Join(h.rules, ", ") + ")"
		}
		fmt.Fprintf(w, "  %-32s %s\n", n, line)
	}
	if n := s.sub.Dropped(); n > 0 {
		fmt.Fprintf(w, "  (the summary missed %d events; the audit log has them all)\n", n)
	}
	fmt.Fprintf(w, "chaperone: audit log: %s\n", auditLog)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// hostname strips the port from a host[:port] value.
func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
