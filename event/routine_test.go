package event

import "testing"

func TestRoutine(t *testing.T) {
	sess := &Session{Workdir: "/work/repo", Home: "/home/u"}
	allow := Verdict{Action: Allow}
	read := func(path string) *Event {
		return &Event{Kind: KindFile, File: &File{Path: path, Access: FileRead}, Verdict: allow, SessionInfo: sess}
	}
	with := func(e *Event, f func(*Event)) *Event { f(e); return e }
	tests := []struct {
		name string
		e    *Event
		want bool
	}{
		{"libc", read("/usr/lib/x86_64-linux-gnu/libc.so.6"), true},
		{"lib64 loader", read("/lib64/ld-linux-x86-64.so.2"), true},
		{"ld.so.cache", read("/etc/ld.so.cache"), true},
		{"a .so elsewhere", read("/opt/tool/libfoo.so.1.2"), true},
		{"not a .so", read("/opt/tool/libfoo.something"), false},
		{"locale", read("/usr/share/locale/de/LC_MESSAGES/coreutils.mo"), true},
		{"zoneinfo", read("/usr/share/zoneinfo/Europe/Paris"), true},
		{"certs", read("/etc/ssl/certs/ca-certificates.crt"), true},
		{"localtime", read("/etc/localtime"), true},
		{"working tree", read("/work/repo/src/main.go"), true},
		{"working tree itself", read("/work/repo"), false},
		{"sibling of the working tree", read("/work/repo2/x"), false},
		{"dot-dot out of the tree", read("/work/repo/../secret/x"), false},
		{"npm cache", read("/home/u/.npm/_cacache/index"), true},
		{"go module cache", read("/home/u/go/pkg/mod/cache/x"), true},
		{"home elsewhere", read("/home/u/notes.txt"), false},
		{"etc passwd", read("/etc/passwd"), false},
		{"env file in the tree", read("/work/repo/.env"), false},
		{"env.local in the tree", read("/work/repo/.env.local"), false},
		{"ssh key", read("/home/u/.ssh/id_ed25519"), false},
		{"pem in the tree", read("/work/repo/certs/server.pem"), false},
		{"aws dir in cache", read("/home/u/.cache/.aws/credentials"), false},
		{"write in the tree", with(read("/work/repo/a"), func(e *Event) { e.File.Access = FileWrite }), false},
		{"unknown access", with(read("/work/repo/a"), func(e *Event) { e.File.Access = FileUnknown }), false},
		{"rename", with(read("/work/repo/a"), func(e *Event) { e.File.Op = "rename" }), false},
		{"denied", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.Verdict = Verdict{} }), false},
		{"asked and allowed", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.Verdict.DecidedBy = DecidedByHuman }), false},
		{"by the judge", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.Verdict.DecidedBy = DecidedByJudge }), false},
		{"by a rule", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.Verdict.DecidedBy = DecidedByRule }), true},
		{"rewrite", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.Verdict.Action = Rewrite }), false},
		{"no session: tree unknown", with(read("/work/repo/a"), func(e *Event) { e.SessionInfo = nil }), false},
		{"no session: libraries still", with(read("/usr/lib/libc.so.6"), func(e *Event) { e.SessionInfo = nil }), true},
		{"an exec", &Event{Kind: KindExec, Exec: &Exec{Path: "/usr/lib/x"}, Verdict: allow}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Routine(tt.e); got != tt.want {
				t.Errorf("Routine(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
