package certs

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrInvalidHost is wrapped by the error for a host that no leaf can be
// minted for; the host comes from the client, so this is a client fault.
var ErrInvalidHost = errors.New("certs: invalid host")

const (
	maxHostLen  = 253 // RFC 1035, without the trailing dot
	maxLabelLen = 63
)

// leafHost is a normalised host: an IP address (no zone, IPv4 unmapped) or a
// lowercase DNS name without a trailing dot.
type leafHost struct {
	ip   netip.Addr // valid for an IP host
	name string     // the cache key: the DNS name or the IP's text form
}

// parseHost normalises a host taken from SNI, a CONNECT line or a local
// address. DNS names are held to the characters that x509 hostname matching
// accepts (letters, digits, '-', '_', '.'), so every name that passes can be
// verified by clients.
func parseHost(host string) (leafHost, error) {
	if host == "" {
		return leafHost{}, fmt.Errorf("%w: empty", ErrInvalidHost)
	}
	h := host
	bracketed := len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']'
	if bracketed {
		h = h[1 : len(h)-1]
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		// A certificate's IP SAN has no zone, and x509 matches an IPv4-mapped
		// address against the IPv4 one.
		addr = addr.WithZone("").Unmap()
		return leafHost{ip: addr, name: addr.String()}, nil
	}
	if bracketed {
		return leafHost{}, invalidHost(host, "brackets enclose something that is not an IP address")
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return leafHost{}, invalidHost(host, "no name before the trailing dot")
	}
	if _, err := netip.ParseAddr(h); err == nil {
		// "192.0.2.1." would normalise to the address, whose leaf carries an
		// IP SAN, not the DNS name that a client sending it matches.
		return leafHost{}, invalidHost(host, "an IP address with a trailing dot")
	}
	if len(h) > maxHostLen {
		return leafHost{}, invalidHost(host, fmt.Sprintf("longer than %d bytes", maxHostLen))
	}
	label := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == '.':
			if label == 0 {
				return leafHost{}, invalidHost(host, "empty label")
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == ' ':
			return leafHost{}, invalidHost(host, "contains a space")
		case c == '/' || c == '\\':
			return leafHost{}, invalidHost(host, "contains a slash")
		case c == 0:
			return leafHost{}, invalidHost(host, "contains NUL")
		case c < 0x20 || c == 0x7f:
			return leafHost{}, invalidHost(host, "contains a control character")
		case c >= 0x80:
			return leafHost{}, invalidHost(host, "is not ASCII (use its punycode form)")
		default:
			return leafHost{}, invalidHost(host, fmt.Sprintf("contains %q", c))
		}
		label++
		if label > maxLabelLen {
			return leafHost{}, invalidHost(host, fmt.Sprintf("has a label longer than %d bytes", maxLabelLen))
		}
	}
	if label == 0 {
		return leafHost{}, invalidHost(host, "empty label")
	}
	return leafHost{name: strings.ToLower(h)}, nil
}

// invalidHost quotes at most the first 64 bytes of the client's host so that
// a hostile one cannot flood the logs.
func invalidHost(host, reason string) error {
	const maxQuoted = 64
	q := host
	if len(q) > maxQuoted {
		return fmt.Errorf("%w %q... (%d bytes): %s", ErrInvalidHost, q[:maxQuoted], len(host), reason)
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidHost, q, reason)
}
