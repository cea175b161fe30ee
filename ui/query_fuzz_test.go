package ui

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// FuzzEventQuery feeds any query string, as the standard library parses
// it, to the events query's parser and runs what it accepts over a
// session: never a panic, and the page keeps its bounds.
func FuzzEventQuery(f *testing.F) {
	for _, s := range []string{"", "limit=10", "limit=10&before=42", "after=3&limit=1", "kind=dns,exec&verdict=deny",
		"kind=file", "pid=101", "q=ITEM-1", "q=%3Cscript%3E", "all=1", "limit=0", "before=-1", "kind=,,,", "q=" + strings.Repeat("x", 300),
		"verdict=allow&verdict=deny&verdict=rewrite&verdict=ask", "pid=99999999999999999999", "after=1&before=3"} {
		f.Add(s)
	}
	x := telemetry.NewLogIndex(pagedLog(f, 30))
	defer x.Close()
	if _, err := x.Poll(false); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseEventQuery(v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ui: ") {
				t.Errorf("error %q not prefixed", err)
			}
			return
		}
		if q.limit < 1 || q.limit > maxLimit || len(q.text) > maxText || q.text != strings.ToLower(q.text) {
			t.Fatalf("query out of bounds: %+v", q)
		}
		for _, k := range q.kinds {
			if !knownKind(k) {
				t.Fatalf("unknown kind %q accepted", k)
			}
		}
		for _, a := range q.verdicts {
			if _, err := event.ParseAction(a.String()); err != nil {
				t.Fatalf("verdict %v accepted", a)
			}
		}
		page, err := queryEvents(x, "p", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) > q.limit || len(page.Events) > page.Total {
			t.Fatalf("%d events, limit %d, total %d", len(page.Events), q.limit, page.Total)
		}
	})
}
