package telemetry

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chaperone-dev/chaperone/event"
)

// FormatRecord writes r as one line a person can read:
//
//	13:04:05.123 7f3a9c01 connect       allow   api.example.com:443 (127.0.0.2:443)  curl[1234]
//	13:04:05.200 7f3a9c01 http          deny    GET https://evil.example/x  curl[1234]  deny_hosts: evil.example is listed in deny_hosts
//
// The time is shown in r.Time's location (UTC as read; convert with Local
// first for local time). Verdicts other than allow show their rule and
// reason. Values from the agent are escaped, so a crafted URL cannot send
// control sequences to a terminal.
func FormatRecord(w io.Writer, r Record) {
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000"))
	b.WriteByte(' ')
	b.WriteString(shortSession(r.Session))
	fmt.Fprintf(&b, " %-13s %-7s %s", clean(string(r.Kind)), r.Verdict, what(r))
	if p := r.Process; p != nil {
		fmt.Fprintf(&b, "  %s[%d]", ProcessName(p), p.PID)
	} else if r.ProcessID != 0 {
		// Its process record is not in what was read.
		fmt.Fprintf(&b, "  #%d[%d]", r.ProcessID, r.PID)
	}
	if r.Verdict != event.Allow && (r.Rule != "" || r.Reason != "") {
		b.WriteString("  ")
		switch {
		case r.Rule != "" && r.Reason != "":
			b.WriteString(clean(r.Rule) + ": " + clean(r.Reason))
		case r.Rule != "":
			b.WriteString(clean(r.Rule))
		default:
			b.WriteString(clean(r.Reason))
		}
		b.WriteString(" (by " + r.DecidedBy.String() + ")")
	}
	if r.Truncated {
		b.WriteString("  [truncated]")
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// Describe says what r did, as FormatRecord shows it: the host of a
// connection, the method and URL of a request, the path of a file…, escaped
// for a terminal; "-" when the record holds nothing to show.
func Describe(r Record) string { return what(r) }

// ProcessName is the base name of p's executable (else of its argv[0]),
// escaped for a terminal; "?" when neither says.
func ProcessName(p *Process) string {
	name := filepath.Base(p.Exe)
	if p.Exe == "" && len(p.Argv) > 0 {
		name = filepath.Base(p.Argv[0])
	}
	if name == "." || name == "/" {
		name = "?"
	}
	return clean(name)
}

// Printable returns s escaped when it holds anything a terminal would not
// print as is (control characters, invalid UTF-8), else s itself.
func Printable(s string) string { return clean(s) }

func shortSession(s string) string {
	switch {
	case s == "":
		return "-"
	case len(s) > 8:
		s = s[:8]
	}
	return clean(s)
}

// what describes the action of one kind of record.
func what(r Record) string {
	var parts []string
	add := func(s ...string) {
		for _, v := range s {
			if v != "" {
				parts = append(parts, clean(v))
			}
		}
	}
	switch r.Kind {
	case event.KindConnect:
		target := r.Host
		if target != "" && r.Port != 0 {
			target = net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
		}
		switch {
		case target == "":
			add(r.Dst)
		case r.Dst != "" && r.Dst != target:
			add(target, "("+r.Dst+")")
		default:
			add(target)
		}
		if r.Transport != "" && r.Transport != string(event.TCP) {
			add(r.Transport)
		}
	case event.KindTLS:
		sni := r.SNI
		if sni == "" {
			sni = "(no sni)"
		}
		add(sni)
		if len(r.ALPN) > 0 {
			add("alpn=" + strings.Join(r.ALPN, ","))
		}
		if r.TLSVersion != "" {
			add("tls" + r.TLSVersion)
		}
		if r.Intercepted {
			add("intercepted")
		}
		if r.ClientRejected {
			add("client_rejected=" + r.Alert)
		}
		if r.ClientRejectsCA {
			add("client_rejects_ca")
		}
	case event.KindHTTP:
		add(r.Method, r.URL)
		if r.Upgrade != "" {
			add("upgrade=" + r.Upgrade)
		}
		if r.Status != 0 {
			add("→ " + strconv.Itoa(r.Status))
		}
		if r.Error != "" {
			add("(" + r.Error + ")")
		}
	case event.KindLLM:
		add(r.Provider, r.Model, r.Path)
		if r.WebSocket {
			add("ws", r.WSMessage)
		}
	case event.KindWS:
		add(r.Direction, r.Opcode, r.Host+r.Path)
		if r.Size >= 0 {
			add(strconv.FormatInt(r.Size, 10) + "B")
		}
		if r.MCPMethod != "" {
			add(r.MCPMethod, r.MCPTool)
		}
		if len(r.Secrets) > 0 {
			add("secrets=" + strings.Join(r.Secrets, ","))
		}
	case event.KindDNS:
		add(r.Name, r.QType)
		if len(r.Answers) > 0 {
			add("→ " + strings.Join(r.Answers, ","))
		}
		if r.Rcode != "" && r.Rcode != "NOERROR" {
			add(r.Rcode)
		}
	case event.KindFile:
		add(r.Access, r.Path)
	case KindFileReads:
		n := 0
		for _, d := range r.Reads {
			n += len(d.Files)
		}
		add(fmt.Sprintf("%d routine reads of %d files in %d directories:", r.Count, n, len(r.Reads)))
		dirs := make([]string, len(r.Reads))
		for i, d := range r.Reads {
			dirs[i] = fmt.Sprintf("%s (%d)", d.Dir, d.Count)
		}
		add(shorten(strings.Join(dirs, ", ")))
	case KindProcess:
		if p := r.Process; p != nil {
			add(fmt.Sprintf("#%d", r.ProcessID), p.Exe)
			if len(p.Argv) > 0 {
				add(shorten(strings.Join(p.Argv, " ")))
			}
			if p.Cwd != "" {
				add("in " + p.Cwd)
			}
		}
	case event.KindExec:
		add(r.Path)
		if len(r.Argv) > 1 {
			add(shorten(strings.Join(r.Argv[1:], " ")))
		}
	case event.KindPolicyReload:
		add(r.Path, r.Digest)
		if r.Trigger != "" {
			add("(" + r.Trigger + ")")
		}
		if r.Error != "" {
			add("kept the old policy: " + r.Error)
		}
	case event.KindSessionStart:
		add(r.Agent, r.Mode)
		if r.ContainerID != "" {
			// A container is known by its id's first 12 digits, as
			// docker ps shows it.
			c := r.ContainerID[:min(len(r.ContainerID), 12)]
			if r.ContainerRuntime != "" {
				c = r.ContainerRuntime + ":" + c
			}
			add("container " + c)
		}
		if r.PodUID != "" {
			add("pod " + r.PodUID)
		}
		if len(r.Command) > 0 {
			add("$ " + shorten(strings.Join(r.Command, " ")))
		}
	case event.KindSessionEnd:
		add(r.Agent)
		if r.ExitCode != nil {
			add("exit=" + strconv.Itoa(*r.ExitCode))
		}
		if r.DurationMS != nil {
			add(fmt.Sprintf("after %.3fs", float64(*r.DurationMS)/1000))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// maxCommand is how much of a command line one readable line shows; the
// JSON record has all of it.
const maxCommand = 100

// shorten cuts a command line to maxCommand runes, on one line.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= maxCommand {
		return s
	}
	return string([]rune(s)[:maxCommand-1]) + "…"
}

// clean escapes s when it holds anything a terminal would not print as is.
func clean(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
