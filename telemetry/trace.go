package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/chaperone-dev/chaperone/event"
)

// TracerOptions configures NewTracer.
type TracerOptions struct {
	// Provider makes the spans: a Provider from NewProvider, or any
	// TracerProvider (tests pass one with a tracetest.SpanRecorder).
	// Required.
	Provider trace.TracerProvider
	// Logger is discarded when nil.
	Logger *slog.Logger
	// CaptureContent puts whole command lines and URL query values in
	// spans. Off, a span holds only the program of a command line and a
	// URL's query names. Prompts, answers and header values are never in
	// events, so never in spans.
	CaptureContent bool
	// Now ends an LLM call's span when its answer arrives (the llm event
	// is published then); time.Now when nil.
	Now func() time.Time
	// ToolWindow is how long after an answer its tool calls may be linked
	// to actions; 60 s when zero.
	ToolWindow time.Duration
}

// maxProcesses bounds the process spans of one session; later processes'
// events go on the session's span.
const maxProcesses = 4096

// maxAnswerDelay bounds the time between an LLM request and the arrival
// of its llm event that is taken as the call's duration; beyond it (a
// replay, a stopped clock) the span gets no duration.
const maxAnswerDelay = 30 * time.Minute

// Tracer turns the bus's events into one OpenTelemetry trace per session:
// see doc.go and docs/telemetry.md for the spans. It is a lossy
// subscriber: it never slows the data path, and counts what it missed.
type Tracer struct {
	tracer  trace.Tracer
	prov    trace.TracerProvider
	log     *slog.Logger
	capture bool
	now     func() time.Time
	window  time.Duration

	// actionFields are the fields of each kind of action event that its
	// span event has as attributes (event.Field.Attr).
	actionFields map[event.Kind][]event.Field

	mu       sync.Mutex
	sessions map[string]*sessionTrace
	sub      *event.Subscription
	closed   bool
}

// sessionTrace is the open spans of one session.
type sessionTrace struct {
	id    string
	root  trace.Span
	ctx   context.Context // carries root
	start time.Time
	last  time.Time // the latest event time seen
	procs map[int]*procSpan
	// rootPID is the session's first process: lineages are cut there,
	// since what is above it (whoever ran Chaperone) is not the session's.
	rootPID int
	tools   toolLinker[*procSpan]
	// https holds the http spans of requests that may be LLM calls, by
	// pid and path, until their llm event arrives.
	https map[httpKey]trace.SpanContext
}

type procSpan struct {
	span     trace.Span
	ctx      context.Context
	inferred bool                // made from a descendant's lineage; no event of its own yet
	links    map[string]struct{} // tool call ids already linked
}

type httpKey struct {
	pid  int
	t    int64
	path string
}

// NewTracer returns a Tracer making spans with o.Provider.
func NewTracer(o TracerOptions) (*Tracer, error) {
	if o.Provider == nil {
		return nil, errors.New("telemetry: tracer: no TracerProvider")
	}
	t := &Tracer{
		tracer:       o.Provider.Tracer("github.com/chaperone-dev/chaperone/telemetry"),
		prov:         o.Provider,
		log:          o.Logger,
		capture:      o.CaptureContent,
		now:          o.Now,
		window:       o.ToolWindow,
		sessions:     map[string]*sessionTrace{},
		actionFields: map[event.Kind][]event.Field{},
	}
	for _, f := range event.Fields() {
		if f.Attr == "" {
			continue
		}
		for _, k := range f.Kinds {
			t.actionFields[k] = append(t.actionFields[k], f)
		}
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.window <= 0 {
		t.window = defaultToolWindow
	}
	return t, nil
}

// Run makes spans of every event of sub until its channel is closed, then
// ends every open span. sub should be lossy (Lossless false): Run may fall
// behind, never the data path. Run never waits for the exporter; Shutdown
// exports what is left.
func (t *Tracer) Run(sub *event.Subscription) error {
	t.mu.Lock()
	t.sub = sub
	t.mu.Unlock()
	// Batched, a millisecond apart: spans end a millisecond late at most.
	sub.Receive(time.Millisecond, t.Handle, nil)
	t.endAll()
	return nil
}

// Dropped returns the events the subscription missed plus the spans the
// provider dropped (when it counts them, as Provider does).
func (t *Tracer) Dropped() uint64 {
	t.mu.Lock()
	sub := t.sub
	t.mu.Unlock()
	var n uint64
	if sub != nil {
		n = sub.Dropped()
	}
	if d, ok := t.prov.(interface{ Dropped() uint64 }); ok {
		n += d.Dropped()
	}
	return n
}

// Shutdown ends every open span, then shuts the provider down (when it
// has a Shutdown method), exporting what it can until ctx ends. Events
// handled afterwards are ignored. It is idempotent.
func (t *Tracer) Shutdown(ctx context.Context) error {
	t.endAll()
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.mu.Unlock()
	if already {
		return nil
	}
	if s, ok := t.prov.(interface{ Shutdown(context.Context) error }); ok {
		if err := s.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: shut down tracer: %w", err)
		}
	}
	return nil
}

// Close is Shutdown bounded to 5 seconds.
func (t *Tracer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.Shutdown(ctx)
}

func (t *Tracer) endAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.sessions {
		t.endSession(s, s.last, nil)
		delete(t.sessions, id)
	}
}

// Handle makes the spans of one event. Run calls it; it is exported for
// callers that feed events another way. Events outside any session are
// not traced.
func (t *Tracer) Handle(e *event.Event) {
	if e == nil || e.Session == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if e.Kind == event.KindSessionStart {
		if old := t.sessions[e.Session]; old != nil {
			t.endSession(old, e.Time, nil)
		}
		t.sessions[e.Session] = t.startSession(e.Session, e.Time, e.SessionInfo)
		return
	}
	s := t.sessions[e.Session]
	if s == nil {
		// The start was missed (dropped, or the tracer started late).
		s = t.startSession(e.Session, e.Time, e.SessionInfo)
		t.sessions[e.Session] = s
	}
	if e.Time.After(s.last) {
		s.last = e.Time
	}
	s.tools.expire(e.Time)
	switch e.Kind {
	case event.KindSessionEnd:
		t.endSession(s, e.Time, e.SessionInfo)
		delete(t.sessions, e.Session)
	case event.KindHTTP:
		if e.HTTP != nil {
			t.onHTTP(s, e)
		}
	case event.KindLLM:
		if e.LLM != nil {
			t.onLLM(s, e)
		}
	case event.KindConnect, event.KindDNS, event.KindTLS, event.KindFile, event.KindExec, event.KindWS:
		t.onAction(s, e)
	}
}

func (t *Tracer) startSession(id string, at time.Time, info *event.Session) *sessionTrace {
	agent := ""
	if info != nil {
		agent = info.Agent
	}
	name := "invoke_agent"
	if agent != "" {
		name += " " + agent
	}
	attrs := []attribute.KeyValue{
		attribute.String(keyOperation, "invoke_agent"),
		attribute.String(keyAgentID, id),
		attribute.String(keyConversation, id),
		attribute.String(keySessionID, id),
	}
	if agent != "" {
		attrs = append(attrs, attribute.String(keyAgentName, agent))
	}
	if info != nil {
		if info.Mode != "" {
			attrs = append(attrs, attribute.String(keyMode, info.Mode))
		}
		if a := args(info.Command, t.capture); len(a) > 0 {
			attrs = append(attrs, attribute.StringSlice(keyArgs, a))
		}
		if info.RootPID > 0 {
			attrs = append(attrs, attribute.Int(keyPID, info.RootPID))
		}
		if info.Workdir != "" {
			attrs = append(attrs, attribute.String(keyCwd, info.Workdir))
		}
		// The daemon's sessions share one process's resource: the
		// container a session runs in is an attribute of its root span.
		for _, a := range [...]struct{ key, value string }{
			{keyContainerID, info.ContainerID},
			{keyContainerRuntime, info.ContainerRuntime},
			{keyPodUID, info.PodUID},
		} {
			if a.value != "" {
				attrs = append(attrs, attribute.String(a.key, a.value))
			}
		}
	}
	ctx, span := t.tracer.Start(context.Background(), name,
		trace.WithNewRoot(), trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
	st := &sessionTrace{id: id, root: span, ctx: ctx, start: at, last: at, procs: map[int]*procSpan{}}
	if info != nil {
		st.rootPID = info.RootPID
	}
	return st
}

// endSession ends the session's tool, process and root spans at at (never
// before a span's start: the SDK keeps what it is given).
func (t *Tracer) endSession(s *sessionTrace, at time.Time, info *event.Session) {
	if at.Before(s.last) {
		at = s.last
	}
	s.tools.endAll()
	end := trace.WithTimestamp(at)
	for _, p := range s.procs {
		p.span.End(end)
	}
	s.procs = nil
	if info != nil {
		s.root.SetAttributes(attribute.Int(keyExitCode, info.ExitCode))
		if info.ExitCode != 0 {
			s.root.SetStatus(codes.Error, fmt.Sprintf("exit code %d", info.ExitCode))
			s.root.SetAttributes(attribute.String(keyErrorType, "exit_code"))
		}
	}
	s.root.End(end)
}

// process returns the span of e's process, making it (and spans for its
// unseen ancestors, from the lineage) on first sight.
func (t *Tracer) process(s *sessionTrace, e *event.Event) *procSpan {
	p := e.Process
	if p == nil || p.PID <= 0 || s.procs == nil {
		return nil
	}
	exe, argv := p.Exe, p.Argv
	if e.Kind == event.KindExec && e.Exec != nil {
		// The exec's program names the process better than its
		// pre-exec image.
		exe, argv = e.Exec.Path, e.Exec.Argv
	}
	if ps := s.procs[p.PID]; ps != nil {
		if e.Kind == event.KindExec && e.Exec != nil && e.Verdict.Allowed() {
			// The pid runs a new program now: the span is named after
			// what the process became (a shell forks, then execs curl).
			ps.inferred = false
			ps.span.SetName("process " + processName(exe, argv))
			ps.span.SetAttributes(t.processAttrs(p, exe, argv)...)
			ps.span.SetAttributes(attribute.Bool(keyPlaceholder, false))
			return ps
		}
		if ps.inferred {
			// A descendant made it; now it has an event of its own.
			ps.inferred = false
			ps.span.SetName("process " + processName(exe, argv))
			ps.span.SetAttributes(t.processAttrs(p, exe, argv)...)
			ps.span.SetAttributes(attribute.Bool(keyPlaceholder, false))
		}
		return ps
	}
	if len(s.procs) >= maxProcesses {
		return nil
	}
	parent := s.ctx
	// Lineage is parent first; make spans from the root down. Ancestors
	// above the session's root are not the session's: cut them off.
	lineage := p.Lineage
	if s.rootPID > 0 && p.PID != s.rootPID {
		if i := slices.Index(lineage, s.rootPID); i >= 0 {
			lineage = lineage[:i+1]
		}
	} else if p.PID == s.rootPID {
		lineage = nil
	}
	names := p.LineageNames
	for i := len(lineage) - 1; i >= 0; i-- {
		pid := lineage[i]
		if pid <= 0 || pid == p.PID {
			continue
		}
		ps := s.procs[pid]
		if ps == nil {
			if len(s.procs) >= maxProcesses {
				break
			}
			name := "process"
			// LineageNames runs root → this process, so the ancestor
			// i steps above is at len-2-i when the lengths agree.
			if j := len(names) - 2 - i; len(names) == len(lineage)+1 && j >= 0 {
				name += " " + names[j]
			}
			ppid := 0
			if i+1 < len(lineage) {
				ppid = lineage[i+1]
			}
			attrs := []attribute.KeyValue{attribute.Int(keyPID, pid), attribute.Bool(keyPlaceholder, true)}
			if ppid > 0 {
				attrs = append(attrs, attribute.Int(keyPPID, ppid))
			}
			ctx, span := t.tracer.Start(parent, name, trace.WithTimestamp(e.Time), trace.WithAttributes(attrs...))
			ps = &procSpan{span: span, ctx: ctx, inferred: true}
			s.procs[pid] = ps
		}
		parent = ps.ctx
	}
	if len(lineage) == 0 && p.PPID > 0 && p.PID != s.rootPID {
		if ps := s.procs[p.PPID]; ps != nil {
			parent = ps.ctx
		}
	}
	ctx, span := t.tracer.Start(parent, "process "+processName(exe, argv),
		trace.WithTimestamp(e.Time), trace.WithAttributes(t.processAttrs(p, exe, argv)...))
	ps := &procSpan{span: span, ctx: ctx}
	s.procs[p.PID] = ps
	return ps
}

func processName(exe string, argv []string) string {
	if n := baseName(exe); n != "" {
		return n
	}
	if len(argv) > 0 {
		return baseName(argv[0])
	}
	return "unknown"
}

func (t *Tracer) processAttrs(p *event.Process, exe string, argv []string) []attribute.KeyValue {
	a := []attribute.KeyValue{attribute.Int(keyPID, p.PID)}
	if p.PPID > 0 {
		a = append(a, attribute.Int(keyPPID, p.PPID))
	}
	if exe != "" {
		a = append(a, attribute.String(keyExePath, exe), attribute.String(keyExeName, baseName(exe)))
	}
	if v := args(argv, t.capture); len(v) > 0 {
		a = append(a, attribute.StringSlice(keyArgs, v))
	}
	if p.Cwd != "" {
		a = append(a, attribute.String(keyCwd, p.Cwd))
	}
	if p.ExeDigest != "" {
		a = append(a, attribute.String(keyDigest, p.ExeDigest))
	}
	return a
}

// parentOf returns the context new spans of e hang from: its process's
// span, or the session's.
func (t *Tracer) parentOf(s *sessionTrace, e *event.Event) (context.Context, *procSpan) {
	if ps := t.process(s, e); ps != nil {
		return ps.ctx, ps
	}
	return s.ctx, nil
}

func actionOf(e *event.Event) action {
	a := action{kind: e.Kind, t: e.Time}
	if e.Process != nil {
		a.pid, a.lineage = e.Process.PID, e.Process.Lineage
	}
	return a
}

func pidOf(e *event.Event) int {
	if e.Process == nil {
		return 0
	}
	return e.Process.PID
}

func (t *Tracer) onHTTP(s *sessionTrace, e *event.Event) {
	h := e.HTTP
	ctx, ps := t.parentOf(s, e)
	host, port := serverOf(h)
	attrs := []attribute.KeyValue{
		attribute.String(keyMethod, h.Method),
		attribute.String(keyURL, traceURL(h.URL, t.capture)),
	}
	if host != "" {
		attrs = append(attrs, attribute.String(keySrvAddr, host))
	}
	if port > 0 {
		attrs = append(attrs, attribute.Int(keySrvPort, port))
	}
	if h.Status > 0 {
		attrs = append(attrs, attribute.Int(keyStatus, h.Status))
	}
	if h.Proto != "" {
		attrs = append(attrs, attribute.String(keyProto, h.Proto))
	}
	if len(h.Secrets) > 0 {
		attrs = append(attrs, attribute.StringSlice(keySecrets, h.Secrets))
	}
	if h.Rewrite != nil {
		n := 0
		for _, c := range h.Rewrite.Redacted {
			n += c
		}
		if n > 0 {
			attrs = append(attrs, attribute.Int(keyRedacted, n))
		}
	}
	attrs = append(attrs, verdictAttrs(e.Verdict)...)
	if h.Error != "" && e.Verdict.Action != event.Deny { // a denial has its error.type
		attrs = append(attrs, attribute.String(keyErrorType, httpErrorType(h.Error)))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(e.Time), trace.WithSpanKind(trace.SpanKindClient)}
	if c, how := s.tools.act(actionOf(e), ps); c != nil {
		attrs = append(attrs, attribute.String(keyToolCallID, c.id), attribute.String(keyToolMatch, how))
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: c.sc, Attributes: []attribute.KeyValue{attribute.String(keyToolMatch, how)}}))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	name := h.Method
	if name == "" {
		name = "HTTP"
	}
	_, span := t.tracer.Start(ctx, name, opts...)
	switch {
	case !e.Verdict.Allowed():
		span.SetStatus(codes.Error, "denied")
	case h.Error != "":
		span.SetStatus(codes.Error, h.Error)
	case h.Status >= 400:
		span.SetStatus(codes.Error, "")
	}
	span.End(trace.WithTimestamp(e.Time))
	if h.Method == "POST" {
		if s.https == nil {
			s.https = map[httpKey]trace.SpanContext{}
		}
		if len(s.https) >= 256 {
			clear(s.https) // llm events that never came
		}
		s.https[httpKey{pidOf(e), e.Time.UnixNano(), pathOf(h.URL)}] = span.SpanContext()
	}
}

func pathOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Path
	}
	return ""
}

func (t *Tracer) onLLM(s *sessionTrace, e *event.Event) {
	l := e.LLM
	ctx, _ := t.parentOf(s, e)
	op := operationName(l.Operation)
	name := op
	if l.Model != "" {
		name += " " + l.Model
	}
	attrs := []attribute.KeyValue{
		attribute.String(keyOperation, op),
		attribute.String(keyProvider, providerName(l.Provider)),
		attribute.String(keyConversation, s.id),
	}
	if l.Model != "" {
		attrs = append(attrs, attribute.String(keyRequestModel, l.Model))
	}
	if l.ResponseModel != "" {
		attrs = append(attrs, attribute.String(keyResponseModel, l.ResponseModel))
	}
	if l.Stream {
		attrs = append(attrs, attribute.Bool(keyRequestStream, true))
	}
	if in := inputTokens(l); in > 0 || l.OutputTokens > 0 {
		attrs = append(attrs, attribute.Int64(keyInputTokens, in), attribute.Int64(keyOutputTokens, l.OutputTokens))
	}
	if l.CacheReadTokens > 0 {
		attrs = append(attrs, attribute.Int64(keyCacheRead, l.CacheReadTokens))
	}
	if l.CacheCreationTokens > 0 {
		attrs = append(attrs, attribute.Int64(keyCacheCreation, l.CacheCreationTokens))
	}
	if len(l.FinishReasons) > 0 {
		attrs = append(attrs, attribute.StringSlice(keyFinish, l.FinishReasons))
	}
	if l.Status > 0 {
		attrs = append(attrs, attribute.Int(keyStatus, l.Status))
	}
	attrs = append(attrs, verdictAttrs(e.Verdict)...)
	opts := []trace.SpanStartOption{trace.WithTimestamp(e.Time), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	key := httpKey{pidOf(e), e.Time.UnixNano(), l.Path}
	if sc, ok := s.https[key]; ok {
		delete(s.https, key)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	chatCtx, span := t.tracer.Start(ctx, name, opts...)
	if !e.Verdict.Allowed() {
		span.SetStatus(codes.Error, "denied")
	} else if l.Status >= 400 {
		span.SetStatus(codes.Error, "")
	}
	// The llm event arrives when the answer has ended.
	end := answerEnd(e.Time, l.Latency, t.now())
	span.End(trace.WithTimestamp(end))
	added := s.tools.addCalls(l.ToolCalls, e.Time, end, pidOf(e), t.window)
	for _, c := range added {
		tattrs := []attribute.KeyValue{
			attribute.String(keyOperation, "execute_tool"),
			attribute.String(keyToolName, c.name),
		}
		if c.id != "" {
			tattrs = append(tattrs, attribute.String(keyToolCallID, c.id))
		}
		_, c.span = t.tracer.Start(chatCtx, "execute_tool "+c.name,
			trace.WithTimestamp(end), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(tattrs...))
		c.sc = c.span.SpanContext()
	}
	if len(added) > 0 {
		s.tools.relink(e.Time, func(ps *procSpan, c *toolCall, how string) { linkProcess(ps, c, how+" (late)") })
	}
}

// linkProcess links ps's span to the tool call c (once).
func linkProcess(ps *procSpan, c *toolCall, how string) {
	if ps == nil {
		return
	}
	if _, ok := ps.links[c.sc.SpanID().String()]; ok {
		return
	}
	if ps.links == nil {
		ps.links = map[string]struct{}{}
	}
	ps.links[c.sc.SpanID().String()] = struct{}{}
	ps.span.AddLink(trace.Link{SpanContext: c.sc, Attributes: []attribute.KeyValue{
		attribute.String(keyToolCallID, c.id), attribute.String(keyToolMatch, how),
	}})
}

// onAction records a connect, dns, tls, file or exec event as an event on
// its process's span, linked to the tool call that caused it.
func (t *Tracer) onAction(s *sessionTrace, e *event.Event) {
	_, ps := t.parentOf(s, e)
	attrs := t.actionAttrs(e)
	attrs = append(attrs, verdictAttrs(e.Verdict)...)
	if c, how := s.tools.act(actionOf(e), ps); c != nil {
		attrs = append(attrs,
			attribute.String(keyToolCallID, c.id),
			attribute.String(keyToolSpan, c.sc.SpanID().String()),
			attribute.String(keyToolMatch, how))
		linkProcess(ps, c, how)
	}
	span := s.root
	if ps != nil {
		span = ps.span
	}
	span.AddEvent(string(e.Kind), trace.WithTimestamp(e.Time), trace.WithAttributes(attrs...))
}

// actionAttrs are the attributes of an action's span event: its fields
// that have one (event.Field.Attr), those that are set; a flag is always
// set. A command line is clipped (args), answers are at most maxArgs, and
// an exec's program only when it is not its path.
func (t *Tracer) actionAttrs(e *event.Event) []attribute.KeyValue {
	var a []attribute.KeyValue
	for i := range t.actionFields[e.Kind] {
		f := &t.actionFields[e.Kind][i]
		v, ok := f.Get(e)
		if !ok {
			continue
		}
		switch f.Type {
		case event.TypeString:
			if v.Str == "" || f.Attr == keyProgram && v.Str == e.Exec.Path {
				continue
			}
			a = append(a, attribute.String(f.Attr, v.Str))
		case event.TypeInt:
			if v.Int != 0 {
				a = append(a, attribute.Int64(f.Attr, v.Int))
			}
		case event.TypeBool:
			a = append(a, attribute.Bool(f.Attr, v.Bool))
		case event.TypeStrings:
			l := v.Strs
			if f.Attr == keyArgs {
				l = args(l, t.capture)
			}
			if len(l) > 0 {
				a = append(a, attribute.StringSlice(f.Attr, l))
			}
		case event.TypeAddrPort:
			if v.Addr.IsValid() {
				a = append(a, attribute.String(f.Attr+".address", v.Addr.Addr().String()), attribute.Int(f.Attr+".port", int(v.Addr.Port())))
			}
		case event.TypeAddrs:
			as, _ := v.Any.([]netip.Addr)
			if len(as) == 0 {
				continue
			}
			l := make([]string, 0, min(len(as), maxArgs))
			for _, ip := range as[:min(len(as), maxArgs)] {
				l = append(l, ip.String())
			}
			a = append(a, attribute.StringSlice(f.Attr, l))
		}
	}
	return a
}
