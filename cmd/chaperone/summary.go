package main

import (
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"

	"github.com/chaperone-dev/chaperone/event"
)

// summary counts what a session did, for the lines printed when it ends.
type summary struct {
	sub  *event.Subscription
	done chan struct{}

	hosts    map[string]*hostCount
	requests int
	denials  []string
}

type hostCount struct {
	requests, denied int
}

func newSummary(sub *event.Subscription) *summary {
	s := &summary{sub: sub, done: make(chan struct{}), hosts: map[string]*hostCount{}}
	go s.run()
	return s
}

func (s *summary) run() {
	defer close(s.done)
	for e := range s.sub.Events() {
		s.add(e)
	}
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
	var target string
	switch {
	case e.Connect != nil:
		name := e.Connect.Host
		if name == "" && e.Connect.Dst.IsValid() {
			name = e.Connect.Dst.Addr().String()
		}
		target = net.JoinHostPort(name, strconv.Itoa(int(e.Connect.Port)))
		h := s.host(name)
		if denied {
			h.denied++
		}
	case e.HTTP != nil:
		target = e.HTTP.Method + " " + e.HTTP.URL
		s.requests++
		h := s.host(hostname(e.HTTP.Host))
		h.requests++
		if denied {
			h.denied++
		}
	case e.TLS != nil:
		target = "TLS " + e.TLS.ServerName
	default:
		return
	}
	if denied {
		d := fmt.Sprintf("%s %s", e.Kind, target)
		if e.Verdict.Rule != "" {
			d += " (rule " + e.Verdict.Rule + ")"
		}
		s.denials = append(s.denials, d)
	}
}

func (s *summary) print(w io.Writer, ss *session, code int) {
	names := make([]string, 0, len(s.hosts))
	for n := range s.hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "chaperone: session %s ended, exit status %d: %d requests, %d hosts, %d denied\n",
		ss.id, code, s.requests, len(names), len(s.denials))
	for _, n := range names {
		h := s.hosts[n]
		fmt.Fprintf(w, "  %-40s %d requests, %d denied\n", n, h.requests, h.denied)
	}
	for _, d := range s.denials {
		fmt.Fprintf(w, "  denied: %s\n", d)
	}
	if n := s.sub.Dropped(); n > 0 {
		fmt.Fprintf(w, "  (summary missed %d events; the audit log has them all)\n", n)
	}
	fmt.Fprintf(w, "chaperone: audit log: %s\n", ss.auditLog)
}

// hostname strips the port from a host[:port] value.
func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
