package telemetry

import (
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/chaperone-dev/chaperone/event"
)

// Attribute keys. The gen_ai.*, process.*, http.*, url.*, server.*,
// container.*, k8s.* and session.id keys are OpenTelemetry semantic conventions (GenAI as of
// semconv 1.41); chaperone.* are this project's: the conventions have no
// settled names yet for a policy's verdict on an agent's action.
const (
	keyOperation     = "gen_ai.operation.name"
	keyAgentName     = "gen_ai.agent.name"
	keyAgentID       = "gen_ai.agent.id"
	keyConversation  = "gen_ai.conversation.id"
	keyProvider      = "gen_ai.provider.name"
	keyRequestModel  = "gen_ai.request.model"
	keyResponseModel = "gen_ai.response.model"
	keyRequestStream = "gen_ai.request.stream"
	keyInputTokens   = "gen_ai.usage.input_tokens"
	keyOutputTokens  = "gen_ai.usage.output_tokens"
	keyCacheRead     = "gen_ai.usage.cache_read.input_tokens"
	keyCacheCreation = "gen_ai.usage.cache_creation.input_tokens"
	keyFinish        = "gen_ai.response.finish_reasons"
	keyToolName      = "gen_ai.tool.name"
	keyToolCallID    = "gen_ai.tool.call.id"
	keySessionID     = "session.id"

	keyPID       = "process.pid"
	keyPPID      = "process.parent_pid"
	keyExePath   = "process.executable.path"
	keyExeName   = "process.executable.name"
	keyArgs      = "process.command_args"
	keyCwd       = "process.working_directory"
	keyExitCode  = "process.exit.code"
	keyMethod    = "http.request.method"
	keyURL       = "url.full"
	keyStatus    = "http.response.status_code"
	keyProto     = "network.protocol.version"
	keySrvAddr   = "server.address"
	keySrvPort   = "server.port"
	keyErrorType = "error.type"
	keyDNSAnswer = "dns.answers"
	// The container and pod of a session in one (semconv 1.41: the
	// runtime's name is container.runtime.name, container.runtime being
	// deprecated).
	keyContainerID      = "container.id"
	keyContainerRuntime = "container.runtime.name"
	keyPodUID           = "k8s.pod.uid"

	keyVerdict     = "chaperone.verdict"
	keyRule        = "chaperone.rule"
	keyDecidedBy   = "chaperone.decided_by"
	keyReason      = "chaperone.reason"
	keySecrets     = "chaperone.secrets"
	keyRedacted    = "chaperone.redacted"
	keyDigest      = "chaperone.exe.digest"
	keyMode        = "chaperone.session.mode"
	keyToolSpan    = "chaperone.tool.span_id"
	keyToolMatch   = "chaperone.tool.match"
	keyPlaceholder = "chaperone.process.inferred"
	keyProgram     = "chaperone.exec.program"

	// The attributes of an action's span event (connect, dns, tls, file,
	// exec) are its fields' (event.Field.Attr), but for those above that
	// other spans share and keyDNSAnswer and keyProgram, which actionAttrs
	// treats apart.
)

// maxArgs and maxArgLen clip argv: a command line can be long, and the
// trace is not where it is kept whole (the audit log is).
const (
	maxArgs   = 32
	maxArgLen = 256
)

// redacted replaces query values in URLs when content capture is off.
const redacted = "REDACTED"

func verdictAttrs(v event.Verdict) []attribute.KeyValue {
	a := []attribute.KeyValue{
		attribute.String(keyVerdict, v.Action.String()),
		attribute.String(keyDecidedBy, v.DecidedBy.String()),
	}
	if v.Rule != "" {
		a = append(a, attribute.String(keyRule, v.Rule))
	}
	if v.Reason != "" {
		a = append(a, attribute.String(keyReason, v.Reason))
	}
	if v.Action == event.Deny {
		a = append(a, attribute.String(keyErrorType, "chaperone.denied"))
	}
	return a
}

// httpErrorType is the error.type of an http event that did not complete
// (event.HTTP.Error): which side failed, a value of low cardinality.
func httpErrorType(msg string) string {
	if strings.HasPrefix(msg, "client ") {
		return "chaperone.client_error"
	}
	return "chaperone.upstream_error"
}

// args returns argv as the trace may hold it: without content capture
// only the program (arguments carry tokens as often as not); with it, at
// most maxArgs arguments of at most maxArgLen bytes.
func args(argv []string, capture bool) []string {
	if len(argv) == 0 {
		return nil
	}
	if !capture {
		return []string{clip(argv[0])}
	}
	n := min(len(argv), maxArgs)
	out := make([]string, 0, n+1)
	for _, a := range argv[:n] {
		out = append(out, clip(a))
	}
	if len(argv) > n {
		out = append(out, "…"+strconv.Itoa(len(argv)-n)+" more")
	}
	return out
}

func clip(s string) string {
	if len(s) <= maxArgLen {
		return s
	}
	// Cut at a rune boundary.
	i := maxArgLen
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

// traceURL returns u without userinfo, and without query values unless
// capture is on. Producers already remove credentials; this is the second
// line, because a trace leaves the machine.
func traceURL(raw string, capture bool) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactURL(raw)
	}
	u.User = nil
	if !capture && u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{redacted}
		}
		u.RawQuery = q.Encode()
	}
	if !capture {
		u.Fragment, u.RawFragment = "", ""
	}
	return u.String()
}

// redactURL keeps what precedes userinfo and query of a string that may
// not parse as a URL.
func redactURL(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.LastIndex(s[i+3:], "@"); j >= 0 {
			s = s[:i+3] + s[i+3+j+1:]
		}
	}
	return s
}

// serverOf returns the host and port an HTTP request went to.
func serverOf(h *event.HTTP) (string, int) {
	host := h.Host
	port := 0
	if u, err := url.Parse(h.URL); err == nil {
		if host == "" {
			host = u.Host
		}
		switch u.Scheme {
		case "https", "wss":
			port = 443
		case "http", "ws":
			port = 80
		}
	}
	if hh, pp, err := net.SplitHostPort(host); err == nil {
		host = hh
		if n, err := strconv.Atoi(pp); err == nil {
			port = n
		}
	}
	return host, port
}

// providerName maps the event's provider to gen_ai.provider.name values.
func providerName(p string) string {
	switch p {
	case "azure-openai":
		return "azure.ai.openai"
	case "gemini":
		return "gcp.gemini"
	case "bedrock":
		return "aws.bedrock"
	}
	return p
}

// operationName maps an API operation to gen_ai.operation.name.
func operationName(op string) string {
	switch {
	case strings.Contains(strings.ToLower(op), "embed"):
		return "embeddings"
	case strings.Contains(op, "generateContent"), strings.Contains(op, "GenerateContent"):
		return "generate_content"
	case op == "completions":
		return "text_completion"
	}
	return "chat"
}

// inputTokens follows the GenAI conventions: input tokens include cached
// ones. Anthropic reports its cache apart; the others include it.
func inputTokens(l *event.LLM) int64 {
	if l.Provider == "anthropic" {
		return l.InputTokens + l.CacheReadTokens + l.CacheCreationTokens
	}
	return l.InputTokens
}

func baseName(path string) string {
	if path == "" {
		return ""
	}
	return filepath.Base(path)
}
