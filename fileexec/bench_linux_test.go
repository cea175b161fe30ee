//go:build linux

package fileexec

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// BenchmarkOpen has a helper in a private mount namespace open and close one
// file b.N times and reports its own time per open (child-ns/open), so the
// pipe to the helper is not counted:
//
//   - unwatched-namespace: no marks anywhere
//   - other-namespace-watched: the helper's namespace is not watched but
//     another helper's is (what every process outside the session pays)
//   - outside: the namespace is watched but the helper is not in the
//     session (each open is a permission event, allowed at once)
//   - in-session-cached: the helper is in the session and the verdict is
//     cached (each open is a permission event answered from the cache)
//   - in-session-cached-protected: as in-session-cached, with a session's
//     protected files set (each open's inode is looked up in it, as in a
//     session)
//   - in-session-static: as in-session-cached, with Static true for the
//     file: its inode carries an ignore mark, so its opens raise no event
func BenchmarkOpen(b *testing.B) {
	requireRoot(b)
	path := writeFile(b, "bench")
	cases := []struct {
		name    string
		watch   bool
		session bool
		other   bool // watch another helper's namespace instead
		static  bool
		protect bool
	}{
		{"unwatched-namespace", false, false, false, false, false},
		{"other-namespace-watched", false, false, true, false, false},
		{"outside", true, false, false, false, false},
		{"in-session-cached", true, true, false, false, false},
		{"in-session-cached-protected", true, true, false, false, true},
		{"in-session-static", true, true, false, true, false},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c := startChild(b)
			if tc.other {
				watch(b, startChild(b), allowAll)
			}
			if tc.watch {
				watch(b, c, allowAll, func(o *FileOptions) {
					if !tc.session {
						o.InSession = func(int) bool { return false }
					}
					if tc.static {
						o.Static = func(string, event.FileAccess, event.Verdict) bool { return true }
					}
					if tc.protect {
						dir := b.TempDir()
						var list []Protect
						for _, n := range []string{"policy.yaml", "config.yaml", "audit.jsonl"} {
							if err := os.WriteFile(dir+"/"+n, nil, 0o600); err != nil {
								b.Fatal(err)
							}
							list = append(list, Protect{Path: dir + "/" + n, Protection: NoWrite})
						}
						list = append(list, Protect{Path: dir, Protection: NoAccess, Tree: true, What: "state"})
						p, err := NewProtected(list, nil)
						if err != nil {
							b.Fatal(err)
						}
						o.Protected, o.Alias = p, p.Alias
					}
				})
				if got := c.do(b, "open "+path+" r"); got != "ok" { // fill the cache, mark the file
					b.Fatalf("child got %q", got)
				}
			}
			b.ResetTimer()
			got := c.do(b, "bench "+path+" "+strconv.Itoa(b.N))
			b.StopTimer()
			ns, ok := strings.CutPrefix(got, "ok ")
			if !ok {
				b.Fatalf("child got %q", got)
			}
			total, err := strconv.ParseFloat(ns, 64)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(total/float64(b.N), "child-ns/open")
		})
	}
}

// BenchmarkWatchFilesUnmarkedOpen times an open and close of one file with
// the daemon's file mediation (WatchFiles on a home's credential files and
// a state directory) running or not, side by side:
//
//   - self/unmarked/unwatched: this process opens a file, no group at all
//   - self/unmarked/watching: the same, the files marked (what every
//     process on the machine pays for its ordinary opens)
//   - self/unmarked/alternating: both, in alternating rounds of 2,000 opens
//     with the group made and closed between them (untimed), so that a
//     loaded machine's swings fall on both alike: unwatched-ns/open,
//     watching-ns/open and their ratio, watching/unwatched
//   - self/unmarked/alternating-no-marks: the same with a group that marks
//     nothing, the method's own bias and noise
//   - self/marked/outside: this process opens a marked file, allowed at
//     once (Chaperone's own opens: the round trip to the reader)
//   - child/unmarked/unwatched: a helper process opens the unmarked file
//     (child-ns/open: its own time per open, the pipe to it not counted)
//   - child/marked/outside: the helper, not in the session, opens a marked
//     file: each open waits for the reader to see it is not in the session
func BenchmarkWatchFilesUnmarkedOpen(b *testing.B) {
	requireRoot(b)
	home := b.TempDir()
	key, plain := home+"/.ssh/id_ed25519", home+"/notes.txt"
	for _, p := range []string{key, home + "/.aws/credentials", home + "/state/ca-key.pem", plain} {
		writeAt(b, p, "data\n")
	}
	paths := append(CredentialFiles([]string{home}), home+"/state")
	cases := []struct {
		name  string
		child bool
		watch bool
		path  string
	}{
		{"self/unmarked/unwatched", false, false, plain},
		{"self/unmarked/watching", false, true, plain},
		{"self/unmarked/alternating", false, false, plain},
		{"self/unmarked/alternating-no-marks", false, false, plain},
		{"self/marked/outside", false, true, key},
		{"child/unmarked/unwatched", true, false, plain},
		{"child/marked/outside", true, true, key},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			if tc.watch {
				watchFiles(b, paths, newPIDSet(), allowAll)
			}
			if tc.child {
				c := startChild(b)
				b.ResetTimer()
				got := c.do(b, "bench "+tc.path+" "+strconv.Itoa(b.N))
				b.StopTimer()
				ns, ok := strings.CutPrefix(got, "ok ")
				if !ok {
					b.Fatalf("child got %q", got)
				}
				total, err := strconv.ParseFloat(ns, 64)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(total/float64(b.N), "child-ns/open")
				return
			}
			switch {
			case strings.HasSuffix(tc.name, "/alternating"):
				alternateWatching(b, paths, tc.path)
				return
			case strings.HasSuffix(tc.name, "/alternating-no-marks"):
				alternateWatching(b, nil, tc.path)
				return
			}
			for b.Loop() {
				if err := openClose(tc.path, unix.O_RDONLY); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// alternateWatching opens path b.N times, in rounds of 2,000 with paths
// watched (WatchFiles) and 2,000 without, and reports each's time per
// open and their ratio: the thread's CPU time (CLOCK_THREAD_CPUTIME_ID,
// which the time spent waiting for a CPU on a loaded machine does not
// swell) as *-cpu-ns/open and cpu-watching/unwatched, and the wall time
// as *-ns/open and watching/unwatched.
func alternateWatching(b *testing.B, paths []string, path string) {
	const round = 2000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	var wall, cpu [2]time.Duration // unwatched, watching
	var opens [2]int
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i = 1 - i {
		n := min(round, b.N-done)
		var f *Files
		if i == 1 {
			b.StopTimer()
			f, _ = watchFiles(b, paths, newPIDSet(), allowAll)
			b.StartTimer()
		}
		start, startCPU := time.Now(), threadCPU()
		for range n {
			if err := openClose(path, unix.O_RDONLY); err != nil {
				b.Fatal(err)
			}
		}
		cpu[i] += threadCPU() - startCPU
		wall[i] += time.Since(start)
		opens[i] += n
		done += n
		if f != nil {
			b.StopTimer()
			f.Close()
			b.StartTimer()
		}
	}
	if opens[0] == 0 || opens[1] == 0 {
		return // b.N too small for both
	}
	per := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(wall[0], opens[0]), "unwatched-ns/open")
	b.ReportMetric(per(wall[1], opens[1]), "watching-ns/open")
	b.ReportMetric(per(wall[1], opens[1])/per(wall[0], opens[0]), "watching/unwatched")
	b.ReportMetric(per(cpu[0], opens[0]), "unwatched-cpu-ns/open")
	b.ReportMetric(per(cpu[1], opens[1]), "watching-cpu-ns/open")
	b.ReportMetric(per(cpu[1], opens[1])/per(cpu[0], opens[0]), "cpu-watching/unwatched")
}
