package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/chaperone-dev/chaperone/proxy/internal/h3"
)

// h3Route says whether a request of tunnel t goes upstream over HTTP/3,
// and to which UDP address: when its client came over QUIC (to the
// tunnel's destination), or when the origin offers HTTP/3 (its Alt-Svc,
// or an earlier request over HTTP/3), unless QUIC to it failed lately.
// Never for a relayed tunnel (relays carry TCP) or plain HTTP.
func (p *Proxy) h3Route(t *tunnel) (string, netip.AddrPort, bool) {
	if t == nil || t.relay != nil || t.scheme != "https" {
		return "", netip.AddrPort{}, false
	}
	origin := t.authorityWithPort()
	var port uint16
	if t.quic {
		if p.altSvc.Broken(origin) {
			return "", netip.AddrPort{}, false
		}
		port = t.port
	} else if alt, ok := p.altSvc.Lookup(origin); ok {
		port = alt
	} else {
		return "", netip.AddrPort{}, false
	}
	addr, ok := p.originAddr(t)
	if !ok {
		return "", netip.AddrPort{}, false
	}
	return origin, netip.AddrPortFrom(addr, port), true
}

// originAddr is where a tunnel's origin is: its destination (transparent
// mode), its host when that is an address, or the address a Resolve
// override gives its name. Other names are left to the TCP path, whose
// dialer resolves them.
func (p *Proxy) originAddr(t *tunnel) (netip.Addr, bool) {
	if t.dst.IsValid() {
		return t.dst.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(t.host); err == nil {
		return a.Unmap(), true
	}
	if p.resolve != nil && t.host != "" {
		if a, ok := p.resolve(t.host, t.port); ok {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// authorityWithPort is the tunnel's origin as host:port, the key of what
// is known of its HTTP/3.
func (t *tunnel) authorityWithPort() string {
	host := t.host
	if host == "" && t.dst.IsValid() {
		host = t.dst.Addr().Unmap().String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(t.port)))
}

// roundTripH3 sends out over HTTP/3 to dst; fellBack reports that QUIC
// could not reach the origin (nothing was sent), which is then sent over
// TCP for a while.
func (p *Proxy) roundTripH3(out *http.Request, origin string, dst netip.AddrPort) (res *http.Response, err error, fellBack bool) {
	res, err = p.h3Client.RoundTrip(out, dst)
	if errors.Is(err, h3.ErrUnreachable) {
		p.log.Debug("proxy: upstream not reachable over QUIC; over TCP", "origin", origin, "err", err)
		p.altSvc.Failed(origin)
		return nil, err, true
	}
	if err == nil {
		p.altSvc.Succeeded(origin, dst.Port())
	}
	return res, err, false
}

// altSvcSeen learns what an upstream's Alt-Svc says of HTTP/3 and, for a
// client that reached the proxy as a proxy (explicit mode), removes the
// HTTP/3 alternatives from it: that client would go around the proxy over
// UDP. To a client that came over QUIC, or in transparent mode when the
// clients' QUIC is intercepted too (Options.QUICClients), it passes as it
// came; when their QUIC is refused or let through unmediated, the h3
// alternatives are removed as in explicit mode. It reports whether it
// changed h.
func (p *Proxy) altSvcSeen(t *tunnel, h http.Header) (changed bool) {
	vs, ok := h["Alt-Svc"]
	if !ok {
		return false
	}
	if t != nil && t.scheme == "https" && t.relay == nil {
		for _, v := range vs {
			p.altSvc.Learn(t.authorityWithPort(), v)
		}
	}
	if t != nil && (t.quic || t.via == "transparent" && p.quicClients) {
		return false
	}
	kept := vs[:0:0]
	for _, v := range vs {
		if s, ok := h3.StripH3(v); ok {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		delete(h, "Alt-Svc")
	} else {
		h["Alt-Svc"] = kept
	}
	return true
}
