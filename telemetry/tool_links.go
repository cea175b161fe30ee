package telemetry

import (
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// ToolLink names the tool call an action most plausibly came from: its
// id and name as the llm record's tool_calls have them, and the rule that
// linked it ("lineage", "kind", "recent"; with " (late)" when the call
// arrived after the action). The zero ToolLink links nothing.
type ToolLink struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Match string `json:"match"`
}

// maxLineage bounds the lineage LinkToolCalls rebuilds for an action.
const maxLineage = 64

// LinkToolCalls links the actions of recs (connect, dns, tls, http, file,
// exec and file_reads records) to the tool calls of their session's llm
// records, by the rule the tracer applies (docs/telemetry.md, "Linking
// actions to tool calls"), with the same linker: the result is aligned
// with recs, zero where nothing is linked. recs are in the log's order
// (ReadRecords'), with their processes put back; an action's lineage is
// rebuilt from the pids and parents of the records before it, up to its
// session's root. A call's window opens at its request's start (the log
// does not say when the answer named it) and its answer ends latency_ms
// later.
func LinkToolCalls(recs []Record) []ToolLink {
	out := make([]ToolLink, len(recs))
	type session struct {
		tools   toolLinker[int] // the index of an action not linked yet
		parents map[int]int     // pid → ppid
		root    int
	}
	sessions := map[string]*session{}
	for i := range recs {
		r := &recs[i]
		if r.Session == "" {
			continue
		}
		s := sessions[r.Session]
		if s == nil || r.Kind == event.KindSessionStart {
			s = &session{parents: map[int]int{}}
			sessions[r.Session] = s
		}
		if r.Kind == event.KindSessionStart {
			s.root = r.RootPID
		}
		pid := r.PID
		if r.Process != nil {
			pid = r.Process.PID
			if r.Process.PPID > 0 && pid != r.Process.PPID {
				s.parents[pid] = r.Process.PPID
			}
		}
		if r.Kind == KindProcess {
			continue
		}
		s.tools.expire(r.Time)
		switch kind := r.Kind; kind {
		case event.KindSessionEnd:
			delete(sessions, r.Session)
		case event.KindLLM:
			var latency time.Duration
			if r.LatencyMS > 0 {
				latency = time.Duration(r.LatencyMS) * time.Millisecond
			}
			end := answerEnd(r.Time, latency, r.Time)
			if len(s.tools.addCalls(r.ToolCalls, r.Time, end, pid, defaultToolWindow)) > 0 {
				s.tools.relink(r.Time, func(j int, c *toolCall, how string) {
					out[j] = ToolLink{ID: c.id, Name: c.name, Match: how + " (late)"}
				})
			}
		case KindFileReads, event.KindConnect, event.KindDNS, event.KindTLS, event.KindHTTP, event.KindFile, event.KindExec:
			if kind == KindFileReads {
				kind = event.KindFile // reads, folded: one action at the first's time
			}
			a := action{kind: kind, pid: pid, lineage: lineageOf(s.parents, pid, s.root), t: r.Time}
			if c, how := s.tools.act(a, i); c != nil {
				out[i] = ToolLink{ID: c.id, Name: c.name, Match: how}
			}
		}
	}
	return out
}

// lineageOf is pid's ancestors' pids, parent first, as parents knows
// them, up to root (included) or the first pid it does not know.
func lineageOf(parents map[int]int, pid, root int) []int {
	if pid == 0 || pid == root {
		return nil
	}
	var l []int
	for p, ok := parents[pid]; ok && p > 0 && len(l) < maxLineage; p, ok = parents[p] {
		l = append(l, p)
		if p == root {
			break
		}
	}
	return l
}
