package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/ws"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// Bounds of the messages a msgSocket holds whole to decide: a longer one
// is decided at its start, with what came of it by then (its first
// maxWSText bytes of text, maxWSBinary of binary; ws.truncated), and then
// passes on as it comes, holding a window at most: an outgoing one is
// searched for secrets as it streams, as a large request body is.
const (
	maxWSText   = 1 << 20
	maxWSBinary = 64 << 10
)

// isWebSocket reports whether r asks to switch to WebSocket: any Upgrade
// that names it, whether or not its Connection says so (serveSocket
// refuses a handshake it cannot inspect rather than pass it through).
func isWebSocket(h http.Header) bool {
	for _, v := range h["Upgrade"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

// msgSocketFor makes the handler of a WebSocket upgrade to a host that is
// not an LLM API (or an LLM API's host at a path it does not serve
// WebSocket on); rw is the session's rewrites, nil for none.
func (p *Proxy) msgSocketFor(x *exchange, r *http.Request, rw *Rewrites) {
	x.socket = &msgSocket{
		p: p, rw: rw, ctx: context.WithoutCancel(r.Context()),
		session: x.ev.Session, process: x.ev.Process, host: r.Host, path: x.eventPath(r),
	}
}

// msgSocket is the handler of a WebSocket connection whose messages are
// not an LLM API's: each data message, either way, is a ws event decided
// before it goes on, and recorded. A refused message closes the
// connection: 1008 with the rule and reason to the client, 1001 to the
// server. Outgoing messages, text or binary, are searched for secrets
// (ws.secrets) as a request body is; JSON-RPC messages of the Model
// Context Protocol name their method and tool. A message longer than the
// bound of its type is decided at its start, searched on as it streams
// (scanRest), and recorded once it has gone whole.
type msgSocket struct {
	p       *Proxy
	rw      *Rewrites       // nil in a session without rewrites: no text, no secrets
	ctx     context.Context // the upgrade's, for the decisions
	session string
	process *event.Process
	host    string
	path    string

	mcp mcpCalls
	// started holds, per direction, the event of a message decided at
	// its start, published at its end. Each is its direction's goroutine's
	// until Relay returns.
	started [2]*event.Event
}

func (s *msgSocket) Begin(dir ws.Direction, op ws.Opcode) int64 {
	if op == ws.OpText {
		return maxWSText
	}
	return maxWSBinary
}

func (s *msgSocket) Message(m ws.Message) ws.Action {
	e := s.newEvent(m, int64(len(m.Data)), false)
	if !e.Verdict.Allowed() {
		return s.refuse(e)
	}
	s.p.publish(e)
	return ws.Action{Send: []ws.Out{{Op: m.Op, Data: m.Data}}}
}

// Oversized decides a message from its start; allowed, it streams on.
func (s *msgSocket) Oversized(m ws.Message) ws.Action {
	e := s.newEvent(m, -1, true)
	if !e.Verdict.Allowed() {
		return s.refuse(e)
	}
	s.started[m.Dir] = e
	a := ws.Action{Stream: true}
	if m.Dir == ws.ToServer && s.rw != nil {
		a.Filter = func(prefix []byte, rest io.Reader) io.Reader { return s.scanRest(e, prefix, rest) }
	}
	return a
}

// scanRest is the rest of an outgoing message decided at its start (e),
// searched for secrets as it streams, a window at a time: a secret not
// found before has e decided again, with ws.secrets grown, and a verdict
// that does not allow it ends the message short of the window that holds
// it, and the connection (a ws.Refusal), e published refused.
func (s *msgSocket) scanRest(e *event.Event, prefix []byte, rest io.Reader) io.Reader {
	check := func(window []byte, _ bool) error {
		found := s.rw.findIn(window, partMessage, s.host, nil)
		ids := mergeIDs(e.WS.Secrets, ruleIDs(found))
		if len(ids) == len(e.WS.Secrets) {
			return nil
		}
		e.WS.Secrets = ids
		v := s.p.decide(s.ctx, e)
		if v.Allowed() {
			return nil
		}
		v.Reason = withPlaces(v.Reason, found)
		e.Verdict = v
		s.started[ws.ToServer] = nil
		s.p.publish(e)
		a := policyClose(v)
		return &ws.Refusal{Code: a.CloseCode, Reason: a.CloseReason}
	}
	ss, err := rewrite.NewStreamScanner(prefix, rest, rewrite.Encoding{}, check, rewrite.StreamOptions{Overlap: secrets.StreamOverlap})
	if err != nil {
		return refusedReader{&ws.Refusal{Code: ws.CloseInternalError, Reason: "chaperone: " + err.Error()}}
	}
	return ss
}

// refusedReader refuses a message before any of it goes on.
type refusedReader struct{ err *ws.Refusal }

func (r refusedReader) Read([]byte) (int, error) { return 0, r.err }

// Streamed records a message decided at its start, with its size.
func (s *msgSocket) Streamed(dir ws.Direction, _ ws.Opcode, size int64) {
	if e := s.started[dir]; e != nil {
		s.started[dir] = nil
		e.WS.Size = size
		s.p.publish(e)
	}
}

func (s *msgSocket) Closing(ws.Direction) []ws.Out { return nil }

// ended records the messages whose end never came.
func (s *msgSocket) ended(end ws.End) {
	for i, e := range s.started {
		if e != nil {
			s.started[i] = nil
			s.p.publish(e)
		}
	}
	s.p.log.Debug("proxy: WebSocket ended", "session", s.session, "host", s.host,
		"client_close", end.ClientClose, "server_close", end.ServerClose, "closed", end.Closed, "err", end.Err)
}

// newEvent makes and decides the ws event of m (all of it, or its start
// when partial), whose size is size (-1: not known yet).
func (s *msgSocket) newEvent(m ws.Message, size int64, partial bool) *event.Event {
	w := &event.WS{Host: s.host, Path: s.path, Direction: event.WSReceive, Opcode: "binary", Size: size, Truncated: partial}
	if m.Dir == ws.ToServer {
		w.Direction = event.WSSend
	}
	var found []secretAt
	if s.rw != nil && m.Dir == ws.ToServer {
		found = s.rw.findIn(m.Data, partMessage, s.host, nil)
		w.Secrets = ruleIDs(found)
	}
	if m.Op == ws.OpText {
		w.Opcode = "text"
		if s.rw != nil && s.rw.Redactor != nil {
			var cut bool
			w.Text, cut = rewrite.LogPrompt(string(m.Data), s.rw.Redactor, event.MaxWSText)
			w.Truncated = w.Truncated || cut
		}
	}
	if !partial {
		if c, ok := parseMCP(m.Data); ok {
			w.MCPMethod, w.MCPTool = s.mcp.note(c, m.Dir == ws.ToServer)
		}
	}
	e := &event.Event{Time: s.p.now(), Kind: event.KindWS, Session: s.session, Process: s.process, WS: w}
	e.Verdict = s.p.decide(s.ctx, e)
	if !e.Verdict.Allowed() {
		e.Verdict.Reason = withPlaces(e.Verdict.Reason, found)
	}
	return e
}

// refuse publishes e, refused, and closes the connection: 1008 with the
// rule and reason to the client.
func (s *msgSocket) refuse(e *event.Event) ws.Action {
	s.p.publish(e)
	return policyClose(e.Verdict)
}
