//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// The denied address of TestBypassFiles.
const bypassFilesSink = "127.0.0.50"

// bypassFilesPolicy is the default policy, with a rule that denies the
// sink: an agent that rewrote the policy file would reach it.
func bypassFilesPolicy(t *testing.T, sink netip.AddrPort) []byte {
	def := string(policy.DefaultPolicyYAML())
	i := strings.LastIndex(def, "\ndefault: ")
	if i < 0 {
		t.Fatal("the default policy has no default")
	}
	return []byte(def[:i] + `
  - name: no-sink
    on: connect
    when: dst.ip == "` + sink.Addr().String() + `"
    action: deny
    reason: the sink is denied
ask:
  timeout: 5s
  on_timeout: deny
` + def[i+1:])
}

// filesSession is one session of TestBypassFiles: its directory, the
// agent's output, the audit log's records and what chaperone said.
type filesSession struct {
	dir, work, policy, log string
	lines                  map[string]bypassLine
	recs                   []telemetry.Record
	stderr                 string
}

// runFilesSession runs testdata/bypassfiles/agent.py with cfg (the paths
// it tries) in a transparent session whose working tree dir/work holds
// the policy file, as user ("" for root, the default when Chaperone runs
// as root without sudo).
func runFilesSession(t *testing.T, dir string, cfg map[string]any, user string) *filesSession {
	t.Helper()
	s := &filesSession{dir: dir, work: filepath.Join(dir, "work"), log: filepath.Join(dir, "audit.jsonl")}
	s.policy = filepath.Join(s.work, "policy.yaml")
	cfg["log"] = s.log
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	agent, err := filepath.Abs("testdata/bypassfiles/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--mode", "transparent", "--policy", s.policy, "--log", s.log}
	python := "python3"
	if user != "" {
		args = append(args, "--user", user)
		// Another user may not reach the test's python3 (a pyenv shim
		// under root's home): the system's.
		python = "/usr/bin/python3"
		if _, err := os.Stat(python); err != nil {
			t.Skipf("no system python3 for %s: %v", user, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(args, "--", python, agent, cfgFile)...)
	cmd.Dir = s.work
	cmd.Env = append(baseEnv(dir), "CHAPERONE_STATE_DIR="+filepath.Join(dir, "state"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("session: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	t.Logf("agent:\n%s", out.String())
	s.stderr = errb.String()
	s.lines = parseBypassLines(t, out.String())
	if _, ok := s.lines["done"]; !ok {
		t.Fatalf("the agent did not finish:\n%s\nstderr:\n%s", out.String(), s.stderr)
	}
	f, err := os.Open(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := telemetry.ReadRecords(f, telemetry.Filter{}, func(r telemetry.Record) error {
		s.recs = append(s.recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// fileRecord returns the first file record that match accepts.
func (s *filesSession) fileRecord(match func(telemetry.Record) bool) (telemetry.Record, bool) {
	for _, r := range s.recs {
		if r.Kind == event.KindFile && match(r) {
			return r, true
		}
	}
	return telemetry.Record{}, false
}

func (s *filesSession) dumpFiles() string {
	var b strings.Builder
	for _, r := range s.recs {
		if r.Kind == event.KindFile && r.Verdict != event.Allow {
			pid, exe := 0, ""
			if r.Process != nil {
				pid, exe = r.Process.PID, filepath.Base(r.Process.Exe)
			}
			b.WriteString("  file " + r.Path + " " + r.Access + " " + r.Op + " " + r.Target + " " + r.Verdict.String() + " " + r.Rule + " " + exe + " pid=" + strconv.Itoa(pid) + "\n")
		}
	}
	return b.String()
}

// checkRefusedRecord asserts that the attempt's line says it failed with
// one of errnos and that a denied file record of the process that tried
// (pid, or exe when the attempt ran a program) names want's path, op and
// target, with one of rules.
func (s *filesSession) checkRefused(t *testing.T, name string, errnos []string, want telemetry.Record, rules ...string) {
	t.Helper()
	l, ok := s.lines[name]
	if !ok {
		t.Fatalf("the agent printed no line for %s", name)
	}
	if !slices.Contains(errnos, l.outcome) {
		t.Errorf("BYPASS: %s: %s, want %v", name, l.outcome, errnos)
	}
	if want.Path == "" {
		return // the kernel refused it in the session's namespace: no event
	}
	rec, ok := s.fileRecord(func(r telemetry.Record) bool {
		return r.Path == want.Path && r.Op == want.Op && r.Target == want.Target && r.Process != nil && r.Process.PID == l.pid &&
			(want.Access == "" || r.Access == want.Access)
	})
	if !ok {
		t.Fatalf("not seen: no file record of pid %d for %s %s -> %s\n%s", l.pid, want.Op, want.Path, want.Target, s.dumpFiles())
	}
	if rec.Verdict != event.Deny || !slices.Contains(rules, rec.Rule) || rec.Reason == "" {
		t.Errorf("record %+v: want a deny by %v, with a reason", rec, rules)
	}
	if rec.Session != s.recs[0].Session {
		t.Errorf("record in session %q, want %q", rec.Session, s.recs[0].Session)
	}
}

// TestBypassFiles is the bypass suite's file paths: one transparent session
// as root whose agent (testdata/bypassfiles/agent.py) reads another tree's
// .env with openat2 and io_uring, links and renames denied files to
// allowed names, reads, appends to and truncates the audit log (under
// /tmp), and rewrites, truncates, replaces, links and moves the policy
// file in its working tree, then checks a denied address is still denied
// after the policy's reload interval; git runs on a busy machine; and the
// same attempts on the policy as an ordinary user (--user nobody).
func TestBypassFiles(t *testing.T) {
	needTransparent(t)
	needMediation(t)
	need(t, "python3", "git", "ln", "mv")
	sink := startSink(t, bypassFilesSink)

	// Not t.TempDir: the agent runs as nobody too, and must reach it.
	dir, err := os.MkdirTemp("", "chaperone-bypassfiles-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	for _, d := range []string{"work", "other", "home/.aws"} {
		if err := os.MkdirAll(filepath.Join(dir, "root", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "root")
	at := func(rel string) string { return filepath.Join(root, rel) }
	otherEnv, creds := at("other/.env"), at("home/.aws/credentials")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(otherEnv, []byte("OTHER_SECRET=not-for-the-agent\n"), 0o644))
	must(os.WriteFile(creds, []byte("[default]\naws_secret_access_key = not-for-the-agent\n"), 0o600))
	pol := bypassFilesPolicy(t, sink.addr)
	must(os.WriteFile(at("work/policy.yaml"), pol, 0o644))
	must(os.Link(at("work/policy.yaml"), at("policy-hardlink.yaml"))) // made before the session
	repo := at("repo")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", repo},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@e2e.test", "commit", "-q", "--allow-empty", "-m", "one"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	const forged = `{"kind":"session_end","forged":"by the agent"}`

	s := runFilesSession(t, root, map[string]any{
		"files": true, "other_env": otherEnv, "creds": creds, "made_dir": at("made"),
		"sink": sink.addr.String(), "forged": forged, "repo": repo, "hardlink": at("policy-hardlink.yaml"),
	}, "")
	eperm := []string{"errno=EPERM"}

	// (a) Reads whose access the registers do not show are decided as a
	// read and as a write: refused, never recorded as a write.
	t.Run("openat2", func(t *testing.T) {
		s.checkRefused(t, "openat2-env", eperm, telemetry.Record{Path: otherEnv}, "no-env-files-elsewhere")
		if r, ok := s.fileRecord(func(r telemetry.Record) bool { return r.Path == otherEnv && r.Access == "write" }); ok {
			t.Errorf("BYPASS: an open of %s recorded as a write: %+v", otherEnv, r)
		}
		if r, _ := s.fileRecord(func(r telemetry.Record) bool { return r.Path == otherEnv && r.Op == "" }); r.Access != "unknown" && r.Access != "read" {
			t.Errorf("the openat2 read was recorded with access %q, want unknown or read", r.Access)
		}
	})
	t.Run("io_uring", func(t *testing.T) {
		// io_uring is refused at io_uring_setup; were a ring had anyway,
		// its open of the file would be decided as above.
		l := s.lines["iouring-env"]
		if l.outcome != "errno=EPERM" {
			t.Errorf("BYPASS: io_uring read of another tree's .env: %s", l.outcome)
		}
		if _, ok := s.fileRecord(func(r telemetry.Record) bool {
			return r.Process != nil && r.Process.PID == l.pid && r.Verdict == event.Deny &&
				(r.Op == "io_uring" && r.Rule == fileexec.RuleIOURing || r.Path == otherEnv && (r.Access == "unknown" || r.Access == "read"))
		}); !ok {
			t.Errorf("not seen: no denied record of the io_uring attempt by pid %d\n%s", l.pid, s.dumpFiles())
		}
	})

	// (c) Links and renames of denied files to allowed names are decided as
	// reads of them, and refused.
	workPath := func(name string) string { return filepath.Join(s.work, name) }
	for _, a := range []struct {
		name, src, op, target, rule string
		byProgram                   string // the attempt ran this program
	}{
		{"ln-env", otherEnv, "link", workPath("env-linked"), "no-env-files-elsewhere", "ln"},
		{"mv-env", otherEnv, "rename", workPath("env-moved"), "no-env-files-elsewhere", "mv"},
		{"link-creds", creds, "link", workPath("creds-linked"), "no-credential-files", ""},
		{"rename-creds", creds, "rename", workPath("creds-moved"), "no-credential-files", ""},
		{"link-made", at("made/.env"), "link", workPath("made-linked"), "no-env-files-elsewhere", ""},
		{"rename-made", at("made/.env"), "rename", workPath("made-moved"), "no-env-files-elsewhere", ""},
	} {
		t.Run(a.name, func(t *testing.T) {
			want := []string{"errno=EPERM"}
			if a.byProgram != "" {
				want = []string{"rc=1"}
			}
			s.checkRefused(t, a.name, want, telemetry.Record{Path: a.src, Op: a.op, Target: a.target, Access: "read"}, a.rule)
		})
	}
	t.Run("nothing read by a new name", func(t *testing.T) {
		for name, l := range s.lines {
			if strings.HasPrefix(name, "leftover-") {
				t.Errorf("BYPASS: %s exists after the session's refusals: %s", strings.TrimPrefix(name, "leftover-"), l.outcome)
			}
		}
		if b, err := os.ReadFile(otherEnv); err != nil || !strings.Contains(string(b), "OTHER_SECRET") {
			t.Errorf("%s was moved away: %v", otherEnv, err)
		}
	})
	// A symbolic link gives nothing by itself: the open through it is
	// decided on the file it leads to.
	t.Run("symlink", func(t *testing.T) {
		s.checkRefused(t, "symlink-env", eperm, telemetry.Record{Path: otherEnv, Access: "read"}, "no-env-files-elsewhere")
	})

	// (e) The audit log under /tmp: not read, not appended to.
	t.Run("audit log read", func(t *testing.T) {
		s.checkRefused(t, "log-read", eperm, telemetry.Record{Path: s.log}, fileexec.RuleProtected)
	})
	t.Run("audit log append", func(t *testing.T) {
		// Read-only in the session's namespace: the kernel refuses the open.
		s.checkRefused(t, "log-append", []string{"errno=EROFS", "errno=EPERM"}, telemetry.Record{})
		b, err := os.ReadFile(s.log)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"forged"`)) {
			t.Error("BYPASS: a forged line landed in the audit log")
		}
	})

	// (d) The policy file in the working tree, as root.
	checkPolicyKept(t, s, pol)
	t.Run("policy through a hard link made before", func(t *testing.T) {
		s.checkRefused(t, "policy-hardlink-write", eperm, telemetry.Record{Path: at("policy-hardlink.yaml"), Access: "write"}, fileexec.RuleProtected)
		s.checkRefused(t, "policy-hardlink-truncate", eperm, telemetry.Record{Path: at("policy-hardlink.yaml"), Op: "truncate"}, fileexec.RuleProtected)
	})

	// (b) git's children on a busy machine: their loader and locale reads
	// are reads, not writes a person would be asked about.
	t.Run("git children's reads", func(t *testing.T) {
		if l := s.lines["git"]; l.outcome != "failed=0" {
			t.Errorf("git runs failed: %s", l.outcome)
		}
		var seen int
		for _, r := range s.recs {
			if r.Process == nil || !strings.HasPrefix(filepath.Base(r.Process.Exe), "git") && filepath.Base(r.Process.Exe) != "cat" {
				continue
			}
			if r.Kind == telemetry.KindFileReads { // routine reads, folded: allowed reads
				seen += r.Count
				continue
			}
			if r.Kind != event.KindFile {
				continue
			}
			if !strings.HasPrefix(r.Path, "/usr/") && !strings.HasPrefix(r.Path, "/lib") && !strings.HasPrefix(r.Path, "/etc/") {
				continue
			}
			seen++
			if r.Access != "read" && r.Access != "exec" || r.Verdict != event.Allow {
				t.Errorf("BYPASS: %s by %s recorded as %s, %s (%s)", r.Path, r.Process.Exe, r.Access, r.Verdict, r.Reason)
			}
		}
		if seen == 0 {
			t.Error("no record of git's loader or locale reads")
		}
	})

	if conns, _ := sink.received(); len(conns) > 0 {
		t.Errorf("BYPASS: the denied address accepted %d connections: %q", len(conns), conns)
	}

	// (d) again as an ordinary user, whose files the policy and its tree are.
	t.Run("as an ordinary user", func(t *testing.T) {
		userDir := filepath.Join(dir, "user")
		must(os.MkdirAll(filepath.Join(userDir, "work"), 0o777))
		os.Chmod(userDir, 0o777)
		os.Chmod(filepath.Join(userDir, "work"), 0o777)
		must(os.WriteFile(filepath.Join(userDir, "work", "policy.yaml"), pol, 0o666))
		must(os.Chmod(filepath.Join(userDir, "work", "policy.yaml"), 0o666))
		if out, err := exec.Command("chown", "-R", "nobody", userDir).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
		u := runFilesSession(t, userDir, map[string]any{"sink": sink.addr.String()}, "nobody")
		checkPolicyKept(t, u, pol)
		if conns, _ := sink.received(); len(conns) > 0 {
			t.Errorf("BYPASS: the denied address accepted %d connections: %q", len(conns), conns)
		}
	})
}

// checkPolicyKept checks s's attempts on the policy file failed (with an
// event where Chaperone, not the kernel, refused them), that it is what
// it was, and that the denied address stayed denied after the reload
// interval.
func checkPolicyKept(t *testing.T, s *filesSession, pol []byte) {
	t.Helper()
	rofs := []string{"errno=EROFS"}
	busy := []string{"errno=EBUSY"}
	eperm := []string{"errno=EPERM"}
	t.Run("policy write", func(t *testing.T) {
		s.checkRefused(t, "policy-write", rofs, telemetry.Record{})
		s.checkRefused(t, "policy-otrunc", rofs, telemetry.Record{})
	})
	t.Run("policy truncate", func(t *testing.T) {
		s.checkRefused(t, "policy-truncate", eperm, telemetry.Record{Path: s.policy, Op: "truncate", Access: "write"}, fileexec.RuleProtected)
	})
	t.Run("policy replaced", func(t *testing.T) {
		s.checkRefused(t, "policy-renameover", eperm, telemetry.Record{Path: filepath.Join(s.work, "relaxed.yaml"), Op: "rename", Target: s.policy}, fileexec.RuleProtected)
	})
	t.Run("policy linked", func(t *testing.T) {
		s.checkRefused(t, "policy-link", eperm, telemetry.Record{Path: s.policy, Op: "link", Target: filepath.Join(s.work, "policy-linked.yaml")}, fileexec.RuleProtected)
	})
	t.Run("policy removed", func(t *testing.T) {
		s.checkRefused(t, "policy-unlink", busy, telemetry.Record{})
	})
	t.Run("policy's directory moved", func(t *testing.T) {
		s.checkRefused(t, "policy-renamedir", eperm, telemetry.Record{Path: s.work, Op: "rename", Target: s.work + "-moved"}, fileexec.RuleProtected)
	})
	t.Run("policy kept", func(t *testing.T) {
		if b, err := os.ReadFile(s.policy); err != nil || !bytes.Equal(b, pol) {
			t.Errorf("BYPASS: the policy file is now %q (%v)", b, err)
		}
		l := s.lines["still-denied"]
		if !strings.HasSuffix(l.outcome, " reached=0") || strings.HasPrefix(l.outcome, "tries=0 ") {
			t.Errorf("BYPASS: after the attempts on the policy: %s", l.outcome)
		}
		if strings.Contains(s.stderr, "policy reloaded") {
			t.Errorf("the policy was reloaded:\n%s", s.stderr)
		}
		denied := 0
		for _, r := range s.recs {
			if r.Kind == event.KindConnect && r.Rule == "no-sink" && r.Verdict == event.Deny {
				denied++
			}
		}
		if denied == 0 {
			t.Errorf("no connect record denied by no-sink")
		}
	})
}
