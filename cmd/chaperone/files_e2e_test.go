package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// needMediation skips a test that needs file and exec mediation where it
// cannot run.
func needMediation(t *testing.T) {
	t.Helper()
	if ok, why := session.CanMediateFiles(); !ok {
		t.Skip(why)
	}
}

// fileRecords returns the audit log's records of kind.
func (w *world) kindRecords(kind event.Kind) []telemetry.Record {
	var out []telemetry.Record
	for _, r := range w.records() {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// The default policy keeps the agent, and the programs it starts, out of
// the user's credential files: the open fails with EPERM in the session,
// is logged with the lineage, and the same read outside succeeds.
func TestCredentialFileDenied(t *testing.T) {
	need(t, "python3")
	needMediation(t)
	w := newWorld(t)
	creds := filepath.Join(w.dir, "home", ".aws", "credentials")
	os.MkdirAll(filepath.Dir(creds), 0o755)
	if err := os.WriteFile(creds, []byte("[default]\naws_secret_access_key = not-for-the-agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := w.chaperone(nil, "run", "--mode", "proxy", "--log", w.log, "--",
		"sh", "-c", `cat "$HOME/.aws/credentials"; echo "cat=$?"
python3 -c 'import os; open(os.environ["HOME"] + "/.aws/credentials").read()' 2>&1 | tail -1
head -c 1 /etc/hostname >/dev/null && echo other-ok`)
	mustSucceed(t, r)
	if strings.Contains(r.stdout, "not-for-the-agent") {
		t.Fatalf("the agent read the credentials:\n%s", r.stdout)
	}
	for _, want := range []string{"cat=1", "PermissionError", "other-ok"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("agent output lacks %q:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if b, err := os.ReadFile(creds); err != nil || !strings.Contains(string(b), "not-for-the-agent") {
		t.Errorf("the same read outside the session: %v", err)
	}
	var denied []telemetry.Record
	for _, rec := range w.kindRecords(event.KindFile) {
		if rec.Path == creds && rec.Verdict == event.Deny {
			denied = append(denied, rec)
		}
	}
	if len(denied) < 2 {
		t.Fatalf("%d denied records of the credentials file; want cat's and python3's", len(denied))
	}
	lineages := map[string]bool{}
	for _, rec := range denied {
		if rec.Rule != "no-credential-files" || rec.Access != "read" || rec.Process == nil {
			t.Errorf("record %+v", rec)
			continue
		}
		lineages[strings.Join(rec.Process.Lineage, ">")] = true
	}
	if !lineages["sh>cat"] && !lineages["dash>cat"] {
		t.Errorf("no record with the lineage sh>cat: %v", lineages)
	}
}

// A credential file reached by another path (its directory moved into the
// working tree) is still the credential file; a hard link to it is refused
// when it is made, as a read of it.
func TestCredentialFileByAnotherPath(t *testing.T) {
	needMediation(t)
	w := newWorld(t)
	creds := filepath.Join(w.dir, "home", ".aws", "credentials")
	os.MkdirAll(filepath.Dir(creds), 0o755)
	if err := os.WriteFile(creds, []byte("[default]\naws_secret_access_key = not-for-the-agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(w.dir, "work")
	os.MkdirAll(work, 0o755)
	cmd := exec.Command(binary, "run", "--mode", "proxy", "--log", w.log, "--",
		"sh", "-c", `ln "$HOME/.aws/credentials" linked && cat linked; echo "link=$?"
mv "$HOME/.aws" moved && cat moved/credentials; echo "moved=$?"`)
	cmd.Dir, cmd.Env = work, baseEnv(w.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), "not-for-the-agent") {
		t.Fatal("the agent read the credentials by another path")
	}
	for _, want := range []string{"link=1", "moved=1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("agent output lacks %q:\n%s", want, out)
		}
	}
	want := map[string]bool{"link " + filepath.Join(work, "linked"): false, filepath.Join(work, "moved", "credentials"): false}
	for _, rec := range w.kindRecords(event.KindFile) {
		if _, ok := want[rec.Path]; ok && rec.Verdict == event.Deny && rec.Rule == "no-credential-files" && strings.Contains(rec.Reason, creds) {
			want[rec.Path] = true
		}
		if rec.Op == "link" && rec.Path == creds && rec.Target == filepath.Join(work, "linked") && rec.Verdict == event.Deny && rec.Rule == "no-credential-files" {
			want["link "+rec.Target] = true
		}
	}
	for path, seen := range want {
		if !seen {
			t.Errorf("no denied record of %s naming %s", path, creds)
		}
	}
}

const execPolicy = `rules:
  - name: no-force-push
    on: exec
    when: exec.argv.exists(a, a == "push") && exec.argv.exists(a, a == "--force" || a == "-f")
    action: deny
    reason: force-pushing rewrites others' history
  - name: no-date
    on: exec
    when: exec.path.endsWith("/date")
    action: deny
default: allow
`

// Execs are decided on their argv and path: a denied one fails with EPERM
// and the rest run.
func TestExecDenied(t *testing.T) {
	need(t, "git")
	needMediation(t)
	w := newWorld(t)
	repo := filepath.Join(w.dir, "repo")
	bare := filepath.Join(w.dir, "bare.git")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"init", "-q", "-b", "main", repo},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@e2e.test", "commit", "-q", "--allow-empty", "-m", "one"},
		{"-C", repo, "remote", "add", "origin", bare},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	pol := filepath.Join(w.dir, "exec.yaml")
	os.WriteFile(pol, []byte(execPolicy), 0o644)
	r := w.chaperone(nil, "run", "--mode", "proxy", "--policy", pol, "--log", w.log, "--",
		"sh", "-c", `cd "$1"
git push -q --force origin main; echo "force=$?"
git push -q origin main; echo "plain=$?"
/bin/true; echo "true=$?"
date >/dev/null; echo "date=$?"`, "sh", repo)
	mustSucceed(t, r)
	for _, want := range []string{"force=126", "plain=0", "true=0", "date=126"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("agent output lacks %q:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if out, err := exec.Command("git", "--git-dir", bare, "log", "--format=%s", "main").Output(); err != nil || strings.TrimSpace(string(out)) != "one" {
		t.Errorf("the plain push did not arrive: %q %v", out, err)
	}
	found := false
	for _, rec := range w.kindRecords(event.KindExec) {
		if rec.Rule == "no-force-push" {
			found = true
			if rec.Verdict != event.Deny || !strings.Contains(rec.Reason, "EPERM") || !strings.Contains(strings.Join(rec.Argv, " "), "push -q --force") {
				t.Errorf("exec record %+v", rec)
			}
		}
	}
	if !found {
		t.Error("no exec record of the denied force push")
	}
}

// A process that changes its argv between the check and the kernel's own
// read of it is killed before the new program runs: the denied argument
// never runs, whichever way the race goes. Whether a flip lands between
// the check and the kernel's read is up to the scheduler (on a loaded
// machine, few attempts are), so the program races at least 40 times and
// on until one was killed, 1,000 times at most.
func TestExecArgvFlipKilled(t *testing.T) {
	need(t, "python3")
	needMediation(t)
	w := newWorld(t)
	pol := filepath.Join(w.dir, "evil.yaml")
	os.WriteFile(pol, []byte("rules:\n  - name: no-evil\n    on: exec\n    when: exec.argv.exists(a, a == \"evil\")\n    action: deny\ndefault: allow\n"), 0o644)
	script, err := filepath.Abs("testdata/flipargv.py")
	if err != nil {
		t.Fatal(err)
	}
	r := w.chaperone(nil, "run", "--mode", "proxy", "--policy", pol, "--log", w.log, "--", "python3", script, "40", "1000")
	mustSucceed(t, r)
	if strings.Contains(r.stdout, "EVIL RAN") {
		t.Fatalf("the denied argv ran:\n%s", r.stdout)
	}
	var killed, denied int
	if _, err := fmt.Sscanf(strings.TrimSpace(r.stdout), "killed=%d denied=%d", &killed, &denied); err != nil {
		t.Fatalf("flipargv printed %q: %v", r.stdout, err)
	}
	t.Logf("flipargv: %s", strings.TrimSpace(r.stdout))
	if killed == 0 {
		t.Errorf("no exec was killed (%s)", strings.TrimSpace(r.stdout))
	}
	kills := 0
	for _, rec := range w.kindRecords(event.KindExec) {
		if strings.Contains(rec.Reason, "killed before it ran") && rec.Verdict == event.Deny {
			kills++
		}
	}
	if kills != killed {
		t.Errorf("%d kills in the audit log, %d seen by the program", kills, killed)
	}
}

// A build-like walk over 20,000 files completes in a session.
func TestManyFilesInSession(t *testing.T) {
	need(t, "find")
	needMediation(t)
	w := newWorld(t)
	tree := filepath.Join(w.dir, "tree")
	for d := range 20 {
		dir := filepath.Join(tree, fmt.Sprintf("d%02d", d))
		os.MkdirAll(dir, 0o755)
		for f := range 1000 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.go", f)), []byte("package x\n"), 0o644)
		}
	}
	start := time.Now()
	r := w.chaperone(nil, "run", "--mode", "proxy", "--log", w.log, "--",
		"sh", "-c", `find "$1" -type f -exec cat {} + | wc -l; find "$1" -type f -exec cat {} + | wc -l`, "sh", tree)
	mustSucceed(t, r)
	if got := strings.Fields(r.stdout); len(got) != 2 || got[0] != "20000" || got[1] != "20000" {
		t.Errorf("agent printed %q", r.stdout)
	}
	t.Logf("two walks over 20,000 files in a session: %v", time.Since(start))
}

const filePolicy = `rules:
  - name: ask-notes
    on: file
    when: file.path.endsWith("/ask-me.txt")
    action: ask
plugins:
  - name: pyplugin
    command: [python3, %q]
    on: [file]
    timeout: 30s # python's start alone may take seconds on a busy machine
ask:
  timeout: 30s
  unattended: wait # answered with chaperone approve
default: allow
`

const pyPlugin = `import json, sys
for line in sys.stdin:
    r = json.loads(line)
    e = r["event"]
    v = {"id": r["id"], "verdict": "abstain"}
    if e.get("kind") == "file" and e.get("path", "").endswith("/plugin-deny.txt"):
        v = {"id": r["id"], "verdict": "deny", "reason": "the plugin says no", "rule": "pyplugin"}
    print(json.dumps(v), flush=True)
`

// File opens are decided by plugins and by a person too.
func TestFileVerdictsFromPluginAndAsk(t *testing.T) {
	need(t, "python3")
	needMediation(t)
	w := newWorld(t)
	plugin := filepath.Join(w.dir, "plugin.py")
	os.WriteFile(plugin, []byte(pyPlugin), 0o644)
	pol := filepath.Join(w.dir, "files.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(filePolicy, plugin)), 0o644)
	notes := filepath.Join(w.dir, "notes")
	os.MkdirAll(notes, 0o755)
	os.WriteFile(filepath.Join(notes, "plugin-deny.txt"), []byte("plugin-secret\n"), 0o644)
	os.WriteFile(filepath.Join(notes, "ask-me.txt"), []byte("asked-content\n"), 0o644)

	cmd, out, errb := w.startAskSession(t, pol, nil, "sh", "-c",
		`cat "$1/plugin-deny.txt"; echo "plugin=$?"; cat "$1/ask-me.txt"; echo "ask=$?"`, "sh", notes)
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r := w.chaperone(nil, "approve")
		if q, rest, ok := strings.Cut(r.stdout, "  session "); ok && strings.Contains(rest, "ask-me.txt") {
			id = q
		}
	}
	if id == "" {
		t.Fatalf("no question about ask-me.txt; session stderr:\n%s", errb.String())
	}
	mustSucceed(t, w.chaperone(nil, "approve", id))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("session: %v\n%s", err, errb.String())
	}
	for _, want := range []string{"plugin=1", "asked-content", "ask=0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("agent output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "plugin-secret") {
		t.Error("the plugin's deny did not hold")
	}
	var byPlugin, byHuman bool
	for _, rec := range w.kindRecords(event.KindFile) {
		byPlugin = byPlugin || strings.HasPrefix(rec.Rule, "plugin:pyplugin") && rec.Verdict == event.Deny && rec.DecidedBy == event.DecidedByPlugin
		byHuman = byHuman || rec.Rule == "ask-notes" && rec.Verdict == event.Allow && rec.DecidedBy == event.DecidedByHuman
	}
	if !byPlugin || !byHuman {
		for _, rec := range w.kindRecords(event.KindFile) {
			if strings.HasPrefix(rec.Path, notes) {
				t.Logf("record: %s %s %s %s %s", rec.Path, rec.Verdict, rec.Rule, rec.DecidedBy, rec.Reason)
			}
		}
		t.Errorf("decided by plugin: %v, by a person: %v", byPlugin, byHuman)
	}
}
