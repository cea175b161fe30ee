package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

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

// toolRef links an action to the tool call that caused it.
type toolRef struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Match string `json:"match,omitempty"`
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
	page := eventsPage{Events: []json.RawMessage{}, Total: len(matches)}
	// matches is in seq order; pick the page.
	var lo, hi int
	switch {
	case q.after > 0:
		lo, _ = slices.BinarySearch(matches, q.after) // positions are seq-1: seq>after means pos>=after
		hi = min(lo+q.limit, len(matches))
		if q.before > 0 {
			b, _ := slices.BinarySearch(matches, q.before-1)
			hi = min(hi, b)
		}
	case q.before > 0:
		hi, _ = slices.BinarySearch(matches, q.before-1)
		lo = max(0, hi-q.limit)
	default:
		hi = len(matches)
		lo = max(0, hi-q.limit)
	}
	if lo > hi {
		lo = hi
	}
	page.More, page.Newer = lo > 0, hi < len(matches)
	var want []telemetry.IndexEntry
	l.Entries(id, func(es []telemetry.IndexEntry) {
		for _, p := range matches[lo:hi] {
			want = append(want, es[p])
		}
	})
	recs, err := l.Read(gen, want)
	if err != nil {
		return eventsPage{}, err
	}
	for i, rec := range recs {
		page.Events = append(page.Events, eventJSON(rec, matches[lo+i]+1, nil, false))
	}
	return page, nil
}

// eventJSON is E: the record's JSON with its seq, its tool call when it
// has one, and (on the stream) its session, which the record holds.
func eventJSON(r telemetry.Record, seq int, tool *toolRef, stream bool) json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return mustJSON(map[string]any{"seq": seq, "kind": r.Kind, "session": r.Session, "error": "ui: record not encodable"})
	}
	out := make([]byte, 0, len(b)+64)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, int64(seq), 10)
	if tool != nil {
		t, _ := json.Marshal(tool)
		out = append(out, `,"tool":`...)
		out = append(out, t...)
	}
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, b[1:]...)
	_ = stream
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
