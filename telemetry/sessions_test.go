package telemetry

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func TestSessionDenials(t *testing.T) {
	at := time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC)
	deny := func(kind event.Kind, host string) Record {
		r := Record{Time: at, Session: "s", Kind: kind, Verdict: event.Deny, Host: host}
		switch kind {
		case event.KindTLS:
			r.Host, r.SNI = "", host
		case event.KindHTTP:
			r.Host, r.URL = host+":443", "https://"+host+"/x"
		}
		return r
	}
	allow := func(r Record) Record { r.Verdict = event.Allow; return r }
	tests := []struct {
		name string
		recs []Record
		want int
	}{
		{"nothing denied", []Record{allow(deny(event.KindConnect, "a")), allow(deny(event.KindHTTP, "a"))}, 0},
		{"a denied connection", []Record{deny(event.KindConnect, "a")}, 1},
		{"a denied ClientHello", []Record{deny(event.KindTLS, "a")}, 1},
		{"connect and tls of one connection", []Record{deny(event.KindConnect, "a"), deny(event.KindTLS, "a")}, 1},
		{"a denied tunnel's requests", []Record{deny(event.KindConnect, "a"), deny(event.KindTLS, "a"),
			deny(event.KindHTTP, "a"), deny(event.KindHTTP, "a")}, 2},
		{"two hosts", []Record{deny(event.KindConnect, "a"), deny(event.KindConnect, "b"), deny(event.KindHTTP, "b")}, 2},
		{"an LLM call with its request", []Record{deny(event.KindHTTP, "a"), deny(event.KindLLM, "")}, 1},
		{"dns, file, exec", []Record{deny(event.KindDNS, ""), deny(event.KindFile, ""), deny(event.KindExec, "")}, 3},
		{"ask is not a denial", []Record{{Time: at, Session: "s", Kind: event.KindFile, Verdict: event.Ask}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewSessionCounter("s")
			for _, r := range tt.recs {
				c.Add(r)
			}
			if got := c.Summary().Denials; got != tt.want {
				t.Errorf("Denials = %d, want %d", got, tt.want)
			}
		})
	}
}

// Processes nest by ppid; a parent without records of its own is named
// from the lineage; a pid loop (pids reused) still shows every process.
func TestProcessTree(t *testing.T) {
	at := time.Date(2025, 3, 1, 13, 0, 0, 0, time.UTC)
	rec := func(pid, ppid int, lineage ...string) Record {
		return Record{Time: at, Session: "s", Kind: event.KindExec, Verdict: event.Allow,
			Process: &Process{PID: pid, PPID: ppid, Exe: "/bin/" + lineage[len(lineage)-1], Lineage: lineage}}
	}
	tests := []struct {
		name    string
		rootPID int
		recs    []Record
		want    string
	}{
		{"nested", 1, []Record{rec(1, 0, "a"), rec(2, 1, "a", "b"), rec(3, 2, "a", "b", "c")}, "a[1](b[2](c[3]))"},
		{"root without records", 1, []Record{rec(2, 1, "a", "b")}, "a[1](b[2])"},
		{"stand-in parent", 1, []Record{rec(3, 2, "a", "sh", "c"), rec(4, 2, "a", "sh", "d")}, "a[1](sh[2](c[3] d[4]))"},
		{"unknown ancestry", 1, []Record{rec(5, 0, "x")}, "a[1](x[5])"},
		{"no root known", 0, []Record{rec(2, 1, "a", "b"), rec(3, 9, "z")}, "z[3] a[1](b[2])"},
		{"pid loop", 1, []Record{rec(1, 0, "a"), rec(2, 3, "a", "b"), rec(3, 2, "a", "c")}, "a[1](c[3](b[2]))"},
		{"exec renames", 1, []Record{rec(1, 0, "a"), rec(1, 0, "a2")}, "a → a2[1]"},
		{"process record missing: by pid", 1, []Record{rec(1, 0, "a"),
			{Time: at, Session: "s", Kind: event.KindFile, Verdict: event.Allow, ProcessID: 7, PID: 8}}, "a[1](?[8])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := SessionSummary{ID: "s", RootPID: tt.rootPID, Command: []string{"/usr/bin/a"}}
			var parts []string
			for _, n := range ProcessTree(s, tt.recs) {
				parts = append(parts, treeString(n))
			}
			if diff := cmp.Diff(tt.want, strings.Join(parts, " ")); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
		})
	}
}

func treeString(n *ProcNode) string {
	s := strings.Join(n.Names, " → ") + "[" + strconv.Itoa(n.PID) + "]"
	if len(n.Children) == 0 {
		return s
	}
	var cs []string
	for _, c := range n.Children {
		cs = append(cs, treeString(c))
	}
	return s + "(" + strings.Join(cs, " ") + ")"
}
