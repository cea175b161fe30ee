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
	"github.com/quic-go/quic-go/qlogwriter"
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
	// Start is called at a connection's first Initial, with the client's
	// address and the Initial's destination connection ID (dcid), which
	// tells apart connections started at once from one client socket:
	// the context it returns is the connection's (its TLS callbacks,
	// Admit, its requests). An error refuses the connection: its
	// handshake fails at the ClientHello (there are no keys before it to
	// send a reason with). Nil: the Serve context.
	Start func(ctx context.Context, client netip.AddrPort, dcid []byte) (context.Context, error)
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
	// quic-go's ClientInfo has no connection ID, but Config.Tracer gets
	// the original one, on the same goroutine right after ConnContext and
	// with a context derived from ConnContext's, before the connection's
	// goroutines start: ConnContext leaves a slot that Tracer fills with
	// Start's context, which the connection's context then reads through.
	tr.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
		client := addrPortOf(info.RemoteAddr)
		pinned.pin(ctx, client)
		return &slotContext{Context: ctx, slot: &startSlot{base: ctx, client: client}}, nil
	}
	get := conf.GetConfigForClient
	conf.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if sl, _ := hello.Context().Value(slotKey{}).(*startSlot); sl != nil && sl.err != nil {
			return nil, sl.err // Start refused the connection
		}
		if get == nil {
			return nil, nil
		}
		return get(hello)
	}
	qconf := &quic.Config{
		HandshakeIdleTimeout:  orDefault(s.HandshakeTimeout, 10*time.Second),
		MaxIdleTimeout:        orDefault(s.IdleTimeout, 2*time.Minute),
		Allow0RTT:             false, // replayable requests are never taken
		EnableDatagrams:       false, // no QUIC datagrams, hence no WebTransport or MASQUE
		MaxIncomingStreams:    250,   // as for HTTP/2
		MaxIncomingUniStreams: 16,
		Tracer: func(ctx context.Context, isClient bool, dcid quic.ConnectionID) qlogwriter.Trace {
			sl, _ := ctx.Value(slotKey{}).(*startSlot)
			if isClient || sl == nil || sl.ctx != nil || sl.err != nil {
				return nil
			}
			sl.ctx = sl.base
			if s.Start != nil {
				sl.ctx, sl.err = s.Start(sl.base, sl.client, dcid.Bytes())
				if sl.err != nil {
					sl.ctx = nil
				}
			}
			return nil
		},
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

// slotKey finds a connection's startSlot in its context.
type slotKey struct{}

// startSlot is where a connection's Start result is kept. It is written
// once, by Config.Tracer on the server's goroutine before the connection's
// goroutines start, and only read after.
type startSlot struct {
	base   context.Context // ConnContext's, which ends with the connection
	client netip.AddrPort
	ctx    context.Context // Start's; nil until Tracer, or when it failed
	err    error           // Start's
}

// slotContext is a connection's context: its values are Start's context's
// once Start has run.
type slotContext struct {
	context.Context
	slot *startSlot
}

func (c *slotContext) Value(key any) any {
	if key == (slotKey{}) {
		return c.slot
	}
	if c.slot.ctx != nil {
		return c.slot.ctx.Value(key)
	}
	return c.Context.Value(key)
}
