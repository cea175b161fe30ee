package session

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

func TestProcessCache(t *testing.T) {
	calls := 0
	exe := "/usr/bin/cat"
	now := time.Unix(1000, 0)
	c := newProcessCache(func(pid int) (*event.Process, error) {
		calls++
		return &event.Process{PID: pid, Exe: exe}, nil
	}, time.Second)
	c.now = func() time.Time { return now }
	c.exeOf = func(int) (string, error) { return exe, nil }

	for range 100 {
		if p, err := c.process(7); err != nil || p.Exe != "/usr/bin/cat" {
			t.Fatalf("process = %+v, %v", p, err)
		}
	}
	if calls != 1 {
		t.Errorf("%d descriptions for 100 lookups of one process, want 1", calls)
	}
	exe = "/usr/bin/python3" // the pid exec'd another program
	if p, _ := c.process(7); p.Exe != exe || calls != 2 {
		t.Errorf("after an exec: %+v (%d calls)", p, calls)
	}
	now = now.Add(2 * time.Second)
	c.process(7)
	if calls != 3 {
		t.Errorf("an old entry was used: %d calls", calls)
	}
	c.exeOf = func(int) (string, error) { return "", errors.New("gone") }
	c.process(7)
	if calls != 4 {
		t.Errorf("a pid whose exe cannot be read was served from the cache: %d calls", calls)
	}
}

func TestModeDeniesWrite(t *testing.T) {
	agent := ids{uid: 1000, gids: []int{1000, 27}}
	for _, tt := range []struct {
		name     string
		uid, gid int
		mode     uint32
		want     bool
	}{
		{"root's library", 0, 0, 0o644, true},
		{"own file", 1000, 1000, 0o644, false},
		{"own read-only file", 1000, 1000, 0o444, true},
		{"group-writable, in the group", 0, 27, 0o664, false},
		{"group-writable, not in the group", 0, 50, 0o664, true},
		{"world-writable", 0, 0, 0o666, false},
		{"owner bits win over others'", 1000, 0, 0o466, true},
	} {
		if got := modeDeniesWrite(tt.uid, tt.gid, tt.mode, agent); got != tt.want {
			t.Errorf("%s: modeDeniesWrite = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWriteDenied(t *testing.T) {
	if ok, _ := CanMediateFiles(); !ok {
		t.Skip("file mediation is not built here")
	}
	dir := t.TempDir()
	ro, rw := filepath.Join(dir, "ro"), filepath.Join(dir, "rw")
	os.WriteFile(ro, []byte("x"), 0o444)
	os.WriteFile(rw, []byte("x"), 0o644)
	me := ids{uid: os.Geteuid(), gids: []int{os.Getegid()}}
	if !writeDenied(ro, me) || writeDenied(rw, me) {
		t.Errorf("writeDenied: read-only %v, writable %v", writeDenied(ro, me), writeDenied(rw, me))
	}
	if writeDenied(dir, me) || writeDenied(filepath.Join(dir, "missing"), me) {
		t.Error("a directory or a missing file counted as known")
	}
}
