package event

import (
	"net/netip"
	"time"
)

// Kind names what an event describes. The names are the audit log's "kind"
// values and the policy's event kinds; they never change once released.
type Kind string

const (
	KindSessionStart Kind = "session_start"
	KindSessionEnd   Kind = "session_end"
	KindConnect      Kind = "connect" // a TCP connection (or tunnel) to a destination
	KindDNS          Kind = "dns"     // a DNS query and its answer
	KindTLS          Kind = "tls"     // a TLS ClientHello seen on a connection
	KindHTTP         Kind = "http"    // an HTTP request (and, once known, its response status)
	KindLLM          Kind = "llm"     // an HTTP request recognised as a call to an LLM API
	KindFile         Kind = "file"    // a file open
	KindExec         Kind = "exec"    // a program started
	KindWS           Kind = "ws"      // a data message of a WebSocket connection
	// KindPolicyReload records a policy file read again during a session:
	// its digest, or the error that kept the old policy. It is recorded,
	// never decided.
	KindPolicyReload Kind = "policy_reload"
)

// Kinds lists every Kind, in a stable order.
var Kinds = []Kind{KindSessionStart, KindSessionEnd, KindConnect, KindDNS, KindTLS, KindHTTP, KindLLM, KindFile, KindExec, KindPolicyReload, KindWS}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

// Event is one action of an agent session and the decision about it. Exactly
// one of the payload pointers is set, the one that matches Kind; session
// events carry SessionInfo.
type Event struct {
	Time    time.Time
	Kind    Kind
	Session string   // session id; empty only for actions outside any session (refused)
	Process *Process // nil when the process could not be found

	Verdict Verdict

	SessionInfo *Session
	Connect     *Connect
	DNS         *DNS
	TLS         *TLS
	HTTP        *HTTP
	LLM         *LLM
	File        *File
	Exec        *Exec
	Policy      *PolicyReload
	WS          *WS
}

// Process describes the process that performed an action.
type Process struct {
	PID       int       `json:"pid"`
	PPID      int       `json:"ppid"`
	Exe       string    `json:"exe,omitempty"`
	Argv      []string  `json:"argv,omitempty"`
	Cwd       string    `json:"cwd,omitempty"`
	UID       int       `json:"uid"`
	StartTime time.Time `json:"start_time,omitzero"`
	// Lineage holds the ancestors' pids, parent first, up to the session's
	// root process.
	Lineage []int `json:"lineage,omitempty"`
	// LineageNames names the executables from the session's root down to
	// this process, e.g. ["claude", "bash", "python3"].
	LineageNames []string `json:"lineage_names,omitempty"`
	// ExeDigest is "sha256:<hex>" of the executable, when computed.
	ExeDigest string `json:"exe_digest,omitempty"`
}

// Session describes an agent session: one agent command and every process it
// starts.
type Session struct {
	ID      string    `json:"id"`
	Agent   string    `json:"agent,omitempty"`   // the agent's name when detected, else the command's base name
	Command []string  `json:"command,omitempty"` // the argv Chaperone started
	RootPID int       `json:"root_pid,omitempty"`
	Mode    string    `json:"mode,omitempty"` // "proxy" or "transparent"
	Started time.Time `json:"started,omitzero"`
	// Workdir is the directory the session started in: the agent's working
	// tree. Home is the agent's home directory, StateDir Chaperone's.
	Workdir  string `json:"workdir,omitempty"`
	Home     string `json:"home,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
	// Who and where, for an agent a daemon found: its user, its terminal
	// (empty for none) and the process that started it.
	UID       int    `json:"uid,omitempty"`
	TTY       string `json:"tty,omitempty"`
	ParentPID int    `json:"parent_pid,omitempty"`
	// The container the session's root process runs in, when it runs in
	// one (attribution.Container): its id (64 hex digits), its runtime
	// ("docker", "containerd", "cri-o", "podman"; empty when the cgroup
	// path does not say) and, under Kubernetes, its pod's UID.
	ContainerID      string `json:"container_id,omitempty"`
	ContainerRuntime string `json:"container_runtime,omitempty"`
	PodUID           string `json:"pod_uid,omitempty"`
	// Set on session_end only.
	ExitCode int           `json:"exit_code"`
	Duration time.Duration `json:"duration,omitempty"`
}

// Transport is the protocol a connection uses.
type Transport string

const (
	TCP Transport = "tcp"
	UDP Transport = "udp"
)

// Connect is a connection (or an explicit-proxy tunnel) to a destination.
type Connect struct {
	// Dst is the destination address when known: the original destination
	// in transparent mode, or the resolved address in explicit mode (zero
	// until resolved).
	Dst       netip.AddrPort
	Host      string // the name the client asked for (CONNECT line, SNI or DNS memory); may be empty
	Port      uint16
	Transport Transport
	// Via says how the connection reached Chaperone: "connect" (explicit
	// CONNECT), "http" (explicit absolute-URI request), "transparent", or
	// "relay" (asked of a relay through another connection: Relay).
	Via string
	// Relay is the relay a connection to Host was asked of, as a URL of
	// its protocol and address ("http://127.0.0.5:3128",
	// "socks5://127.0.0.5:1080"); empty when no relay was involved.
	Relay string
}

// DNS is one query and, once answered, its answer.
type DNS struct {
	Name    string
	Type    string // "A", "AAAA", …
	Answers []netip.Addr
	Rcode   string
}

// TLS is what a ClientHello showed.
type TLS struct {
	ServerName  string   // SNI; empty when the client sent none
	ALPN        []string // protocols the client offered
	Version     string   // highest version offered, e.g. "1.3"
	Intercepted bool     // Chaperone terminated TLS with a minted leaf
	// ClientRejected says the client refused Chaperone's certificate on
	// this connection: its handshake ended with Alert, or it closed the
	// connection without a word twice in a row (Alert "closed").
	ClientRejected bool
	// Alert is the alert the client refused the certificate with, by its
	// name in RFC 8446 ("unknown_ca", "bad_certificate", …); with
	// ClientRejected only.
	Alert string
	// ClientRejectsCA says a client of the session refused Chaperone's
	// certificate for this host before: the policy decides whether the
	// connection is passed through uninspected (allow) or refused.
	ClientRejectsCA bool
}

// HTTP is one request and, once known, the status of its response and how
// it ended.
type HTTP struct {
	Method string
	URL    string // never with credentials: userinfo and secret query values are removed
	Host   string
	Proto  string // "HTTP/1.1", "HTTP/2.0"
	// Status is 0 until the response is known.
	Status int
	// Upgrade is the protocol of an Upgrade request ("websocket"), if any.
	Upgrade string
	// Header holds request header names and values for the policy. Values
	// of credential headers are never put here.
	Header map[string][]string
	// Secrets lists the rule ids of the secrets found in the request body,
	// each once, sorted; empty when there were none or the body was not
	// scanned.
	Secrets []string
	// Rewrite says what Chaperone changed in the request; nil when
	// nothing.
	Rewrite *Changes
	// Error says why the exchange did not complete, in one line a person
	// can read: the upstream failed (before its response, or while its
	// body was copied: Status is then what it had sent), the client went
	// away ("client closed …"), or it never sent a whole request header.
	// Empty when the response was sent in full, refusals included: their
	// verdict says why.
	Error string
}

// Changes is what Chaperone changed in a request and its response. It
// names rules, credentials and headers; never a secret.
type Changes struct {
	// Redacted counts the secrets replaced by placeholders, by rule id.
	Redacted map[string]int `json:"redacted,omitempty"`
	// Credentials names the brokered credentials injected.
	Credentials []string `json:"credentials,omitempty"`
	// Headers names the identity and trace headers set.
	Headers []string `json:"headers,omitempty"`
}

// Empty reports whether r records no change.
func (r *Changes) Empty() bool {
	return r == nil || len(r.Redacted) == 0 && len(r.Credentials) == 0 && len(r.Headers) == 0
}

// LLM is an HTTP request recognised as a call to an LLM API, or a client
// message of a WebSocket connection to one that carries a request
// (WebSocket). The fields after Stream are known once the response has
// ended.
type LLM struct {
	Provider  string // "openai", "anthropic", "azure-openai", "gemini", "bedrock"
	Model     string // the model asked for
	Path      string
	Operation string // "messages", "chat.completions", "responses", "generateContent", "converse", …
	Stream    bool

	Status        int    // the response's HTTP status; 0 until known
	ResponseModel string // the model that answered
	// Token counts as the provider reports them; Anthropic's InputTokens
	// leave out the cache's.
	InputTokens         int64
	OutputTokens        int64
	CacheReadTokens     int64
	CacheCreationTokens int64
	FinishReasons       []string
	ToolCalls           []ToolCall // tools the model asked to run
	// Restored counts the placeholders put back in the answer.
	Restored int
	// Prompt is the text of the request's last user turn (its text
	// parts) as sent upstream, with every secret the session's redactor
	// finds replaced by its placeholder (also when the request went
	// unredacted): at most MaxPrompt bytes, cut at a rune boundary, and
	// PromptTruncated says it was cut. Latency is the time from the
	// request's start to the answer's end.
	Prompt          string
	PromptTruncated bool
	Latency         time.Duration

	// Over WebSocket (Responses over WebSocket, the Realtime API, Gemini
	// Live), Path is the connection's and Status its 101. WSMessage is
	// the message's type ("response.create", "session.update",
	// "clientContent"; empty when it has none); WSUnparsed counts the
	// connection's messages, either way, passed on without being
	// understood (not JSON, binary, not of the API's shape) since its
	// previous llm event; Rewrite is what was changed in the message (an
	// HTTP call's changes are on its http event).
	WebSocket  bool
	WSMessage  string
	WSUnparsed int
	Rewrite    *Changes
}

// MaxPrompt bounds LLM.Prompt, in bytes.
const MaxPrompt = 2000

// ToolCall is a tool the model asked the agent to run.
type ToolCall struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Time is when the answer named the call, as it streamed by; zero
	// when unknown. Nothing before it is the call's doing. It is not
	// written to the audit log.
	Time time.Time `json:"-"`
}

// WS is one data message of a WebSocket connection, either way. It is
// decided before it goes on: as a whole when it fits the proxy's bound for
// its type, else at its start, with what came of it by then.
type WS struct {
	Host string // the upgrade request's Host
	Path string // the upgrade request's path, without the query
	// Direction is WSSend (client to server) or WSReceive.
	Direction string
	Opcode    string // "text" or "binary"
	// Size is the message's length in bytes, decompressed: -1 while it is
	// not known (a message decided at its start, recorded once it has
	// gone whole, or when the connection ended before its end).
	Size int64
	// Text is a text message's text, with every secret the session's
	// redactor finds replaced by its placeholder, at most MaxWSText
	// bytes; empty for a binary message and in a session without
	// redaction. Truncated says Text is not the whole message: cut at
	// MaxWSText, or decided at its start.
	Text      string
	Truncated bool
	// Secrets lists the rule ids of the secrets found in an outgoing
	// message, text or binary, to a host that is not an LLM API (as
	// HTTP.Secrets), each once, sorted.
	Secrets []string
	// MCPMethod and MCPTool name a JSON-RPC 2.0 message of the Model
	// Context Protocol: its method ("tools/call"; for a result, the
	// method of the request it answers, matched by id) and, for
	// tools/call, the tool (params.name).
	MCPMethod string
	MCPTool   string
}

// The directions of a WebSocket message (WS.Direction).
const (
	WSSend    = "send"
	WSReceive = "receive"
)

// MaxWSText bounds WS.Text, in bytes.
const MaxWSText = 64 << 10

// FileAccess is how a file is opened.
type FileAccess string

const (
	FileRead  FileAccess = "read"
	FileWrite FileAccess = "write"
	FileExec  FileAccess = "exec"
	// FileUnknown is an open whose access mode could not be seen (an
	// io_uring or openat2 open read from registers): it is decided as a
	// read and as a write, denied if either is.
	FileUnknown FileAccess = "unknown"
)

// File is a file open, or (Op "link", "rename") a new name given to a
// file, decided as a read of it.
type File struct {
	Path   string
	Access FileAccess
	// Op is "" for an open, "link" or "rename" when Path is given the new
	// name Target, "truncate" for a truncation by path (a write), and
	// "io_uring" for the refused io_uring_setup of a session process.
	Op     string
	Target string
}

// PolicyReload is a policy file read again during a session, on a signal
// or because it changed.
type PolicyReload struct {
	Path    string
	Digest  string // "sha256:<hex>" of the file as read; empty when it could not be read
	Trigger string // "SIGHUP", "file changed"
	// Error says why the file was not made the policy: the old one stays.
	// Empty when the file is now the session's policy.
	Error string
}

// Exec is a program started.
type Exec struct {
	Path string
	Argv []string
	Cwd  string
	// Program is the program that will actually run: Path, or for the
	// dynamic loader (ld.so PROGRAM) the program it is asked to load.
	Program string
	// Interpreter is the interpreter the kernel starts for a script (its
	// #! line); empty for a binary.
	Interpreter string
	// Digest is "sha256:…" of the content of the program the event is
	// about (of a memfd's, for an exec of a descriptor), when computed. An
	// exec that runs several programs (a script and its interpreter, the
	// loader and its program) is decided once per program, each event
	// with that program's Path, Argv and Digest; the recorded event is
	// Program's.
	Digest string
}
