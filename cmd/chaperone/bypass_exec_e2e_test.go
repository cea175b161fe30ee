//go:build linux

package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// execAgent tries every route it knows to run a denied program ($2,
// openssl) and prints "NAME pid=PID" before each try (PID: the process
// that makes the exec) and "NAME rc=RC" after. A run leaves NAME.marker
// (openssl rand -out) or output in NAME.out; a refused one neither.
const execAgent = `set -u
LDSO=$1 PROG=$2 WORK=$3 PY=$4
cd "$WORK"
try() {
	local name=$1; shift
	( echo "$name pid=$BASHPID"; exec "$@" >"$WORK/$name.out" 2>&1 )
	echo "$name rc=$?"
}
py() {
	"$PY" - "$PROG" "$WORK/$1.marker" "$1" <<'EOF'
import os, sys
src, marker, how = sys.argv[1:4]
print(f"{how} pid={os.getpid()}", flush=True)
if how == "fd":
    fd = os.open(src, os.O_RDONLY)
else:
    fd = os.memfd_create("innocent")
    with open(src, "rb") as f:
        data = f.read()
    while data:
        data = data[os.write(fd, data):]
argv = ["openssl", "rand", "-out", marker, "8"]
try:
    if how == "execveat":
        os.execve(fd, argv, os.environ)  # fexecve: execveat(fd, "", AT_EMPTY_PATH)
    else:
        os.execve(f"/proc/self/fd/{fd}", argv, os.environ)
except OSError as e:
    print(f"{how} refused: {e}", flush=True)
    sys.exit(1)
EOF
	echo "$1 rc=$?"
}
try control /bin/echo allowed
case "$5" in
path)
	try direct "$PROG" rand -out "$WORK/direct.marker" 8
	try loader "$LDSO" "$PROG" rand -out "$WORK/loader.marker" 8
	try loader-argv0 "$LDSO" --argv0 innocent --library-path /nowhere "$PROG" rand -out "$WORK/loader-argv0.marker" 8
	printf '#!%s version\n' "$PROG" >"$WORK/shebang"
	printf '#!%s\n' "$WORK/shebang" >"$WORK/shebang-chain"
	printf '#!%s %s\n' "$LDSO" "$PROG" >"$WORK/shebang-loader"
	chmod +x "$WORK/shebang" "$WORK/shebang-chain" "$WORK/shebang-loader"
	try shebang "$WORK/shebang"
	try shebang-chain "$WORK/shebang-chain"
	try shebang-loader "$WORK/shebang-loader" rand -out "$WORK/shebang-loader.marker" 8
	py memfd
	py execveat
	py fd
	;;
digest)
	cp "$PROG" "$WORK/innocent"
	try copy "$WORK/innocent" rand -out "$WORK/copy.marker" 8
	try copy-loader "$LDSO" "$WORK/innocent" rand -out "$WORK/copy-loader.marker" 8
	;;
esac
echo done
`

// execRoute is one way the agent tries to run the denied program, and
// what its exec record must show.
type execRoute struct {
	name        string
	path        string // the exec record's path; "" when not fixed (a descriptor)
	program     string
	interpreter string
	rule        string
	as          string // in the reason: the program that was decided as denied
}

// TestBypassExecs runs an agent that tries to run a program the policy
// denies by path (openssl, or another one where it is missing) around the
// rule: through the dynamic loader, a #! script (and a chain of them, and
// one naming the loader), a memfd (by /proc/self/fd and by execveat), a
// descriptor of the program; and, with a rule on its digest, a renamed
// copy, directly and through the loader. Every try is refused with an exec
// record of the process that made it, showing the program, interpreter and
// digest that would have run; the program leaves no trace. As root and as
// an ordinary user.
func TestBypassExecs(t *testing.T) {
	needMediation(t)
	need(t, "bash", "python3")
	prog, ldso := deniedProgram(t)
	digest := fileDigest(t, prog)
	for _, user := range []string{"root", "nobody"} {
		t.Run(user, func(t *testing.T) {
			w := newWorld(t)
			work := filepath.Join(w.dir, "work")
			if err := os.Mkdir(work, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(work, 0o777)
			for d := w.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
				os.Chmod(d, 0o755) // the agent runs as nobody too
			}
			policies := map[string]string{
				"path": `rules:
  - name: no-openssl
    on: exec
    when: exec.path.endsWith("/` + filepath.Base(prog) + `")
    action: deny
    reason: not for the agent
default: allow
`,
				"digest": `rules:
  - name: no-openssl-copies
    on: exec
    when: exec.digest == "` + digest + `"
    action: deny
    reason: not for the agent, whatever its name
default: allow
`,
			}
			routes := map[string][]execRoute{
				"path": {
					{name: "direct", path: prog, program: prog, rule: "no-openssl"},
					{name: "loader", path: ldso, program: prog, rule: "no-openssl", as: prog + ": the program the dynamic loader runs"},
					{name: "loader-argv0", path: ldso, program: prog, rule: "no-openssl", as: prog + ": the program the dynamic loader runs"},
					{name: "shebang", path: filepath.Join(work, "shebang"), program: prog, interpreter: prog, rule: "no-openssl", as: prog + ": the #! interpreter"},
					{name: "shebang-chain", path: filepath.Join(work, "shebang-chain"), program: prog, interpreter: prog, rule: "no-openssl", as: prog + ": the #! interpreter"},
					{name: "shebang-loader", path: filepath.Join(work, "shebang-loader"), program: prog, interpreter: ldso, rule: "no-openssl", as: prog + ": the program the dynamic loader runs"},
					{name: "memfd", program: "memfd:innocent", rule: "no-openssl", as: "an installed program with the same content"},
					{name: "execveat", program: "memfd:innocent", rule: "no-openssl", as: "an installed program with the same content"},
					{name: "fd", program: prog, rule: "no-openssl", as: prog + ": the file the descriptor names"},
				},
				"digest": {
					{name: "copy", path: filepath.Join(work, "innocent"), program: filepath.Join(work, "innocent"), rule: "no-openssl-copies"},
					{name: "copy-loader", path: ldso, program: filepath.Join(work, "innocent"), rule: "no-openssl-copies", as: filepath.Join(work, "innocent") + ": the program the dynamic loader runs"},
				},
			}
			for _, kind := range []string{"path", "digest"} {
				t.Run(kind, func(t *testing.T) {
					pol := filepath.Join(w.dir, kind+".yaml")
					if err := os.WriteFile(pol, []byte(policies[kind]), 0o644); err != nil {
						t.Fatal(err)
					}
					os.Remove(w.log)
					args := []string{"run", "--mode", "proxy", "--policy", pol, "--log", w.log}
					if user != "root" {
						args = append(args, "--user", user)
					}
					r := w.chaperone(nil, append(args, "--", "bash", "-c", execAgent, "bash", ldso, prog, work, "/usr/bin/python3", kind)...)
					mustSucceed(t, r)
					t.Logf("agent:\n%s", r.stdout)
					lines := parseExecLines(r.stdout)
					if lines["done"] == nil || lines["control"]["rc"] != "0" {
						t.Fatalf("the agent did not finish, or could not run /bin/echo:\n%s\nstderr:\n%s", r.stdout, r.stderr)
					}
					recs := w.kindRecords(event.KindExec)
					for _, rt := range routes[kind] {
						t.Run(rt.name, func(t *testing.T) {
							checkExecRoute(t, rt, lines[rt.name], recs, work, digest)
						})
					}
				})
			}
		})
	}
}

// checkExecRoute checks that one route was refused, recorded and left no
// trace.
func checkExecRoute(t *testing.T, rt execRoute, line map[string]string, recs []telemetry.Record, work, digest string) {
	t.Helper()
	pid, _ := strconv.Atoi(line["pid"])
	if pid == 0 {
		t.Fatalf("the agent printed no line for %s", rt.name)
	}
	if rc := line["rc"]; rc == "0" {
		t.Errorf("BYPASS: %s exited 0", rt.name)
	}
	if _, err := os.Stat(filepath.Join(work, rt.name+".marker")); err == nil {
		t.Errorf("BYPASS: %s ran the denied program: it wrote its file", rt.name)
	}
	if out, err := os.ReadFile(filepath.Join(work, rt.name+".out")); err == nil && (strings.Contains(string(out), "OpenSSL") || strings.Contains(string(out), "Use -help")) {
		t.Errorf("BYPASS: %s ran the denied program: %q", rt.name, out)
	}
	var rec *telemetry.Record
	for i := range recs {
		if recs[i].Process != nil && recs[i].Process.PID == pid && recs[i].Verdict == event.Deny {
			rec = &recs[i]
		}
	}
	if rec == nil {
		var seen []string
		for _, r := range recs {
			if r.Process != nil && r.Process.PID == pid {
				seen = append(seen, fmt.Sprintf("%s %q %s %s", r.Path, r.Argv, r.Verdict, r.Reason))
			}
		}
		t.Fatalf("BYPASS: no denied exec record of pid %d (%s); its records: %q", pid, rt.name, seen)
	}
	if rec.Rule != rt.rule || !strings.Contains(rec.Reason, "(denied with EPERM)") || rt.as != "" && !strings.Contains(rec.Reason, rt.as) {
		t.Errorf("record: rule %q, reason %q; want rule %q and a reason naming %q", rec.Rule, rec.Reason, rt.rule, rt.as)
	}
	if rt.path != "" && rec.Path != rt.path {
		t.Errorf("record path %q, want %q", rec.Path, rt.path)
	}
	if rec.Program != rt.program || rec.Interpreter != rt.interpreter || rec.Digest != digest {
		t.Errorf("record program %q, interpreter %q, digest %q; want %q, %q, %q", rec.Program, rec.Interpreter, rec.Digest, rt.program, rt.interpreter, digest)
	}
	if rec.Process.Exe == "" || len(rec.Process.Lineage) == 0 || rec.Process.Lineage[0] != "bash" {
		t.Errorf("record's process %+v: want its executable and a lineage from the session's bash", rec.Process)
	}
}

// parseExecLines reads the agent's "NAME key=value" lines.
func parseExecLines(out string) map[string]map[string]string {
	lines := map[string]map[string]string{}
	re := regexp.MustCompile(`^(\S+) (pid|rc)=(\d+)$`)
	for l := range strings.SplitSeq(out, "\n") {
		if l == "done" {
			lines["done"] = map[string]string{}
		}
		if m := re.FindStringSubmatch(l); m != nil {
			if lines[m[1]] == nil {
				lines[m[1]] = map[string]string{}
			}
			lines[m[1]][m[2]] = m[3]
		}
	}
	return lines
}

// deniedProgram is the program the test denies (openssl, else another
// dynamically linked program of the system), symlinks resolved, and the
// loader it names.
func deniedProgram(t *testing.T) (prog, ldso string) {
	t.Helper()
	for _, name := range []string{"openssl", "gzip", "xz"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		for _, ph := range f.Progs {
			if ph.Type == elf.PT_INTERP {
				b := make([]byte, ph.Filesz)
				ph.ReadAt(b, 0)
				ldso = strings.TrimRight(string(b), "\x00")
			}
		}
		f.Close()
		if ldso != "" {
			return p, ldso
		}
	}
	t.Skip("no dynamically linked openssl, gzip or xz to deny")
	return "", ""
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
