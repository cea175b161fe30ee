package telemetry

import (
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// SessionSummary is what the audit log says about one session: the one
// projection that `chaperone sessions`, `sessions show` and the live view
// share.
type SessionSummary struct {
	ID       string   `json:"id"`
	Agent    string   `json:"agent,omitempty"`
	Command  []string `json:"command,omitempty"`
	Mode     string   `json:"mode,omitempty"`
	RootPID  int      `json:"root_pid,omitempty"`
	AgentUID *int     `json:"agent_uid,omitempty"`
	// Start is the session_start's time, else (a log that begins in the
	// middle of the session) its first record's.
	Start time.Time `json:"start"`
	// End is the session_end's time; absent while Running.
	End        *time.Time `json:"end,omitempty"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	DurationMS *int64     `json:"duration_ms,omitempty"`
	// Last is the time of the session's latest record.
	Last time.Time `json:"last"`
	// Events counts the session's actions, each folded read included.
	Events int `json:"events"`
	// Requests counts http records, whatever their verdict.
	Requests int `json:"requests"`
	// Denials counts denied actions (see SessionCounter.Add).
	Denials int `json:"denials"`
	// Redactions counts the secrets replaced in requests.
	Redactions   int   `json:"redactions"`
	LLMCalls     int   `json:"llm_calls"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Tokens       int64 `json:"tokens"` // input + output
}

// SessionCounter sums one session's records into its summary. Its zero
// value is not ready: use NewSessionCounter.
type SessionCounter struct {
	s       SessionSummary
	started bool // a session_start was seen
	// Denied connections and requests by host: one denied request can be
	// recorded as a denied connect, tls and http record.
	deniedConns map[string]int
	deniedReqs  map[string]bool
}

// NewSessionCounter returns a counter for session id.
func NewSessionCounter(id string) *SessionCounter {
	return &SessionCounter{s: SessionSummary{ID: id}, deniedConns: map[string]int{}, deniedReqs: map[string]bool{}}
}

// Add counts r. Denials count every denied http, dns, file and exec
// record, and denied connections (connect, or else tls, records) to hosts
// none of whose requests were denied: a denied tunnel is kept open to
// answer its requests 403, so their denials stand for it. Denied llm
// records are not counted: each comes with its denied http record.
func (c *SessionCounter) Add(r Record) {
	s := &c.s
	switch r.Kind {
	case KindFileReads:
		s.Events += r.Count // the reads folded in it
	case KindProcess:
	default:
		s.Events++
	}
	if !c.started && (s.Start.IsZero() || r.Time.Before(s.Start)) {
		s.Start = r.Time
	}
	if r.Time.After(s.Last) {
		s.Last = r.Time
	}
	denied := r.Verdict == event.Deny
	switch r.Kind {
	case event.KindSessionStart:
		c.started = true
		s.Start, s.Agent, s.Command, s.Mode, s.RootPID = r.Time, r.Agent, r.Command, r.Mode, r.RootPID
		if r.AgentUID != 0 || r.Mode != "" {
			uid := r.AgentUID
			s.AgentUID = &uid
		}
	case event.KindSessionEnd:
		t := r.Time
		s.End, s.ExitCode, s.DurationMS = &t, r.ExitCode, r.DurationMS
		if s.Agent == "" {
			s.Agent, s.Command, s.Mode, s.RootPID = r.Agent, r.Command, r.Mode, r.RootPID
		}
	case event.KindHTTP:
		s.Requests++
		if r.Rewrite != nil {
			for _, n := range r.Rewrite.Redacted {
				s.Redactions += n
			}
		}
		if denied {
			c.deniedReqs[RequestHost(r)] = true
		}
	case event.KindConnect:
		if denied {
			c.deniedConns[r.Host]++
		}
	case event.KindTLS:
		if denied && c.deniedConns[r.SNI] == 0 {
			c.deniedConns[r.SNI] = 1
		}
	case event.KindLLM:
		s.LLMCalls++
		s.InputTokens += r.InputTokens
		s.OutputTokens += r.OutputTokens
		s.Tokens += r.InputTokens + r.OutputTokens
	}
	switch r.Kind {
	case event.KindHTTP, event.KindDNS, event.KindFile, event.KindExec, event.KindWS:
		if denied {
			s.Denials++
		}
	}
}

// Summary is the session as counted so far.
func (c *SessionCounter) Summary() SessionSummary {
	s := c.s
	for host, n := range c.deniedConns {
		if !c.deniedReqs[host] {
			s.Denials += n
		}
	}
	s.Running = s.End == nil
	return s
}

// RequestHost is the host name (no port) an http record went to.
func RequestHost(r Record) string {
	h := r.Host
	if h == "" {
		if u, err := url.Parse(r.URL); err == nil {
			h = u.Host
		}
	}
	if name, _, err := net.SplitHostPort(h); err == nil {
		return name
	}
	return h
}

// Sessions summarises every session of the audit log r, oldest first.
// Records of no session (traffic from outside any session, refused) are
// left out.
func Sessions(r io.Reader) ([]SessionSummary, error) {
	counters := map[string]*SessionCounter{}
	var order []string
	err := ReadRecords(r, Filter{}, func(r Record) error {
		if r.Session == "" {
			return nil
		}
		c := counters[r.Session]
		if c == nil {
			c = NewSessionCounter(r.Session)
			counters[r.Session] = c
			order = append(order, r.Session)
		}
		c.Add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	list := make([]SessionSummary, 0, len(order))
	for _, id := range order {
		list = append(list, counters[id].Summary())
	}
	slices.SortStableFunc(list, func(a, b SessionSummary) int { return a.Start.Compare(b.Start) })
	return list, nil
}

// ProcNode is one process of a session's tree.
type ProcNode struct {
	PID, PPID int
	Names     []string // executable names, in order (an exec changes it)
	Argv      []string
	Lineage   []string
	Records   []Record // its actions, in time order
	Parent    *ProcNode
	Children  []*ProcNode // in the order they first acted
}

// ProcessTree sorts a session's records (session_start, session_end and
// process records aside) into its processes, nested by parentage, and
// returns the tops: the root process, then any process whose ancestry is
// unknown, then the records that name no process (a node of PID 0). A
// parent the log has no record of is stood in for by a node named from the
// child's lineage. Names are printable (see Printable); argv and lineage
// are as recorded.
func ProcessTree(s SessionSummary, recs []Record) []*ProcNode {
	byPID := map[int]*ProcNode{}
	var order []*ProcNode
	var orphan *ProcNode // records without a process
	node := func(pid, ppid int, lineage []string) *ProcNode {
		n := byPID[pid]
		if n == nil {
			n = &ProcNode{PID: pid, PPID: ppid, Lineage: lineage}
			byPID[pid] = n
			order = append(order, n)
		}
		return n
	}
	for _, r := range recs {
		if !InProcessTree(r) {
			continue
		}
		p := r.Process
		if p == nil && r.PID != 0 {
			// Its process record is not in the log (a log that begins
			// mid-session): its pid is all there is.
			p = &Process{PID: r.PID}
		}
		if p == nil {
			if orphan == nil {
				orphan = &ProcNode{}
			}
			orphan.Records = append(orphan.Records, r)
			continue
		}
		n := node(p.PID, p.PPID, p.Lineage)
		if name := ProcessName(p); len(n.Names) == 0 || n.Names[len(n.Names)-1] != name {
			n.Names = append(n.Names, name)
		}
		if len(n.Argv) == 0 {
			n.Argv = p.Argv
		}
		if len(n.Lineage) == 0 {
			n.Lineage = p.Lineage
		}
		n.Records = append(n.Records, r)
	}

	var root *ProcNode
	if s.RootPID != 0 && (len(order) > 0 || byPID[s.RootPID] != nil) {
		root = byPID[s.RootPID]
		if root == nil {
			root = node(s.RootPID, 0, nil)
			root.Argv = s.Command
		}
		if len(root.Names) == 0 {
			root.Names = []string{rootName(s, order)}
		}
	}
	// order grows as stand-in parents are added; they are linked in turn.
	for i := 0; i < len(order); i++ {
		n := order[i]
		if n == root {
			continue
		}
		p := byPID[n.PPID]
		if p == nil && n.PPID != 0 && len(n.Lineage) >= 2 && (root == nil || n.PPID != root.PID) {
			p = node(n.PPID, 0, n.Lineage[:len(n.Lineage)-1])
			p.Names = []string{clean(n.Lineage[len(n.Lineage)-2])}
		}
		if p == nil || p == n || descends(p, n) {
			p = root
		}
		if p != nil {
			n.Parent = p
			p.Children = append(p.Children, n)
		}
	}

	var tops []*ProcNode
	if root != nil {
		tops = append(tops, root)
	}
	for _, n := range order {
		if n.Parent == nil && n != root {
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

// InProcessTree reports whether ProcessTree counts r as an action of its
// process: session_start, session_end and process records are not, nor is
// an allowed tls record (a ClientHello let through says nothing its
// connect does not).
func InProcessTree(r Record) bool {
	switch {
	case r.Kind == event.KindSessionStart, r.Kind == event.KindSessionEnd, r.Kind == KindProcess:
		return false
	case r.Kind == event.KindTLS && r.Verdict == event.Allow:
		return false
	}
	return true
}

// sortTree puts the records of n and of the processes under it in time
// order, and each process's children in the order they first acted.
func sortTree(n *ProcNode) {
	slices.SortStableFunc(n.Records, func(a, b Record) int { return a.Time.Compare(b.Time) })
	for _, c := range n.Children {
		sortTree(c)
	}
	slices.SortStableFunc(n.Children, func(a, b *ProcNode) int { return firstTime(a).Compare(firstTime(b)) })
}

// descends reports whether n is p or one of p's ancestors, which would make
// p's parent a loop (pids reused within a session).
func descends(p, n *ProcNode) bool {
	for a := p; a != nil; a = a.Parent {
		if a == n {
			return true
		}
	}
	return false
}

// firstTime is when n, or a process under it, first acted.
func firstTime(n *ProcNode) time.Time {
	var t time.Time
	if len(n.Records) > 0 {
		t = n.Records[0].Time
	}
	for _, c := range n.Children {
		if ct := firstTime(c); !ct.IsZero() && (t.IsZero() || ct.Before(t)) {
			t = ct
		}
	}
	return t
}

// rootName names the session's root process: the first name of a
// descendant's lineage, else its command's.
func rootName(s SessionSummary, nodes []*ProcNode) string {
	for _, n := range nodes {
		if len(n.Lineage) > 1 {
			return clean(n.Lineage[0])
		}
	}
	if len(s.Command) > 0 {
		return clean(filepath.Base(s.Command[0]))
	}
	return "?"
}
