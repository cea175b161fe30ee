package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/ask"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// sessionView is a session's summary as the API serves it (S).
type sessionView struct {
	telemetry.SessionSummary
	Questions int `json:"questions"`
}

// treeNode is one process of a session's tree as the API serves it (N).
type treeNode struct {
	PID      int        `json:"pid"`
	PPID     int        `json:"ppid"`
	Names    []string   `json:"names"`
	Argv     []string   `json:"argv"`
	Actions  int        `json:"actions"`
	Denials  int        `json:"denials"`
	Children []treeNode `json:"children"`
}

func (s *Server) sessionJSON(sum telemetry.SessionSummary) sessionView {
	return sessionView{SessionSummary: sum, Questions: s.asks.count(sum.ID)}
}

// findSession returns the log holding session id.
func (s *Server) findSession(id string) (*telemetry.LogIndex, telemetry.SessionSummary, bool) {
	for _, l := range s.logs {
		if sum, ok := l.Session(id); ok {
			return l, sum, true
		}
	}
	return nil, telemetry.SessionSummary{}, false
}

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	s.asks.refresh()
	seen := map[string]bool{}
	list := []sessionView{}
	for _, l := range s.logs {
		for _, sum := range l.Sessions() {
			if !seen[sum.ID] {
				seen[sum.ID] = true
				list = append(list, s.sessionJSON(sum))
			}
		}
	}
	slices.SortStableFunc(list, func(a, b sessionView) int { return b.Start.Compare(a.Start) })
	writeJSON(w, map[string]any{"sessions": list})
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	l, sum, ok := s.findSession(id)
	if !ok {
		apiError(w, http.StatusNotFound, "ui: no such session")
		return
	}
	tops, count, _ := l.Tree(id)
	tree := make([]treeNode, 0, len(tops))
	for _, n := range tops {
		tree = append(tree, nodeJSON(n, count))
	}
	s.asks.refresh()
	qs := s.asks.of(id)
	writeJSON(w, map[string]any{"session": s.sessionJSON(sum), "tree": tree, "questions": qs})
}

func nodeJSON(n *telemetry.ProcNode, count func(telemetry.Record) (int, int)) treeNode {
	t := treeNode{PID: n.PID, PPID: n.PPID, Names: n.Names, Argv: n.Argv, Children: []treeNode{}}
	if t.Names == nil {
		t.Names = []string{}
	}
	if t.Argv == nil {
		t.Argv = []string{}
	}
	for _, r := range n.Records {
		a, d := count(r)
		t.Actions += a
		t.Denials += d
	}
	for _, c := range n.Children {
		t.Children = append(t.Children, nodeJSON(c, count))
	}
	return t
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q, err := parseEventQuery(r.URL.Query())
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	l, _, ok := s.findSession(id)
	if !ok {
		apiError(w, http.StatusNotFound, "ui: no such session")
		return
	}
	page, err := queryEvents(l, id, q)
	if errors.Is(err, telemetry.ErrIndexReset) {
		page, err = queryEvents(l, id, q) // once more, on the log as it is now
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, page)
}

// eventsPage is the answer of /api/sessions/{id}/events.
type eventsPage struct {
	Events []json.RawMessage `json:"events"`
	Total  int               `json:"total"`
	More   bool              `json:"more"`  // older matches exist before the first
	Newer  bool              `json:"newer"` // newer matches exist after the last
}

// queryEvents answers q over session id of l.
func queryEvents(l *telemetry.LogIndex, id string, q eventQuery) (eventsPage, error) {
	var (
		matches []int // positions in entries
		cands   []telemetry.IndexEntry
		candPos []int
	)
	gen, _ := l.Entries(id, func(es []telemetry.IndexEntry) {
		for i := range es {
			if !q.matchEntry(&es[i]) {
				continue
			}
			if q.text == "" {
				matches = append(matches, i)
			} else {
				cands = append(cands, es[i])
				candPos = append(candPos, i)
			}
		}
	})
	if q.text != "" {
		// The text is in the records: read the candidates, a chunk at a
		// time.
		const chunk = 4096
		for lo := 0; lo < len(cands); lo += chunk {
			hi := min(lo+chunk, len(cands))
			recs, err := l.Read(gen, cands[lo:hi])
			if err != nil {
				return eventsPage{}, err
			}
			for i, rec := range recs {
				if q.matchText(&rec) {
					matches = append(matches, candPos[lo+i])
				}
			}
		}
	}

	// The lines: a match each, or, unless all, a run of routine file
	// records of one process folded into one.
	lines := make([]line, 0, len(matches))
	var es []telemetry.IndexEntry // the entries of the page's lines
	if err := l.EntriesIn(gen, id, func(all []telemetry.IndexEntry) {
		for k32, p32 := range matches {
			k, p := int32(k32), int32(p32)
			e := &all[p]
			fold := !q.all && e.Routine && e.Kind == event.KindFile
			if n := len(lines); fold && n > 0 && lines[n-1].n > 0 && lines[n-1].pid == e.PID && lines[n-1].lastMatch == k-1 {
				lines[n-1].last, lines[n-1].lastMatch = p, k
				lines[n-1].n++
				lines[n-1].until = e.Time
				continue
			}
			ln := line{first: p, last: p, firstMatch: k, lastMatch: k, pid: e.PID, until: e.Time}
			if fold {
				ln.n = 1
			}
			lines = append(lines, ln)
		}
	}); err != nil {
		return eventsPage{}, err
	}

	page := eventsPage{Events: []json.RawMessage{}, Total: len(lines)}
	// Lines are in seq order (of their first); pick the page.
	search := func(seq int) int { // the first line whose seq is >= seq
		i, _ := slices.BinarySearchFunc(lines, seq, func(ln line, seq int) int { return int(ln.first) + 1 - seq })
		return i
	}
	var lo, hi int
	switch {
	case q.after > 0:
		lo = search(q.after + 1)
		hi = min(lo+q.limit, len(lines))
		if q.before > 0 {
			hi = min(hi, search(q.before))
		}
	case q.before > 0:
		hi = search(q.before)
		lo = max(0, hi-q.limit)
	default:
		hi = len(lines)
		lo = max(0, hi-q.limit)
	}
	if lo > hi {
		lo = hi
	}
	page.More, page.Newer = lo > 0, hi < len(lines)
	lines = lines[lo:hi]
	if err := l.EntriesIn(gen, id, func(all []telemetry.IndexEntry) {
		for _, ln := range lines {
			es = append(es, all[ln.first])
		}
	}); err != nil {
		return eventsPage{}, err
	}
	recs, err := l.Read(gen, es)
	if err != nil {
		return eventsPage{}, err
	}
	var links map[int]telemetry.ToolLink
	if !l.LastToolCall(id).IsZero() {
		acts := make([]posRecord, len(lines))
		for i, ln := range lines {
			acts[i] = posRecord{ln.first, recs[i]}
		}
		if links, err = linkToolCalls(l, id, gen, acts, linkAfter); err != nil {
			return eventsPage{}, err
		}
	}
	for i, rec := range recs {
		ln := lines[i]
		x := extra{routine: es[i].Routine}
		if ln.n > 1 {
			if rec, err = foldRun(l, id, gen, matches[ln.firstMatch:ln.lastMatch+1]); err != nil {
				return eventsPage{}, err
			}
			x.lastSeq = int(ln.last) + 1
		} else if tl, ok := links[int(ln.first)]; ok && tl.ID != "" {
			x.tool = &tl
		}
		page.Events = append(page.Events, eventJSON(rec, int(ln.first)+1, x))
	}
	return page, nil
}

// maxFoldRead bounds the records of a run of routine reads read to fold
// it: past it, the folded record lists the first ones' files, and counts
// every one.
const maxFoldRead = 4096

// foldRun folds the routine file records of session id at positions
// (one run: one process, nothing else between them) into one file_reads
// record, with telemetry.ViewFold, the folding of every view.
func foldRun(l *telemetry.LogIndex, id string, gen int, positions []int) (telemetry.Record, error) {
	var es []telemetry.IndexEntry
	var last telemetry.IndexEntry
	if err := l.EntriesIn(gen, id, func(all []telemetry.IndexEntry) {
		for _, p := range positions[:min(len(positions), maxFoldRead)] {
			es = append(es, all[p])
		}
		last = all[positions[len(positions)-1]]
	}); err != nil {
		return telemetry.Record{}, err
	}
	recs, err := l.Read(gen, es)
	if err != nil {
		return telemetry.Record{}, err
	}
	workdir, home := l.Places(id)
	v := telemetry.ViewFold{}
	v.Note(telemetry.Record{Kind: event.KindSessionStart, Session: id, Workdir: workdir, Home: home})
	var out []telemetry.Record
	emit := func(r telemetry.Record) error { out = append(out, r); return nil }
	for _, r := range recs {
		v.Add(r, emit)
	}
	v.Flush(emit)
	if len(out) != 1 {
		return telemetry.Record{}, fmt.Errorf("ui: %d routine reads folded into %d records, not one", len(recs), len(out))
	}
	r := out[0]
	r.Count, r.Until = len(positions), last.EntryTime()
	return r, nil
}

// line is one line of an events page: one record, or n > 0 routine file
// records of one process folded.
type line struct {
	first, last           int32 // positions in the session's entries
	firstMatch, lastMatch int32 // their positions among the matches
	n                     int32 // records folded; 0: not folded
	pid                   int32 // the process
	until                 int64 // the last record's time
}

// posRecord is a record and its position in its session's entries.
type posRecord struct {
	pos int32
	r   telemetry.Record
}

// linkAfter is how long after a page's last action the calls that may be
// linked to it late are looked for: a call links the actions made while
// its request was in flight, and requests take minutes at most.
const linkAfter = 5 * time.Minute

// linkToolCalls links acts, actions of session id in position order, to
// its tool calls: telemetry.LinkToolCalls over the session's processes,
// its calls and the execs (LinkRecords, which decide every link) up to
// after past the last act, and acts. It returns the links by position.
func linkToolCalls(l *telemetry.LogIndex, id string, gen int, acts []posRecord, after time.Duration) (map[int]telemetry.ToolLink, error) {
	if len(acts) == 0 {
		return nil, nil
	}
	last := acts[len(acts)-1]
	end := int(last.pos) + 1
	if err := l.EntriesIn(gen, id, func(all []telemetry.IndexEntry) {
		until := last.r.Time.Add(after).UnixNano()
		for end < len(all) && all[end].Time <= until {
			end++
		}
	}); err != nil {
		return nil, err
	}
	sum, _ := l.Session(id)
	procs := l.Processes(id)
	n := 1 + len(procs) + l.CountLinkRecords(id, end) + len(acts) + 1
	recs := make([]telemetry.Record, 0, n)
	pos := make([]int, 0, n) // of recs, -1 for the head
	recs = append(recs, telemetry.Record{Time: sum.Start, Session: id, Kind: event.KindSessionStart, RootPID: sum.RootPID})
	recs = append(recs, procs...)
	for range recs {
		pos = append(pos, -1)
	}
	// Merge the acts into the link records, by position.
	next := 0
	actsBefore := func(p int) {
		for next < len(acts) && int(acts[next].pos) < p {
			recs, pos = append(recs, acts[next].r), append(pos, int(acts[next].pos))
			next++
		}
	}
	if err := l.LinkRecords(gen, id, end, func(p int, r telemetry.Record) {
		actsBefore(p)
		if next < len(acts) && int(acts[next].pos) == p {
			return // an act itself, whole
		}
		recs, pos = append(recs, r), append(pos, p)
	}); err != nil {
		return nil, err
	}
	actsBefore(end)
	out := make(map[int]telemetry.ToolLink)
	for i, tl := range telemetry.LinkToolCalls(recs) {
		if tl.ID != "" && pos[i] >= 0 {
			out[pos[i]] = tl
		}
	}
	return out, nil
}

// extra is what E adds to a record: its tool call, whether it is a
// routine read, and the last seq of the records a folded line stands for.
type extra struct {
	tool    *telemetry.ToolLink
	routine bool
	lastSeq int
}

// eventJSON is E: the record's JSON with its seq and x (and, on the
// stream, its session, which the record holds).
func eventJSON(r telemetry.Record, seq int, x extra) json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return mustJSON(map[string]any{"seq": seq, "kind": r.Kind, "session": r.Session, "error": "ui: record not encodable"})
	}
	out := make([]byte, 0, len(b)+64)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, int64(seq), 10)
	if x.tool != nil {
		t, _ := json.Marshal(x.tool)
		out = append(out, `,"tool":`...)
		out = append(out, t...)
	}
	if x.routine {
		out = append(out, `,"routine":true`...)
	}
	if x.lastSeq > 0 {
		out = append(out, `,"folded":true,"last_seq":`...)
		out = strconv.AppendInt(out, int64(x.lastSeq), 10)
	}
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, b[1:]...)
	return out
}

// timeline is the answer of /api/sessions/{id}/timeline.
type timeline struct {
	Start    int64    `json:"start"` // Unix milliseconds
	End      int64    `json:"end"`
	BucketMS int64    `json:"bucket_ms"`
	Series   []series `json:"series"`
}

type series struct {
	Kind    event.Kind   `json:"kind"`
	Verdict event.Action `json:"verdict"`
	Counts  []int        `json:"counts"`
}

func (s *Server) handleTimeline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	n := 60
	if v := r.URL.Query().Get("buckets"); v != "" {
		b, err := strconv.Atoi(v)
		if err != nil || b < 1 || b > 1000 {
			apiError(w, http.StatusBadRequest, "ui: buckets is not a number from 1 to 1000")
			return
		}
		n = b
	}
	l, sum, ok := s.findSession(id)
	if !ok {
		apiError(w, http.StatusNotFound, "ui: no such session")
		return
	}
	writeJSON(w, buildTimeline(l, id, sum, n))
}

func buildTimeline(l *telemetry.LogIndex, id string, sum telemetry.SessionSummary, n int) timeline {
	start, end := sum.Start.UnixMilli(), sum.Last.UnixMilli()
	if sum.End != nil && sum.End.UnixMilli() > end {
		end = sum.End.UnixMilli()
	}
	if end < start {
		end = start
	}
	bucket := max(1, (end-start+int64(n))/int64(n))
	tl := timeline{Start: start, End: end, BucketMS: bucket, Series: []series{}}
	type key struct {
		k event.Kind
		v event.Action
	}
	idx := map[key]int{}
	l.Entries(id, func(es []telemetry.IndexEntry) {
		for i := range es {
			e := &es[i]
			if e.Kind == event.KindSessionStart || e.Kind == event.KindSessionEnd {
				continue
			}
			k := key{e.Kind, e.Verdict}
			j, ok := idx[k]
			if !ok {
				j = len(tl.Series)
				idx[k] = j
				tl.Series = append(tl.Series, series{Kind: e.Kind, Verdict: e.Verdict, Counts: make([]int, n)})
			}
			b := int((e.Time/1e6 - start) / bucket)
			b = min(max(b, 0), n-1)
			tl.Series[j].Counts[b] += int(e.Count)
		}
	})
	slices.SortFunc(tl.Series, func(a, b series) int {
		if a.Kind != b.Kind {
			if a.Kind < b.Kind {
				return -1
			}
			return 1
		}
		return int(a.Verdict) - int(b.Verdict)
	})
	return tl
}

func (s *Server) handleQuestions(w http.ResponseWriter, r *http.Request) {
	s.asks.refresh()
	writeJSON(w, map[string]any{"questions": s.asks.all()})
}

// maxAnswer bounds an answer's body.
const maxAnswer = 4096

func (s *Server) handleAnswer(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && !hasPrefixFold(ct, "application/json;") {
		apiError(w, http.StatusUnsupportedMediaType, "ui: an answer is application/json")
		return
	}
	var a struct {
		Allow  bool `json:"allow"`
		Always bool `json:"always"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAnswer))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		apiError(w, http.StatusBadRequest, "ui: bad answer: want {\"allow\":bool,\"always\":bool}")
		return
	}
	id := r.PathValue("id")
	q, err := s.asks.answer(id, a.Allow, a.Always)
	switch {
	case errors.Is(err, ask.ErrUnknown):
		apiError(w, http.StatusNotFound, "ui: no such question waiting (answered, timed out or abandoned)")
		return
	case err != nil:
		apiError(w, http.StatusForbidden, err.Error())
		return
	}
	s.hub.publish("answered", "", mustJSON(map[string]string{"id": id, "session": q.Session}))
	writeJSON(w, map[string]bool{"ok": true})
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "ui: encode: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

func apiError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}
