package policy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
)

// RuleDenyHosts is the name of the built-in rule that denies the hosts of
// the configuration's deny_hosts.
const RuleDenyHosts = "deny_hosts"

// Builtin is the built-in policy: deny the listed hosts, allow the rest.
type Builtin struct {
	deny *HostList
}

// NewBuiltin returns the built-in policy denying denyHosts (see
// NewHostList for the entries' form).
func NewBuiltin(denyHosts []string) (*Builtin, error) {
	l, err := NewHostList(denyHosts)
	if err != nil {
		return nil, fmt.Errorf("policy: deny_hosts: %w", err)
	}
	return &Builtin{deny: l}, nil
}

// HostList matches hosts against a list of names, *.domain wildcards and
// IP addresses.
type HostList struct {
	exact    map[string]bool
	suffixes []string // ".example.com" from "*.example.com"
	addrs    map[netip.Addr]bool
}

// NewHostList returns a list of hosts. An entry is a host name
// ("example.com"), a wildcard for its subdomains ("*.example.com", which
// does not match example.com itself) or an IP address.
func NewHostList(hosts []string) (*HostList, error) {
	b := &HostList{exact: map[string]bool{}, addrs: map[netip.Addr]bool{}}
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		switch {
		case h == "":
			return nil, fmt.Errorf("empty host")
		case strings.HasPrefix(h, "*."):
			b.suffixes = append(b.suffixes, h[1:])
		default:
			if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
				b.addrs[a.Unmap()] = true
				continue
			}
			if strings.ContainsAny(h, "*/:@ ") {
				return nil, fmt.Errorf("%q is not a host name, *.domain or IP address", h)
			}
			b.exact[h] = true
		}
	}
	return b, nil
}

// Decide implements the built-in policy.
func (b *Builtin) Decide(_ context.Context, e *event.Event) event.Verdict {
	if host, addr := target(e); b.deny.Match(host, addr) {
		name := host
		if name == "" {
			name = addr.String()
		}
		return event.Verdict{
			Action:    event.Deny,
			Rule:      RuleDenyHosts,
			Reason:    name + " is listed in deny_hosts",
			DecidedBy: event.DecidedByRule,
		}
	}
	return event.Verdict{Action: event.Allow, DecidedBy: event.DecidedByDefault, Reason: "allowed by default"}
}

// Match reports whether host (a name, IP literal or host:port) or addr is
// in the list.
func (b *HostList) Match(host string, addr netip.Addr) bool {
	if len(b.addrs) == 0 && len(b.exact) == 0 && len(b.suffixes) == 0 {
		return false // the usual deny_hosts, asked about every event
	}
	if addr.IsValid() && b.addrs[addr.Unmap()] {
		return true
	}
	host = strings.TrimSuffix(strings.ToLower(hostOnly(host)), ".")
	if host == "" {
		return false
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return b.addrs[a.Unmap()]
	}
	if b.exact[host] {
		return true
	}
	for _, s := range b.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// target returns the host name and address an event is about.
func target(e *event.Event) (string, netip.Addr) {
	switch {
	case e.Connect != nil:
		return e.Connect.Host, e.Connect.Dst.Addr()
	case e.TLS != nil:
		return e.TLS.ServerName, netip.Addr{}
	case e.HTTP != nil:
		return hostOnly(e.HTTP.Host), netip.Addr{}
	case e.DNS != nil:
		return e.DNS.Name, netip.Addr{}
	}
	return "", netip.Addr{}
}

// hostOnly strips a port from a Host header value. It runs for every
// request, often on its own result, so the common cases (a name or an
// IPv4 address, with or without a port) allocate nothing.
func hostOnly(hostport string) string {
	i := strings.LastIndexByte(hostport, ':')
	switch {
	case i < 0:
		return strings.Trim(hostport, "[]")
	case strings.IndexByte(hostport, ':') == i: // a name or an IPv4 address, and a port
		return hostport[:i]
	}
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		return ap.Addr().String()
	}
	return strings.Trim(hostport, "[]")
}
