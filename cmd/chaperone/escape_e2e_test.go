//go:build linux

package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
)

// escapeAgent is an agent left at uid 0 (Chaperone runs as root, no sudo,
// no --user) that tries to leave the session's cgroup and to stop, trace
// or read Chaperone, its parent. Each attempt prints "ESCAPE name
// outcome". Signals that would reach beyond Chaperone (its process group,
// every process) are SIGURG, which nothing here acts on. Then it checks
// the session still mediates, and exits 7.
const escapeAgent = `
chap=$PPID
echo "ESCAPE chaperone $chap $(cat /proc/$chap/comm)"
echo "ESCAPE cgroup-start $(grep '^0::' /proc/self/cgroup)"
while read -r mnt; do
	if (echo "$BASHPID" >"$mnt/cgroup.procs") 2>/dev/null; then r=moved; else r=refused; fi
	echo "ESCAPE cgroup:$mnt $r"
done < <(awk '{for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2" || $(i+1) == "cgroup") print $5; break }}' /proc/self/mountinfo)
# Through the root of a process outside the namespace (pid 1): needs ptrace
# access to it.
mnt2=$(awk '{for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") print $5; break }}' /proc/self/mountinfo | head -n 1)
if (echo "$BASHPID" >"/proc/1/root$mnt2/cgroup.procs") 2>/dev/null; then r=moved; else r=refused; fi
echo "ESCAPE cgroup-via-pid1 $r"
echo "ESCAPE cgroup-end $(grep '^0::' /proc/self/cgroup)"
echo "ESCAPE fds $(ls -l /proc/self/fd/ 2>/dev/null | grep -c cgroup)"
outcome() { if "$@" 2>/dev/null; then echo sent; else echo refused; fi; }
echo "ESCAPE kill-term $(outcome kill -TERM "$chap")"
echo "ESCAPE kill-term-child $(bash -c 'if kill -TERM "$1" 2>/dev/null; then echo sent; else echo refused; fi' bash "$chap")"
pgid=$(awk '{print $5}' /proc/$chap/stat)
echo "ESCAPE kill-pgid $(outcome kill -URG -- "-$pgid")"
echo "ESCAPE kill-0 $(outcome kill -URG 0)"
echo "ESCAPE kill-all $(outcome kill -URG -- -1)"
if cat /proc/$chap/environ >/dev/null 2>&1; then echo "ESCAPE environ read"; else echo "ESCAPE environ refused"; fi
python3 - "$chap" <<'PY'
import ctypes, os, resource, signal, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
print("ESCAPE ptrace", "attached" if r == 0 else "refused errno=%d" % ctypes.get_errno())
def attempt(name, f):
    try:
        f()
        print("ESCAPE", name, "sent")
    except OSError as e:
        print("ESCAPE", name, "refused errno=%d" % e.errno)
attempt("pidfd-open", lambda: os.pidfd_open(pid))
attempt("pidfd-proc", lambda: signal.pidfd_send_signal(os.open("/proc/%d" % pid, os.O_DIRECTORY), signal.SIGTERM))
attempt("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)))
PY
tid=$(ls /proc/$chap/task 2>/dev/null | grep -vx "$chap" | head -n 1)
if [ -n "$tid" ]; then echo "ESCAPE tid-signal $(outcome kill -URG "$tid")"; else echo "ESCAPE tid-signal none"; fi
echo "ESCAPE denied-after $(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --resolve "exfil.e2e.test:$2:$1" "https://exfil.e2e.test:$2/after" 2>&1)"
echo "ESCAPE allowed-after $(curl -sS --max-time 10 --resolve "api.e2e.test:$4:$3" "https://api.e2e.test:$4/after" 2>&1)"
exit 7
`

var escapeLineRE = regexp.MustCompile(`(?m)^ESCAPE (\S+) (.*)$`)

// TestEscapeAsRoot runs escapeAgent in each mode that starts the agent
// differently: transparent with and without file mediation (gated and
// plain start), and the explicit proxy.
func TestEscapeAsRoot(t *testing.T) {
	needTransparent(t)
	need(t, "bash", "python3", "curl", "awk")
	modes := []struct {
		name        string
		transparent bool
		extra       []string
	}{
		{name: "transparent", transparent: true},
		{name: "transparent without file mediation", transparent: true, extra: []string{"--mediate-files=false"}},
		{name: "proxy"},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			w := newWorld(t)
			args := []string{"bash", "-c", escapeAgent, "bash",
				w.exfil.Addr.Addr().String(), strconv.Itoa(int(w.exfil.Addr.Port())),
				w.api.Addr.Addr().String(), strconv.Itoa(int(w.api.Addr.Port()))}
			var r result
			if m.transparent {
				r = w.transparent(m.extra, args...)
			} else {
				r = w.run(args...)
			}
			t.Logf("agent:\n%s", r.stdout)
			if r.code != 7 {
				t.Fatalf("chaperone exited %d, want the agent's 7\nstderr:\n%s", r.code, r.stderr)
			}
			lines := map[string]string{}
			for _, l := range escapeLineRE.FindAllStringSubmatch(r.stdout, -1) {
				lines[l[1]] = l[2]
			}
			if f := strings.Fields(lines["chaperone"]); len(f) != 2 || f[1] != "chaperone" {
				t.Fatalf("the agent's parent is %q, want chaperone", lines["chaperone"])
			}
			checkEscapeRefused(t, lines)
			if start, end := lines["cgroup-start"], lines["cgroup-end"]; start == "" || start != end {
				t.Errorf("BYPASS: the agent's cgroup went from %q to %q", start, end)
			}
			if lines["denied-after"] == "200" {
				t.Errorf("BYPASS: the denied host answered after the attempts")
			}
			if reqs := w.exfil.Requests(); len(reqs) > 0 {
				t.Errorf("BYPASS: the denied host received %+v", reqs)
			}
			if !strings.Contains(lines["allowed-after"], "hello from api.e2e.test") {
				t.Errorf("the session no longer serves an allowed request: %q\nstderr:\n%s", lines["allowed-after"], r.stderr)
			}
			start := w.sessionStart()
			if start.RootPID == 0 {
				t.Fatal("no session start")
			}
			if m.transparent {
				denied := false
				for _, rec := range w.records() {
					denied = denied || (rec.Kind == event.KindConnect && rec.Verdict == event.Deny &&
						strings.HasPrefix(rec.Dst, w.exfil.Addr.Addr().String()+":") && rec.Session == start.Session)
				}
				if !denied {
					t.Errorf("no denied connect record to %s in the session after the attempts", w.exfil.Addr.Addr())
				}
			}
			// Known gap: the kernel lets a uid-0 process signal every
			// process of uid 0, and a filter cannot know Chaperone's
			// thread ids. Asserted as it is, so that the day it closes
			// this fails and docs/security.md is updated.
			switch l := lines["tid-signal"]; l {
			case "sent":
				t.Logf("known gap: a signal to one of Chaperone's threads by its id got through (SIGURG, harmless here)")
			case "none":
			default:
				t.Errorf("tid-signal %q: the signal to Chaperone's thread was refused: update this test and docs/security.md", l)
			}
		})
	}
}

// checkEscapeRefused asserts every attempt on Chaperone and the cgroups
// was refused.
func checkEscapeRefused(t *testing.T, lines map[string]string) {
	t.Helper()
	cgroups := 0
	for name, outcome := range lines {
		if strings.HasPrefix(name, "cgroup:") {
			cgroups++
			if outcome != "refused" {
				t.Errorf("BYPASS: the uid-0 agent wrote its pid into %s/cgroup.procs (%s)", strings.TrimPrefix(name, "cgroup:"), outcome)
			}
		}
	}
	if cgroups == 0 {
		t.Error("the agent found no cgroup mount")
	}
	for _, name := range []string{"cgroup-via-pid1", "kill-term", "kill-term-child", "kill-pgid", "kill-0", "kill-all", "environ", "ptrace", "pidfd-open", "pidfd-proc", "prlimit"} {
		if l, ok := lines[name]; !ok || !strings.HasPrefix(l, "refused") {
			t.Errorf("BYPASS: %s: %q, want refused", name, l)
		}
	}
	if lines["fds"] != "0" {
		t.Errorf("the agent holds %s descriptors of cgroup files", lines["fds"])
	}
}
