package proxy

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy/internal/ws"
	"github.com/chaperone-dev/chaperone/rewrite"
)

// maxAnswerMessage bounds a server message held to be restored and
// parsed; a larger one passes on as it comes, unparsed.
const maxAnswerMessage = 8 << 20

// llmSocketFor recognises, in a session with rewrites (x.rw), a protocol
// switch that goes to an LLM API, and makes the handler of its messages.
// Any switch to an LLM API's host is taken for a WebSocket (a spelling of
// Upgrade or Connection that a server might take for one is no way
// around the inspection): serveSocket refuses one it cannot inspect.
func (p *Proxy) llmSocketFor(x *exchange, r *http.Request) (rewrite.API, bool) {
	if r.Header["Upgrade"] == nil {
		return rewrite.API{}, false
	}
	api, ok := rewrite.DetectWebSocketAPI(r.Host, r.URL.Path, x.rw.LLMHosts)
	if !ok {
		return api, false
	}
	s := &llmSocket{
		p: p, rw: x.rw, api: api, ctx: context.WithoutCancel(r.Context()),
		session: x.ev.Session, process: x.ev.Process, host: r.Host, path: x.eventPath(r),
		model: r.URL.Query().Get("model"), // the Realtime API's
	}
	var restore func(string) (string, bool)
	if x.rw.Restore && x.rw.Redactor != nil {
		red := x.rw.Redactor
		restore = func(ph string) (string, bool) {
			v, ok := red.Lookup(ph)
			if ok {
				s.restored++
			}
			return v, ok
		}
	}
	s.answer = rewrite.NewWSAnswer(api, restore)
	s.answer.StampToolCalls(p.now)
	x.socket = s
	return api, true
}

// llmSocket is the handler of a WebSocket connection to an LLM API. Each
// client message that may carry a prompt (all but those known to carry
// none: acknowledgements, audio, cancels) is an llm event decided before
// it goes on, and redacted when the verdict says so, as an HTTP call's
// body is; one that asks for an answer is published when its answer has
// ended (answers are matched to requests in order), any other at once. A
// refused message closes the connection: 1008 with the rule and reason to
// the client. The server's messages have the placeholders they quote
// restored, split across deltas too (rewrite.WSAnswer).
type llmSocket struct {
	p       *Proxy
	rw      *Rewrites
	api     rewrite.API
	ctx     context.Context // the upgrade's, for the decisions: the connection outlives its handler's return
	session string
	process *event.Process
	host    string
	path    string

	// The server direction's.
	answer   *rewrite.WSAnswer
	restored int       // placeholders restored in the current answer
	lastOp   ws.Opcode // of the message the answer may hold back

	mu       sync.Mutex
	model    string      // the connection's: from the URL, setup or session.update
	pending  []*llmEvent // requests waiting for their answers, oldest first
	unparsed int         // messages passed without being understood since the last llm event
}

// llmEvent is the llm event of one client message.
type llmEvent struct {
	ev  event.Event
	llm event.LLM
}

func (s *llmSocket) Begin(dir ws.Direction, op ws.Opcode) int64 {
	if dir == ws.ToServer {
		return maxLLMBody // a prompt is held whole to be redacted, as over HTTP
	}
	return maxAnswerMessage
}

func (s *llmSocket) Message(m ws.Message) ws.Action {
	if m.Dir == ws.ToServer {
		return s.request(m)
	}
	if m.Op == ws.OpBinary && !looksJSON(m.Data) {
		s.countUnparsed()
		return ws.Action{Send: append(s.flush(), ws.Out{Op: m.Op, Data: m.Data})}
	}
	outs, ev := s.answer.Message(m.Data)
	s.lastOp = m.Op
	if !ev.Understood {
		s.countUnparsed()
	}
	if ev.Done {
		s.answered(s.answer.Take(), s.restored)
		s.restored = 0
	}
	act := ws.Action{Send: make([]ws.Out, len(outs))}
	for i, o := range outs {
		act.Send[i] = ws.Out{Op: m.Op, Data: o}
	}
	return act
}

// Oversized: a client message too large to redact is refused, unless it
// is binary that is not JSON (passed on, counted); a server message too
// large to hold goes on as it comes, unparsed.
func (s *llmSocket) Oversized(m ws.Message) ws.Action {
	if m.Dir == ws.ToClient {
		s.countUnparsed()
		return ws.Action{Send: s.flush(), Stream: true}
	}
	if m.Op == ws.OpBinary && !looksJSON(m.Data) {
		s.countUnparsed()
		return ws.Action{Stream: true}
	}
	e := s.newEvent(rewrite.WSMessage{})
	return s.refuse(e, proxyVerdict(ruleRedactFailed, "the LLM request message is too large to check for secrets"))
}

func (s *llmSocket) Streamed(ws.Direction, ws.Opcode, int64) {}

func (s *llmSocket) Closing(dir ws.Direction) []ws.Out {
	if dir == ws.ToClient {
		return s.flush()
	}
	return nil
}

// flush returns the server message the answer held back, if any.
func (s *llmSocket) flush() []ws.Out {
	var out []ws.Out
	for _, b := range s.answer.Flush() {
		out = append(out, ws.Out{Op: s.lastOp, Data: b})
	}
	return out
}

// request decides a client's message, redacts it and sends it on.
func (s *llmSocket) request(m ws.Message) ws.Action {
	send := func(b []byte) ws.Action { return ws.Action{Send: []ws.Out{{Op: m.Op, Data: b}}} }
	if m.Op == ws.OpBinary && !looksJSON(m.Data) {
		s.countUnparsed() // audio or other bytes: passed on, counted
		return send(m.Data)
	}
	wm := rewrite.InspectWSMessage(s.api, m.Data)
	if wm.Kind == rewrite.WSControl {
		return send(m.Data)
	}
	if wm.Kind == rewrite.WSUnknown {
		s.countUnparsed() // decided and redacted all the same: it may carry a prompt
	}
	e := s.newEvent(wm)
	rw := s.rw
	rw.tellTask(wm.Task, wm.Prompt)
	v := s.p.decide(s.ctx, &e.ev)
	if !v.Allowed() {
		rw.logPrompt(&e.llm, wm.Prompt, m.Data, false)
		return s.refuse(e, v)
	}
	e.ev.Verdict = v
	out := m.Data
	redacted := false
	if rw.wants(v, "redact_secrets") && rw.Redactor != nil {
		var ids []string
		if out, ids = rewrite.RedactBody(m.Data, rw.Redactor); len(ids) > 0 {
			counts := map[string]int{}
			for _, id := range ids {
				counts[id]++
			}
			e.llm.Rewrite = &event.Changes{Redacted: counts}
		}
		redacted = true
	}
	rw.logPrompt(&e.llm, wm.Prompt, m.Data, redacted)
	if b := rw.Credentials; b != nil {
		var leaked []string
		for _, name := range b.FindPlaceholders(out) {
			if !b.Matches(name, s.host) {
				leaked = append(leaked, name)
			}
		}
		if len(leaked) > 0 {
			slices.Sort(leaked)
			return s.refuse(e, proxyVerdict(ruleCredentialLeak,
				"the message carries the placeholder of credential "+strings.Join(slices.Compact(leaked), ", ")+" to a host it is not bound to"))
		}
	}
	if e.llm.Rewrite != nil && e.ev.Verdict.Action == event.Allow {
		e.ev.Verdict.Action = event.Rewrite
	}
	if wm.Kind == rewrite.WSRequest {
		s.mu.Lock()
		s.pending = append(s.pending, e)
		s.mu.Unlock()
	} else {
		s.publish(e)
	}
	return send(out)
}

// newEvent starts the llm event of a client message, and notes the model
// it names as the connection's.
func (s *llmSocket) newEvent(wm rewrite.WSMessage) *llmEvent {
	s.mu.Lock()
	if wm.Model != "" && wm.Kind == rewrite.WSContext {
		s.model = wm.Model // setup, session.update: the connection's from now on
	}
	model := s.model
	s.mu.Unlock()
	if wm.Model != "" {
		model = wm.Model
	}
	e := &llmEvent{}
	e.llm = event.LLM{
		Provider: string(s.api.Provider), Model: model, Path: s.path, Operation: s.api.Op, Stream: true,
		Status: http.StatusSwitchingProtocols, WebSocket: true, WSMessage: wm.Type,
	}
	e.ev = event.Event{Time: s.p.now(), Kind: event.KindLLM, Session: s.session, Process: s.process, LLM: &e.llm}
	return e
}

// refuse publishes e refused by v, and closes the connection: 1008 with
// the rule and reason, which the client reads.
func (s *llmSocket) refuse(e *llmEvent, v event.Verdict) ws.Action {
	e.ev.Verdict = v
	s.publish(e)
	return policyClose(v)
}

// answered publishes the oldest request waiting for its answer with what
// the answer said; an answer no request waits for (one the server started
// by itself) is not recorded.
func (s *llmSocket) answered(info rewrite.ResponseInfo, restored int) {
	s.mu.Lock()
	if len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	e := s.pending[0]
	s.pending = s.pending[1:]
	s.mu.Unlock()
	if d := s.p.now().Sub(e.ev.Time); d > 0 {
		e.llm.Latency = d
	}
	e.fill(info, restored)
	s.publish(e)
}

// fill records in e what its answer said.
func (e *llmEvent) fill(info rewrite.ResponseInfo, restored int) {
	l := &e.llm
	l.ResponseModel = info.Model
	l.InputTokens, l.OutputTokens = info.InputTokens, info.OutputTokens
	l.CacheReadTokens, l.CacheCreationTokens = info.CacheReadTokens, info.CacheCreationTokens
	l.FinishReasons = info.FinishReasons
	for _, tc := range info.ToolCalls {
		l.ToolCalls = append(l.ToolCalls, event.ToolCall{ID: tc.ID, Name: tc.Name, Time: tc.Seen})
	}
	l.Restored = restored
}

// publish publishes e with the count of messages not understood since the
// connection's previous llm event.
func (s *llmSocket) publish(e *llmEvent) {
	s.mu.Lock()
	e.llm.WSUnparsed, s.unparsed = s.unparsed, 0
	s.mu.Unlock()
	s.p.publish(&e.ev)
}

func (s *llmSocket) countUnparsed() {
	s.mu.Lock()
	s.unparsed++
	s.mu.Unlock()
}

// ended publishes the requests whose answers had not ended, the oldest
// with what its answer said so far. Both directions are over: the answer
// is this goroutine's.
func (s *llmSocket) ended(end ws.End) {
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for i, e := range pending {
		if i == 0 {
			e.fill(s.answer.Take(), s.restored)
		}
		s.publish(e)
	}
	s.mu.Lock()
	left := s.unparsed
	s.mu.Unlock()
	if left > 0 {
		s.p.log.Info("proxy: WebSocket messages passed without being understood after the connection's last llm event",
			"session", s.session, "host", s.host, "count", left)
	}
	s.p.log.Debug("proxy: LLM WebSocket ended", "session", s.session, "host", s.host,
		"client_close", end.ClientClose, "server_close", end.ServerClose, "closed", end.Closed, "err", end.Err)
}

// looksJSON reports whether b starts, past white space, as a JSON object.
func looksJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}
