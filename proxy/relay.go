package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// A relay is a server at the far end of an allowed connection that opens
// connections for its client: an HTTP proxy (CONNECT, or a request in
// absolute form), a SOCKS4, SOCKS4a or SOCKS5 server. What a client asks a
// relay for is decided as a connect event for the target (Via "relay",
// Relay the relay's URL), before the relay is told anything. Allowed, the
// proxy asks the relay itself, in a form of its own making (the target as
// decided, the client's credentials for the relay and nothing else), and
// handles what follows as a tunnel to the target: a relayed tunnel, whose
// upstream connections are all made through the relay.

// relayProto is the protocol a relay speaks.
type relayProto uint8

const (
	relayHTTP relayProto = iota + 1
	relaySOCKS4
	relaySOCKS5
)

func (r relayProto) scheme() string {
	switch r {
	case relayHTTP:
		return "http"
	case relaySOCKS4:
		return "socks4"
	case relaySOCKS5:
		return "socks5"
	}
	return "unknown"
}

// maxRelayDepth bounds relays asked through relays: a CONNECT inside a
// relayed tunnel recurses, up to this many relays deep.
const maxRelayDepth = 4

// relayHop is how a relayed tunnel reaches its destination: through the
// relay at the far end of parent, with the client's credentials for it.
// It does not change once made.
type relayHop struct {
	parent *tunnel // the tunnel to the relay: how the relay is reached
	proto  relayProto
	// forward: an HTTP relay asked for requests in absolute form (a
	// forward proxy), rather than for a tunnel by CONNECT.
	forward bool
	dest    relayDest // what the relay is asked for
	url     string    // the relay, as events name it: "socks5://127.0.0.5:1080"
	depth   int       // 1 for a relay reached without one
	// key says which pooled upstream connections may serve the tunnel:
	// the same relays, reached the same way, with the same credentials.
	key string

	// The client's credentials for the relay, given to it alone.
	proxyAuth  []string // HTTP: Proxy-Authorization
	user, pass string   // SOCKS5 username and password; SOCKS4 USERID in user
	password   bool     // SOCKS5: the client authenticated with a password
}

// newRelayHop returns the hop through the relay at the far end of parent.
func newRelayHop(parent *tunnel, proto relayProto, forward bool, d relayDest) *relayHop {
	h := &relayHop{parent: parent, proto: proto, forward: forward, dest: d, depth: 1}
	h.url = proto.scheme() + "://" + parent.destination()
	if parent.relay != nil {
		h.depth = parent.relay.depth + 1
	}
	return h
}

// seal computes the hop's pool key once its credentials are set.
func (h *relayHop) seal() {
	var b strings.Builder
	if h.parent.relay != nil {
		b.WriteString(h.parent.relay.key)
		b.WriteByte('>')
	}
	b.WriteString(h.url)
	if h.forward {
		b.WriteString("/forward")
	}
	// The credentials count by their digest: connections a relay opened
	// for one identity are not used for another.
	sum := sha256.New()
	for _, v := range h.proxyAuth {
		sum.Write([]byte(v))
		sum.Write([]byte{0})
	}
	fmt.Fprintf(sum, "%d\x00%s\x00%s", len(h.user), h.user, h.pass)
	b.WriteByte('#')
	b.WriteString(hex.EncodeToString(sum.Sum(nil)[:12]))
	h.key = b.String()
}

// destination is where a tunnel leads, as an address with its port: the
// original destination when known, else the host asked for.
func (t *tunnel) destination() string {
	if t.dst.IsValid() {
		return t.dst.String()
	}
	return net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
}

// relayDest is a destination asked of a relay, in the one form the proxy
// decides on and asks the relay for: an IP address (also when written in
// one of the shorthands a relay's resolver reads as one, such as
// 2130706433 or 127.1) or a lowercase host name.
type relayDest struct {
	host string     // the address's text, or the name
	addr netip.Addr // valid for an address
	port uint16
}

func (d relayDest) hostPort() string { return net.JoinHostPort(d.host, strconv.Itoa(int(d.port))) }

// errRelayDest is a destination that no relay should be asked for.
var errRelayDest = errors.New("proxy: " + badRelayDest)

// badRelayDest is why a destination is refused, as events say it (never
// quoting it: it is the client's, and may carry anything).
const badRelayDest = "not a host name or IP address with a port"

// parseRelayDest normalises a destination asked of a relay.
func parseRelayDest(host string, port uint16) (relayDest, error) {
	if port == 0 {
		return relayDest{}, errRelayDest
	}
	h := host
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return relayDest{}, errRelayDest
		}
		a = a.Unmap()
		return relayDest{host: a.String(), addr: a, port: port}, nil
	}
	h = strings.TrimSuffix(h, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return relayDest{}, errRelayDest
		}
		a = a.Unmap()
		return relayDest{host: a.String(), addr: a, port: port}, nil
	}
	if a, ok := parseLooseIPv4(h); ok {
		return relayDest{host: a.String(), addr: a, port: port}, nil
	}
	if len(h) == 0 || len(h) > 253 || h[0] == '.' || strings.Contains(h, "..") {
		return relayDest{}, errRelayDest
	}
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return relayDest{}, errRelayDest
		}
	}
	return relayDest{host: strings.ToLower(h), port: port}, nil
}

// parseLooseIPv4 reads s as inet_aton(3) does, which resolvers use before
// asking DNS: one to four parts separated by dots, each decimal, octal
// (leading 0) or hexadecimal (0x), the last filling the bytes left.
func parseLooseIPv4(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0" // inet_aton reads "0x" as 0
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p == "" || p[0] == '+' || p[0] == '-' {
			return netip.Addr{}, false
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	last := len(parts) - 1
	var ip uint64
	for i := range last {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		ip |= vals[i] << (24 - 8*i)
	}
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	ip |= vals[last]
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// relayRefusal is a relay's refusal of what the proxy asked it for.
type relayRefusal struct {
	status int         // an HTTP relay's status
	header http.Header // and its challenge (Proxy-Authenticate)
	socks  byte        // a SOCKS relay's reply code
	reason string
}

func (e *relayRefusal) Error() string { return "proxy: relay refused: " + e.reason }

// relayEvent decides and publishes the connect event for d, asked of the
// relay at the far end of t by protocol proto.
func (p *Proxy) relayEvent(ctx context.Context, t *tunnel, proto relayProto, d relayDest) *event.Event {
	e := &event.Event{
		Time: p.now(), Kind: event.KindConnect, Session: t.session, Process: t.process,
		Connect: &event.Connect{Host: d.host, Port: d.port, Transport: event.TCP, Via: "relay",
			Relay: proto.scheme() + "://" + t.destination()},
	}
	if d.addr.IsValid() {
		e.Connect.Dst = netip.AddrPortFrom(d.addr, d.port)
	}
	switch {
	case t.denied != nil:
		e.Verdict = *t.denied // the relay itself is denied
	case t.relay != nil && t.relay.depth >= maxRelayDepth:
		e.Verdict = proxyVerdict(ruleRelayDepth, "a relay asked through "+strconv.Itoa(maxRelayDepth)+" relays already")
	case d.addr.IsUnspecified():
		e.Verdict = proxyVerdict(ruleRelayUnsupported, "unspecified address "+d.host+": it reaches the relay's own host")
	case !p.sessions.Load().has(t.session):
		e.Verdict = proxyVerdict(ruleUnknownSession, "the session has ended")
	default:
		e.Verdict = p.decide(ctx, e)
	}
	p.publish(e)
	return e
}

// refuseRelay publishes a denied connect event for what a client asked of
// the relay at the far end of t that the proxy does not relay: a target it
// could not read, a SOCKS command other than CONNECT.
func (p *Proxy) refuseRelay(t *tunnel, proto relayProto, host string, port uint16, rule, reason string) {
	e := &event.Event{
		Time: p.now(), Kind: event.KindConnect, Session: t.session, Process: t.process,
		Verdict: proxyVerdict(rule, reason),
		Connect: &event.Connect{Host: host, Port: port, Transport: event.TCP, Via: "relay",
			Relay: proto.scheme() + "://" + t.destination()},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		e.Connect.Dst = netip.AddrPortFrom(a.Unmap(), port)
	}
	p.publish(e)
}

// newRelayTunnel is the tunnel to d through the relay at the far end of
// t: the same session and process, its upstream connections made through
// hop.
func newRelayTunnel(t *tunnel, hop *relayHop) *tunnel {
	hop.seal()
	return &tunnel{
		session: t.session,
		process: t.process,
		host:    hop.dest.host,
		port:    hop.dest.port,
		via:     "relay",
		relay:   hop,
	}
}

// dialRelay connects to the hop's destination through its relay: the
// relay is reached as its tunnel is (directly, or through relays of its
// own) and asked for the destination, unless the hop is a forward proxy's
// (the connection to the relay is then the upstream connection).
func (p *Proxy) dialRelay(ctx context.Context, h *relayHop) (net.Conn, error) {
	c, err := p.dialTunnel(ctx, h.parent)
	if err != nil {
		return nil, err
	}
	if h.forward {
		return c, nil
	}
	deadline := time.Now().Add(p.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	rc, err := h.handshake(c)
	if !stop() {
		err = cmpErr(err, ctx.Err())
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return rc, nil
}

func cmpErr(err, other error) error {
	if err != nil {
		return err
	}
	return other
}

// handshake asks the relay on c for the hop's destination and returns the
// connection to it (c, with whatever the relay sent beyond its answer).
func (h *relayHop) handshake(c net.Conn) (net.Conn, error) {
	br := bufio.NewReaderSize(c, 1024)
	var err error
	switch h.proto {
	case relayHTTP:
		err = h.httpConnect(c, br)
	case relaySOCKS5:
		err = h.socks5Connect(c, br)
	case relaySOCKS4:
		err = h.socks4Connect(c, br)
	default:
		err = errors.New("proxy: relay: unknown protocol")
	}
	if err != nil {
		return nil, err
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		return &prefixConn{Conn: c, prefix: append([]byte(nil), b...)}, nil
	}
	return c, nil
}

func (h *relayHop) httpConnect(c net.Conn, br *bufio.Reader) error {
	hp := h.dest.hostPort()
	var b strings.Builder
	b.WriteString("CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n")
	for _, v := range h.proxyAuth {
		b.WriteString("Proxy-Authorization: " + v + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	if res.StatusCode/100 == 2 {
		return nil
	}
	res.Body.Close()
	ref := &relayRefusal{status: res.StatusCode, reason: h.url + " answered " + res.Status}
	if v := res.Header.Values("Proxy-Authenticate"); len(v) > 0 {
		ref.header = http.Header{"Proxy-Authenticate": v}
	}
	return ref
}

func (h *relayHop) socks5Connect(c net.Conn, br *bufio.Reader) error {
	methods := []byte{socks5AuthNone}
	if h.password {
		methods = []byte{socks5AuthNone, socks5AuthPassword}
	}
	if _, err := c.Write(appendSOCKS5Greeting(nil, methods...)); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	var choice [2]byte
	if _, err := io.ReadFull(br, choice[:]); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	switch {
	case choice[0] != socksVersion5:
		return fmt.Errorf("proxy: relay %s: not a SOCKS5 server", h.url)
	case choice[1] == socks5AuthNone:
	case choice[1] == socks5AuthPassword && h.password:
		if _, err := c.Write(appendSOCKS5Password(nil, h.user, h.pass)); err != nil {
			return fmt.Errorf("proxy: relay %s: %w", h.url, err)
		}
		var st [2]byte
		if _, err := io.ReadFull(br, st[:]); err != nil {
			return fmt.Errorf("proxy: relay %s: %w", h.url, err)
		}
		if st[1] != 0 {
			return &relayRefusal{socks: socks5NotAllowed, reason: h.url + " refused the username and password"}
		}
	default:
		return &relayRefusal{socks: socks5NotAllowed, reason: h.url + " accepts none of the authentication methods offered"}
	}
	if _, err := c.Write(appendSOCKS5Request(nil, socksCmdConnect, h.dest)); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	var rep byte
	if _, err := readSOCKS(br, func(b []byte) (int, error) {
		r, n, err := parseSOCKS5Reply(b)
		rep = r
		return n, err
	}); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	if rep != socks5Succeeded {
		return &relayRefusal{socks: rep, reason: h.url + " answered SOCKS5 reply " + strconv.Itoa(int(rep))}
	}
	return nil
}

func (h *relayHop) socks4Connect(c net.Conn, br *bufio.Reader) error {
	if h.dest.addr.IsValid() && !h.dest.addr.Is4() {
		return &relayRefusal{socks: socks4Rejected, reason: "SOCKS4 cannot ask for an IPv6 address"}
	}
	if _, err := c.Write(appendSOCKS4Request(nil, h.dest, h.user)); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	var reply [8]byte
	if _, err := io.ReadFull(br, reply[:]); err != nil {
		return fmt.Errorf("proxy: relay %s: %w", h.url, err)
	}
	if reply[1] != socks4Granted {
		return &relayRefusal{socks: reply[1], reason: h.url + " answered SOCKS4 reply " + strconv.Itoa(int(reply[1]))}
	}
	return nil
}

// readSOCKS reads one SOCKS message from br, as parse delimits it, and
// returns it (a copy).
func readSOCKS(br *bufio.Reader, parse func(b []byte) (int, error)) ([]byte, error) {
	need := 1
	for {
		b, err := br.Peek(need)
		if len(b) < need {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		n, perr := parse(b)
		switch {
		case perr == nil:
			msg := append([]byte(nil), b[:n]...)
			br.Discard(n)
			return msg, nil
		case errors.Is(perr, errSOCKSShort):
			need = max(len(b)+1, br.Buffered())
		default:
			return nil, perr
		}
	}
}
