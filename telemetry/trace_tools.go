package telemetry

import (
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/chaperone-dev/chaperone/event"
)

// Linking actions to tool calls.
//
// The model asks for a tool in an LLM answer; the agent then runs it, and
// what it runs shows up as exec, file and network events. Nothing in those
// events names the tool call, so the tracer links each action to the call
// that most plausibly caused it, in this order:
//
//  1. lineage: the action's process, or one of its ancestors, was started
//     by an exec already linked to a call → that call ("lineage");
//  2. kind: among the session's calls whose window holds the action's time
//     (from when the answer named the call, as it streamed by, to 60 s
//     after the answer ended), the most recent whose tool kind matches the
//     action's → that call ("kind"). Tools named like
//     bash/shell/run/exec/command/terminal match exec events;
//     fetch/http/web/url/curl/browse/download match connect, dns, tls and
//     http events; read/write/edit/file/glob/grep/ls/view/patch match file
//     events;
//  3. recent: otherwise the most recent call in its window, unless the
//     action comes from the process that made the LLM call (the agent's own
//     traffic and files are not its tools' doing unless the kind matches)
//     → that call ("recent").
//
// A process (an exec event) is linked by 2 or 3 only when it descends from
// the process that made the LLM call, which runs the tools, and started
// after the answer named the call: an agent's own helpers (Claude Code's
// git, run while its request is in flight) and other process trees of the
// session are not a tool's doing. Without the time the call was named (a
// replay of the audit log), the window opens at the request's start.
//
// An action linked by 1 or 2 is reliable; 3 is a guess, and the attribute
// chaperone.tool.match says which rule linked it.

// toolKind groups tools by the actions they lead to.
type toolKind uint8

const (
	toolOther toolKind = iota
	toolExec
	toolNet
	toolFile
)

var toolWords = []struct {
	kind  toolKind
	words []string
}{
	{toolOther, []string{"todo", "task", "agent", "think", "plan"}},
	{toolExec, []string{"bash", "shell", "run", "exec", "command", "terminal", "cmd"}},
	{toolNet, []string{"fetch", "http", "web", "url", "curl", "browse", "download"}},
	{toolFile, []string{"read", "write", "edit", "file", "glob", "grep", "view", "patch", "notebook", "str_replace"}},
}

// classifyTool guesses what kind of action a tool named name leads to.
func classifyTool(name string) toolKind {
	n := strings.ToLower(name)
	if n == "ls" || n == "list" || n == "create" {
		return toolFile
	}
	for _, w := range toolWords {
		for _, s := range w.words {
			if strings.Contains(n, s) {
				return w.kind
			}
		}
	}
	return toolOther
}

// actionKind is the tool kind that explains an event of kind k; toolOther
// for kinds that are not an action of a tool.
func actionKind(k event.Kind) toolKind {
	switch k {
	case event.KindExec:
		return toolExec
	case event.KindFile:
		return toolFile
	case event.KindConnect, event.KindDNS, event.KindTLS, event.KindHTTP:
		return toolNet
	}
	return toolOther
}

// defaultToolWindow is how long after an answer its tool calls may be
// linked to actions, unless told otherwise (TracerOptions.ToolWindow).
const defaultToolWindow = 60 * time.Second

// toolCall is one tool the model asked for, open for linking until until.
type toolCall struct {
	id, name  string
	kind      toolKind
	called    time.Time // when the answer named it (else the request's start): earlier actions are not its
	answered  time.Time // when the answer ended: the span starts here
	until     time.Time
	callerPID int
	last      time.Time // the latest action linked to it
	// The tracer's span of the call; LinkToolCalls makes none.
	sc    trace.SpanContext
	span  trace.Span
	ended bool
}

// action is what the linker knows of an event.
type action struct {
	kind    event.Kind
	pid     int
	lineage []int
	t       time.Time
}

// pendingAction is an action no call has claimed yet, and what the
// linker's user keeps of it (P: the tracer's process span, LinkToolCalls'
// record index).
type pendingAction[P any] struct {
	a action
	p P
}

// maxUnlinked bounds the actions kept for late tool calls.
const maxUnlinked = 256

// toolLinker holds a session's tool calls and the processes their execs
// started: the one linker of actions to tool calls, which the tracer and
// LinkToolCalls both feed a session's events, in order.
type toolLinker[P any] struct {
	calls   []*toolCall         // in the order the answers arrived
	started map[int]*toolCall   // pid → the call whose exec started it
	byID    map[string]struct{} // ids seen, so a repeated answer adds nothing
	// unlinked holds the latest actions no tool call claimed: the llm
	// event that names a call is published when the proxy has passed its
	// whole answer on, and the agent may act on it before that.
	unlinked []pendingAction[P]
}

// act links a to the call that most plausibly caused it, and returns the
// call and the rule that chose it; nil when none fits, and then an action
// of a tool's kind is kept, with p, for calls that arrive late (relink).
func (l *toolLinker[P]) act(a action, p P) (*toolCall, string) {
	if c, how := l.link(a); c != nil {
		l.linked(a, c)
		return c, how
	}
	if actionKind(a.kind) != toolOther {
		if len(l.unlinked) == maxUnlinked {
			l.unlinked = slices.Delete(l.unlinked, 0, 1)
		}
		l.unlinked = append(l.unlinked, pendingAction[P]{a: a, p: p})
	}
	return nil, ""
}

// link returns the call that most plausibly caused a, and the rule that
// chose it; nil when none fits.
func (l *toolLinker[P]) link(a action) (*toolCall, string) {
	if c := l.started[a.pid]; c != nil {
		return c, "lineage"
	}
	for _, pid := range a.lineage {
		if c := l.started[pid]; c != nil {
			return c, "lineage"
		}
	}
	want := actionKind(a.kind)
	if want == toolOther {
		return nil, ""
	}
	var fallback *toolCall
	for _, c := range slices.Backward(l.calls) {
		if a.t.Before(c.called) || a.t.After(c.until) {
			continue
		}
		if a.kind == event.KindExec && c.callerPID != 0 && !slices.Contains(a.lineage, c.callerPID) {
			continue // not started by the agent that runs the call's tools
		}
		if c.kind == want {
			return c, "kind"
		}
		if fallback == nil && a.pid != c.callerPID {
			fallback = c
		}
	}
	if fallback != nil {
		return fallback, "recent"
	}
	return nil, ""
}

// linked records that a, linked to c, happened; an exec makes its process
// (and so its descendants) c's.
func (l *toolLinker[P]) linked(a action, c *toolCall) {
	if a.t.After(c.last) {
		c.last = a.t
	}
	if a.kind == event.KindExec && a.pid != c.callerPID {
		if l.started == nil {
			l.started = map[int]*toolCall{}
		}
		l.started[a.pid] = c
	}
}

// addCalls adds the tool calls l names (those of an id not seen before),
// asked for by the process callerPID in a request that began at start and
// whose answer ended at answered; each is open for linking until window
// after the answer. It returns the calls added, for the caller to give
// them spans, then to relink from start.
func (l *toolLinker[P]) addCalls(calls []event.ToolCall, start, answered time.Time, callerPID int, window time.Duration) []*toolCall {
	var added []*toolCall
	for _, tc := range calls {
		if tc.ID != "" {
			if _, dup := l.byID[tc.ID]; dup {
				continue
			}
			if l.byID == nil {
				l.byID = map[string]struct{}{}
			}
			l.byID[tc.ID] = struct{}{}
		}
		called := tc.Time
		if called.IsZero() || called.Before(start) {
			called = start // unknown (a replay): from the request's start
		}
		c := &toolCall{
			id: tc.ID, name: tc.Name, kind: classifyTool(tc.Name),
			called: called, answered: answered, until: answered.Add(window),
			callerPID: callerPID,
		}
		l.calls = append(l.calls, c)
		added = append(added, c)
	}
	return added
}

// relink gives the actions no call had claimed a second chance, now that
// calls whose requests began at or after from have arrived: the agent may
// act on an answer before its llm event is published. linked is told
// each one linked, with the rule that chose the call.
func (l *toolLinker[P]) relink(from time.Time, linked func(p P, c *toolCall, how string)) {
	kept := l.unlinked[:0]
	for _, pa := range l.unlinked {
		if pa.a.t.Before(from) {
			kept = append(kept, pa)
			continue
		}
		if c, how := l.link(pa.a); c != nil {
			l.linked(pa.a, c)
			linked(pa.p, c, how)
			continue
		}
		kept = append(kept, pa)
	}
	clear(l.unlinked[len(kept):])
	l.unlinked = kept
}

// answerEnd is when the answer of an LLM request that began at start
// ended: start plus its latency when known, else now (its llm event is
// published when the answer has ended) unless now is before start or
// too long after it (a replay, a stopped clock): then start.
func answerEnd(start time.Time, latency time.Duration, now time.Time) time.Time {
	if latency > 0 {
		return start.Add(latency)
	}
	if now.Before(start) || now.Sub(start) > maxAnswerDelay {
		return start
	}
	return now
}

// expire ends the spans of calls whose window closed before t and forgets
// them (the lineage map keeps them for their processes).
func (l *toolLinker[P]) expire(t time.Time) {
	keep := l.calls[:0]
	for _, c := range l.calls {
		if t.After(c.until) {
			c.end()
			continue
		}
		keep = append(keep, c)
	}
	clear(l.calls[len(keep):])
	l.calls = keep
}

// endAll ends every open call's span.
func (l *toolLinker[P]) endAll() {
	for _, c := range l.calls {
		c.end()
	}
	l.calls = nil
}

// end ends c's span at its last linked action, or at the answer when none.
func (c *toolCall) end() {
	if c.ended || c.span == nil {
		return
	}
	c.ended = true
	end := c.answered
	if c.last.After(end) {
		end = c.last
	}
	c.span.End(trace.WithTimestamp(end))
}
