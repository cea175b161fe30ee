package attribution

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

// ExeDigest and LineageNames against the real /proc.

// startSleep starts bin (a sleep) for 30 seconds and stops it at cleanup.
func startSleep(t testing.TB, bin string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func lookSleep(t testing.TB) string {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	bin, err := filepath.EvalSymlinks(sleep)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestRealExeDigestChild(t *testing.T) {
	realTable(t)
	bin := lookSleep(t)
	content, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	c := &countingFS{FS: OSProc()}
	tbl := NewTable(c)
	a, b := startSleep(t, bin), startSleep(t, bin)
	for i, cmd := range []*exec.Cmd{a, b} {
		got, err := tbl.ExeDigest(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if want := sha256Digest(content); got != want {
			t.Errorf("ExeDigest(sleep %d) = %q, want %q", i, got, want)
		}
	}
	// The second sleep runs the same file: opened, not read.
	if opens, read := c.counts(); opens != 2 || read != int64(len(content)) {
		t.Errorf("two digests of %s opened %d times and read %d bytes, want 2 and %d", bin, opens, read, len(content))
	}
}

// TestRealExeDigestReplaced checks that the digest is of the file the
// process runs, not of whatever is at its path now.
func TestRealExeDigestReplaced(t *testing.T) {
	tbl := realTable(t)
	orig, err := os.ReadFile(lookSleep(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sleep")
	writeFile(t, bin, orig)
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run a program from %s (noexec?): %v", filepath.Dir(bin), err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// Replace the path with another file, as an upgrade or an attacker would.
	writeFile(t, bin+".new", []byte("#!/bin/sh\necho not sleep\n"))
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	got, err := tbl.ExeDigest(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256Digest(orig); got != want {
		t.Errorf("ExeDigest after the path was replaced = %q, want the running file's %q", got, want)
	}
}

func TestRealLineageNames(t *testing.T) {
	tbl := realTable(t)
	shPath, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	sh, err := filepath.EvalSymlinks(shPath) // often dash or bash
	if err != nil {
		t.Fatal(err)
	}
	sleep := lookSleep(t)
	// "; :" keeps sh waiting for sleep: a lone command in -c is often
	// exec'd in place of the shell.
	cmd := exec.Command(shPath, "-c", "sleep 5; :")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	root := cmd.Process.Pid

	var child *event.Process
	for deadline := time.Now().Add(5 * time.Second); child == nil; {
		for _, pid := range tbl.Descendants(root) {
			if pid == root {
				continue
			}
			if p, err := tbl.Process(pid); err == nil && p.Exe == sleep {
				child = p
			}
		}
		if child == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no sleep below sh (pid %d) after 5s: %v", root, tbl.Descendants(root))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := []string{filepath.Base(sh), filepath.Base(sleep)}
	if diff := cmp.Diff(want, tbl.LineageNames(child, root)); diff != "" {
		t.Errorf("LineageNames(sleep %d, root %d) (-want +got):\n%s", child.PID, root, diff)
	}
	// Without the root, the walk goes on above sh up to this test.
	all := tbl.LineageNames(child, 0)
	self, err := tbl.Process(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(child.Lineage)+1 || !slices.Equal(all[len(all)-2:], want) || all[len(all)-3] != filepath.Base(mustExe(t, tbl, self.PPID)) {
		t.Errorf("LineageNames(sleep, 0) = %q, want ..., this test's exe, %q", all, want)
	}
}

func mustExe(t *testing.T, tbl *Table, pid int) string {
	t.Helper()
	p, err := tbl.Process(pid)
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return p.Exe
}
