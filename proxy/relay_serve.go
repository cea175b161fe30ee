package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/proxy/internal/h1"

	"github.com/chaperone-dev/chaperone/proxy/internal/netx"

	"golang.org/x/net/http/httpguts"

	"github.com/chaperone-dev/chaperone/event"
)

// serveRequestLine reads a request line that net/http is not given as it
// came (protoRequestLine): a CONNECT, in any spelling, is a request for a
// relay (serveRelayConnect); any other line is given to the tunnel's HTTP
// server in net/http's spelling, where a request in absolute form for
// another host is, again, one for a relay (forwardRelayed). A line that is
// no request is refused with 400 and an event.
func (p *Proxy) serveRequestLine(ctx context.Context, tc *tunnelConn) (handedOff bool) {
	t := tc.t
	t.setScheme("http")
	tc.Conn.SetReadDeadline(time.Now().Add(p.readHeaderTimeout))
	line, err := peekLine(tc)
	if err != nil {
		p.refuseLine(tc, err)
		return false
	}
	rl, err := h1.ParseRequestLine(line)
	if err != nil {
		p.refuseLine(tc, err)
		return false
	}
	if h1.IsConnectMethod([]byte(rl.Method)) {
		tc.r.Discard(len(line))
		return p.serveRelayConnect(ctx, tc, rl, len(line))
	}
	tc.Conn.SetReadDeadline(time.Time{})
	if rl.Canonical {
		// As it came (the h2c preface among others), once all of it is
		// here.
		return p.serveInnerConn(tc, tc)
	}
	tc.r.Discard(len(line))
	tc.pre = rl.CanonicalLine()
	go p.serveH1(tc, tc)
	return true
}

// errLineIncomplete is a request line the client did not finish.
var errLineIncomplete = errors.New("proxy: request line incomplete")

// peekLine returns the request line at the head of the sniffing buffer,
// blank lines before it included, through its LF, waiting for it; a line
// longer than the buffer is h1.ErrLineTooLong.
func peekLine(tc *tunnelConn) ([]byte, error) {
	r := tc.r
	for {
		b, _ := r.Peek(r.Buffered())
		lead := 0
		for lead < len(b) && h1.IsLeadSpace(b[lead]) {
			lead++
		}
		if i := indexLF(b[lead:]); i >= 0 {
			return b[:lead+i+1], nil
		}
		if len(b) == r.Size() {
			return nil, h1.ErrLineTooLong
		}
		if _, err := r.Peek(len(b) + 1); err != nil {
			if netx.IsTimeout(err) {
				return nil, err
			}
			return nil, errLineIncomplete
		}
	}
}

func indexLF(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// refuseLine answers a request line that cannot be read, with an event.
func (p *Proxy) refuseLine(tc *tunnelConn, err error) {
	t := tc.t
	switch {
	case netx.IsTimeout(err):
		p.publishConnFault(netx.FaultHeaderTimeout, t.session, t.process, t.authority, "HTTP/1.1")
		return
	case errors.Is(err, h1.ErrLineTooLong):
		p.publishMalformed(t, http.StatusRequestURITooLong, "request line longer than "+strconv.Itoa(tc.r.Size())+" bytes")
		writeClose(tc, http.StatusRequestURITooLong, "chaperone: request line too long\n", nil)
	default:
		p.publishMalformed(t, http.StatusBadRequest, "a request line that is not HTTP's")
		writeClose(tc, http.StatusBadRequest, "chaperone: malformed request line\n", nil)
	}
}

// publishMalformed publishes an http event refusing a request that cannot
// be read. The reason never quotes the request: it may carry secrets.
func (p *Proxy) publishMalformed(t *tunnel, status int, reason string) {
	p.publish(&event.Event{
		Time: p.now(), Kind: event.KindHTTP, Session: t.session, Process: t.process,
		Verdict: proxyVerdict(ruleMalformedRequest, reason),
		HTTP:    &event.HTTP{Host: t.authority, Proto: "HTTP/1.1", Status: status},
	})
}

// writeClose answers a client of the tunnel in plain HTTP/1.1 and closes
// the connection once the client has read it (netx.CloseLinger at most).
func writeClose(tc *tunnelConn, status int, body string, h http.Header) {
	var b strings.Builder
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	for k, vv := range h {
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				b.WriteString(k + ": " + v + "\r\n")
			}
		}
	}
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	tc.Conn.SetWriteDeadline(time.Now().Add(netx.CloseLinger))
	io.WriteString(tc.Conn, b.String())
	lingerClose(tc)
}

// lingerClose half-closes the client's connection and reads what it
// still sends for a moment, so that it reads the answer rather than a
// reset caused by its unread bytes. The caller closes the connection.
func lingerClose(tc *tunnelConn) {
	tc.CloseWrite()
	tc.Conn.SetReadDeadline(time.Now().Add(netx.CloseLinger))
	io.CopyN(io.Discard, tc.Conn, 1<<20)
}

// serveRelayConnect serves a CONNECT sent through tc's tunnel: a request
// for the relay at its far end to open a connection. Its header is read
// (the Proxy-Authorization fields are the client's credentials for the
// relay), its target is decided; denied, the client gets 403 naming the
// rule and the relay is told nothing; allowed, the proxy asks the relay
// and, once the relay agreed, answers 200 and serves what follows as a
// tunnel to the target.
func (p *Proxy) serveRelayConnect(ctx context.Context, tc *tunnelConn, rl h1.RequestLine, size int) (handedOff bool) {
	t := tc.t
	var auth []string
	for {
		line, err := h1.ReadLine(tc.r, p.maxHeaderBytes-size)
		switch {
		case errors.Is(err, h1.ErrLineTooLong):
			p.publishConnFault(netx.FaultHeaderTooLarge, t.session, t.process, t.authority, "HTTP/1.1")
			writeClose(tc, http.StatusRequestHeaderFieldsTooLarge, "chaperone: request header too large\n", nil)
			return false
		case netx.IsTimeout(err):
			p.publishConnFault(netx.FaultHeaderTimeout, t.session, t.process, t.authority, "HTTP/1.1")
			return false
		case err != nil:
			return false // the client went away
		}
		size += len(line)
		field := strings.TrimRight(string(line), "\r\n")
		if field == "" {
			break
		}
		name, value, _ := strings.Cut(field, ":")
		if strings.EqualFold(strings.TrimSpace(name), "Proxy-Authorization") {
			value = strings.TrimSpace(value)
			if !httpguts.ValidHeaderFieldValue(value) {
				p.publishMalformed(t, http.StatusBadRequest, "CONNECT with a Proxy-Authorization field that is not valid")
				writeClose(tc, http.StatusBadRequest, "chaperone: malformed Proxy-Authorization\n", nil)
				return false
			}
			auth = append(auth, value)
		}
	}
	tc.Conn.SetReadDeadline(time.Time{})

	host, port, ok := connectTarget(rl.Target)
	d, err := parseRelayDest(host, port)
	if !ok || err != nil {
		p.refuseRelay(t, relayHTTP, host, port, ruleMalformedRequest, "CONNECT to a target that is "+badRelayDest)
		writeClose(tc, http.StatusBadRequest, "chaperone: CONNECT needs host:port\n", nil)
		return false
	}
	e := p.relayEvent(ctx, t, relayHTTP, d)
	if !e.Verdict.Allowed() {
		writeClose(tc, http.StatusForbidden, denyMessage(e.Verdict), nil)
		return false
	}
	hop := newRelayHop(t, relayHTTP, false, d)
	hop.proxyAuth = auth
	rt := newRelayTunnel(t, hop)
	up, err := p.dialRelay(ctx, hop)
	if err != nil {
		p.log.Debug("proxy: relay refused or failed", "session", t.session, "relay", hop.url, "target", d.hostPort(), "err", err)
		var ref *relayRefusal
		if errors.As(err, &ref) && ref.status != 0 {
			writeClose(tc, ref.status, "chaperone: "+ref.reason+"\n", ref.header)
		} else {
			writeClose(tc, upstreamErrorStatus(err), "chaperone: relay "+hop.url+": "+err.Error()+"\n", nil)
		}
		return false
	}
	if !rt.setPending(up) {
		up.Close()
		return false
	}
	if _, err := io.WriteString(tc.Conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rt.close()
		return false
	}
	return p.serveRelayed(ctx, tc, rt)
}

// connectTarget reads a CONNECT's target: host:port, [v6]:port, or (as
// some proxies take it) a URL's authority.
func connectTarget(target string) (host string, port uint16, ok bool) {
	if _, rest, found := strings.Cut(target, "://"); found {
		target, _, _ = strings.Cut(rest, "/")
	}
	h, ps := splitHostPortLoose(target)
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 || h == "" {
		return h, 0, false
	}
	return h, uint16(n), true
}

// serveRelayed serves the rest of tc as rt, the tunnel to the
// destination a relay opened for the client: classified and inspected as
// any tunnel is, its upstream connections made through the relay.
func (p *Proxy) serveRelayed(ctx context.Context, tc *tunnelConn, rt *tunnel) (handedOff bool) {
	outer := tc.t
	rt.conn = tc
	if !outer.setChild(rt) {
		rt.close()
		return false
	}
	tc.t = rt
	return p.serveProtocol(ctx, tc, p.classify(tc, p.peekTimeout))
}

// serveSOCKS serves a SOCKS4, SOCKS4a or SOCKS5 client of tc's tunnel: a
// client asking the SOCKS server at its far end for a connection. The
// proxy answers as that server would, up to the request; the request's
// target is decided; denied, the client gets the protocol's refusal and
// the relay is told nothing; allowed, the proxy asks the relay (with the
// client's username and password, or SOCKS4 user id) and, once the relay
// agreed, answers success and serves what follows as a tunnel to the
// target. BIND and UDP ASSOCIATE are refused.
func (p *Proxy) serveSOCKS(ctx context.Context, tc *tunnelConn, proto protocol) (handedOff bool) {
	t := tc.t
	tc.Conn.SetDeadline(time.Now().Add(p.handshakeTimeout))
	rp := relaySOCKS4
	refusal := socks4Reply(socks4Rejected)
	if proto == protoSOCKS5 {
		rp, refusal = relaySOCKS5, socks5Reply(socks5NotAllowed)
	}
	malformed := func(what string, err error) bool {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) || netx.IsTimeout(err) {
			p.refuseRelay(t, rp, "", 0, ruleMalformedRequest, what+": "+err.Error())
		}
		return false
	}
	var req socksRequest
	var user, pass string
	password := false
	if proto == protoSOCKS5 {
		msg, err := readSOCKS(tc.r, func(b []byte) (int, error) { _, n, err := parseSOCKS5Greeting(b); return n, err })
		if err != nil {
			return malformed("SOCKS5 greeting", err)
		}
		methods := msg[2:]
		// A password if the client has one, to pass on to the relay if it
		// asks; else none.
		choice := byte(socks5NoAcceptable)
		switch {
		case slices.Contains(methods, socks5AuthPassword):
			choice = socks5AuthPassword
		case slices.Contains(methods, socks5AuthNone):
			choice = socks5AuthNone
		}
		if _, err := tc.Conn.Write([]byte{socksVersion5, choice}); err != nil {
			return false
		}
		if choice == socks5NoAcceptable {
			p.refuseRelay(t, rp, "", 0, ruleRelayUnsupported, "the SOCKS5 client offers no authentication method the proxy can pass on (none, username and password)")
			return false
		}
		if choice == socks5AuthPassword {
			if _, err := readSOCKS(tc.r, func(b []byte) (int, error) {
				u, pw, n, err := parseSOCKS5Password(b)
				user, pass = u, pw
				return n, err
			}); err != nil {
				return malformed("SOCKS5 username and password", err)
			}
			password = true
			// Accepted here; the relay has the last word, on the request.
			if _, err := tc.Conn.Write([]byte{0x01, 0x00}); err != nil {
				return false
			}
		}
		if _, err := readSOCKS(tc.r, func(b []byte) (int, error) {
			r, n, err := parseSOCKS5Request(b)
			req = r
			return n, err
		}); err != nil {
			if errors.Is(err, errSOCKSMalformed) {
				tc.Conn.Write(socks5Reply(socks5AtypUnsupp))
			}
			return malformed("SOCKS5 request", err)
		}
	} else {
		if _, err := readSOCKS(tc.r, func(b []byte) (int, error) {
			r, n, err := parseSOCKS4Request(b)
			req = r
			return n, err
		}); err != nil {
			if errors.Is(err, errSOCKSMalformed) {
				tc.Conn.Write(refusal)
			}
			return malformed("SOCKS4 request", err)
		}
		user = req.user
	}
	if req.cmd != socksCmdConnect {
		cmd := map[byte]string{socksCmdBind: "BIND", socksCmdAssociate: "UDP ASSOCIATE"}[req.cmd]
		if cmd == "" {
			cmd = "command " + strconv.Itoa(int(req.cmd))
		}
		p.refuseRelay(t, rp, req.host, req.port, ruleRelayUnsupported, "SOCKS "+cmd+" is not relayed: only CONNECT is")
		if proto == protoSOCKS5 {
			tc.Conn.Write(socks5Reply(socks5CmdUnsupported))
		} else {
			tc.Conn.Write(refusal)
		}
		return false
	}
	d, err := parseRelayDest(req.host, req.port)
	if err != nil {
		p.refuseRelay(t, rp, "", req.port, ruleMalformedRequest, "SOCKS request for a target that is "+badRelayDest)
		tc.Conn.Write(refusal)
		return false
	}
	e := p.relayEvent(ctx, t, rp, d)
	if !e.Verdict.Allowed() {
		tc.Conn.Write(refusal)
		return false
	}
	hop := newRelayHop(t, rp, false, d)
	hop.user, hop.pass, hop.password = user, pass, password
	rt := newRelayTunnel(t, hop)
	up, err := p.dialRelay(ctx, hop)
	if err != nil {
		p.log.Debug("proxy: relay refused or failed", "session", t.session, "relay", hop.url, "target", d.hostPort(), "err", err)
		var ref *relayRefusal
		switch {
		case proto == protoSOCKS4:
		case errors.As(err, &ref) && ref.socks != 0:
			refusal = socks5Reply(ref.socks)
		default:
			refusal = socks5Reply(socks5GeneralFailure)
		}
		tc.Conn.Write(refusal)
		return false
	}
	if !rt.setPending(up) {
		up.Close()
		return false
	}
	ok := socks4Reply(socks4Granted)
	if proto == protoSOCKS5 {
		ok = socks5Reply(socks5Succeeded)
	}
	if _, err := tc.Conn.Write(ok); err != nil {
		rt.close()
		return false
	}
	tc.Conn.SetDeadline(time.Time{})
	return p.serveRelayed(ctx, tc, rt)
}

// relays reports whether r, read in plain from t, is in absolute form for
// another destination than t's: a request for the relay (a forward proxy)
// at t's far end to pass on.
func (p *Proxy) relays(t *tunnel, r *http.Request) bool {
	if r.URL.Host == "" || t.scheme != "http" {
		return false
	}
	host, port := splitHostPortLoose(r.URL.Host)
	if port == "" {
		port = "80"
		if r.URL.Scheme == "https" {
			port = "443"
		}
	}
	if p.hostMatches(t, net.JoinHostPort(host, port)) {
		return false
	}
	// The destination's own address, on a tunnel known by name.
	a, err := netip.ParseAddr(host)
	return err != nil || !t.dst.IsValid() || a.Unmap() != t.dst.Addr().Unmap() || port != strconv.Itoa(int(t.port))
}

// forwardRelayed serves r, a request in absolute form that t's client
// sends for the relay at t's far end to pass on (see relays): its target
// is decided as a connect event (once for a run of requests to the same
// target), then r is decided and forwarded as a request of a tunnel to the
// target, sent to the relay in absolute form with the client's
// Proxy-Authorization. Denied, the relay is told nothing.
func (p *Proxy) forwardRelayed(w http.ResponseWriter, r *http.Request, t *tunnel) {
	host, ps := splitHostPortLoose(r.URL.Host)
	port := uint16(80)
	if ps != "" {
		n, _ := strconv.ParseUint(ps, 10, 16) // 0 when not a port: refused below
		port = uint16(n)
	}
	if r.URL.Scheme != "http" {
		p.refuseRelay(t, relayHTTP, host, port, ruleRelayUnsupported, "a request in absolute form for "+r.URL.Scheme+"://: only http:// is relayed")
		writeText(w, http.StatusForbidden, "chaperone: only http:// requests are passed to a relay in absolute form\n")
		return
	}
	d, err := parseRelayDest(host, port)
	if err != nil {
		p.refuseRelay(t, relayHTTP, host, port, ruleMalformedRequest, "a request in absolute form for a target that is "+badRelayDest)
		writeText(w, http.StatusBadRequest, "chaperone: a request for a relay needs a host name or IP address\n")
		return
	}
	auth := r.Header["Proxy-Authorization"]
	t.mu.Lock()
	rt := t.forward
	t.mu.Unlock()
	if rt == nil || rt.relay.dest != d || !slices.Equal(rt.relay.proxyAuth, auth) {
		e := p.relayEvent(r.Context(), t, relayHTTP, d)
		if !e.Verdict.Allowed() {
			writeText(w, http.StatusForbidden, denyMessage(e.Verdict))
			return
		}
		hop := newRelayHop(t, relayHTTP, true, d)
		hop.proxyAuth = slices.Clone(auth)
		rt = newRelayTunnel(t, hop)
		rt.setScheme("http")
		t.mu.Lock()
		t.forward = rt
		t.mu.Unlock()
	}
	r2 := r.WithContext(context.WithValue(r.Context(), tunnelKey{}, rt))
	u := *r.URL
	u.Host = rt.authority // as decided: an address's shorthand is written as the address
	r2.URL, r2.Host = &u, rt.authority
	p.forward(w, r2, rt)
}

// tunnelTransport is the http.Transport of a request's tunnel: the
// proxy's shared one, or for a relayed tunnel one of its own. A Transport
// pools connections by address alone; sharing one would let a request of a
// relayed tunnel go out on a connection made straight to the same address,
// or the reverse.
type tunnelTransport struct {
	p      *Proxy
	h1Only bool
}

func (tt tunnelTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := tunnelFrom(req.Context())
	switch {
	case t == nil || t.relay == nil:
		if tt.h1Only {
			return tt.p.transportH1.RoundTrip(req)
		}
		return tt.p.transport.RoundTrip(req)
	case t.relay.forward:
		return nil, errors.New("proxy: a protocol switch is not passed to a relay in absolute form")
	}
	i := 0
	if tt.h1Only {
		i = 1
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errors.New("proxy: tunnel closed")
	}
	tr := t.transports[i]
	if tr == nil {
		tr = tt.p.newRelayTransport(tt.h1Only)
		t.transports[i] = tr
	}
	t.mu.Unlock()
	return tr.RoundTrip(req)
}
