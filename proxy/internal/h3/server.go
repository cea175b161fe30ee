package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// NextProto is HTTP/3's ALPN protocol ID.
const NextProto = http3.NextProtoH3

// ErrCodeRefused is the application error code of a connection the
// Server's Admit refused: H3_REQUEST_REJECTED (RFC 9114 section 8.1), as
// nothing of the client's was processed.
const ErrCodeRefused = quic.ApplicationErrorCode(http3.ErrCodeRequestRejected)

// Closer ends a QUIC connection with ErrCodeRefused and a reason phrase,
// which the client sees.
type Closer func(reason string)

// Server serves HTTP/3 on the QUIC connections of one packet connection.
// Its callbacks run on the connection's goroutines, concurrently for
// different connections.
type Server struct {
	// TLS is the handshake's configuration; Serve sets ALPN h3 and TLS
	// 1.3 on a copy. Its callbacks get the ClientHello with the
	// connection's context (Start's): ClientHelloInfo.Context().
	TLS *tls.Config
	// Start is called at a client's first packet: the context it returns
	// is the connection's (its TLS callbacks, Admit, its requests). An
	// error refuses the connection (CONNECTION_REFUSED, no reason: there
	// are no keys yet to send one with). Nil: the Serve context.
	Start func(ctx context.Context, client netip.AddrPort) (context.Context, error)
	// Admit is called once the handshake has completed: a non-nil error
	// closes the connection, its text the reason phrase; nil serves its
	// requests. closeConn ends the connection later (the same way). Nil
	// admits every connection.
	Admit func(ctx context.Context, closeConn Closer) error
	// Handler serves each request; its context derives from the
	// connection's.
	Handler http.Handler
	// HandshakeTimeout bounds a handshake; IdleTimeout closes a connection
	// without requests for so long. Defaults: 10 s and 2 minutes.
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration
	// MaxHeaderBytes bounds a request's header section; http3's default
	// when zero.
	MaxHeaderBytes int
	Logger         *slog.Logger

	mu     sync.Mutex
	closed bool
	tr     *quic.Transport
	ln     *quic.Listener
	srv    *http3.Server
	conns  map[*quic.Conn]struct{}
	wg     sync.WaitGroup
}

// errServerClosed ends Serve after Close.
var errServerClosed = errors.New("h3: server closed")

// Serve accepts QUIC connections on pc until Close, after which it
// returns nil. It does not close pc.
func (s *Server) Serve(pc net.PacketConn) error {
	conf := s.TLS.Clone()
	conf.NextProtos = []string{NextProto}
	conf.MinVersion = tls.VersionTLS13
	pinned := newPinnedConn(pc)
	tr := &quic.Transport{Conn: pinned}
	tr.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
		client := addrPortOf(info.RemoteAddr)
		if s.Start != nil {
			var err error
			if ctx, err = s.Start(ctx, client); err != nil {
				return nil, err
			}
		}
		pinned.pin(ctx, client)
		return ctx, nil
	}
	qconf := &quic.Config{
		HandshakeIdleTimeout:  orDefault(s.HandshakeTimeout, 10*time.Second),
		MaxIdleTimeout:        orDefault(s.IdleTimeout, 2*time.Minute),
		Allow0RTT:             false, // replayable requests are never taken
		EnableDatagrams:       false, // no QUIC datagrams, hence no WebTransport or MASQUE
		MaxIncomingStreams:    250,   // as for HTTP/2
		MaxIncomingUniStreams: 16,
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := &http3.Server{
		Handler:         s.Handler,
		EnableDatagrams: false,
		IdleTimeout:     orDefault(s.IdleTimeout, 2*time.Minute),
		MaxHeaderBytes:  s.MaxHeaderBytes,
		Logger:          logger,
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	ln, err := tr.Listen(conf, qconf)
	if err != nil {
		s.mu.Unlock()
		tr.Close()
		return fmt.Errorf("h3: listen: %w", err)
	}
	s.tr, s.ln, s.srv = tr, ln, srv
	s.conns = make(map[*quic.Conn]struct{})
	s.mu.Unlock()
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, quic.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("h3: accept: %w", err)
		}
		if !s.add(c) {
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			return nil
		}
		go func() {
			defer s.remove(c)
			s.serveConn(srv, c)
		}()
	}
}

func (s *Server) serveConn(srv *http3.Server, c *quic.Conn) {
	if s.Admit != nil {
		closeConn := func(reason string) { c.CloseWithError(ErrCodeRefused, reason) }
		if err := s.Admit(c.Context(), closeConn); err != nil {
			c.CloseWithError(ErrCodeRefused, err.Error())
			return
		}
	}
	srv.ServeQUICConn(c)
}

func (s *Server) add(c *quic.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) remove(c *quic.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Close stops accepting, closes every connection and waits for their
// handlers to return. Safe before Serve and more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ln, srv, tr := s.ln, s.srv, s.tr
	conns := make([]*quic.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	if srv != nil {
		srv.Close()
	}
	for _, c := range conns {
		c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
	s.wg.Wait()
	if tr != nil {
		tr.Close()
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// addrPortOf returns a net.Addr as an AddrPort (IPv4 unmapped), or the
// zero value.
func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case nil:
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
