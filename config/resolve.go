package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Resolve pins a host name to an address, like curl --resolve.
type Resolve struct {
	Host string     // lower case, without a trailing dot
	Port uint16     // 0 means any port
	Addr netip.Addr // never zoned; IPv4-mapped IPv6 is unmapped
}

// String formats r so that ParseResolve gives r back: HOST:ADDR or
// HOST:PORT:ADDR, with IPv6 addresses in brackets.
func (r Resolve) String() string {
	a := r.Addr.String()
	if r.Addr.Is6() {
		a = "[" + a + "]"
	}
	if r.Port == 0 {
		return r.Host + ":" + a
	}
	return r.Host + ":" + strconv.Itoa(int(r.Port)) + ":" + a
}

// ParseResolve parses HOST:ADDR or HOST:PORT:ADDR. An IPv6 address may be in
// brackets, and must be when the host has no port and the address could be
// read as PORT:ADDR (write "h:[1::2]", not "h:1::2" meaning any port).
// Examples: "api.example.com:127.0.0.2", "api.example.com:443:127.0.0.2",
// "h:[::1]", "h:443:::1", "h:443:[::1]".
func ParseResolve(s string) (Resolve, error) {
	r, problem := parseResolve(s)
	if problem != "" {
		return Resolve{}, fmt.Errorf("config: resolve %q %s", s, problem)
	}
	return r, nil
}

const resolveWant = "(want HOST:ADDR or HOST:PORT:ADDR)"

// parseResolve returns the problem as a predicate of s, or "".
func parseResolve(s string) (Resolve, string) {
	host, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Resolve{}, "has no address " + resolveWant
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !isHostName(host) {
		return Resolve{}, "does not start with a host name " + resolveWant
	}
	r := Resolve{Host: host}
	// PORT:ADDR when what follows the first colon is digits and the
	// remainder is an address; otherwise the whole rest is the address.
	if p, a, ok := strings.Cut(rest, ":"); ok && p != "" && allDigits(p) {
		if addr, err := parseAddr(a); err == nil {
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil || port == 0 {
				return Resolve{}, "has a port outside 1-65535 " + resolveWant
			}
			r.Port = uint16(port)
			r.Addr = addr
			return r, ""
		}
	}
	addr, err := parseAddr(rest)
	if err != nil {
		return Resolve{}, "does not end with an IP address " + resolveWant
	}
	r.Addr = addr
	return r, ""
}

func parseAddr(s string) (netip.Addr, error) {
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return netip.Addr{}, errors.New("unclosed bracket")
		}
		s = s[1 : len(s)-1]
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, err
		}
		if !a.Is6() {
			return netip.Addr{}, errors.New("brackets around an IPv4 address")
		}
		return finishAddr(a)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return finishAddr(a)
}

func finishAddr(a netip.Addr) (netip.Addr, error) {
	if a.Zone() != "" {
		return netip.Addr{}, errors.New("zoned address")
	}
	return a.Unmap(), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Resolves parses every Resolve entry. Validate has checked them; the error
// joins a *FieldError per bad entry.
func (c Config) Resolves() ([]Resolve, error) {
	out := make([]Resolve, 0, len(c.Resolve))
	var errs []error
	for i, s := range c.Resolve {
		r, p := parseResolve(s)
		if p != "" {
			errs = append(errs, &FieldError{Key: fmt.Sprintf("resolve[%d]", i), Value: s, Problem: p})
			continue
		}
		out = append(out, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
