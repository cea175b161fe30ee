package telemetry

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// Record is one line of the audit log: a flat JSON object. time, session,
// kind, verdict and decided_by are always present; the rest are omitted when
// empty. Field names never change once released.
type Record struct {
	Time      time.Time       `json:"time"` // UTC
	Session   string          `json:"session"`
	Kind      event.Kind      `json:"kind"`
	Verdict   event.Action    `json:"verdict"`
	Rule      string          `json:"rule,omitempty"`
	DecidedBy event.DecidedBy `json:"decided_by"`
	Reason    string          `json:"reason,omitempty"`
	Process   *Process        `json:"process,omitempty"`
	// ProcessID names the acting process's process record (kind
	// "process"), which precedes it in the log, and PID is its pid: a
	// record written with them has no inline Process. Readers
	// (ReadRecords, Follow) put the process back in Process.
	ProcessID int64 `json:"process_id,omitempty"`
	PID       int   `json:"pid,omitempty"`

	// connect (host and port), http (host)
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
	URL     string `json:"url,omitempty"`
	Status  int    `json:"status,omitempty"`
	Proto   string `json:"proto,omitempty"`
	Upgrade string `json:"upgrade,omitempty"`
	// Secrets are the rule ids of secrets found in the request body.
	Secrets []string `json:"secrets,omitempty"`
	// Rewrite is what Chaperone changed in the request (never a secret).
	Rewrite *event.Changes `json:"rewrite,omitempty"`
	// Error says why the exchange did not complete (event.HTTP.Error).
	Error string `json:"error,omitempty"`

	// llm (and path for llm, file and exec; status for http and llm)
	Provider            string           `json:"provider,omitempty"`
	Model               string           `json:"model,omitempty"`
	Path                string           `json:"path,omitempty"`
	Operation           string           `json:"operation,omitempty"`
	Stream              bool             `json:"stream,omitempty"`
	ResponseModel       string           `json:"response_model,omitempty"`
	InputTokens         int64            `json:"input_tokens,omitempty"`
	OutputTokens        int64            `json:"output_tokens,omitempty"`
	CacheReadTokens     int64            `json:"cache_read_tokens,omitempty"`
	CacheCreationTokens int64            `json:"cache_creation_tokens,omitempty"`
	FinishReasons       []string         `json:"finish_reasons,omitempty"`
	ToolCalls           []event.ToolCall `json:"tool_calls,omitempty"`
	Restored            int              `json:"restored,omitempty"`
	// Prompt is the request's last user turn, placeholders for its
	// secrets (event.LLM.Prompt); LatencyMS from its start to the
	// answer's end.
	Prompt          string `json:"prompt,omitempty"`
	PromptTruncated bool   `json:"prompt_truncated,omitempty"`
	LatencyMS       int64  `json:"latency_ms,omitempty"`
	// An llm request made over WebSocket (event.LLM's WebSocket, WSMessage,
	// WSUnparsed; its changes in Rewrite).
	WebSocket  bool   `json:"websocket,omitempty"`
	WSMessage  string `json:"ws_message,omitempty"`
	WSUnparsed int    `json:"ws_unparsed,omitempty"`

	// dns
	Name    string   `json:"name,omitempty"`
	QType   string   `json:"qtype,omitempty"`
	Answers []string `json:"answers,omitempty"`
	Rcode   string   `json:"rcode,omitempty"`

	// file
	Access string `json:"access,omitempty"`
	Op     string `json:"op,omitempty"`     // "link", "rename"; empty for an open
	Target string `json:"target,omitempty"` // the new name, for link and rename

	// file_reads: a process's routine reads (event.Routine), folded: the
	// first's time is Time, the last's Until; Count reads in all, by
	// directory in Reads.
	Until time.Time  `json:"until,omitzero"`
	Count int        `json:"count,omitempty"`
	Reads []DirReads `json:"reads,omitempty"`

	// exec
	Argv   []string `json:"argv,omitempty"`
	Cwd    string   `json:"cwd,omitempty"`
	Digest string   `json:"digest,omitempty"`
	// Program is the program that runs (the loader's target); Interpreter
	// the #! interpreter of a script.
	Program     string `json:"program,omitempty"`
	Interpreter string `json:"interpreter,omitempty"`

	// ws (and host, path, secrets)
	Direction     string `json:"direction,omitempty"`
	Opcode        string `json:"opcode,omitempty"`
	Size          int64  `json:"size,omitempty"`
	Text          string `json:"text,omitempty"`
	TextTruncated bool   `json:"text_truncated,omitempty"`
	MCPMethod     string `json:"mcp_method,omitempty"`
	MCPTool       string `json:"mcp_tool,omitempty"`

	// policy_reload (and path, digest, error)
	Trigger string `json:"trigger,omitempty"`

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
	ExitCode         *int     `json:"exit_code,omitempty"`   // session_end only, present even when 0
	DurationMS       *int64   `json:"duration_ms,omitempty"` // session_end only
	// session_start only: the agent's working tree and home, which tell
	// routine reads (RoutineRecord).
	Workdir string `json:"workdir,omitempty"`
	Home    string `json:"home,omitempty"`

	// Truncated says long values were shortened to keep the line readable
	// (under MaxLineSize).
	Truncated bool `json:"truncated,omitempty"`
}

// Process is the acting process as the audit log records it.
type Process struct {
	PID     int      `json:"pid"`
	PPID    int      `json:"ppid"`
	Exe     string   `json:"exe,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	Lineage []string `json:"lineage,omitempty"`    // executable names, the session's root first
	Digest  string   `json:"exe_digest,omitempty"` // "sha256:<hex>"
	Cwd     string   `json:"cwd,omitempty"`
	// StartTime is when the process started, when known.
	StartTime time.Time `json:"start_time,omitzero"`
}

// DirReads are the folded reads of one directory by one process (a
// file_reads record's): Count opens of the files named in Files (each
// once), allowed by the policy's default, or by Rule.
type DirReads struct {
	Dir   string   `json:"dir"`
	Rule  string   `json:"rule,omitempty"`
	Count int      `json:"count"`
	Files []string `json:"files,omitempty"`
}

// The kinds of records that are not events: a process as first seen
// (written before the first record that names it by ProcessID), and a
// process's folded routine reads.
const (
	KindProcess   event.Kind = "process"
	KindFileReads event.Kind = "file_reads"
)

// RecordOf flattens e into its audit record. Only the payload that matches
// e.Kind is recorded; HTTP header values never are.
func RecordOf(e *event.Event) Record {
	return recordOf(e, processOf(e.Process))
}

// recordForms are the audit log's flat forms of an event (event.Flat): a
// Record, and the Process within it.
type recordForms struct {
	record  *event.Flat[Record]
	process *event.Flat[Process]
}

// flatRecords plans the audit log's flat forms once: a field the
// projection puts in the log without a member of Record is a mistake the
// tests catch.
var flatRecords = sync.OnceValue(func() recordForms {
	fs := event.Fields()
	record, err := event.NewFlat[Record](fs, event.InLog, false)
	if err != nil {
		panic(err)
	}
	process, err := event.NewFlat[Process](fs, event.InLog, true)
	if err != nil {
		panic(err)
	}
	return recordForms{record, process}
})

// processOf is the record of the acting process p (nil for none).
func processOf(p *event.Process) *Process {
	if p == nil {
		return nil
	}
	var rec Process
	flatRecords().process.Fill(&rec, &event.Event{Process: p})
	rec.Argv = clipArgv(rec.Argv)
	if !jsonTime(rec.StartTime) {
		rec.StartTime = time.Time{} // not a time JSON can say
	}
	return &rec
}

// recordOf is RecordOf with the process's record given.
func recordOf(e *event.Event, p *Process) Record {
	var r Record
	flatRecords().record.Fill(&r, e)
	r.Process = p
	return r
}

// Event rebuilds the event r records, as far as the record holds it: the
// process's cwd, uid and lineage, HTTP headers and sub-millisecond durations
// are not in the log, and addresses that do not parse are left zero.
func (r Record) Event() *event.Event {
	e := &event.Event{Kind: r.Kind}
	forms := flatRecords()
	forms.record.Read(&r, e)
	if r.Process != nil {
		forms.process.Read(r.Process, e)
	}
	if e.SessionInfo != nil {
		e.SessionInfo.ID = r.Session
	}
	return e
}

// Events rebuilds the events r records, as Event does: one, or for a
// file_reads record one read per file it names (its repeated opens of a
// file are one), each with the record's time, process and verdict.
func (r Record) Events() []*event.Event {
	if r.Kind != KindFileReads {
		return []*event.Event{r.Event()}
	}
	var proc *event.Process
	if r.Process != nil {
		proc = Record{Kind: event.KindFile, Process: r.Process}.Event().Process
	}
	var out []*event.Event
	for _, d := range r.Reads {
		v := event.Verdict{Action: r.Verdict, DecidedBy: r.DecidedBy}
		if d.Rule != "" {
			v.Rule, v.DecidedBy = d.Rule, event.DecidedByRule
		}
		dir := strings.TrimSuffix(d.Dir, "/")
		for _, name := range d.Files {
			out = append(out, &event.Event{Time: r.Time, Kind: event.KindFile, Session: r.Session, Process: proc, Verdict: v,
				File: &event.File{Path: dir + "/" + name, Access: event.FileRead}})
		}
	}
	return out
}

// RoutineRecord reports whether r records routine file reads
// (event.Routine): a file_reads record, which folds nothing else, or a
// file record that the rule finds routine, given the session's working
// tree and home (its session_start record's workdir and home; empty when
// unknown, and then only the system's paths count). The live views fold
// these records, as the audit log folds the events.
func RoutineRecord(r *Record, workdir, home string) bool {
	switch {
	case r.Kind == KindFileReads:
		return true
	case r.Kind != event.KindFile:
		return false
	}
	e := r.Event()
	e.SessionInfo = &event.Session{ID: r.Session, Workdir: workdir, Home: home}
	return event.Routine(e)
}

// Truncation limits applied when a record would exceed MaxLineSize. With
// JSON escaping at most six bytes per input byte, the worst case stays well
// under a MiB.
const (
	truncString = 512
	truncList   = 32
	truncMark   = "…"
)

// truncated returns r with long strings and lists shortened.
func (r Record) truncated() Record {
	s := func(p *string) {
		if len(*p) > truncString {
			cut := truncString
			for cut > 0 && (*p)[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
				cut--
			}
			*p = (*p)[:cut] + truncMark
		}
	}
	l := func(p *[]string) {
		if len(*p) > truncList {
			*p = append((*p)[:truncList:truncList], truncMark)
		} else {
			*p = append([]string(nil), *p...)
		}
		for i := range *p {
			s(&(*p)[i])
		}
	}
	for _, p := range []*string{&r.Session, &r.Rule, &r.Reason, &r.Dst, &r.Host, &r.Transport, &r.Via, &r.Relay, &r.SNI,
		&r.TLSVersion, &r.Alert, &r.Method, &r.URL, &r.Proto, &r.Upgrade, &r.Error, &r.Provider, &r.Model, &r.Path, &r.Name,
		&r.QType, &r.Rcode, &r.Access, &r.Op, &r.Target, &r.Cwd, &r.Digest, &r.Program, &r.Interpreter, &r.Trigger, &r.Agent, &r.Mode,
		&r.TTY, &r.ContainerID, &r.ContainerRuntime, &r.PodUID, &r.Workdir, &r.Home, &r.Prompt,
		&r.Direction, &r.Opcode, &r.Text, &r.MCPMethod, &r.MCPTool} {
		s(p)
	}
	k := string(r.Kind)
	s(&k)
	r.Kind = event.Kind(k)
	for _, p := range []*[]string{&r.ALPN, &r.Answers, &r.Argv, &r.Command} {
		l(p)
	}
	if r.Process != nil {
		p := *r.Process
		s(&p.Exe)
		s(&p.Cwd)
		l(&p.Argv)
		r.Process = &p
	}
	r.Truncated = true
	return r
}

// redacted returns r with the secrets redact finds replaced in its free
// text: process and exec argv, the session's command, URL and paths. An
// LLM call's prompt is not: the proxy made it with the session's redactor
// already, and a redactor run again over its placeholders may take one
// for part of a secret (`-u [REDACTED:…]:` for a user and password).
// Lists are copied, never changed in place: they belong to the event.
func (r Record) redacted(redact func(string) string) Record {
	r.Process = r.Process.redacted(redact)
	r.Argv, r.Command = redactList(r.Argv, redact), redactList(r.Command, redact)
	r.URL, r.Path = redact(r.URL), redact(r.Path)
	if r.Workdir != "" {
		r.Workdir = redact(r.Workdir)
	}
	if r.Home != "" {
		r.Home = redact(r.Home)
	}
	return r
}

// redacted returns p with its argv and cwd passed through redact (a copy
// when anything changed).
func (p *Process) redacted(redact func(string) string) *Process {
	if p == nil {
		return nil
	}
	argv := redactList(p.Argv, redact)
	cwd := p.Cwd
	if cwd != "" {
		cwd = redact(cwd)
	}
	if (len(argv) == 0 || &argv[0] == &p.Argv[0]) && cwd == p.Cwd {
		return p
	}
	c := *p
	c.Argv, c.Cwd = argv, cwd
	return &c
}

// redactList returns l with each element passed through redact: l itself
// when nothing changed, else a copy.
func redactList(l []string, redact func(string) string) []string {
	var out []string
	for i, s := range l {
		if t := redact(s); t != s {
			if out == nil {
				out = slices.Clone(l)
			}
			out[i] = t
		}
	}
	if out == nil {
		return l
	}
	return out
}

// Bounds of the acting process's argv in a record: it says who acted, and
// a build tool's argv can hold thousands of file names, repeated in every
// record of that process. The argv of an exec record, which is what the
// exec is about, is not clipped.
const (
	maxProcessArgs    = 32
	maxProcessArgLen  = 256
	maxProcessArgvLen = 4096
)

// clipArgv returns argv bounded for a record's process: at most
// maxProcessArgs arguments of at most maxProcessArgLen bytes, and
// maxProcessArgvLen in all, with a last element saying how many were left
// out. argv itself is returned when it is within bounds.
func clipArgv(argv []string) []string {
	total, fits := 0, len(argv) <= maxProcessArgs
	for _, a := range argv {
		total += len(a)
		fits = fits && len(a) <= maxProcessArgLen
	}
	if fits && total <= maxProcessArgvLen {
		return argv
	}
	out := make([]string, 0, maxProcessArgs+1)
	total = 0
	for i, a := range argv {
		if i == maxProcessArgs || total >= maxProcessArgvLen {
			out = append(out, fmt.Sprintf("…(%d more)", len(argv)-i))
			break
		}
		if len(a) > maxProcessArgLen {
			cut := maxProcessArgLen
			for cut > 0 && a[cut]&0xC0 == 0x80 {
				cut--
			}
			a = a[:cut] + "…"
		}
		total += len(a)
		out = append(out, a)
	}
	return out
}
