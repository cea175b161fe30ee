package plugin

import (
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// Verdict words of a Response.
const (
	Allow   = "allow"
	Deny    = "deny"
	Rewrite = "rewrite" // let it through with the policy's rewrites applied
	Ask     = "ask"     // hold it until a person answers
	Abstain = "abstain" // no opinion: the next plugin, then the judge or the default, decides
)

// ValidVerdict reports whether w is one of the verdict words.
func ValidVerdict(w string) bool {
	switch w {
	case Allow, Deny, Rewrite, Ask, Abstain:
		return true
	}
	return false
}

// Request is one line Chaperone writes to the plugin's stdin.
type Request struct {
	ID    uint64 `json:"id"` // never 0
	Event Event  `json:"event"`
}

// Response is one line the plugin writes to its stdout, answering the
// Request with the same ID.
type Response struct {
	ID uint64 `json:"id"`
	Verdict
}

// Verdict is a plugin's decision about one event.
type Verdict struct {
	Verdict string `json:"verdict"`          // Allow, Deny, Rewrite, Ask or Abstain
	Reason  string `json:"reason,omitempty"` // one line a person can read
	Rule    string `json:"rule,omitempty"`   // the plugin's own name for what decided; never a secret
}

// Event is the JSON view of an event that a plugin receives. Its field names
// are those of the audit log (docs/events.md); only the fields of the
// event's kind are set.
type Event struct {
	Kind    event.Kind `json:"kind"`
	Time    time.Time  `json:"time,omitzero"`
	Session string     `json:"session,omitempty"`
	Process *Process   `json:"process,omitempty"` // absent when the process could not be found

	// connect (dst, host, port, transport, via), http (host)
	Dst       string `json:"dst,omitempty"` // "ip:port"
	Host      string `json:"host,omitempty"`
	Port      uint16 `json:"port,omitempty"`
	Transport string `json:"transport,omitempty"`
	Via       string `json:"via,omitempty"`
	Relay     string `json:"relay,omitempty"`

	// tls
	SNI         string   `json:"sni,omitempty"`
	ALPN        []string `json:"alpn,omitempty"`
	TLSVersion  string   `json:"tls_version,omitempty"`
	Intercepted bool     `json:"intercepted,omitempty"`
	// The client refused Chaperone's certificate (with Alert), or did
	// before for this host (ClientRejectsCA).
	ClientRejected  bool   `json:"client_rejected,omitempty"`
	Alert           string `json:"alert,omitempty"`
	ClientRejectsCA bool   `json:"client_rejects_ca,omitempty"`

	// http
	Method  string `json:"method,omitempty"`
	URL     string `json:"url,omitempty"` // without credentials
	Status  int    `json:"status,omitempty"`
	Proto   string `json:"proto,omitempty"`
	Upgrade string `json:"upgrade,omitempty"`
	// Header holds the request's headers; values of credential headers are
	// never included.
	Header map[string][]string `json:"header,omitempty"`

	// llm (and path for llm, file and exec)
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Path     string `json:"path,omitempty"`

	// ws (and host, path)
	Direction     string   `json:"direction,omitempty"` // send, receive
	Opcode        string   `json:"opcode,omitempty"`    // text, binary
	Size          int64    `json:"size,omitempty"`      // -1 while not known
	Text          string   `json:"text,omitempty"`      // secrets replaced by placeholders
	TextTruncated bool     `json:"text_truncated,omitempty"`
	Secrets       []string `json:"secrets,omitempty"`
	MCPMethod     string   `json:"mcp_method,omitempty"`
	MCPTool       string   `json:"mcp_tool,omitempty"`

	// dns
	Name    string   `json:"name,omitempty"`
	QType   string   `json:"qtype,omitempty"`
	Answers []string `json:"answers,omitempty"`
	Rcode   string   `json:"rcode,omitempty"`

	// file
	Access string `json:"access,omitempty"` // read, write, exec, unknown
	Op     string `json:"op,omitempty"`     // link, rename; empty for an open
	Target string `json:"target,omitempty"` // the new name, for link and rename

	// exec
	Argv   []string `json:"argv,omitempty"`
	Cwd    string   `json:"cwd,omitempty"`
	Digest string   `json:"digest,omitempty"`
	// Program is the program that runs (the loader's target),
	// Interpreter a script's #! interpreter.
	Program     string `json:"program,omitempty"`
	Interpreter string `json:"interpreter,omitempty"`

	// session_start, session_end
	Agent            string   `json:"agent,omitempty"`
	Command          []string `json:"command,omitempty"`
	RootPID          int      `json:"root_pid,omitempty"`
	AgentUID         int      `json:"agent_uid,omitempty"`
	TTY              string   `json:"tty,omitempty"`
	ParentPID        int      `json:"parent_pid,omitempty"`
	Mode             string   `json:"mode,omitempty"`
	ContainerID      string   `json:"container_id,omitempty"`
	ContainerRuntime string   `json:"container_runtime,omitempty"`
	PodUID           string   `json:"pod_uid,omitempty"`
	ExitCode         *int     `json:"exit_code,omitempty"`   // session_end only
	DurationMS       *int64   `json:"duration_ms,omitempty"` // session_end only
}

// Process is the process that performed an action.
type Process struct {
	PID     int      `json:"pid"`
	PPID    int      `json:"ppid"`
	UID     int      `json:"uid"`
	Exe     string   `json:"exe,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	Lineage []string `json:"lineage,omitempty"`    // executable names, the session's root first
	Digest  string   `json:"exe_digest,omitempty"` // "sha256:<hex>"
}

// EventFrom returns the JSON view of e. Only the payload that matches
// e.Kind is included; the verdict is not (the plugin is asked for one).
// Which fields a plugin is given, and under which names, is the event's
// flat projection's to say (event.Fields, event.InPlugin).
func EventFrom(e *event.Event) Event {
	forms := flatEvents()
	var v Event
	forms.event.Fill(&v, e)
	if e.Process != nil {
		v.Process = &Process{}
		forms.process.Fill(v.Process, e)
	}
	return v
}

// eventForms are the plugins' flat forms of an event: an Event, and the
// Process within it.
type eventForms struct {
	event   *event.Flat[Event]
	process *event.Flat[Process]
}

// flatEvents plans the plugins' flat forms once: a field the projection
// gives plugins without a member of Event is a mistake the tests catch.
var flatEvents = sync.OnceValue(func() eventForms {
	fs := event.Fields()
	ev, err := event.NewFlat[Event](fs, event.InPlugin, false)
	if err != nil {
		panic(err)
	}
	proc, err := event.NewFlat[Process](fs, event.InPlugin, true)
	if err != nil {
		panic(err)
	}
	return eventForms{ev, proc}
})
