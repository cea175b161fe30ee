//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
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

// gitPushAgent pushes a new commit to the bare repository $2 from the
// repository $1 in every way it knows, printing "NAME rc=RC" after each;
// then fetches ("fetch rc=RC").
const gitPushAgent = `set -u
REPO=$1 BARE=$2
cd "$REPO"
try() {
	local name=$1; shift
	git -c user.name=a -c user.email=a@e2e.test commit -q --allow-empty -m "c-$name"
	"$@" >"$REPO/../$name.out" 2>&1
	echo "$name rc=$?"
}
try push git push -q origin HEAD:main
try push-c git -c push.default=simple push -q origin HEAD:main
try push-git-dir git --git-dir="$REPO/.git" push -q origin HEAD:main
try push-C git -C "$REPO" push -q origin HEAD:main
try alias git -c alias.p=push p -q origin HEAD:main
try shell-alias git -c 'alias.sp=!git push' sp -q origin HEAD:main
try send-pack git send-pack "$BARE" HEAD:main
try git-send-pack "$(git --exec-path)/git-send-pack" "$BARE" HEAD:main
try file-url git push -q "file://$BARE" HEAD:main
git fetch -q origin >"$REPO/../fetch.out" 2>&1
echo "fetch rc=$?"
echo done
`

var gitPushes = []string{"push", "push-c", "push-git-dir", "push-C", "alias", "shell-alias", "send-pack", "git-send-pack", "file-url"}

// docPolicy returns the YAML block that follows marker in docs/files.md.
func docPolicy(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/files.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("docs/files.md has no %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/files.md: no yaml block after %q", marker)
	}
	return block
}

// TestDocsGitPushRule checks the rule docs/files.md shows for git's
// pushes (read from the document): in a session with it, every way git
// pushes (git push with options before it, aliases, send-pack,
// git-send-pack, a file:// URL) is refused and nothing reaches the bare
// repository, while a fetch works; the same pushes in a session without
// it all arrive. Its http rule refuses smart-HTTP pushes and lets fetches
// through.
func TestDocsGitPushRule(t *testing.T) {
	doc := docPolicy(t, "<!-- policy: git push")
	t.Run("http", func(t *testing.T) {
		pol, err := policy.Parse("docs/files.md", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		eng, err := policy.NewEngine(pol, policy.EngineOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			method, url string
			want        event.Action
		}{
			{"GET", "https://git.e2e.test/r.git/info/refs?service=git-receive-pack", event.Deny},
			{"POST", "https://git.e2e.test/r.git/git-receive-pack", event.Deny},
			{"POST", "https://git.e2e.test/r.git/git%2Dreceive-pack", event.Deny},
			{"GET", "https://git.e2e.test/r.git/info/refs?service=git%2Dreceive%2Dpack", event.Deny},
			{"GET", "https://git.e2e.test/r.git/info/refs?service=git-upload-pack", event.Allow},
			{"POST", "https://git.e2e.test/r.git/git-upload-pack", event.Allow},
		} {
			e := &event.Event{Kind: event.KindHTTP, HTTP: &event.HTTP{Method: tt.method, URL: tt.url, Host: "git.e2e.test"}}
			if got := eng.Decide(context.Background(), e); got.Action != tt.want {
				t.Errorf("%s %s: %s, want %s", tt.method, tt.url, got, tt.want)
			}
		}
	})
	needMediation(t)
	need(t, "git", "bash")
	for _, tt := range []struct {
		name, policy string
		refused      bool
	}{
		{name: "without the rule", policy: "default: allow\n"},
		{name: "with the rule", policy: doc, refused: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			repo, bare := filepath.Join(w.dir, "repo"), filepath.Join(w.dir, "bare.git")
			for _, args := range [][]string{
				{"init", "-q", "--bare", "-b", "main", bare},
				{"init", "-q", "-b", "main", repo},
				{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@e2e.test", "commit", "-q", "--allow-empty", "-m", "one"},
				{"-C", repo, "remote", "add", "origin", bare},
				{"-C", repo, "push", "-q", "origin", "main"},
			} {
				if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
			}
			pol := filepath.Join(w.dir, "git.yaml")
			os.WriteFile(pol, []byte(tt.policy), 0o644)
			r := w.chaperone(nil, "run", "--mode", "proxy", "--policy", pol, "--log", w.log, "--", "bash", "-c", gitPushAgent, "bash", repo, bare)
			mustSucceed(t, r)
			lines := parseExecLines(r.stdout)
			if lines["done"] == nil || lines["fetch"]["rc"] != "0" {
				t.Fatalf("the agent did not finish, or could not fetch:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			out, err := exec.Command("git", "--git-dir", bare, "log", "--format=%s", "main").Output()
			if err != nil {
				t.Fatal(err)
			}
			arrived := strings.Fields(string(out))
			denials := map[int]bool{}
			for _, rec := range w.kindRecords(event.KindExec) {
				if rec.Rule == "no-git-push" && rec.Verdict == event.Deny && rec.Process != nil {
					denials[rec.Process.PID] = true
				}
			}
			for _, name := range gitPushes {
				got := slices.Contains(arrived, "c-"+name)
				switch {
				case tt.refused && got:
					t.Errorf("BYPASS: %s reached the repository (rc=%s)", name, lines[name]["rc"])
				case tt.refused && lines[name]["rc"] == "0":
					t.Errorf("%s exited 0", name)
				case !tt.refused && (!got || lines[name]["rc"] != "0"):
					b, _ := os.ReadFile(filepath.Join(w.dir, name+".out"))
					t.Errorf("%s did not push without the rule (rc=%s): %s", name, lines[name]["rc"], b)
				}
			}
			if tt.refused && len(denials) < len(gitPushes) {
				t.Errorf("%d processes refused by no-git-push, want one per push at least (%d)", len(denials), len(gitPushes))
			}
		})
	}
}
