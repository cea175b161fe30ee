package telemetry

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/chaperone-dev/chaperone/event"
)

// appendProcess appends p as a JSON object.
func appendProcess(b []byte, p *Process) []byte {
	b = append(b, `{"pid":`...)
	b = strconv.AppendInt(b, int64(p.PID), 10)
	b = append(b, `,"ppid":`...)
	b = strconv.AppendInt(b, int64(p.PPID), 10)
	b = appendStringField(b, "exe", p.Exe)
	b = appendListField(b, "argv", p.Argv)
	b = appendListField(b, "lineage", p.Lineage)
	b = appendStringField(b, "exe_digest", p.Digest)
	b = appendStringField(b, "cwd", p.Cwd)
	if !p.StartTime.IsZero() {
		b = append(b, `,"start_time":"`...)
		b = p.StartTime.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}

// jsonTime reports whether encoding/json encodes t: a year within 0–9999
// and a zone offset under a day.
func jsonTime(t time.Time) bool {
	_, off := t.Zone()
	y := t.Year()
	return y >= 0 && y <= 9999 && off > -24*3600 && off < 24*3600
}

// appendRecord appends r as one JSON line, byte for byte what an
// encoding/json Encoder with SetEscapeHTML(false) writes (the fuzz test
// holds it to that), without reflection: the audit log writes a line for
// every request. ok is false for a time encoding/json refuses (a year
// outside 0–9999, a zone offset of a day or more), which the caller then
// encodes with encoding/json to get its error.
func appendRecord(b []byte, r *Record) (_ []byte, ok bool) { return appendRecordProc(b, r, nil) }

// appendRecordProc is appendRecord with r.Process already encoded as
// procJSON (by appendProcess), unless procJSON is nil.
func appendRecordProc(b []byte, r *Record, procJSON []byte) (_ []byte, ok bool) {
	if !jsonTime(r.Time) || !jsonTime(r.Until) || r.Process != nil && procJSON == nil && !jsonTime(r.Process.StartTime) {
		return b, false
	}
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","session":`...)
	b = appendJSONString(b, r.Session)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(r.Kind))
	b = append(b, `,"verdict":`...)
	b = appendJSONString(b, r.Verdict.String())
	b = appendStringField(b, "rule", r.Rule)
	b = append(b, `,"decided_by":`...)
	b = appendJSONString(b, r.DecidedBy.String())
	b = appendStringField(b, "reason", r.Reason)
	if p := r.Process; p != nil {
		b = append(b, `,"process":`...)
		if procJSON != nil {
			b = append(b, procJSON...)
		} else {
			b = appendProcess(b, p)
		}
	}
	b = appendIntField(b, "process_id", r.ProcessID)
	b = appendIntField(b, "pid", int64(r.PID))

	b = appendStringField(b, "dst", r.Dst)
	b = appendStringField(b, "host", r.Host)
	b = appendIntField(b, "port", int64(r.Port))
	b = appendStringField(b, "transport", r.Transport)
	b = appendStringField(b, "via", r.Via)
	b = appendStringField(b, "relay", r.Relay)

	b = appendStringField(b, "sni", r.SNI)
	b = appendListField(b, "alpn", r.ALPN)
	b = appendStringField(b, "tls_version", r.TLSVersion)
	b = appendBoolField(b, "intercepted", r.Intercepted)
	b = appendBoolField(b, "client_rejected", r.ClientRejected)
	b = appendStringField(b, "alert", r.Alert)
	b = appendBoolField(b, "client_rejects_ca", r.ClientRejectsCA)

	b = appendStringField(b, "method", r.Method)
	b = appendStringField(b, "url", r.URL)
	b = appendIntField(b, "status", int64(r.Status))
	b = appendStringField(b, "proto", r.Proto)
	b = appendStringField(b, "upgrade", r.Upgrade)
	b = appendListField(b, "secrets", r.Secrets)
	if c := r.Rewrite; c != nil {
		b = append(b, `,"rewrite":`...)
		b = appendChanges(b, c)
	}
	b = appendStringField(b, "error", r.Error)

	b = appendStringField(b, "provider", r.Provider)
	b = appendStringField(b, "model", r.Model)
	b = appendStringField(b, "path", r.Path)
	b = appendStringField(b, "operation", r.Operation)
	b = appendBoolField(b, "stream", r.Stream)
	b = appendStringField(b, "response_model", r.ResponseModel)
	b = appendIntField(b, "input_tokens", r.InputTokens)
	b = appendIntField(b, "output_tokens", r.OutputTokens)
	b = appendIntField(b, "cache_read_tokens", r.CacheReadTokens)
	b = appendIntField(b, "cache_creation_tokens", r.CacheCreationTokens)
	b = appendListField(b, "finish_reasons", r.FinishReasons)
	if len(r.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range r.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			if tc.ID != "" {
				b = append(b, `"id":`...)
				b = appendJSONString(b, tc.ID)
				b = append(b, ',')
			}
			b = append(b, `"name":`...)
			b = appendJSONString(b, tc.Name)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendIntField(b, "restored", int64(r.Restored))
	b = appendStringField(b, "prompt", r.Prompt)
	b = appendBoolField(b, "prompt_truncated", r.PromptTruncated)
	b = appendIntField(b, "latency_ms", r.LatencyMS)
	b = appendBoolField(b, "websocket", r.WebSocket)
	b = appendStringField(b, "ws_message", r.WSMessage)
	b = appendIntField(b, "ws_unparsed", int64(r.WSUnparsed))

	b = appendStringField(b, "name", r.Name)
	b = appendStringField(b, "qtype", r.QType)
	b = appendListField(b, "answers", r.Answers)
	b = appendStringField(b, "rcode", r.Rcode)

	b = appendStringField(b, "access", r.Access)
	b = appendStringField(b, "op", r.Op)
	b = appendStringField(b, "target", r.Target)
	if !r.Until.IsZero() {
		b = append(b, `,"until":"`...)
		b = r.Until.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = appendIntField(b, "count", int64(r.Count))
	if len(r.Reads) > 0 {
		b = append(b, `,"reads":[`...)
		for i, d := range r.Reads {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"dir":`...)
			b = appendJSONString(b, d.Dir)
			b = appendStringField(b, "rule", d.Rule)
			b = append(b, `,"count":`...)
			b = strconv.AppendInt(b, int64(d.Count), 10)
			b = appendListField(b, "files", d.Files)
			b = append(b, '}')
		}
		b = append(b, ']')
	}

	b = appendListField(b, "argv", r.Argv)
	b = appendStringField(b, "cwd", r.Cwd)
	b = appendStringField(b, "digest", r.Digest)
	b = appendStringField(b, "program", r.Program)
	b = appendStringField(b, "interpreter", r.Interpreter)

	b = appendStringField(b, "direction", r.Direction)
	b = appendStringField(b, "opcode", r.Opcode)
	b = appendIntField(b, "size", r.Size)
	b = appendStringField(b, "text", r.Text)
	b = appendBoolField(b, "text_truncated", r.TextTruncated)
	b = appendStringField(b, "mcp_method", r.MCPMethod)
	b = appendStringField(b, "mcp_tool", r.MCPTool)
	b = appendStringField(b, "trigger", r.Trigger)

	b = appendStringField(b, "agent", r.Agent)
	b = appendListField(b, "command", r.Command)
	b = appendIntField(b, "root_pid", int64(r.RootPID))
	b = appendIntField(b, "agent_uid", int64(r.AgentUID))
	b = appendStringField(b, "tty", r.TTY)
	b = appendIntField(b, "parent_pid", int64(r.ParentPID))
	b = appendStringField(b, "mode", r.Mode)
	b = appendStringField(b, "container_id", r.ContainerID)
	b = appendStringField(b, "container_runtime", r.ContainerRuntime)
	b = appendStringField(b, "pod_uid", r.PodUID)
	if r.ExitCode != nil {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	if r.DurationMS != nil {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendInt(b, *r.DurationMS, 10)
	}
	b = appendStringField(b, "workdir", r.Workdir)
	b = appendStringField(b, "home", r.Home)
	b = appendBoolField(b, "truncated", r.Truncated)
	return append(b, '}', '\n'), true
}

// appendChanges appends c as encoding/json does: fields in order, empty
// ones left out, the map's keys sorted.
func appendChanges(b []byte, c *event.Changes) []byte {
	b = append(b, '{')
	sep := false
	if len(c.Redacted) > 0 {
		b = append(b, `"redacted":{`...)
		keys := make([]string, 0, len(c.Redacted))
		for k := range c.Redacted {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(c.Redacted[k]), 10)
		}
		b = append(b, '}')
		sep = true
	}
	for _, f := range [...]struct {
		name string
		l    []string
	}{{"credentials", c.Credentials}, {"headers", c.Headers}} {
		if len(f.l) == 0 {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = appendJSONList(b, f.l)
		sep = true
	}
	return append(b, '}')
}

// The append*Field helpers append ,"name":value, or nothing for an empty
// value (omitempty). Every field but the first is written by them or
// after a comma, so the object never starts with one.
func appendStringField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, v)
}

func appendIntField(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

func appendBoolField(b []byte, name string, v bool) []byte {
	if !v {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, `":true`...)
}

func appendListField(b []byte, name string, l []string) []byte {
	if len(l) == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONList(b, l)
}

func appendJSONList(b []byte, l []string) []byte {
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does without HTML
// escaping: control characters, '"' and '\' escaped, invalid UTF-8 as
// \ufffd, U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
