package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// showWidth is the widest line sessions show writes, in runes.
const showWidth = 100

// label names a process: its names, pid and argv, printable.
func label(n *telemetry.ProcNode) string {
	if n.PID == 0 {
		return "(no process recorded)"
	}
	l := strings.Join(n.Names, " → ") + "[" + strconv.Itoa(n.PID) + "]"
	if len(n.Argv) > 0 {
		args := make([]string, len(n.Argv))
		for i, a := range n.Argv {
			args[i] = telemetry.Printable(a)
		}
		l += "  " + strings.Join(strings.Fields(strings.Join(args, " ")), " ")
	}
	return l
}

// printSessionTree writes the session's header and its process tree, no
// line wider than showWidth.
func printSessionTree(w io.Writer, s telemetry.SessionSummary, recs []telemetry.Record) {
	var b strings.Builder
	line := func(format string, args ...any) {
		b.WriteString(fit(fmt.Sprintf(format, args...), showWidth) + "\n")
	}
	head := "session " + telemetry.Printable(s.ID) + "  " + sessionAgent(s)
	if s.Mode != "" {
		head += " (" + telemetry.Printable(s.Mode) + ")"
	}
	line("%s", head)
	if len(s.Command) > 0 {
		args := make([]string, len(s.Command))
		for i, a := range s.Command {
			args[i] = telemetry.Printable(a)
		}
		line("  command   %s", strings.Join(strings.Fields(strings.Join(args, " ")), " "))
	}
	line("  started   %s", s.Start.UTC().Format(time.DateTime+" MST"))
	switch {
	case s.End != nil:
		end := "  ended     " + s.End.UTC().Format(time.DateTime+" MST")
		if s.DurationMS != nil {
			end += ", after " + (time.Duration(*s.DurationMS) * time.Millisecond).String()
		}
		if s.ExitCode != nil {
			end += ", exit code " + strconv.Itoa(*s.ExitCode)
		}
		line("%s", end)
	default:
		last := s.Start
		for _, r := range recs {
			if r.Time.After(last) {
				last = r.Time
			}
		}
		line("  running   no session_end recorded; last record at %s", last.UTC().Format(time.DateTime+" MST"))
	}
	activity := fmt.Sprintf("%s, %d denied, %s redacted", plural(s.Requests, "request"), s.Denials, plural(s.Redactions, "secret"))
	if s.LLMCalls > 0 {
		activity += fmt.Sprintf(", %s, %d tokens (%d in, %d out)", plural(s.LLMCalls, "LLM call"), s.Tokens, s.InputTokens, s.OutputTokens)
	}
	line("  activity  %s", activity)

	for _, n := range telemetry.ProcessTree(s, recs) {
		b.WriteString("\n")
		line("%s", label(n))
		writeChildren(&b, n, "")
	}
	io.WriteString(w, b.String())
}

// writeChildren writes n's records, then its child processes, each on
// lines that start with prefix and a branch of the tree.
func writeChildren(b *strings.Builder, n *telemetry.ProcNode, prefix string) {
	items := len(n.Records) + len(n.Children)
	branch := func(i int) (first, rest string) {
		if i == items-1 {
			return prefix + "└─ ", prefix + "   "
		}
		return prefix + "├─ ", prefix + "│  "
	}
	for i, r := range n.Records {
		first, rest := branch(i)
		b.WriteString(fit(first+recordLine(r), showWidth) + "\n")
		for _, note := range recordNotes(r) {
			b.WriteString(fit(rest+"   ↳ "+note, showWidth) + "\n")
		}
	}
	for j, c := range n.Children {
		first, rest := branch(len(n.Records) + j)
		b.WriteString(fit(first+label(c), showWidth) + "\n")
		writeChildren(b, c, rest)
	}
}

// recordLine is one action of a process: time, kind, verdict (DENY in
// capitals) and what it did.
func recordLine(r telemetry.Record) string {
	verdict := r.Verdict.String()
	if r.Verdict == event.Deny {
		verdict = "DENY"
	}
	what := telemetry.Describe(r)
	if r.Kind == event.KindLLM {
		what = llmLine(r)
	}
	return fmt.Sprintf("%s %-7s %-7s %s", r.Time.UTC().Format("15:04:05.000"), telemetry.Printable(string(r.Kind)), verdict, what)
}

// llmLine describes an LLM call: model and tokens.
func llmLine(r telemetry.Record) string {
	var parts []string
	if m := strings.TrimSpace(r.Provider + " " + r.Model); m != "" {
		parts = append(parts, telemetry.Printable(m))
	}
	if r.InputTokens != 0 || r.OutputTokens != 0 {
		parts = append(parts, fmt.Sprintf("%d in / %d out tokens", r.InputTokens, r.OutputTokens))
	}
	if r.Status != 0 && r.Status != 200 {
		parts = append(parts, "→ "+strconv.Itoa(r.Status))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "  ")
}

// recordNotes are the lines under an action: the rule and reason of a
// verdict other than allow, the tools an LLM asked for and the secrets
// redacted from a request. Folded reads are one line (--all shows each).
func recordNotes(r telemetry.Record) []string {
	var notes []string
	if why := verdictReason(r); why != "" {
		notes = append(notes, why)
	}
	if len(r.ToolCalls) > 0 {
		names := make([]string, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			names[i] = telemetry.Printable(c.Name)
		}
		notes = append(notes, "tool calls: "+strings.Join(names, ", "))
	}
	if r.Rewrite != nil && len(r.Rewrite.Redacted) > 0 {
		ids := make([]string, 0, len(r.Rewrite.Redacted))
		for id, n := range r.Rewrite.Redacted {
			ids = append(ids, telemetry.Printable(id)+" ×"+strconv.Itoa(n))
		}
		slices.Sort(ids)
		notes = append(notes, "secrets redacted: "+strings.Join(ids, ", "))
	}
	return notes
}

// verdictReason is the rule and reason of a verdict other than allow.
func verdictReason(r telemetry.Record) string {
	if r.Verdict == event.Allow || r.Rule == "" && r.Reason == "" {
		return ""
	}
	var why string
	switch {
	case r.Rule != "" && r.Reason != "":
		why = telemetry.Printable(r.Rule) + ": " + telemetry.Printable(r.Reason)
	case r.Rule != "":
		why = telemetry.Printable(r.Rule)
	default:
		why = telemetry.Printable(r.Reason)
	}
	return why + " (by " + r.DecidedBy.String() + ")"
}
