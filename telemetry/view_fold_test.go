package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// TestFoldView folds the routine reads of a log written with
// audit.file_reads: all (runs of file records, by process) and keeps
// those the audit log folded (file_reads records); --all shows each read.
func TestFoldView(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 13, 4, 5, 0, time.UTC)
	p10, p11 := &Process{PID: 10, Exe: "/bin/ls"}, &Process{PID: 11, Exe: "/bin/cat"}
	read := func(ms int, p *Process, path string) Record {
		return Record{Time: t0.Add(time.Duration(ms) * time.Millisecond), Session: "s1", Kind: event.KindFile, Verdict: event.Allow,
			Process: p, Path: path, Access: "read"}
	}
	recs := []Record{
		{Time: t0, Session: "s1", Kind: event.KindSessionStart, Verdict: event.Allow, Workdir: "/work/repo", Home: "/home/u"},
		read(1, p10, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
		read(2, p10, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
		read(3, p10, "/work/repo/a.go"), // routine: the session's working tree
		read(4, p10, "/etc/passwd"),
		read(5, p10, "/usr/share/locale/C/x.mo"), // one routine read: as it is
		read(6, p11, "/lib/libz.so.1"),           // another process: another run
		read(7, p11, "/lib/libm.so.6"),
		{Time: t0.Add(8 * time.Millisecond), Session: "s1", Kind: KindFileReads, Verdict: event.Allow, Process: p11, Count: 3,
			Reads: []DirReads{{Dir: "/usr/lib", Count: 3, Files: []string{"a.so", "b.so"}}}},
		read(9, p11, "/home/u/.aws/credentials"),
	}
	show := func(rs []Record) []string {
		var out []string
		for _, r := range rs {
			var b strings.Builder
			FormatRecord(&b, r)
			out = append(out, strings.TrimSpace(strings.SplitN(b.String(), " ", 3)[2])) // without the time and session
		}
		return out
	}
	folded := []string{
		"session_start allow   -",
		"file_reads    allow   3 routine reads of 2 files in 2 directories: /usr/lib/x86_64-linux-gnu (2), /work/repo (1)  ls[10]",
		"file          allow   read /etc/passwd  ls[10]",
		"file          allow   read /usr/share/locale/C/x.mo  ls[10]",
		"file_reads    allow   2 routine reads of 2 files in 1 directories: /lib (2)  cat[11]",
		"file_reads    allow   3 routine reads of 2 files in 1 directories: /usr/lib (3)  cat[11]",
		"file          allow   read /home/u/.aws/credentials  cat[11]",
	}
	if d := cmp.Diff(folded, show(FoldView(recs, false))); d != "" {
		t.Errorf("folded (-want +got):\n%s", d)
	}
	var all []string
	for _, r := range recs[:8] {
		all = append(all, show([]Record{r})...)
	}
	all = append(all, "file          allow   read /usr/lib/a.so  cat[11]", "file          allow   read /usr/lib/b.so  cat[11]",
		"file          allow   read /home/u/.aws/credentials  cat[11]")
	if d := cmp.Diff(all, show(FoldView(recs, true))); d != "" {
		t.Errorf("--all (-want +got):\n%s", d)
	}
	// Streaming: a run is shown once something ends it, or at Flush.
	var v ViewFold
	var got []string
	emit := func(r Record) error { got = append(got, fmt.Sprint(r.Kind)); return nil }
	for _, r := range recs[:3] {
		v.Add(r, emit)
	}
	if d := cmp.Diff([]string{"session_start"}, got); d != "" {
		t.Errorf("before the run ends (-want +got):\n%s", d)
	}
	v.Flush(emit)
	if d := cmp.Diff([]string{"session_start", "file_reads"}, got); d != "" {
		t.Errorf("after Flush (-want +got):\n%s", d)
	}
}
