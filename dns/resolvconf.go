package dns

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// SystemUpstreams returns the nameservers of a resolv.conf file's contents,
// on port 53, in order and without duplicates. Like the C library, it
// ignores comments, other directives and lines whose address does not
// parse. It fails only when no nameserver is left.
func SystemUpstreams(resolvConf []byte) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	seen := map[netip.AddrPort]bool{}
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	sc.Buffer(make([]byte, 0, 4096), len(resolvConf)+1)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		ap := netip.AddrPortFrom(a.Unmap(), 53)
		if !seen[ap] {
			seen[ap] = true
			out = append(out, ap)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dns: resolv.conf: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("dns: resolv.conf: no nameserver")
	}
	return out, nil
}
