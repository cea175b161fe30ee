package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/ws"
)

// socketHandler handles the messages of one inspected WebSocket
// connection (ws.Relay's Handler), and learns how it ended.
type socketHandler interface {
	ws.Handler
	ended(ws.End)
}

// serveSocket serves a WebSocket upgrade whose messages are inspected by
// h: the client's handshake is checked (one the proxy cannot inspect is
// refused, never passed through), the upstream's is made through the
// tunnel's transport with an offer of the proxy's own (permessage-deflate
// is agreed with each side apart), and once the upstream answered 101
// the client is answered and ws.Relay runs until the connection ends.
// The http event is published at the 101, or with the refusal or the
// upstream's other answer; abort is as roundTrip's.
func (p *Proxy) serveSocket(x *exchange, r *http.Request, h socketHandler) (abort bool) {
	key, offers, err := ws.CheckRequest(r)
	if err != nil {
		x.sw.published = true
		p.refuse(x.sw.ResponseWriter, x.ev, http.StatusBadRequest, proxyVerdict(ruleMalformedRequest,
			"a WebSocket handshake that cannot be inspected: "+err.Error()))
		return false
	}
	out := x.outgoing(r, false) // its header is a map of its own: Upgrade is removed from it
	// The handshake has no body: over HTTP/2 (RFC 8441) the stream's
	// DATA is the client's side of the WebSocket.
	out.Body, out.ContentLength = nil, 0
	out.Header.Del("Sec-Websocket-Extensions")
	if len(offers) > 0 {
		out.Header.Set("Sec-Websocket-Extensions", ws.DeflateOffer)
	}
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", "websocket")
	res, err := tunnelTransport{p: p, h1Only: true}.RoundTrip(out)
	if err != nil {
		p.upstreamError(&x.sw, out, err)
		return false
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		// Refused upstream (401, 429, …): the client reads the answer.
		announced := x.writeHeader(r, res)
		if err := p.copyBody(x, r, res); err != nil {
			res.Body.Close()
			return true
		}
		res.Body.Close()
		if len(res.Trailer) > 0 {
			x.fw.flush()
			copyTrailers(x.sw.Header(), res.Trailer, announced)
		}
		return false
	}
	up, ok := res.Body.(io.ReadWriteCloser)
	serverSide, err := ws.CheckResponse(res, key, len(offers) > 0)
	if !ok {
		err = errors.New("the upstream's connection cannot be written")
	}
	if err != nil {
		res.Body.Close()
		p.upstreamError(&x.sw, out, fmt.Errorf("websocket handshake: %w", err))
		return false
	}
	clientSide, answer := ws.AcceptDeflate(offers)
	hdr := http.Header{}
	copyEndToEnd(hdr, res.Header)
	hdr.Del("Sec-Websocket-Extensions")
	if answer != "" {
		hdr.Set("Sec-Websocket-Extensions", answer)
	}
	if r.ProtoMajor == 2 {
		// RFC 8441: the client's side is the stream, answered 200.
		return p.serveStreamSocket(x, r, h, hdr, clientSide, serverSide, up)
	}
	conn, brw, err := http.NewResponseController(&x.sw).Hijack() // publishes the http event (101)
	if err != nil {
		up.Close()
		x.http.Error = "the client's connection cannot be taken over: " + err.Error()
		return false
	}
	defer conn.Close()
	bw := brw.Writer
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	hdr.Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		up.Close()
		return false
	}
	end := ws.Relay(
		ws.NewConn(brw.Reader, conn, conn, ws.AsServer, clientSide),
		ws.NewConn(bufio.NewReaderSize(up, 32<<10), up, up, ws.AsClient, serverSide),
		h, ws.Options{})
	h.ended(end)
	return false
}

// policyClose closes a WebSocket refused by v: 1008 with the rule and
// reason to the client (1001 to the server).
func policyClose(v event.Verdict) ws.Action {
	return ws.Action{Close: true, CloseCode: ws.ClosePolicy, CloseReason: strings.TrimSuffix(denyMessage(v), "\n")}
}

// serveStreamSocket relays a WebSocket opened on an HTTP/2 stream by an
// extended CONNECT (RFC 8441) whose upstream answered 101: the client is
// answered 200 (the http event is published then) and its messages are
// the stream's DATA frames, each frame written flushed.
func (p *Proxy) serveStreamSocket(x *exchange, r *http.Request, h socketHandler, hdr http.Header,
	clientSide, serverSide *ws.Deflate, up io.ReadWriteCloser) bool {
	w := x.sw.ResponseWriter
	out := w.Header()
	for k, v := range hdr {
		if k != "Sec-Websocket-Accept" {
			out[k] = v
		}
	}
	x.sw.status = http.StatusOK
	x.sw.publish()
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		up.Close()
		return false
	}
	end := ws.Relay(
		ws.NewConn(bufio.NewReaderSize(r.Body, 32<<10), flushingWriter{w, rc}, r.Body, ws.AsServer, clientSide),
		ws.NewConn(bufio.NewReaderSize(up, 32<<10), up, up, ws.AsClient, serverSide),
		h, ws.Options{})
	h.ended(end)
	return false
}

// flushingWriter sends each write at once: a frame of the relay is a
// write.
type flushingWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (f flushingWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}
