package ui

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// eventQuery is what a page asks of a session's events.
type eventQuery struct {
	limit         int
	before, after int // seqs; 0: not set
	kinds         []event.Kind
	verdicts      []event.Action
	pid           int // -1: any
	text          string
	all           bool
}

// Bounds of a query.
const (
	defaultLimit = 200
	maxLimit     = 1000
	maxText      = 256
	maxListItems = 32
)

// parseEventQuery reads an events query: limit, before, after, kind,
// verdict, pid, q and all. It never panics: every value comes from the
// page, or from whoever else sends a request.
func parseEventQuery(v url.Values) (eventQuery, error) {
	q := eventQuery{limit: defaultLimit, pid: -1}
	num := func(name string, lo, hi int) (int, bool, error) {
		s := v.Get(name)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, false, fmt.Errorf("ui: %s is not a number from %d to %d", name, lo, hi)
		}
		return n, true, nil
	}
	var err error
	var ok bool
	if q.limit, ok, err = num("limit", 1, maxLimit); err != nil {
		return q, err
	} else if !ok {
		q.limit = defaultLimit
	}
	if q.before, _, err = num("before", 1, 1<<31-1); err != nil {
		return q, err
	}
	if q.after, _, err = num("after", 0, 1<<31-1); err != nil {
		return q, err
	}
	var pid int
	if pid, ok, err = num("pid", 0, 1<<31-1); err != nil {
		return q, err
	} else if ok {
		q.pid = pid
	}
	list := func(name string) ([]string, error) {
		var out []string
		for _, s := range v[name] {
			for _, item := range strings.Split(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					out = append(out, item)
				}
			}
		}
		if len(out) > maxListItems {
			return nil, fmt.Errorf("ui: too many values of %s", name)
		}
		return out, nil
	}
	kinds, err := list("kind")
	if err != nil {
		return q, err
	}
	for _, k := range kinds {
		if !knownKind(event.Kind(k)) {
			return q, fmt.Errorf("ui: kind %q is not a kind of record", telemetry.Printable(clip(k, 40)))
		}
		q.kinds = append(q.kinds, event.Kind(k))
	}
	verdicts, err := list("verdict")
	if err != nil {
		return q, err
	}
	for _, s := range verdicts {
		a, err := event.ParseAction(s)
		if err != nil {
			return q, fmt.Errorf("ui: verdict %q is not allow, deny, rewrite or ask", telemetry.Printable(clip(s, 40)))
		}
		q.verdicts = append(q.verdicts, a)
	}
	if t := v.Get("q"); t != "" {
		if len(t) > maxText {
			return q, fmt.Errorf("ui: q is longer than %d bytes", maxText)
		}
		q.text = strings.ToLower(t)
	}
	switch v.Get("all") {
	case "", "0", "false":
	case "1", "true":
		q.all = true
	default:
		return q, fmt.Errorf("ui: all is not 1 or 0")
	}
	return q, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func knownKind(k event.Kind) bool {
	for _, x := range event.Kinds {
		if x == k {
			return true
		}
	}
	return k == telemetry.KindFileReads
}

// matchEntry reports whether e passes the query's kind, verdict and pid
// filters (the text is matched on the record: matchText).
func (q *eventQuery) matchEntry(e *telemetry.IndexEntry) bool {
	if len(q.kinds) > 0 {
		ok := false
		for _, k := range q.kinds {
			if e.Kind == k || k == event.KindFile && e.Kind == telemetry.KindFileReads {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(q.verdicts) > 0 {
		ok := false
		for _, v := range q.verdicts {
			if e.Verdict == v {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return q.pid < 0 || int(e.PID) == q.pid
}

// matchText reports whether q's text is in one of r's text fields, case
// folded.
func (q *eventQuery) matchText(r *telemetry.Record) bool {
	found := false
	eachText(r, func(s string) bool {
		if s != "" && strings.Contains(strings.ToLower(s), q.text) {
			found = true
			return false
		}
		return true
	})
	return found
}

// eachText calls fn with each free-text field of r until fn returns false.
func eachText(r *telemetry.Record, fn func(string) bool) {
	one := []string{r.Rule, r.Reason, r.Dst, r.Host, r.SNI, r.Method, r.URL, r.Error, r.Provider, r.Model,
		r.Path, r.Name, r.Target, r.Cwd, r.Program, r.Interpreter, r.Agent, r.Alert, r.Digest}
	for _, s := range one {
		if !fn(s) {
			return
		}
	}
	lists := [][]string{r.Argv, r.Command, r.Answers, r.Secrets}
	if p := r.Process; p != nil {
		if !fn(p.Exe) || !fn(p.Cwd) {
			return
		}
		lists = append(lists, p.Argv, p.Lineage)
	}
	for _, l := range lists {
		for _, s := range l {
			if !fn(s) {
				return
			}
		}
	}
	for _, tc := range r.ToolCalls {
		if !fn(tc.Name) || !fn(tc.ID) {
			return
		}
	}
	for _, d := range r.Reads {
		if !fn(d.Dir) {
			return
		}
		for _, f := range d.Files {
			if !fn(f) {
				return
			}
		}
	}
}
