package event

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"
	"unsafe"
)

// Type is the type of a field's value: which of Value's members holds it.
type Type uint8

const (
	TypeString    Type = iota + 1 // Str
	TypeInt                       // Int
	TypeBool                      // Bool
	TypeStrings                   // Strs
	TypeTime                      // Time
	TypeDuration                  // Int, in nanoseconds
	TypeAddrPort                  // Addr
	TypeAddrs                     // Any, a []netip.Addr
	TypeHeader                    // Any, a map[string][]string
	TypeChanges                   // Any, a *Changes; nil when nothing changed
	TypeToolCalls                 // Any, a []ToolCall
	TypeInts                      // Any, an []int
)

// Value is one field's value; its Field's Type says which member holds it.
type Value struct {
	Str  string
	Int  int64
	Bool bool
	Strs []string
	Time time.Time
	Addr netip.AddrPort
	Any  any
}

// Use says which flat forms of an event hold a field.
type Use uint8

const (
	// InLog: the audit log's records (telemetry.Record), under Key.
	InLog Use = 1 << iota
	// InPlugin: the events plugins are given (plugin.Event), under Key.
	InPlugin
)

// Field is one value of an event's flat projection: the one place that
// says what each field of an event is called and who sees it. The audit
// log, plugins, policy conditions (CEL) and traces all read events
// through it; a field of the event types that no Field reads fails
// TestFieldsCoverEvents.
type Field struct {
	// Name is the field's name: its payload and its key, dotted
	// ("http.method", "connect.dst", "process.pid"); the event's own
	// fields have none ("time", "kind").
	Name string
	Type Type
	// Kinds are the kinds of event the field belongs to; nil: every kind.
	// An event of another kind never shows it, whatever it carries.
	Kinds []Kind
	// FlatKinds, when set, are the only kinds whose flat forms hold the
	// field, fewer than Kinds: the session's working tree, which every
	// event carries for the policy, is in session_start's record only.
	FlatKinds []Kind
	// Key is the field's key in the audit log's and plugins' flat JSON
	// (docs/events.md); a process.* field's is its key inside the
	// "process" object. Fields of different kinds may share a key
	// ("path" of llm, file, exec and policy_reload).
	Key string
	// In lists the flat forms that hold the field.
	In Use
	// CEL is the field's name in policy conditions, when conditions read
	// it as it is; "" when they do not, or derive their own variable from
	// it (policy/cel.go: host, dst.ip, tls.sni normalised, …).
	CEL string
	// Attr is the attribute of the field on an action's span event in
	// traces (connect, dns, tls, file and exec events); "" for none. An
	// address field gives Attr+".address" and Attr+".port". HTTP and LLM
	// calls are spans of their own, whose attributes follow the
	// OpenTelemetry conventions (telemetry/trace.go).
	Attr string

	// The field is at offset in its payload, whose pointer is at payload
	// in Event (the Event itself when payload is -1); newPayload makes one.
	payload    uintptr
	offset     uintptr
	newPayload func() unsafe.Pointer
	goType     reflect.Type // the member's
}

// ownField is a Field's payload offset for the event's own fields.
const ownField = ^uintptr(0)

// member returns where the field is in e: nil when e lacks its payload,
// unless make, which makes the payload.
func (f *Field) member(e *Event, make bool) unsafe.Pointer {
	if f.payload == ownField {
		return unsafe.Add(unsafe.Pointer(e), f.offset)
	}
	pp := (*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(e), f.payload))
	if *pp == nil {
		if !make {
			return nil
		}
		*pp = f.newPayload()
	}
	return unsafe.Add(*pp, f.offset)
}

// Get returns the field's value in e and whether e has it: false when e
// lacks the payload the field belongs to. It does not look at e's kind:
// the flat forms take only the fields of the event's kinds (Of).
func (f *Field) Get(e *Event) (Value, bool) {
	p := f.member(e, false)
	if p == nil {
		return Value{}, false
	}
	return load(f.Type, f.goType.Kind(), p), true
}

// Set sets the field in e to v, making the payload it belongs to when e
// has none.
func (f *Field) Set(e *Event, v Value) { store(f.Type, f.goType.Kind(), f.member(e, true), v) }

// Of reports whether the field belongs to events of kind k.
func (f *Field) Of(k Kind) bool {
	if f.Kinds == nil {
		return true
	}
	for _, x := range f.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// InFlat reports whether the flat forms of events of kind k hold the
// field (when its In says they hold it at all).
func (f *Field) InFlat(k Kind) bool {
	if f.FlatKinds != nil {
		for _, x := range f.FlatKinds {
			if x == k {
				return true
			}
		}
		return false
	}
	return f.Of(k)
}

// IsProcess reports whether the field is one of the acting process's
// (the "process" object of the flat forms).
func (f *Field) IsProcess() bool { return strings.HasPrefix(f.Name, "process.") }

// Fields returns the flat projection of events: every field of Event and
// of its payloads, in the order of the payloads' fields. The result is
// the caller's; build it once and keep it.
func Fields() []Field {
	both := InLog | InPlugin
	sess := []Kind{KindSessionStart, KindSessionEnd}
	// The event's own fields, and its verdict's: the audit log records
	// the verdict; plugins are asked for one.
	own := func(name string, in Use, cel string) Field { return Field{Name: name, Key: name, In: in, CEL: cel} }
	fs := []Field{
		ofEvent(own("time", both, ""), func(e *Event) *time.Time { return &e.Time }),
		ofEvent(own("kind", both, "kind"), func(e *Event) *Kind { return &e.Kind }),
		ofEvent(own("session", both, ""), func(e *Event) *string { return &e.Session }),
		ofEvent(own("verdict", InLog, ""), func(e *Event) *Action { return &e.Verdict.Action }),
		ofEvent(own("rule", InLog, ""), func(e *Event) *string { return &e.Verdict.Rule }),
		ofEvent(own("reason", InLog, ""), func(e *Event) *string { return &e.Verdict.Reason }),
		ofEvent(own("decided_by", InLog, ""), func(e *Event) *DecidedBy { return &e.Verdict.DecidedBy }),
	}

	// The acting process: the "process" object of the flat forms.
	proc := func(name, key string, in Use, cel string) Field {
		return Field{Name: "process." + name, Key: key, In: in, CEL: cel}
	}
	pp := func(e *Event) **Process { return &e.Process }
	fs = append(fs,
		of(proc("pid", "pid", both, "process.pid"), pp, func(p *Process) *int { return &p.PID }),
		of(proc("ppid", "ppid", both, "process.ppid"), pp, func(p *Process) *int { return &p.PPID }),
		of(proc("exe", "exe", both, "process.exe"), pp, func(p *Process) *string { return &p.Exe }),
		of(proc("argv", "argv", both, "process.argv"), pp, func(p *Process) *[]string { return &p.Argv }),
		of(proc("cwd", "cwd", both, "process.cwd"), pp, func(p *Process) *string { return &p.Cwd }),
		of(proc("uid", "uid", InPlugin, "process.uid"), pp, func(p *Process) *int { return &p.UID }),
		// When the process started: the audit log's process records
		// carry it. Its ancestors' pids are attribution's own, for
		// telling processes apart; lineage names them.
		of(proc("start_time", "start_time", InLog, ""), pp, func(p *Process) *time.Time { return &p.StartTime }),
		of(proc("lineage_pids", "", 0, ""), pp, func(p *Process) *[]int { return &p.Lineage }),
		of(proc("lineage", "lineage", both, "lineage"), pp, func(p *Process) *[]string { return &p.LineageNames }),
		of(proc("exe_digest", "exe_digest", both, "process.exe_digest"), pp, func(p *Process) *string { return &p.ExeDigest }),
	)

	// The session: session_start's and session_end's, and where the
	// session works, which file and exec events carry for the policy.
	// Its id is the event's (session); its start is session_start's time.
	session := func(name string, kinds []Kind, key string, in Use, cel string) Field {
		return Field{Name: "session." + name, Kinds: kinds, Key: key, In: in, CEL: cel}
	}
	sp := func(e *Event) **Session { return &e.SessionInfo }
	start, end := []Kind{KindSessionStart}, []Kind{KindSessionEnd}
	fs = append(fs,
		of(session("id", sess, "", 0, ""), sp, func(s *Session) *string { return &s.ID }),
		of(session("agent", sess, "agent", both, ""), sp, func(s *Session) *string { return &s.Agent }),
		of(session("command", sess, "command", both, ""), sp, func(s *Session) *[]string { return &s.Command }),
		of(session("root_pid", sess, "root_pid", both, ""), sp, func(s *Session) *int { return &s.RootPID }),
		of(session("mode", sess, "mode", both, ""), sp, func(s *Session) *string { return &s.Mode }),
		of(session("started", sess, "", 0, ""), sp, func(s *Session) *time.Time { return &s.Started }),
		// In session_start's record, for readers of the log to tell
		// routine reads (Routine) as the audit log did.
		flatIn(of(session("workdir", nil, "workdir", InLog, "session.workdir"), sp, func(s *Session) *string { return &s.Workdir }), start),
		flatIn(of(session("home", nil, "home", InLog, "session.home"), sp, func(s *Session) *string { return &s.Home }), start),
		of(session("state_dir", nil, "", 0, "session.state_dir"), sp, func(s *Session) *string { return &s.StateDir }),
		of(session("uid", sess, "agent_uid", both, "session.uid"), sp, func(s *Session) *int { return &s.UID }),
		of(session("tty", sess, "tty", both, "session.tty"), sp, func(s *Session) *string { return &s.TTY }),
		of(session("parent_pid", sess, "parent_pid", both, "session.parent_pid"), sp, func(s *Session) *int { return &s.ParentPID }),
		of(session("container_id", sess, "container_id", both, ""), sp, func(s *Session) *string { return &s.ContainerID }),
		of(session("container_runtime", sess, "container_runtime", both, ""), sp, func(s *Session) *string { return &s.ContainerRuntime }),
		of(session("pod_uid", sess, "pod_uid", both, ""), sp, func(s *Session) *string { return &s.PodUID }),
		of(session("exit_code", end, "exit_code", both, ""), sp, func(s *Session) *int { return &s.ExitCode }),
		// In whole milliseconds in the flat forms.
		of(session("duration", end, "duration_ms", both, ""), sp, func(s *Session) *time.Duration { return &s.Duration }),
	)

	// Payloads of one kind each.
	pay := func(kind Kind, group string) func(name, key string, in Use, cel, attr string) Field {
		return func(name, key string, in Use, cel, attr string) Field {
			return Field{Name: group + "." + name, Kinds: []Kind{kind}, Key: key, In: in, CEL: cel, Attr: attr}
		}
	}
	conn, cp := pay(KindConnect, "connect"), func(e *Event) **Connect { return &e.Connect }
	fs = append(fs,
		of(conn("dst", "dst", both, "", "network.peer"), cp, func(c *Connect) *netip.AddrPort { return &c.Dst }),
		of(conn("host", "host", both, "", "server.address"), cp, func(c *Connect) *string { return &c.Host }),
		of(conn("port", "port", both, "", "server.port"), cp, func(c *Connect) *uint16 { return &c.Port }),
		of(conn("transport", "transport", both, "transport", "network.transport"), cp, func(c *Connect) *Transport { return &c.Transport }),
		of(conn("via", "via", both, "via", "chaperone.connect.via"), cp, func(c *Connect) *string { return &c.Via }),
		of(conn("relay", "relay", both, "relay", "chaperone.connect.relay"), cp, func(c *Connect) *string { return &c.Relay }),
	)
	dns, dp := pay(KindDNS, "dns"), func(e *Event) **DNS { return &e.DNS }
	fs = append(fs,
		of(dns("name", "name", both, "", "dns.question.name"), dp, func(d *DNS) *string { return &d.Name }),
		of(dns("qtype", "qtype", both, "", "chaperone.dns.type"), dp, func(d *DNS) *string { return &d.Type }),
		of(dns("answers", "answers", both, "", "dns.answers"), dp, func(d *DNS) *[]netip.Addr { return &d.Answers }),
		of(dns("rcode", "rcode", both, "", "chaperone.dns.rcode"), dp, func(d *DNS) *string { return &d.Rcode }),
	)
	tls, tp := pay(KindTLS, "tls"), func(e *Event) **TLS { return &e.TLS }
	fs = append(fs,
		of(tls("sni", "sni", both, "", "tls.client.server_name"), tp, func(t *TLS) *string { return &t.ServerName }),
		of(tls("alpn", "alpn", both, "tls.alpn", "chaperone.tls.alpn"), tp, func(t *TLS) *[]string { return &t.ALPN }),
		of(tls("version", "tls_version", both, "tls.version", "tls.protocol.version"), tp, func(t *TLS) *string { return &t.Version }),
		of(tls("intercepted", "intercepted", both, "", "chaperone.tls.intercepted"), tp, func(t *TLS) *bool { return &t.Intercepted }),
		of(tls("client_rejected", "client_rejected", both, "tls.client_rejected", "chaperone.tls.client_rejected"), tp, func(t *TLS) *bool { return &t.ClientRejected }),
		of(tls("alert", "alert", both, "tls.alert", "chaperone.tls.alert"), tp, func(t *TLS) *string { return &t.Alert }),
		of(tls("client_rejects_ca", "client_rejects_ca", both, "tls.client_rejects_ca", "chaperone.tls.client_rejects_ca"), tp, func(t *TLS) *bool { return &t.ClientRejectsCA }),
	)
	http, hp := pay(KindHTTP, "http"), func(e *Event) **HTTP { return &e.HTTP }
	fs = append(fs,
		of(http("method", "method", both, "http.method", ""), hp, func(h *HTTP) *string { return &h.Method }),
		of(http("url", "url", both, "http.url", ""), hp, func(h *HTTP) *string { return &h.URL }),
		of(http("host", "host", both, "", ""), hp, func(h *HTTP) *string { return &h.Host }),
		of(http("proto", "proto", both, "http.proto", ""), hp, func(h *HTTP) *string { return &h.Proto }),
		of(http("status", "status", both, "http.status", ""), hp, func(h *HTTP) *int { return &h.Status }),
		of(http("upgrade", "upgrade", both, "", ""), hp, func(h *HTTP) *string { return &h.Upgrade }),
		// Header values are never written to the audit log.
		of(http("header", "header", InPlugin, "", ""), hp, func(h *HTTP) *map[string][]string { return &h.Header }),
		of(http("secrets", "secrets", InLog, "http.secrets", ""), hp, func(h *HTTP) *[]string { return &h.Secrets }),
		of(http("rewrite", "rewrite", InLog, "", ""), hp, func(h *HTTP) **Changes { return &h.Rewrite }),
		of(http("error", "error", InLog, "", ""), hp, func(h *HTTP) *string { return &h.Error }),
	)
	llm, lp := pay(KindLLM, "llm"), func(e *Event) **LLM { return &e.LLM }
	fs = append(fs,
		of(llm("provider", "provider", both, "llm.provider", ""), lp, func(l *LLM) *string { return &l.Provider }),
		of(llm("model", "model", both, "llm.model", ""), lp, func(l *LLM) *string { return &l.Model }),
		of(llm("path", "path", both, "llm.path", ""), lp, func(l *LLM) *string { return &l.Path }),
		of(llm("operation", "operation", InLog, "llm.operation", ""), lp, func(l *LLM) *string { return &l.Operation }),
		of(llm("stream", "stream", InLog, "llm.stream", ""), lp, func(l *LLM) *bool { return &l.Stream }),
		of(llm("status", "status", InLog, "", ""), lp, func(l *LLM) *int { return &l.Status }),
		of(llm("response_model", "response_model", InLog, "", ""), lp, func(l *LLM) *string { return &l.ResponseModel }),
		of(llm("input_tokens", "input_tokens", InLog, "", ""), lp, func(l *LLM) *int64 { return &l.InputTokens }),
		of(llm("output_tokens", "output_tokens", InLog, "", ""), lp, func(l *LLM) *int64 { return &l.OutputTokens }),
		of(llm("cache_read_tokens", "cache_read_tokens", InLog, "", ""), lp, func(l *LLM) *int64 { return &l.CacheReadTokens }),
		of(llm("cache_creation_tokens", "cache_creation_tokens", InLog, "", ""), lp, func(l *LLM) *int64 { return &l.CacheCreationTokens }),
		of(llm("finish_reasons", "finish_reasons", InLog, "", ""), lp, func(l *LLM) *[]string { return &l.FinishReasons }),
		of(llm("tool_calls", "tool_calls", InLog, "", ""), lp, func(l *LLM) *[]ToolCall { return &l.ToolCalls }),
		of(llm("restored", "restored", InLog, "", ""), lp, func(l *LLM) *int { return &l.Restored }),
		// The prompt (placeholders, never a secret) is the log's only:
		// not a policy's, a plugin's or a trace's.
		of(llm("prompt", "prompt", InLog, "", ""), lp, func(l *LLM) *string { return &l.Prompt }),
		of(llm("prompt_truncated", "prompt_truncated", InLog, "", ""), lp, func(l *LLM) *bool { return &l.PromptTruncated }),
		// In whole milliseconds in the flat forms.
		of(llm("latency", "latency_ms", InLog, "", ""), lp, func(l *LLM) *time.Duration { return &l.Latency }),
		// Over WebSocket: the connection's client messages that carry a
		// request, and what was changed in each.
		of(llm("websocket", "websocket", InLog, "", ""), lp, func(l *LLM) *bool { return &l.WebSocket }),
		of(llm("ws_message", "ws_message", InLog, "", ""), lp, func(l *LLM) *string { return &l.WSMessage }),
		of(llm("ws_unparsed", "ws_unparsed", InLog, "", ""), lp, func(l *LLM) *int { return &l.WSUnparsed }),
		of(llm("rewrite", "rewrite", InLog, "", ""), lp, func(l *LLM) **Changes { return &l.Rewrite }),
	)
	file, fp := pay(KindFile, "file"), func(e *Event) **File { return &e.File }
	fs = append(fs,
		of(file("path", "path", both, "file.path", "file.path"), fp, func(f *File) *string { return &f.Path }),
		of(file("access", "access", both, "file.access", "chaperone.file.access"), fp, func(f *File) *FileAccess { return &f.Access }),
		of(file("op", "op", both, "file.op", "chaperone.file.op"), fp, func(f *File) *string { return &f.Op }),
		of(file("target", "target", both, "file.target", "chaperone.file.target"), fp, func(f *File) *string { return &f.Target }),
	)
	exec, xp := pay(KindExec, "exec"), func(e *Event) **Exec { return &e.Exec }
	fs = append(fs,
		of(exec("path", "path", both, "exec.path", "process.executable.path"), xp, func(x *Exec) *string { return &x.Path }),
		of(exec("argv", "argv", both, "exec.argv", "process.command_args"), xp, func(x *Exec) *[]string { return &x.Argv }),
		of(exec("cwd", "cwd", both, "exec.cwd", "process.working_directory"), xp, func(x *Exec) *string { return &x.Cwd }),
		// Conditions' exec.program is Path when the program is no other's
		// (policy/cel.go).
		of(exec("program", "program", both, "", "chaperone.exec.program"), xp, func(x *Exec) *string { return &x.Program }),
		of(exec("interpreter", "interpreter", both, "exec.interpreter", "chaperone.exec.interpreter"), xp, func(x *Exec) *string { return &x.Interpreter }),
		of(exec("digest", "digest", both, "exec.digest", "chaperone.exe.digest"), xp, func(x *Exec) *string { return &x.Digest }),
	)
	// A policy reload is recorded, never decided: never a plugin's.
	pol, pr := pay(KindPolicyReload, "policy"), func(e *Event) **PolicyReload { return &e.Policy }
	fs = append(fs,
		of(pol("path", "path", InLog, "", ""), pr, func(p *PolicyReload) *string { return &p.Path }),
		of(pol("digest", "digest", InLog, "", ""), pr, func(p *PolicyReload) *string { return &p.Digest }),
		of(pol("trigger", "trigger", InLog, "", ""), pr, func(p *PolicyReload) *string { return &p.Trigger }),
		of(pol("error", "error", InLog, "", ""), pr, func(p *PolicyReload) *string { return &p.Error }),
	)
	// A WebSocket message: its text (secrets replaced by placeholders)
	// is not a trace's. Conditions' host is Host without its port.
	wsf, wp := pay(KindWS, "ws"), func(e *Event) **WS { return &e.WS }
	fs = append(fs,
		of(wsf("host", "host", both, "", "chaperone.ws.host"), wp, func(w *WS) *string { return &w.Host }),
		of(wsf("path", "path", both, "ws.path", "url.path"), wp, func(w *WS) *string { return &w.Path }),
		of(wsf("direction", "direction", both, "ws.direction", "chaperone.ws.direction"), wp, func(w *WS) *string { return &w.Direction }),
		of(wsf("opcode", "opcode", both, "ws.opcode", "chaperone.ws.opcode"), wp, func(w *WS) *string { return &w.Opcode }),
		of(wsf("size", "size", both, "ws.size", "chaperone.ws.size"), wp, func(w *WS) *int64 { return &w.Size }),
		of(wsf("text", "text", both, "ws.text", ""), wp, func(w *WS) *string { return &w.Text }),
		of(wsf("truncated", "text_truncated", both, "ws.truncated", "chaperone.ws.truncated"), wp, func(w *WS) *bool { return &w.Truncated }),
		of(wsf("secrets", "secrets", both, "ws.secrets", "chaperone.ws.secrets"), wp, func(w *WS) *[]string { return &w.Secrets }),
		of(wsf("mcp_method", "mcp_method", both, "ws.mcp_method", "chaperone.ws.mcp_method"), wp, func(w *WS) *string { return &w.MCPMethod }),
		of(wsf("mcp_tool", "mcp_tool", both, "ws.mcp_tool", "chaperone.ws.mcp_tool"), wp, func(w *WS) *string { return &w.MCPTool }),
	)
	return fs
}

// flatIn returns f held by the flat forms of kinds only (FlatKinds).
func flatIn(f Field, kinds []Kind) Field {
	f.FlatKinds = kinds
	return f
}

// ofEvent completes f, a field of the event itself at member.
func ofEvent[V any](f Field, member func(*Event) *V) Field {
	var e Event
	f.payload = ownField
	f.offset = uintptr(unsafe.Pointer(member(&e))) - uintptr(unsafe.Pointer(&e))
	return typed[V](f)
}

// of completes f, a field at member of the payload at payload.
func of[P, V any](f Field, payload func(*Event) **P, member func(*P) *V) Field {
	var e Event
	var p P
	f.payload = uintptr(unsafe.Pointer(payload(&e))) - uintptr(unsafe.Pointer(&e))
	f.offset = uintptr(unsafe.Pointer(member(&p))) - uintptr(unsafe.Pointer(&p))
	f.newPayload = func() unsafe.Pointer { return unsafe.Pointer(new(P)) }
	return typed[V](f)
}

// typed sets f's Type from its member's Go type V.
func typed[V any](f Field) Field {
	t := reflect.TypeFor[V]()
	f.goType = t
	switch t {
	case reflect.TypeFor[time.Time]():
		f.Type = TypeTime
	case reflect.TypeFor[time.Duration]():
		f.Type = TypeDuration
	case reflect.TypeFor[netip.AddrPort]():
		f.Type = TypeAddrPort
	case reflect.TypeFor[[]netip.Addr]():
		f.Type = TypeAddrs
	case reflect.TypeFor[[]string]():
		f.Type = TypeStrings
	case reflect.TypeFor[map[string][]string]():
		f.Type = TypeHeader
	case reflect.TypeFor[*Changes]():
		f.Type = TypeChanges
	case reflect.TypeFor[[]ToolCall]():
		f.Type = TypeToolCalls
	case reflect.TypeFor[[]int]():
		f.Type = TypeInts
	default:
		switch k := t.Kind(); {
		case k == reflect.String:
			f.Type = TypeString
		case k == reflect.Bool:
			f.Type = TypeBool
		case isInt(k):
			f.Type = TypeInt
		default:
			panic(fmt.Sprintf("event: field %s: no Type for %v", f.Name, t))
		}
	}
	return f
}

// load reads the value of type t at p, a member of Go kind k.
func load(t Type, k reflect.Kind, p unsafe.Pointer) Value {
	switch t {
	case TypeString:
		return Value{Str: *(*string)(p)}
	case TypeInt, TypeDuration:
		return Value{Int: getInt(p, k)}
	case TypeBool:
		return Value{Bool: *(*bool)(p)}
	case TypeStrings:
		return Value{Strs: *(*[]string)(p)}
	case TypeTime:
		return Value{Time: *(*time.Time)(p)}
	case TypeAddrPort:
		return Value{Addr: *(*netip.AddrPort)(p)}
	case TypeAddrs:
		return Value{Any: *(*[]netip.Addr)(p)}
	case TypeHeader:
		return Value{Any: *(*map[string][]string)(p)}
	case TypeChanges:
		// A Changes that records no change is none.
		if c := *(**Changes)(p); !c.Empty() {
			return Value{Any: c}
		}
		return Value{}
	case TypeToolCalls:
		return Value{Any: *(*[]ToolCall)(p)}
	case TypeInts:
		return Value{Any: *(*[]int)(p)}
	}
	return Value{}
}

// store writes v, of type t, at p, a member of Go kind k.
func store(t Type, k reflect.Kind, p unsafe.Pointer, v Value) {
	switch t {
	case TypeString:
		*(*string)(p) = v.Str
	case TypeInt, TypeDuration:
		setInt(p, k, v.Int)
	case TypeBool:
		*(*bool)(p) = v.Bool
	case TypeStrings:
		*(*[]string)(p) = v.Strs
	case TypeTime:
		*(*time.Time)(p) = v.Time
	case TypeAddrPort:
		*(*netip.AddrPort)(p) = v.Addr
	case TypeAddrs:
		*(*[]netip.Addr)(p), _ = v.Any.([]netip.Addr)
	case TypeHeader:
		*(*map[string][]string)(p), _ = v.Any.(map[string][]string)
	case TypeChanges:
		*(**Changes)(p), _ = v.Any.(*Changes)
	case TypeToolCalls:
		*(*[]ToolCall)(p), _ = v.Any.([]ToolCall)
	case TypeInts:
		*(*[]int)(p), _ = v.Any.([]int)
	}
}
