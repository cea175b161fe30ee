package main

import (
	"errors"
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
