package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policy test replays a log's file records with the working tree and home
// its session_start says, as the session decided them.
func TestPolicyTestSessionPlaces(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(`default: allow
rules:
  - name: no-tree-writes
    on: file
    when: 'file.access == "write" && session.workdir != "" && file.path.startsWith(session.workdir + "/")'
    action: deny
  - name: no-home-reads
    on: file
    when: 'session.home != "" && file.path.startsWith(session.home + "/secret")'
    action: deny
`), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(log, []byte(`{"time":"2025-03-02T09:00:01Z","session":"s1","kind":"session_start","verdict":"allow","decided_by":"default","agent":"a","root_pid":1,"workdir":"/w","home":"/h"}
{"time":"2025-03-02T09:00:02Z","session":"s1","kind":"file","verdict":"allow","decided_by":"default","pid":2,"path":"/w/x","access":"write"}
{"time":"2025-03-02T09:00:03Z","session":"s1","kind":"file","verdict":"allow","decided_by":"default","pid":2,"path":"/h/secret","access":"read"}
{"time":"2025-03-02T09:00:04Z","session":"s2","kind":"file","verdict":"allow","decided_by":"default","pid":3,"path":"/w/x","access":"write"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, nil, "policy", "test", pol, log)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := []string{"* deny    rule no-tree-writes", "* deny    rule no-home-reads", "  allow   default"} // s2 has no session_start
	if len(lines) != len(want)+1 {
		t.Fatalf("policy test printed:\n%s", r.stdout)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want it to start with %q", i+1, lines[i], w)
		}
	}
}
