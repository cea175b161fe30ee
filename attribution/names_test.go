package attribution

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func TestLineageNamesFake(t *testing.T) {
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 1, comm: "systemd", startTicks: 1, exe: "/usr/lib/systemd/systemd"})
	f.add(fakeProcess{pid: 10, ppid: 1, comm: "chaperone", startTicks: 50, exe: "/usr/bin/chaperone"})
	f.add(fakeProcess{pid: 20, ppid: 10, comm: "claude", startTicks: 100, exe: "/home/u/.local/share/claude/versions/claude"})
	f.add(fakeProcess{pid: 30, ppid: 20, comm: "bash", startTicks: 200, exe: "/usr/bin/bash (deleted)"})
	f.add(fakeProcess{pid: 40, ppid: 30, comm: "secretive", startTicks: 300}) // exe unreadable: comm
	f.add(fakeProcess{pid: 50, ppid: 40, comm: "python3", startTicks: 400, exe: "/usr/bin/python3.12"})

	proc := func(pid int, exe string, argv []string, lineage ...int) *event.Process {
		return &event.Process{PID: pid, Exe: exe, Argv: argv, Lineage: lineage}
	}
	tests := []struct {
		name string
		p    *event.Process
		root int
		want []string
	}{
		{"root to p", proc(50, "/usr/bin/python3.12", nil, 40, 30, 20, 10, 1), 20, []string{"claude", "bash", "secretive", "python3.12"}},
		{"p is root", proc(20, "/x/claude", nil, 10, 1), 20, []string{"claude"}},
		{"root is parent", proc(30, "/usr/bin/bash", nil, 20, 10, 1), 20, []string{"claude", "bash"}},
		{"root not an ancestor", proc(30, "/usr/bin/bash", nil, 20, 10, 1), 777, []string{"systemd", "chaperone", "claude", "bash"}},
		{"no root", proc(20, "", nil, 10, 1), 0, []string{"systemd", "chaperone", "claude"}},
		{"p exe from event, deleted", proc(30, "/usr/bin/bash (deleted)", nil, 20), 20, []string{"claude", "bash"}},
		{"p exe unknown: read", proc(50, "", nil, 40), 40, []string{"secretive", "python3.12"}},
		{"p exe unknown, no exe link: comm", proc(40, "", nil, 30), 30, []string{"bash", "secretive"}},
		{"ancestor gone", proc(60, "/bin/true", nil, 55, 20), 20, []string{"claude", "", "true"}},
		{"p gone: argv", proc(61, "", []string{"/usr/bin/git", "push"}, 20), 20, []string{"claude", "git"}},
		{"p gone, nothing known", proc(62, "", nil, 20), 20, []string{"claude", ""}},
		{"no lineage", proc(1, "/sbin/init", nil), 20, []string{"init"}},
		{"nil process", nil, 20, nil},
	}
	tbl := NewTable(DirFS(f.root))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var lineage []int
			if tt.p != nil {
				lineage = slices.Clone(tt.p.Lineage)
			}
			got := tbl.LineageNames(tt.p, tt.root)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("LineageNames (-want +got):\n%s", diff)
			}
			if tt.p != nil && !slices.Equal(lineage, tt.p.Lineage) {
				t.Errorf("LineageNames changed p.Lineage to %v", tt.p.Lineage)
			}
		})
	}
}
