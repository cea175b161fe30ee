package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// auditWorkload is what the sessions of TestAuditLogFoldsRoutineReads
// run: a first walk of the working tree (find | xargs cat: one cat with
// every file name in its argv, as in issue 29), two requests on one
// keep-alive connection, a read outside the tree and a denied one.
const auditWorkload = `find . -type f | sort | xargs cat >/dev/null
curl -sS -o /dev/null -o /dev/null "$API/one" "$API/two"
cat /etc/passwd >/dev/null
cat "$HOME/.aws/credentials" 2>/dev/null
echo done`

// auditSession runs auditWorkload in a session whose working tree is work,
// under policy pol, with audit.file_reads set to reads, writing the audit
// log to log.
func auditSession(t *testing.T, w *world, work, pol, log, reads string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--mode", "proxy", "--policy", pol, "--log", log, "--audit-file-reads", reads,
		"--upstream-ca", w.caFile, "--resolve", "api.e2e.test:"+w.api.Addr.Addr().String(), "--",
		"sh", "-c", auditWorkload)
	cmd.Dir = work
	cmd.Env = append(baseEnv(w.dir), "API="+w.api.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "done") {
		t.Fatalf("session (%s): %v\n%s", reads, err, out)
	}
}

// TestAuditLogFoldsRoutineReads runs one workload in two real sessions,
// one recording every file read (audit.file_reads: all) and one folding
// the routine ones (the default), and holds the folded log to issue 29:
// at most 150 bytes per routine read, each process written once (the
// requests of a keep-alive connection too), denials and reads outside the
// routine ones whole, and `policy test` reaching the same verdicts over
// both logs with a policy that changes some of them.
func TestAuditLogFoldsRoutineReads(t *testing.T) {
	need(t, "curl", "find", "xargs", "sort")
	needMediation(t)
	w := newWorldAt(t, t.TempDir(), "127.0.37.2", "127.0.37.3")
	home := filepath.Join(w.dir, "home")
	creds := filepath.Join(home, ".aws", "credentials")
	os.MkdirAll(filepath.Dir(creds), 0o755)
	if err := os.WriteFile(creds, []byte("[default]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(w.dir, "work")
	const dirs, files = 20, 150 // 3,000 files
	for d := range dirs {
		dir := filepath.Join(work, "tree", fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%04d.txt", f)), []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The default policy, with a rule that reads the process: no file is
	// static (ignore-marked, alone or with its directory), so both sessions
	// decide, and record, every file's first open: the worst case for the
	// log, and the same opens in both.
	everyOpen := filepath.Join(w.dir, "every-open.yaml")
	def := string(policy.DefaultPolicyYAML())
	i := strings.Index(def, "\nrules:\n")
	if i < 0 {
		t.Fatal("the default policy has no rules section")
	}
	def = def[:i] + "\nrules:\n  - name: not-static\n    on: file\n    when: process.exe == \"/no/such/program\"\n    action: deny\n" + def[i+len("\nrules:\n"):]
	if err := os.WriteFile(everyOpen, []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	all, folded := filepath.Join(w.dir, "all.jsonl"), filepath.Join(w.dir, "folded.jsonl")
	auditSession(t, w, work, everyOpen, all, "all")
	auditSession(t, w, work, everyOpen, folded, "routine")

	info := &event.Session{Workdir: work, Home: home}
	routine := func(r telemetry.Record) bool {
		e := r.Event()
		e.SessionInfo = info
		return event.Routine(e)
	}
	allRecs, foldedRecs := auditRecords(t, all), auditRecords(t, folded)
	allSize, foldedSize := fileSize(t, all), fileSize(t, folded)

	// The same routine reads, whole in one log and folded in the other.
	var opens, foldedOpens, foldedBytes, oldBytes int
	for _, r := range allRecs {
		if r.Kind == event.KindFile && routine(r) {
			opens++
		}
		oldBytes += oldShapeSize(t, r)
	}
	for _, r := range foldedRecs {
		switch {
		case r.Kind == telemetry.KindFileReads:
			foldedOpens += r.Count
			foldedBytes += len(mustJSON(t, r)) // about its line
		case r.Kind == event.KindFile && routine(r):
			t.Errorf("a routine read recorded whole in the folded log: %s", r.Path)
		}
	}
	if opens < dirs*files || foldedOpens < dirs*files {
		t.Fatalf("routine reads: %d in the full log, %d folded; want at least the %d files of the tree", opens, foldedOpens, dirs*files)
	}
	perOpen := float64(foldedSize) / float64(foldedOpens)
	t.Logf("audit bytes per routine read: before (a process inline in every record) %.0f (%d bytes, %d reads); "+
		"audit.file_reads: all %.0f (%d bytes); folded %.1f (%d bytes, %d reads; file_reads records %.1f per read)",
		float64(oldBytes)/float64(opens), oldBytes, opens, float64(allSize)/float64(opens), allSize,
		perOpen, foldedSize, foldedOpens, float64(foldedBytes)/float64(foldedOpens))
	if perOpen > 150 {
		t.Errorf("the folded log takes %.0f bytes per routine read, want at most 150", perOpen)
	}

	// Each process once: cat's argv of 3,000 names is in one process
	// record, not in each record of its reads.
	for name, recs := range map[string][]telemetry.Record{"all": allRecs, "folded": foldedRecs} {
		ids := map[int64]bool{}
		for _, r := range recs {
			if r.Kind == telemetry.KindProcess {
				if ids[r.ProcessID] {
					t.Errorf("%s: process %d written twice", name, r.ProcessID)
				}
				ids[r.ProcessID] = true
			}
		}
		if len(ids) == 0 {
			t.Errorf("%s: no process records", name)
		}
	}
	// The keep-alive connection's requests name curl by id: small
	// records, with curl put back by the reader.
	raw, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	var https, httpBytes, oldHTTPBytes int
	for _, r := range foldedRecs {
		if r.Kind == event.KindHTTP {
			oldHTTPBytes += oldShapeSize(t, r)
		}
	}
	for line := range bytes.Lines(raw) {
		if !bytes.Contains(line, []byte(`"kind":"http"`)) {
			continue
		}
		https++
		httpBytes += len(line)
		if bytes.Contains(line, []byte(`"process":`)) || !bytes.Contains(line, []byte(`"process_id":`)) || len(line) > 400 {
			t.Errorf("http record of %d bytes, with its process inline or without its id: %s", len(line), line)
		}
	}
	var curl int
	for _, r := range foldedRecs {
		if r.Kind == event.KindHTTP && r.Process != nil && filepath.Base(r.Process.Exe) == "curl" {
			curl++
		}
	}
	if https != 2 || curl != 2 {
		t.Fatalf("%d http records, %d of them curl's read back; want 2, 2", https, curl)
	}
	t.Logf("bytes per http record of the keep-alive connection: before %d, now %d", oldHTTPBytes/https, httpBytes/https)

	// Denials and reads that are not routine are whole in both.
	whole := func(recs []telemetry.Record) []string {
		var out []string
		for _, r := range recs {
			if r.Kind == event.KindFile && (r.Path == creds && r.Verdict == event.Deny || r.Path == "/etc/passwd") && r.Process != nil {
				out = append(out, fmt.Sprintf("%s %s %s", r.Path, r.Verdict, filepath.Base(r.Process.Exe)))
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if diff := cmp.Diff(whole(allRecs), whole(foldedRecs)); diff != "" || len(whole(allRecs)) < 2 {
		t.Errorf("whole records, all vs folded (-all +folded):\n%s\nall: %q", diff, whole(allRecs))
	}

	// policy test: the same verdicts over both logs, with a policy that
	// denies some of the tree's reads.
	pol := filepath.Join(w.dir, "stricter.yaml")
	if err := os.WriteFile(pol, []byte(`intent: the tree's d03 is off limits
rules:
  - name: no-d03
    on: file
    when: file.access == "read" && file.path.contains("/tree/d03/")
    action: deny
    reason: d03 is off limits
default: allow
`), 0o644); err != nil {
		t.Fatal(err)
	}
	replayAll, replayFolded := policyTest(t, w, pol, all), policyTest(t, w, pol, folded)
	if diff := cmp.Diff(replayAll, replayFolded); diff != "" {
		t.Errorf("policy test over the full and the folded log (-all +folded):\n%s", diff)
	}
	var denied int
	for _, l := range replayFolded {
		if strings.HasPrefix(l, "* | deny | rule no-d03 | read ") && strings.Contains(l, "/tree/d03/") {
			denied++
		}
	}
	if denied != files {
		t.Errorf("policy test denied %d reads of d03 in the folded log, want %d", denied, files)
	}

	// The readers take the folded log.
	r := w.chaperone(nil, "sessions", "show", foldedRecs[0].Session, "--log", folded)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "file_reads") || !strings.Contains(r.stdout, "3000 reads of 3000 files") && !strings.Contains(r.stdout, "routine reads of 30") {
		t.Errorf("sessions show lacks the folded reads:\n%s", r.stdout)
	}
	r = w.chaperone(nil, "events", "--kind", "file", "--log", folded)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, "routine reads of") || !strings.Contains(r.stdout, "cat[") {
		t.Errorf("events --kind file lacks the folded reads:\n%s", r.stdout)
	}
}

// policyTest runs `policy test` over log and returns what it decided of
// each distinct file read: recorded and new verdict, who decided, the path
// and the program (a folded log has each process's reads of a file once).
func policyTest(t *testing.T, w *world, pol, log string) []string {
	t.Helper()
	r := w.chaperone(nil, "policy", "test", pol, log)
	mustSucceed(t, r)
	t.Logf("policy test %s: %s", filepath.Base(log), r.stdout[strings.LastIndexByte(strings.TrimSuffix(r.stdout, "\n"), '\n')+1:])
	// "* deny    rule no-d03              12:00:00.000 abcd1234 file          deny    read /w/x  cat[12]  no-d03: …"
	line := regexp.MustCompile(`^([ *]) (\S+)\s+(.{24}) \S+ \S+ file\s+\S+\s+(.*?)  ([^ \[]+)\[\d+\]`)
	var out []string
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(m[4], "/chaperone-trust-") { // each session's own
			continue
		}
		out = append(out, strings.Join([]string{m[1], m[2], strings.TrimSpace(m[3]), m[4], m[5]}, " | "))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func auditRecords(t *testing.T, path string) []telemetry.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []telemetry.Record
	if err := telemetry.ReadRecords(f, telemetry.Filter{Kinds: []event.Kind{telemetry.KindProcess}}, func(r telemetry.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := telemetry.ReadRecords(bytes.NewReader(mustRead(t, path)), telemetry.Filter{}, func(r telemetry.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSize(t *testing.T, path string) int {
	t.Helper()
	return len(mustRead(t, path))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oldShapeSize is the size of r's line as the log wrote it before process
// records: its process inline, argv clipped (as it is in process records),
// no process id; process records were not written.
func oldShapeSize(t *testing.T, r telemetry.Record) int {
	if r.Kind == telemetry.KindProcess {
		return 0
	}
	if r.Process != nil {
		p := *r.Process
		p.Cwd, p.StartTime = "", time.Time{}
		r.Process = &p
	}
	r.ProcessID, r.PID = 0, 0
	return len(mustJSON(t, r)) + 1
}
