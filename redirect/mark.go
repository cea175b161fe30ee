package redirect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MarkPending is the mark of a process that the marker found at exec (a
// candidate comm, or CHAPERONE_AGENT= in its environment) and that user
// space has not classified yet. Marks from 2 up are session slots that
// user space gives with Mark; 0 is no mark.
const MarkPending uint32 = 1

// MarkEventKind says what a marked process did.
type MarkEventKind uint8

// The kinds; the values are the marker's MARK_EVENT_* constants.
const (
	// MarkExec: a process exec'd and is marked: it was already (its mark
	// is kept), or it was just marked MarkPending.
	MarkExec MarkEventKind = 1
	// MarkExit: a marked process ended (its last thread exited); its
	// entry is gone.
	MarkExit MarkEventKind = 2
)

func (k MarkEventKind) String() string {
	switch k {
	case MarkExec:
		return "exec"
	case MarkExit:
		return "exit"
	}
	return "mark_event(" + strconv.Itoa(int(k)) + ")"
}

// MarkReason says why an exec'd process is marked.
type MarkReason uint8

// The reasons; the values are the marker's MARK_REASON_* constants.
const (
	// MarkKept: it was marked before the exec (by Mark, or inherited at
	// fork) and keeps that mark.
	MarkKept MarkReason = 1
	// MarkCandidate: its new comm is one of Config.Candidates.
	MarkCandidate MarkReason = 2
	// MarkEnv: CHAPERONE_AGENT= was in the exec's environment.
	MarkEnv MarkReason = 3
)

func (r MarkReason) String() string {
	switch r {
	case 0:
		return "none"
	case MarkKept:
		return "kept"
	case MarkCandidate:
		return "candidate"
	case MarkEnv:
		return "env"
	}
	return "mark_reason(" + strconv.Itoa(int(r)) + ")"
}

// MarkEvent is an exec or the end of a marked process.
type MarkEvent struct {
	Kind MarkEventKind
	// Reason is why an exec'd process is marked; zero for MarkExit.
	Reason MarkReason
	// PID is the process (the kernel's tgid).
	PID uint32
	// Mark is its mark at the time.
	Mark uint32
	// UID and GID are the real ids of the thread that exec'd or exited
	// last.
	UID, GID uint32
	// CgroupID is the id of its cgroup v2.
	CgroupID uint64
	// Comm is its command name (at most 15 bytes): the new one at exec.
	Comm string
}

// validateMarking checks the fields of c that belong to MarkedOnly.
func (c Config) validateMarking() error {
	if !c.MarkedOnly {
		if len(c.Candidates) > 0 {
			return errors.New("redirect: config: candidates need MarkedOnly")
		}
		if c.PinDir != "" {
			return errors.New("redirect: config: a pin directory needs MarkedOnly")
		}
		if c.SkipCgroup != "" {
			return errors.New("redirect: config: a cgroup to skip needs MarkedOnly")
		}
		return nil
	}
	for _, name := range c.Candidates {
		if err := validComm(name); err != nil {
			return fmt.Errorf("redirect: config: candidate %q: %w", name, err)
		}
	}
	return nil
}

// validComm checks a command name as the kernel keeps it: 1 to 15 bytes
// (TASK_COMM_LEN less the NUL), no NUL, no slash (exec takes the name
// after the last one).
func validComm(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > commLen-1:
		return fmt.Errorf("%d bytes, a command name has at most %d", len(name), commLen-1)
	case strings.ContainsRune(name, 0):
		return errors.New("contains NUL")
	case strings.ContainsRune(name, '/'):
		return errors.New("contains a slash: a command name is the file's base name")
	}
	return nil
}

// commLen is the kernel's TASK_COMM_LEN.
const commLen = 16
