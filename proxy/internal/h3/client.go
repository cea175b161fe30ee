package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// ErrUnreachable is wrapped by Client.RoundTrip's error when the upstream
// could not be reached over QUIC (no answer to the handshake, UDP blocked,
// no HTTP/3 there): nothing of the request was sent.
var ErrUnreachable = errors.New("h3: upstream not reachable over QUIC")

// Client sends requests upstream over HTTP/3, one QUIC connection per
// server name and address, kept while it lives. Its methods are safe for
// concurrent use.
type Client struct {
	// TLS verifies upstreams (its RootCAs); ServerName is set per
	// connection. Required.
	TLS *tls.Config
	// HandshakeTimeout bounds reaching an upstream; 5 s when zero.
	HandshakeTimeout time.Duration
	// HeaderTimeout bounds the wait for a response's header once the
	// request is sent; none when zero.
	HeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response's header section; http3's
	// default when zero.
	MaxResponseHeaderBytes int

	once   sync.Once
	h3     *http3.Transport // makes ClientConns; dials nothing itself
	mu     sync.Mutex
	closed bool
	socks  [2]*quic.Transport // IPv4, IPv6
	conns  map[connKey]*clientConn
}

type connKey struct {
	name string
	dst  netip.AddrPort
}

type clientConn struct {
	ready chan struct{} // closed once dialled (or failed)
	qc    *quic.Conn
	cc    *http3.ClientConn
	err   error
}

// RoundTrip sends req to dst, a server that answers for req.URL's host,
// over HTTP/3. An error that wraps ErrUnreachable means nothing was sent.
// An idempotent request without a body that fails because its pooled
// connection was closed under it (the server's idle timeout, its graceful
// close) is sent again once on a new connection, as net/http does.
func (c *Client) RoundTrip(req *http.Request, dst netip.AddrPort) (*http.Response, error) {
	k := connKey{name: req.URL.Hostname(), dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
	for try := 0; ; try++ {
		e, err := c.conn(req.Context(), k)
		if err != nil {
			return nil, err
		}
		res, err := c.send(e.cc, req)
		if err != nil && try == 0 && req.Body == nil && idempotent(req.Method) && req.Context().Err() == nil && closedUnder(e.qc, err) {
			c.forget(k, e)
			continue
		}
		return res, err
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// closedUnder reports whether a request's err says its connection was
// closed: gracefully by the server (H3_NO_ERROR), or at all.
func closedUnder(qc *quic.Conn, err error) bool {
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok && ae.ErrorCode == quic.ApplicationErrorCode(http3.ErrCodeNoError) {
		return true
	}
	return qc.Context().Err() != nil
}

// send sends req on cc, waiting at most HeaderTimeout for the header.
func (c *Client) send(cc *http3.ClientConn, req *http.Request) (*http.Response, error) {
	if c.HeaderTimeout <= 0 {
		return cc.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(c.HeaderTimeout, func() { cancel(errHeaderTimeout) })
	res, err := cc.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() {
		if err == nil {
			res.Body.Close()
		}
		return nil, errHeaderTimeout
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	res.Body = &cancelBody{ReadCloser: res.Body, cancel: cancel}
	return res, nil
}

// errHeaderTimeout is a response header that did not come in time.
var errHeaderTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "h3: timeout awaiting response headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// cancelBody releases its request's context when closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// conn returns the live connection for k, dialling it if there is none.
func (c *Client) conn(ctx context.Context, k connKey) (*clientConn, error) {
	c.once.Do(func() {
		c.h3 = &http3.Transport{MaxResponseHeaderBytes: c.MaxResponseHeaderBytes, DisableCompression: true}
	})
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: client closed", ErrUnreachable)
	}
	if c.conns == nil {
		c.conns = make(map[connKey]*clientConn)
	}
	e, ok := c.conns[k]
	if !ok {
		e = &clientConn{ready: make(chan struct{})}
		c.conns[k] = e
		go c.dial(k, e)
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if e.err != nil {
		return nil, e.err
	}
	return e, nil
}

// dial connects e to k, on its own time: a request that gives up waiting
// does not cancel a dial others may wait for.
func (c *Client) dial(k connKey, e *clientConn) {
	defer close(e.ready)
	fail := func(err error) {
		e.err = fmt.Errorf("%w: %s: %w", ErrUnreachable, k.dst, err)
		c.forget(k, e)
	}
	tr, err := c.socket(k.dst.Addr().Is4())
	if err != nil {
		fail(err)
		return
	}
	conf := c.TLS.Clone()
	conf.ServerName = k.name
	conf.NextProtos = []string{NextProto}
	timeout := orDefault(c.HandshakeTimeout, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	qc, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(k.dst), conf, &quic.Config{
		HandshakeIdleTimeout: timeout,
		MaxIdleTimeout:       90 * time.Second,
		KeepAlivePeriod:      0,
	})
	if err != nil {
		fail(err)
		return
	}
	e.qc, e.cc = qc, c.h3.NewClientConn(qc)
	context.AfterFunc(qc.Context(), func() { c.forget(k, e) })
}

// forget drops e from the pool, if it is still k's.
func (c *Client) forget(k connKey, e *clientConn) {
	c.mu.Lock()
	if c.conns[k] == e {
		delete(c.conns, k)
	}
	c.mu.Unlock()
}

// socket returns the QUIC transport (one UDP socket) of an address family.
func (c *Client) socket(v4 bool) (*quic.Transport, error) {
	i, network, laddr := 0, "udp4", &net.UDPAddr{IP: net.IPv4zero}
	if !v4 {
		i, network, laddr = 1, "udp6", &net.UDPAddr{IP: net.IPv6unspecified}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("client closed")
	}
	if c.socks[i] == nil {
		pc, err := net.ListenUDP(network, laddr)
		if err != nil {
			return nil, err
		}
		c.socks[i] = &quic.Transport{Conn: pc}
	}
	return c.socks[i], nil
}

// Close closes every connection and socket. Safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = nil
	socks := c.socks
	c.socks = [2]*quic.Transport{}
	c.mu.Unlock()
	for _, e := range conns {
		<-e.ready
		if e.qc != nil {
			e.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		}
	}
	for _, tr := range socks {
		if tr != nil {
			tr.Close()
			tr.Conn.Close()
		}
	}
	return nil
}
