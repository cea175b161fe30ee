package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// showWidth is the widest line sessions show writes, in runes.
const showWidth = 100

// procNode is one process of a session's tree.
type procNode struct {
	pid, ppid int
	names     []string // executable names, in order (an exec changes it)
	argv      []string
	lineage   []string
	recs      []telemetry.Record
	parent    *procNode
	children  []*procNode
}

func (n *procNode) label() string {
	if n.pid == 0 {
		return "(no process recorded)"
	}
	l := strings.Join(n.names, " → ") + "[" + strconv.Itoa(n.pid) + "]"
	if len(n.argv) > 0 {
		args := make([]string, len(n.argv))
		for i, a := range n.argv {
			args[i] = telemetry.Printable(a)
		}
		l += "  " + strings.Join(strings.Fields(strings.Join(args, " ")), " ")
	}
	return l
}

// processTree sorts a session's records (session_start and session_end
// aside) into its processes, nested by parentage, and returns the tops:
// the root process, then any process whose ancestry is unknown, then the
// records that name no process. A parent the log has no record of is
// stood in for by a node named from the child's lineage.
func processTree(s sessionSummary, recs []telemetry.Record) []*procNode {
	byPID := map[int]*procNode{}
	var order []*procNode
	var orphan *procNode // records without a process
	node := func(pid, ppid int, lineage []string) *procNode {
		n := byPID[pid]
		if n == nil {
			n = &procNode{pid: pid, ppid: ppid, lineage: lineage}
			byPID[pid] = n
			order = append(order, n)
		}
		return n
	}
	for _, r := range recs {
		switch {
		case r.Kind == event.KindSessionStart, r.Kind == event.KindSessionEnd:
			continue
		case r.Kind == event.KindTLS && r.Verdict == event.Allow:
			continue // a ClientHello let through says nothing its connect does not
		}
		p := r.Process
		if p == nil && r.PID != 0 {
			// Its process record is not in the log (a log that begins
			// mid-session): its pid is all there is.
			p = &telemetry.Process{PID: r.PID}
		}
		if p == nil {
			if orphan == nil {
				orphan = &procNode{}
			}
			orphan.recs = append(orphan.recs, r)
			continue
		}
		n := node(p.PID, p.PPID, p.Lineage)
		if name := telemetry.ProcessName(p); len(n.names) == 0 || n.names[len(n.names)-1] != name {
			n.names = append(n.names, name)
		}
		if len(n.argv) == 0 {
			n.argv = p.Argv
		}
		if len(n.lineage) == 0 {
			n.lineage = p.Lineage
		}
		n.recs = append(n.recs, r)
	}

	var root *procNode
	if s.RootPID != 0 && (len(order) > 0 || byPID[s.RootPID] != nil) {
		root = byPID[s.RootPID]
		if root == nil {
			root = node(s.RootPID, 0, nil)
			root.argv = s.Command
		}
		if len(root.names) == 0 {
			root.names = []string{rootName(s, order)}
		}
	}
	// order grows as stand-in parents are added; they are linked in turn.
	for i := 0; i < len(order); i++ {
		n := order[i]
		if n == root {
			continue
		}
		p := byPID[n.ppid]
		if p == nil && n.ppid != 0 && len(n.lineage) >= 2 && (root == nil || n.ppid != root.pid) {
			p = node(n.ppid, 0, n.lineage[:len(n.lineage)-1])
			p.names = []string{telemetry.Printable(n.lineage[len(n.lineage)-2])}
		}
		if p == nil || p == n || descends(p, n) {
			p = root
		}
		if p != nil {
			n.parent = p
			p.children = append(p.children, n)
		}
	}

	var tops []*procNode
	if root != nil {
		tops = append(tops, root)
	}
	for _, n := range order {
		if n.parent == nil && n != root {
			tops = append(tops, n)
		}
	}
	if orphan != nil {
		tops = append(tops, orphan)
	}
	for _, n := range tops {
		sortTree(n)
	}
	return tops
}

// sortTree puts the records of n and of the processes under it in time
// order, and each process's children in the order they first acted.
func sortTree(n *procNode) {
	slices.SortStableFunc(n.recs, func(a, b telemetry.Record) int { return a.Time.Compare(b.Time) })
	for _, c := range n.children {
		sortTree(c)
	}
	slices.SortStableFunc(n.children, func(a, b *procNode) int { return firstTime(a).Compare(firstTime(b)) })
}

// descends reports whether n is p or one of p's ancestors, which would make
// p's parent a loop (pids reused within a session).
func descends(p, n *procNode) bool {
	for a := p; a != nil; a = a.parent {
		if a == n {
			return true
		}
	}
	return false
}

// firstTime is when n, or a process under it, first acted.
func firstTime(n *procNode) time.Time {
	var t time.Time
	if len(n.recs) > 0 {
		t = n.recs[0].Time
	}
	for _, c := range n.children {
		if ct := firstTime(c); !ct.IsZero() && (t.IsZero() || ct.Before(t)) {
			t = ct
		}
	}
	return t
}

// rootName names the session's root process: the first name of a
// descendant's lineage, else its command's.
func rootName(s sessionSummary, nodes []*procNode) string {
	for _, n := range nodes {
		if len(n.lineage) > 1 {
			return telemetry.Printable(n.lineage[0])
		}
	}
	if len(s.Command) > 0 {
		return telemetry.Printable(filepath.Base(s.Command[0]))
	}
	return "?"
}

// printSessionTree writes the session's header and its process tree, no
// line wider than showWidth.
func printSessionTree(w io.Writer, s sessionSummary, recs []telemetry.Record) {
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

	for _, n := range processTree(s, recs) {
		b.WriteString("\n")
		line("%s", n.label())
		writeChildren(&b, n, "")
	}
	io.WriteString(w, b.String())
}

// writeChildren writes n's records, then its child processes, each on
// lines that start with prefix and a branch of the tree.
func writeChildren(b *strings.Builder, n *procNode, prefix string) {
	items := len(n.recs) + len(n.children)
	branch := func(i int) (first, rest string) {
		if i == items-1 {
			return prefix + "└─ ", prefix + "   "
		}
		return prefix + "├─ ", prefix + "│  "
	}
	for i, r := range n.recs {
		first, rest := branch(i)
		b.WriteString(fit(first+recordLine(r), showWidth) + "\n")
		for _, note := range recordNotes(r) {
			b.WriteString(fit(rest+"   ↳ "+note, showWidth) + "\n")
		}
	}
	for j, c := range n.children {
		first, rest := branch(len(n.recs) + j)
		b.WriteString(fit(first+c.label(), showWidth) + "\n")
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
// redacted from a request, the directories of folded reads.
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
	for i, d := range r.Reads {
		if i == maxReadDirs && len(r.Reads) > maxReadDirs+1 {
			notes = append(notes, fmt.Sprintf("… and %d more directories", len(r.Reads)-i))
			break
		}
		by := ""
		if d.Rule != "" {
			by = " (by rule " + telemetry.Printable(d.Rule) + ")"
		}
		notes = append(notes, fmt.Sprintf("%s: %s of %s%s", telemetry.Printable(d.Dir), plural(d.Count, "read"), plural(len(d.Files), "file"), by))
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

// maxReadDirs is how many directories of a file_reads record sessions
// show lists; the record has them all.
const maxReadDirs = 5

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
