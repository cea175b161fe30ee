//go:build linux

package fileexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/chaperone-dev/chaperone/event"
)

// The kernel's struct seccomp_notif and seccomp_notif_resp.
type testNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type testResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// testAnswer answers one notification of a test listener.
type testAnswer struct {
	l  int
	id uint64
}

func (a testAnswer) Valid() bool {
	id := a.id
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(a.l), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return errno == 0
}

func (a testAnswer) send(r testResp) error {
	buf := make([]uint64, 8) // zeroed, larger than the kernel's struct
	*(*testResp)(unsafe.Pointer(&buf[0])) = r
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(a.l), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return errno
	}
	return nil
}

func (a testAnswer) Continue() error {
	return a.send(testResp{ID: a.id, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE})
}

func (a testAnswer) Fail(errno syscall.Errno) error {
	return a.send(testResp{ID: a.id, Error: -int32(errno)})
}

// serveCalls answers l's notifications with k until the test ends.
func serveCalls(t testing.TB, l *os.File, k *Calls) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			fds := []unix.PollFd{{Fd: int32(l.Fd()), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 100); err != nil || n == 0 || fds[0].Revents&unix.POLLIN == 0 {
				continue // the receive below would block past the test's end
			}
			buf := make([]uint64, 16) // zeroed, larger than struct seccomp_notif
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, l.Fd(), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&buf[0])))
			if errno == unix.ENOENT || errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				return // closed
			}
			n := *(*testNotif)(unsafe.Pointer(&buf[0]))
			wg.Go(func() {
				k.Handle(ctx, Call{TID: int(n.Pid), Arch: n.Arch, Nr: n.Nr, Args: n.Args}, testAnswer{l: int(l.Fd()), id: n.ID})
			})
		}
	})
}

// Links, renames and truncations are decided on the files they act on as
// the caller resolves them: a link or rename as a read of its source, a
// truncation as a write; a protected file is refused whatever the policy;
// io_uring is refused. A denied call fails with EPERM, one whose path does
// not resolve as the kernel fails it, undecided.
func TestCallsDecided(t *testing.T) {
	requireRoot(t)
	dir, p := protectedTree(t)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	must(t, os.MkdirAll(at("secret"), 0o755))
	must(t, os.WriteFile(at("secret/s"), []byte("s\n"), 0o644))
	must(t, os.WriteFile(at("secret/t"), []byte("t\n"), 0o644))
	must(t, os.Symlink("../secret/s", at("work/sym")))
	must(t, os.Symlink("/proc/self/fd/0", at("work/magic")))

	c, l := startChildFiltered(t, true)
	var mu sync.Mutex
	var published []*event.Event
	k, err := NewCalls(FileOptions{
		Session:   "s1",
		InSession: inNamespace(c.mnt),
		Process:   processOf,
		Decider: event.DeciderFunc(func(_ context.Context, e *event.Event) event.Verdict {
			if strings.Contains(e.File.Path, "/secret/") {
				return event.Verdict{Action: event.Deny, Rule: "no-secrets"}
			}
			return event.Verdict{Action: event.Allow}
		}),
		Publish: func(e *event.Event) {
			mu.Lock()
			published = append(published, e)
			mu.Unlock()
		},
		Protected: p,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	serveCalls(t, l, k)
	if got := c.do(t, "cd "+at("work")); got != "ok" {
		t.Fatalf("child: %q", got)
	}

	type rec struct{ Path, Access, Op, Target, Verdict, Rule string }
	for _, tt := range []struct {
		name, op, reply string
		want            []rec // what it publishes; nil: nothing
	}{
		{"link allowed", "fsop link " + at("other/x") + " " + at("work/x1"), "ok",
			[]rec{{at("other/x"), "read", "link", at("work/x1"), "allow", ""}}},
		{"link denied", "fsop link ../secret/s s1", "err EPERM",
			[]rec{{at("secret/s"), "read", "link", at("work/s1"), "deny", "no-secrets"}}},
		{"link through a directory descriptor", "fsop linkat " + at("secret/s") + " s2", "err EPERM",
			[]rec{{at("secret/s"), "read", "link", at("work/s2"), "deny", "no-secrets"}}},
		{"a link that follows a symbolic link is of its target", "fsop linkfollow sym s3", "err EPERM",
			[]rec{{at("secret/s"), "read", "link", at("work/s3"), "deny", "no-secrets"}}},
		{"a link that does not follow is of the symbolic link", "fsop link sym sym2", "ok",
			[]rec{{at("work/sym"), "read", "link", at("work/sym2"), "allow", ""}}},
		{"a descriptor held open, linked through /proc/self/fd", "fsop linkfd " + at("secret/s") + " s4", "err EPERM",
			[]rec{{at("secret/s"), "read", "link", at("work/s4"), "deny", "no-secrets"}}},
		{"a symbolic link to /proc/self is not followed here", "fsop linkfollow magic m", "err EPERM",
			[]rec{{"", "read", "link", "", "deny", ""}}},
		{"rename denied", "fsop rename ../secret/s moved", "err EPERM",
			[]rec{{at("secret/s"), "read", "rename", at("work/moved"), "deny", "no-secrets"}}},
		{"rename allowed", "fsop rename x1 x2", "ok",
			[]rec{{at("work/x1"), "read", "rename", at("work/x2"), "allow", ""}}},
		{"an exchange moves the target too", "fsop exchange x2 ../secret/t", "err EPERM",
			[]rec{{at("secret/t"), "read", "rename", at("work/x2"), "deny", "no-secrets"}}},
		{"truncate is a write", "fsop trunc " + at("other/x"), "ok",
			[]rec{{at("other/x"), "write", "truncate", "", "allow", ""}}},
		{"truncate denied", "fsop trunc ../secret/t", "err EPERM",
			[]rec{{at("secret/t"), "write", "truncate", "", "deny", "no-secrets"}}},
		{"the policy is not linked", "fsop link policy.yaml p2", "err EPERM",
			[]rec{{at("work/policy.yaml"), "read", "link", at("work/p2"), "deny", RuleProtected}}},
		{"nor truncated through its hard link", "fsop trunc " + at("hard"), "err EPERM",
			[]rec{{at("hard"), "write", "truncate", "", "deny", RuleProtected}}},
		{"nor renamed over", "fsop rename " + at("other/x") + " policy.yaml", "err EPERM",
			[]rec{{at("other/x"), "read", "rename", at("work/policy.yaml"), "deny", RuleProtected}}},
		{"nor its directory moved", "fsop rename " + at("work") + " " + at("work2"), "err EPERM",
			[]rec{{at("work"), "read", "rename", at("work2"), "deny", RuleProtected}}},
		{"nothing added to the state", "fsop link " + at("other/x") + " " + at("state/x"), "err EPERM",
			[]rec{{at("other/x"), "read", "link", at("state/x"), "deny", RuleProtected}}},
		{"io_uring", "fsop uring -", "err EPERM",
			[]rec{{"", "unknown", "io_uring", "", "deny", RuleIOURing}}},
		{"a source that does not exist", "fsop link nothing n", "err ENOENT", nil},
		{"a target directory that does not exist", "fsop link " + at("other/x") + " no/n", "err ENOENT", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			published = nil
			mu.Unlock()
			if got := c.do(t, tt.op); got != tt.reply {
				t.Errorf("%s: %s, want %s", tt.op, got, tt.reply)
			}
			mu.Lock()
			defer mu.Unlock()
			var got []rec
			for _, e := range published {
				r := rec{e.File.Path, string(e.File.Access), e.File.Op, e.File.Target, e.Verdict.Action.String(), e.Verdict.Rule}
				if tt.want != nil && tt.want[0].Path == "" && tt.want[0].Op == "link" {
					r.Path, r.Target, r.Rule = "", "", "" // the magic link: only its refusal matters
				}
				got = append(got, r)
				if e.Process == nil || e.Process.PID != c.pid {
					t.Errorf("event of process %+v, want the child's", e.Process)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("published (-want +got):\n%s", d)
			}
		})
	}
	if _, err := os.Stat(at("work/s1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a denied link was made: %v", err)
	}
}

// BenchmarkRename times a rename by a process without the filter, by one
// under it that Calls lets go at once (outside the session: the round
// trip alone), and by one whose renames Calls decides (allowed,
// published): the cost of a rename in a session (child-ns/rename).
func BenchmarkRename(b *testing.B) {
	requireRoot(b)
	for _, name := range []string{"unfiltered", "outside", "decided"} {
		filtered := name != "unfiltered"
		b.Run(name, func(b *testing.B) {
			path := writeFile(b, "renamed")
			c, l := startChildFiltered(b, filtered)
			if filtered {
				k, err := NewCalls(FileOptions{
					InSession: func(int) bool { return name == "decided" }, Process: processOf,
					Decider: event.DeciderFunc(func(context.Context, *event.Event) event.Verdict { return event.Verdict{Action: event.Allow} }),
					Publish: func(*event.Event) {},
				}, nil)
				if err != nil {
					b.Fatal(err)
				}
				serveCalls(b, l, k)
			}
			b.ResetTimer()
			got := c.do(b, "renames "+path+" "+strconv.Itoa((b.N+1)/2))
			b.StopTimer()
			ns, ok := strings.CutPrefix(got, "ok ")
			if !ok {
				b.Fatalf("child got %q", got)
			}
			total, err := strconv.ParseFloat(ns, 64)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(total/float64(2*((b.N+1)/2)), "child-ns/rename")
		})
	}
}
