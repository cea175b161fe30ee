package upstream

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RelayOptions configure a Relay.
type RelayOptions struct {
	// Addr is the listen address, a loopback IP literal and a port;
	// default "127.0.0.1:0".
	Addr string
	// Names resolves the host names clients ask for; a relay never asks
	// DNS. A name not listed is refused.
	Names map[string]netip.Addr
	// User and Password, when User is set, are required of clients: HTTP
	// Proxy-Authorization Basic, SOCKS5 username and password, SOCKS4
	// USERID (User alone).
	User, Password string
}

// RelayRequest is what a client asked a Relay for.
type RelayRequest struct {
	Proto      string // "http-connect", "http-forward", "socks4", "socks4a", "socks5"
	Target     string // host:port as asked
	Authorized bool   // the credentials were right (or none are required)
	Opened     bool   // the relay connected to the target
}

// RelayConn is one connection a Relay accepted: who, and how many bytes
// it received from them.
type RelayConn struct {
	Remote string
	Bytes  int
}

// Relay is a permissive relay of the kind an agent might find outside its
// sandbox: an HTTP proxy (CONNECT and requests in absolute form) and a
// SOCKS4, SOCKS4a and SOCKS5 server on one port, telling them apart by the
// first byte. It reads HTTP request lines as leniently as squid's relaxed
// parser and tinyproxy do and more (blank lines first, any run of white
// space, a method in any case, no version), so that a test shows what
// would happen if a client's bytes reached it. It connects to loopback
// addresses only, and records every connection and request.
type Relay struct {
	Addr netip.AddrPort
	opts RelayOptions
	ln   net.Listener

	mu    sync.Mutex
	reqs  []RelayRequest
	conns []*RelayConn
	live  map[net.Conn]struct{}
	done  bool
}

// StartRelay listens on opts.Addr and serves until Close.
func StartRelay(opts RelayOptions) (*Relay, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	ap, err := netip.ParseAddrPort(opts.Addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("upstream: relay address %q is not a loopback IP and port", opts.Addr)
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("upstream: relay: %w", err)
	}
	r := &Relay{Addr: ln.Addr().(*net.TCPAddr).AddrPort(), opts: opts, ln: ln, live: map[net.Conn]struct{}{}}
	go r.serve()
	return r, nil
}

// Requests returns what clients asked for, in order.
func (r *Relay) Requests() []RelayRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RelayRequest(nil), r.reqs...)
}

// Conns returns the connections accepted so far and the bytes each sent.
func (r *Relay) Conns() []RelayConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RelayConn, len(r.conns))
	for i, c := range r.conns {
		out[i] = *c
	}
	return out
}

// Close stops the relay and closes its connections.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.done = true
	for c := range r.live {
		c.Close()
	}
	r.mu.Unlock()
	return r.ln.Close()
}

func (r *Relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		rc := &RelayConn{Remote: c.RemoteAddr().String()}
		r.mu.Lock()
		if r.done {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns = append(r.conns, rc)
		r.live[c] = struct{}{}
		r.mu.Unlock()
		go func() {
			defer func() {
				c.Close()
				r.mu.Lock()
				delete(r.live, c)
				r.mu.Unlock()
			}()
			r.handle(&countingConn{Conn: c, r: r, rc: rc})
		}()
	}
}

// countingConn counts the bytes a client sent.
type countingConn struct {
	net.Conn
	r  *Relay
	rc *RelayConn
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.r.mu.Lock()
	c.rc.Bytes += n
	c.r.mu.Unlock()
	return n, err
}

func (r *Relay) record(req RelayRequest) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
}

func (r *Relay) handle(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	switch first[0] {
	case 4:
		r.socks4(c, br)
	case 5:
		r.socks5(c, br)
	default:
		r.http(c, br)
	}
}

// dial connects to host:port, a loopback address or a listed name.
func (r *Relay) dial(host string, port uint16) (net.Conn, error) {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		var ok bool
		if a, ok = r.opts.Names[strings.ToLower(strings.TrimSuffix(host, "."))]; !ok {
			return nil, fmt.Errorf("upstream: relay: unknown name %q", host)
		}
	}
	if !a.Unmap().IsLoopback() {
		return nil, fmt.Errorf("upstream: relay: %s is not a loopback address", a)
	}
	return net.DialTimeout("tcp", netip.AddrPortFrom(a, port).String(), 5*time.Second)
}

// splice copies both ways until either side is done.
func splice(c net.Conn, br *bufio.Reader, up net.Conn) {
	c.SetReadDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, br)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		io.Copy(c, up)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else if cc, ok := c.(*countingConn); ok {
			if cw, ok := cc.Conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
		}
		done <- struct{}{}
	}()
	<-done
	<-done
	up.Close()
}

func (r *Relay) authorized(user, pass string) bool {
	return r.opts.User == "" || user == r.opts.User && pass == r.opts.Password
}

// http serves HTTP proxy requests, read leniently.
func (r *Relay) http(c net.Conn, br *bufio.Reader) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue // blank lines before a request
		}
		if len(f) < 2 {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
			return
		}
		method, target := strings.ToUpper(f[0]), f[1]
		header := http.Header{}
		if len(f) > 2 { // HTTP/0.9 has no header
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				l = strings.TrimRight(l, "\r\n")
				if l == "" {
					break
				}
				if k, v, ok := strings.Cut(l, ":"); ok {
					header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
				}
			}
		}
		user, pass := basicAuth(header.Get("Proxy-Authorization"))
		ok := r.authorized(user, pass)
		if method == http.MethodConnect {
			host, ps, err := net.SplitHostPort(target)
			port, perr := strconv.ParseUint(ps, 10, 16)
			req := RelayRequest{Proto: "http-connect", Target: target, Authorized: ok}
			if err != nil || perr != nil {
				r.record(req)
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
				return
			}
			if !ok {
				r.record(req)
				io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"relay\"\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			up, err := r.dial(host, uint16(port))
			req.Opened = err == nil
			r.record(req)
			if err != nil {
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
				return
			}
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			splice(c, br, up)
			return
		}
		keep := len(f) > 2 && strings.EqualFold(f[2], "HTTP/1.1") && !strings.EqualFold(header.Get("Connection"), "close")
		if !r.forward(c, br, method, target, header, ok) || !keep {
			return
		}
	}
}

// forward passes on a request in absolute form and its answer; false
// means the connection is over.
func (r *Relay) forward(c net.Conn, br *bufio.Reader, method, target string, header http.Header, ok bool) bool {
	u, err := urlParse(target)
	req := RelayRequest{Proto: "http-forward", Target: target, Authorized: ok}
	if err != nil {
		r.record(req)
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
		return false
	}
	req.Target = u.host + ":" + strconv.Itoa(int(u.port))
	if !ok {
		r.record(req)
		io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"relay\"\r\nContent-Length: 0\r\n\r\n")
		return drainBody(br, header)
	}
	up, err := r.dial(u.host, u.port)
	req.Opened = err == nil
	r.record(req)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
		return false
	}
	defer up.Close()
	header.Del("Proxy-Authorization")
	header.Del("Proxy-Connection")
	header.Set("Connection", "close")
	if header.Get("Host") == "" {
		header.Set("Host", u.authority)
	}
	var out bytes.Buffer
	out.WriteString(method + " " + u.path + " HTTP/1.1\r\n")
	header.Write(&out)
	out.WriteString("\r\n")
	if _, err := up.Write(out.Bytes()); err != nil {
		return false
	}
	if n, _ := strconv.ParseInt(header.Get("Content-Length"), 10, 64); n > 0 {
		if _, err := io.CopyN(up, br, n); err != nil {
			return false
		}
	}
	res, err := http.ReadResponse(bufio.NewReader(up), &http.Request{Method: method})
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
		return false
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return false
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	res.TransferEncoding = nil
	res.Close = false
	res.Header.Del("Connection")
	return res.Write(c) == nil
}

func drainBody(br *bufio.Reader, h http.Header) bool {
	n, _ := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	_, err := io.CopyN(io.Discard, br, n)
	return err == nil
}

type relayURL struct {
	host, authority, path string
	port                  uint16
}

// urlParse reads an absolute http:// URL, leniently.
func urlParse(s string) (relayURL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !strings.EqualFold(scheme, "http") {
		return relayURL{}, errors.New("not an http:// URL")
	}
	auth, path, _ := strings.Cut(rest, "/")
	u := relayURL{authority: auth, path: "/" + path, port: 80}
	host, ps, err := net.SplitHostPort(auth)
	if err != nil {
		host = strings.Trim(auth, "[]")
	} else {
		p, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			return relayURL{}, err
		}
		u.port = uint16(p)
	}
	u.host = host
	return u, nil
}

func basicAuth(v string) (user, pass string) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", ""
	}
	user, pass, _ = strings.Cut(string(b), ":")
	return user, pass
}

func (r *Relay) socks5(c net.Conn, br *bufio.Reader) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	want := byte(0)
	if r.opts.User != "" {
		want = 2
	}
	if !bytes.Contains(methods, []byte{want}) {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, want})
	ok := true
	if want == 2 {
		var v [2]byte
		if _, err := io.ReadFull(br, v[:]); err != nil {
			return
		}
		user := make([]byte, v[1])
		io.ReadFull(br, user)
		var pl [1]byte
		io.ReadFull(br, pl[:])
		pass := make([]byte, pl[0])
		if _, err := io.ReadFull(br, pass); err != nil {
			return
		}
		ok = r.authorized(string(user), string(pass))
		if !ok {
			r.record(RelayRequest{Proto: "socks5"})
			c.Write([]byte{1, 1})
			return
		}
		c.Write([]byte{1, 0})
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	var host string
	switch req[3] {
	case 1:
		var a [4]byte
		io.ReadFull(br, a[:])
		host = netip.AddrFrom4(a).String()
	case 4:
		var a [16]byte
		io.ReadFull(br, a[:])
		host = netip.AddrFrom16(a).String()
	case 3:
		var l [1]byte
		io.ReadFull(br, l[:])
		name := make([]byte, l[0])
		io.ReadFull(br, name)
		host = string(name)
	default:
		c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := binary.BigEndian.Uint16(pb[:])
	rr := RelayRequest{Proto: "socks5", Target: net.JoinHostPort(host, strconv.Itoa(int(port))), Authorized: ok}
	if req[1] != 1 {
		r.record(rr)
		c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	up, err := r.dial(host, port)
	rr.Opened = err == nil
	r.record(rr)
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
	splice(c, br, up)
}

func (r *Relay) socks4(c net.Conn, br *bufio.Reader) {
	var req [8]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	user, err := br.ReadString(0)
	if err != nil {
		return
	}
	user = strings.TrimSuffix(user, "\x00")
	port := binary.BigEndian.Uint16(req[2:4])
	host := netip.AddrFrom4([4]byte(req[4:8])).String()
	proto := "socks4"
	if req[4] == 0 && req[5] == 0 && req[6] == 0 && req[7] != 0 {
		name, err := br.ReadString(0)
		if err != nil {
			return
		}
		host, proto = strings.TrimSuffix(name, "\x00"), "socks4a"
	}
	ok := r.opts.User == "" || user == r.opts.User
	rr := RelayRequest{Proto: proto, Target: net.JoinHostPort(host, strconv.Itoa(int(port))), Authorized: ok}
	if !ok || req[1] != 1 {
		r.record(rr)
		c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
		return
	}
	up, err := r.dial(host, port)
	rr.Opened = err == nil
	r.record(rr)
	if err != nil {
		c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
		return
	}
	c.Write([]byte{0, 0x5a, 0, 0, 0, 0, 0, 0})
	splice(c, br, up)
}
