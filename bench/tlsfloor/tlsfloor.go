package tlsfloor

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"iter"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/chaperone-dev/chaperone/bench/benchca"
)

// maxHead bounds a request or response head.
const maxHead = 64 << 10

// maxIdle bounds the origin connections kept per origin.
const maxIdle = 1024

// Proxy is the intercepting proxy; its zero value is not usable.
type Proxy struct {
	ca     tls.Certificate
	client *tls.Config // to the origin

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
	idle   map[string][]*originConn // per origin IP:port, the last kept last
}

// New returns a proxy that signs leaves with ca (from benchca.New) and
// verifies origins against roots (nil: the system's).
func New(ca tls.Certificate, roots *x509.CertPool) *Proxy {
	return &Proxy{
		ca:     ca,
		client: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}},
		leaves: map[string]*tls.Certificate{},
		idle:   map[string][]*originConn{},
	}
}

// Serve accepts connections on l until l is closed. Out of file
// descriptors, it waits for some to close rather than stop.
func (p *Proxy) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go p.serve(c)
	}
}

// leaf returns the kept leaf for host, signing it the first time.
func (p *Proxy) leaf(host string) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.leaves[host]; ok {
		return c, nil
	}
	c, err := benchca.Leaf(p.ca, host)
	if err != nil {
		return nil, err
	}
	p.leaves[host] = c
	return c, nil
}

func (p *Proxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	head, err := readHead(br, nil)
	if err != nil {
		return
	}
	method, target := requestLine(head)
	if method != "CONNECT" {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	ap, err := netip.ParseAddrPort(target)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	host := ap.Addr().Unmap().String()
	leaf, err := p.leaf(host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	// The client waits for the answer before its ClientHello, so br holds
	// nothing more; reading through br keeps it right if it did not wait.
	client := tls.Server(&bufferedConn{Conn: c, r: br}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
	})
	defer client.Close()
	if err := client.Handshake(); err != nil {
		return
	}
	p.relay(bufio.NewReader(client), bufio.NewWriter(client), client, ap.String(), host)
}

// originConn is a TLS connection to an origin, with its buffers.
type originConn struct {
	tc *tls.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// origin returns a kept connection to target, or a new one.
func (p *Proxy) origin(target, host string) (*originConn, error) {
	p.mu.Lock()
	if l := p.idle[target]; len(l) > 0 {
		oc := l[len(l)-1]
		p.idle[target] = l[:len(l)-1]
		p.mu.Unlock()
		return oc, nil
	}
	p.mu.Unlock()
	conf := p.client.Clone()
	conf.ServerName = host
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", target, conf)
	if err != nil {
		return nil, err
	}
	return &originConn{tc: tc, r: bufio.NewReader(tc), w: bufio.NewWriter(tc)}, nil
}

// keep puts oc back for the next request to target.
func (p *Proxy) keep(target string, oc *originConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle[target]) >= maxIdle {
		oc.tc.Close()
		return
	}
	p.idle[target] = append(p.idle[target], oc)
}

// relay sends each request from the client to an origin connection and
// its response back, until the client closes, asks to, or either side
// sends what the proxy cannot frame. A client's Connection: close is not
// passed on, so that the origin connection is kept.
func (p *Proxy) relay(cr *bufio.Reader, cw *bufio.Writer, client io.Writer, target, host string) {
	var head []byte // one buffer for every head of the connection
	for {
		req, err := readHead(cr, head[:0])
		if err != nil {
			return
		}
		lastReq := connectionClose(req)
		if lastReq {
			req = withoutConnection(req)
		}
		head = req
		isHEAD := bytes.HasPrefix(req, []byte("HEAD "))
		n, ok := bodyLength(req, true)
		if !ok {
			return
		}
		oc, err := p.origin(target, host)
		if err != nil {
			return
		}
		if !send(oc.w, oc.tc, req, cr, n) {
			oc.tc.Close()
			return
		}
		res, err := readHead(oc.r, head[:0])
		if err != nil {
			oc.tc.Close()
			return
		}
		head = res
		lastRes := connectionClose(res)
		n, ok = bodyLength(res, false)
		if code := statusCode(res); isHEAD || code == 204 || code == 304 || code/100 == 1 {
			n, ok = 0, code/100 != 1 // an interim response would need the final one read too
		}
		if !ok || !send(cw, client, res, oc.r, n) {
			oc.tc.Close()
			return
		}
		if lastRes {
			oc.tc.Close()
		} else {
			p.keep(target, oc)
		}
		if lastReq || lastRes {
			return
		}
	}
}

// send writes head and the n bytes of body from r to w, and flushes: in
// one write when they fit w's buffer, else through a buffer of the size of
// a TLS record straight to dst, w's destination.
func send(w *bufio.Writer, dst io.Writer, head []byte, r io.Reader, n int64) bool {
	w.Write(head)
	if n <= int64(w.Available()) {
		_, err := io.CopyN(w, r, n)
		return err == nil && w.Flush() == nil
	}
	if w.Flush() != nil {
		return false
	}
	buf := bodyBufs.Get().(*[16 << 10]byte)
	defer bodyBufs.Put(buf)
	m, err := io.CopyBuffer(struct{ io.Writer }{dst}, io.LimitReader(r, n), buf[:])
	return err == nil && m == n
}

var bodyBufs = sync.Pool{New: func() any { return new([16 << 10]byte) }}

// connectionClose reports whether head has a Connection field that lists
// close.
func connectionClose(head []byte) bool {
	for f := range fields(head) {
		if name, value, ok := bytes.Cut(f, []byte(":")); ok && bytes.EqualFold(name, []byte("Connection")) && hasToken(value, "close") {
			return true
		}
	}
	return false
}

// withoutConnection returns head without its Connection fields, changed
// in place.
func withoutConnection(head []byte) []byte {
	out := head[:0]
	for f := range lines(head) {
		if name, _, ok := bytes.Cut(f, []byte(":")); !ok || !bytes.EqualFold(name, []byte("Connection")) {
			out = append(out, f...)
		}
	}
	return out
}

// lines yields each line of head with its line end.
func lines(head []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(head) > 0 {
			i := bytes.IndexByte(head, '\n') + 1
			if i == 0 {
				i = len(head)
			}
			if !yield(head[:i]) {
				return
			}
			head = head[i:]
		}
	}
}

// fields yields each field line of head, after its first line.
func fields(head []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		first := true
		for l := range lines(head) {
			if !first && !yield(l) {
				return
			}
			first = false
		}
	}
}

// hasToken reports whether the comma-separated list v has token t, in any
// case.
func hasToken(v []byte, t string) bool {
	for len(v) > 0 {
		var item []byte
		item, v, _ = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(t)) {
			return true
		}
	}
	return false
}

// readHead appends to buf the head of a request or response, up to and
// with its empty line, and returns it: a copy, as the reader's buffer is
// reused.
func readHead(r *bufio.Reader, buf []byte) ([]byte, error) {
	head := buf
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		head = append(head, line...)
		if len(head) > maxHead {
			return nil, errors.New("tlsfloor: head too large")
		}
		if len(line) == 2 && line[0] == '\r' || len(line) == 1 {
			return head, nil
		}
	}
}

// requestLine returns the method and target of a request head's first
// line, "" when it is not METHOD TARGET HTTP/1.x.
func requestLine(head []byte) (method, target string) {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	f := bytes.Fields(line)
	if len(f) != 3 || !bytes.HasPrefix(f[2], []byte("HTTP/1.")) {
		return "", ""
	}
	return string(f[0]), string(f[1])
}

// statusCode is a response head's status, 0 when malformed.
func statusCode(head []byte) int {
	if len(head) < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.")) || head[8] != ' ' {
		return 0
	}
	n := 0
	for _, d := range head[9:12] {
		if d < '0' || d > '9' {
			return 0
		}
		n = n*10 + int(d-'0')
	}
	return n
}

// bodyLength returns the Content-Length of a head, and false for a framing
// this proxy does not handle: Transfer-Encoding, a bad or repeated
// Content-Length, or a response without one. A request without one has no
// body.
func bodyLength(head []byte, request bool) (int64, bool) {
	n := int64(-1)
	for f := range fields(head) {
		name, value, ok := bytes.Cut(f, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, false
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || v < 0 || n >= 0 {
				return 0, false
			}
			n = v
		}
	}
	if n < 0 {
		return 0, request
	}
	return n, true
}

// bufferedConn reads through r, a reader of Conn that may hold bytes read
// ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
