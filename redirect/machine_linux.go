//go:build linux

package redirect

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// marker is what Config.MarkedOnly loads besides the redirection
// programs.
type marker struct {
	objs   markerObjects
	marks  *ebpf.Map       // the shared marks map (the objects hold clones)
	pinDir string          // Config.PinDir
	events *ringbuf.Reader // once MarkEvents is called
}

func (m *marker) close() error {
	var errs []error
	if m.events != nil {
		errs = append(errs, m.events.Close())
	}
	errs = append(errs, m.objs.Close(), m.marks.Close())
	return errors.Join(errs...)
}

// The pins under a pin directory.
const (
	pinMarks      = "marks"
	pinCgroup     = "cg_" // + hook name: a program attached at the root
	pinTracepoint = "tp_" // + tracepoint name: a link
)

// loadMarker loads the marker and the marks map (the one pinned in
// cfg.PinDir, if any), for Load.
func (r *Redirector) loadMarker(cfg Config) error {
	spec, err := loadMarker()
	if err != nil {
		return fmt.Errorf("redirect: load marker: %w", err)
	}
	childOff, deadOff, err := schedOffsets()
	if err != nil {
		return err
	}
	if err := spec.Variables["fork_child_pid_off"].Set(childOff); err != nil {
		return fmt.Errorf("redirect: load marker: %w", err)
	}
	if err := spec.Variables["exit_group_dead_off"].Set(deadOff); err != nil {
		return fmt.Errorf("redirect: load marker: %w", err)
	}
	marks, err := openMarks(spec.Maps[pinMarks], cfg.PinDir)
	if err != nil {
		return err
	}
	m := &marker{marks: marks, pinDir: cfg.PinDir}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{pinMarks: marks}}
	if err := spec.LoadAndAssign(&m.objs, opts); err != nil {
		marks.Close()
		return loadError("load marker", err)
	}
	r.marker = m
	if err := r.SetCandidates(cfg.Candidates); err != nil {
		m.close()
		r.marker = nil
		return fmt.Errorf("redirect: load marker: %w", err)
	}
	return nil
}

// SetCandidates replaces the command names that the marker marks at exec
// (Config.Candidates), for a configuration reload; processes already
// marked keep their marks. On error (a name is invalid: nothing changed;
// or the kernel refused an update) the set may be partly updated: call it
// again.
func (r *Redirector) SetCandidates(names []string) error {
	if r.marker == nil {
		return errors.New("redirect: set candidates: loaded without MarkedOnly")
	}
	want := make(map[[commLen]byte]bool, len(names))
	for _, name := range names {
		if err := validComm(name); err != nil {
			return fmt.Errorf("redirect: set candidates: %q: %w", name, err)
		}
		var key [commLen]byte
		copy(key[:], name)
		want[key] = true
	}
	m := r.marker.objs.Candidates
	var (
		key  [commLen]byte
		val  uint8
		drop [][commLen]byte
	)
	it := m.Iterate()
	for it.Next(&key, &val) {
		if !want[key] {
			drop = append(drop, key)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("redirect: set candidates: %w", err)
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("redirect: set candidates: %q: %w", commString8(k), err)
		}
	}
	for _, k := range drop {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("redirect: set candidates: remove %q: %w", commString8(k), err)
		}
	}
	return nil
}

func commString8(b [commLen]byte) string {
	n := bytes.IndexByte(b[:], 0)
	if n < 0 {
		n = len(b)
	}
	return string(b[:n])
}

// openMarks returns the marks map pinned in pinDir, if there is one, else
// a new one.
func openMarks(spec *ebpf.MapSpec, pinDir string) (*ebpf.Map, error) {
	if pinDir != "" {
		path := filepath.Join(pinDir, pinMarks)
		m, err := ebpf.LoadPinnedMap(path, nil)
		switch {
		case err == nil:
			if err := spec.Compatible(m); err != nil {
				m.Close()
				return nil, fmt.Errorf("redirect: pinned marks map %s: %w", path, err)
			}
			return m, nil
		case !errors.Is(err, os.ErrNotExist):
			return nil, loadError("open pinned marks map", err)
		}
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, loadError("create marks map", err)
	}
	return m, nil
}

// tracepoint is one of the marker's.
type tracepoint struct {
	group, name string
	prog        *ebpf.Program
}

// tracepoints in attach order: a process is marked at exec only once its
// children inherit the mark and its exit removes it.
func (m *marker) tracepoints() []tracepoint {
	p := &m.objs.markerPrograms
	return []tracepoint{
		{"sched", "sched_process_exit", p.ProcessExit},
		{"sched", "sched_process_fork", p.ProcessFork},
		{"syscalls", "sys_enter_execve", p.EnterExecve},
		{"syscalls", "sys_enter_execveat", p.EnterExecveat},
		{"sched", "sched_process_exec", p.ProcessExec},
	}
}

// AttachMachine attaches the programs machine-wide: the redirection
// programs at the cgroup v2 root (BPF_PROG_ATTACH with
// BPF_F_ALLOW_MULTI, so `chaperone run`'s sessions and other programs'
// hooks keep working), where, loaded with Config.MarkedOnly, they
// redirect marked processes only, and the marker's tracepoints. r must
// have been loaded with MarkedOnly.
//
// It fails closed when the daemon dies: the root programs stay attached
// after this process ends, and the marks map and the tracepoint links are
// pinned in pinDir (created on bpffs; bpffs is mounted at /sys/fs/bpf
// when it is not), so marked processes and their new children stay marked
// and their connections keep going to the dead listeners, and fail.
//
// A previous daemon's attachment with the same pinDir is taken over: each
// root program is replaced in place (BPF_F_REPLACE: no moment without
// one), each tracepoint link is attached anew before the old one is
// detached. Load with Config.PinDir set to pinDir keeps the surviving
// marks; a pinDir that holds another marks map than r's is refused.
//
// Closing the returned Closer lets go of this process's handles only; the
// attachment stays until RemoveMachine. On error, what was attached stays
// (and is pinned): call AttachMachine again, or RemoveMachine.
func (r *Redirector) AttachMachine(pinDir string) (io.Closer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, errors.New("redirect: attach machine: redirector closed")
	case r.marker == nil:
		return nil, errors.New("redirect: attach machine: loaded without MarkedOnly")
	case r.machine != nil:
		return nil, errors.New("redirect: attach machine: already attached")
	case pinDir == "":
		return nil, errors.New("redirect: attach machine: no pin directory")
	case r.marker.pinDir != "" && filepath.Clean(r.marker.pinDir) != filepath.Clean(pinDir):
		return nil, fmt.Errorf("redirect: attach machine: pin directory %s, loaded with %s", pinDir, r.marker.pinDir)
	}
	if err := makePinDir(pinDir); err != nil {
		return nil, err
	}
	if err := r.pinMarks(pinDir); err != nil {
		return nil, err
	}
	rootPath, err := CgroupRoot()
	if err != nil {
		return nil, fmt.Errorf("redirect: attach machine: %w", err)
	}
	root, err := os.Open(rootPath)
	if err != nil {
		return nil, fmt.Errorf("redirect: attach machine: open cgroup root: %w", err)
	}
	m := &machine{r: r, root: root, pinDir: pinDir}
	for _, h := range r.hooks() {
		if h.typ == ebpf.AttachCGroupInetEgress {
			// It would run for every packet of the machine; the daemon's
			// resolver finds a query's socket without it.
			continue
		}
		if err := attachRoot(root, h, filepath.Join(pinDir, pinCgroup+h.name)); err != nil {
			return nil, errors.Join(err, m.releaseLocked())
		}
	}
	for _, tp := range r.marker.tracepoints() {
		l, err := attachTracepoint(tp, filepath.Join(pinDir, pinTracepoint+tp.name))
		if err != nil {
			return nil, errors.Join(err, m.releaseLocked())
		}
		m.links = append(m.links, l)
	}
	r.machine = m
	return m, nil
}

// pinMarks pins r's marks map in pinDir, unless it is pinned there
// already.
func (r *Redirector) pinMarks(pinDir string) error {
	path := filepath.Join(pinDir, pinMarks)
	pinned, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if err := r.marker.marks.Pin(path); err != nil {
			return fmt.Errorf("redirect: attach machine: pin marks map: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("redirect: attach machine: open pinned marks map: %w", err)
	}
	defer pinned.Close()
	same, err := sameMap(pinned, r.marker.marks)
	if err != nil {
		return fmt.Errorf("redirect: attach machine: %w", err)
	}
	if !same {
		return fmt.Errorf("redirect: attach machine: %s holds another marks map: load with Config.PinDir %s to keep its marks", path, pinDir)
	}
	return nil
}

func sameMap(a, b *ebpf.Map) (bool, error) {
	ai, err := a.Info()
	if err != nil {
		return false, err
	}
	bi, err := b.Info()
	if err != nil {
		return false, err
	}
	aid, aok := ai.ID()
	bid, bok := bi.ID()
	if !aok || !bok {
		return false, errors.New("map ids not available")
	}
	return aid == bid, nil
}

// attachRoot attaches h at the cgroup root in place of the program pinned
// at pin (a previous daemon's), if any and still attached, and pins it
// there.
func attachRoot(root *os.File, h hook, pin string) error {
	old, err := ebpf.LoadPinnedProgram(pin, nil)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("redirect: attach machine: open pinned %s: %w", h.name, err)
	}
	opts := link.RawAttachProgramOptions{
		Target:  int(root.Fd()),
		Program: h.prog,
		Attach:  h.typ,
		Flags:   unix.BPF_F_ALLOW_MULTI,
	}
	replaced := false
	if old != nil {
		defer old.Close()
		ropts := opts
		ropts.Anchor = link.ReplaceProgram(old)
		replaced = link.RawAttachProgram(ropts) == nil
	}
	if !replaced {
		// No previous program, or it is no longer attached.
		if err := link.RawAttachProgram(opts); err != nil {
			return loadError("attach machine "+h.name, err)
		}
		if old != nil {
			if err := detachRoot(root, h.typ, old); err != nil {
				return fmt.Errorf("redirect: attach machine: detach previous %s: %w", h.name, err)
			}
		}
	}
	if old != nil {
		if err := old.Unpin(); err != nil {
			return fmt.Errorf("redirect: attach machine: unpin previous %s: %w", h.name, err)
		}
	}
	if err := h.prog.Pin(pin); err != nil {
		return fmt.Errorf("redirect: attach machine: pin %s: %w", h.name, err)
	}
	return nil
}

// detachRoot detaches p from the root; one that is not attached is no
// error.
func detachRoot(root *os.File, typ ebpf.AttachType, p *ebpf.Program) error {
	err := link.RawDetachProgram(link.RawDetachProgramOptions{
		Target:  int(root.Fd()),
		Program: p,
		Attach:  typ,
	})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// attachTracepoint attaches tp, then detaches the link pinned at pin (a
// previous daemon's), if any, and pins the new one there: perf event
// links cannot be updated in place, so both run for a moment, which marks
// nothing twice (the marks map is the same).
func attachTracepoint(tp tracepoint, pin string) (link.Link, error) {
	l, err := link.Tracepoint(tp.group, tp.name, tp.prog, nil)
	if err != nil {
		return nil, loadError("attach tracepoint "+tp.name, err)
	}
	if err := unpinLink(pin); err != nil {
		l.Close()
		return nil, fmt.Errorf("redirect: attach machine: previous %s: %w", tp.name, err)
	}
	if err := l.Pin(pin); err != nil {
		l.Close()
		return nil, fmt.Errorf("redirect: attach machine: pin %s: %w", tp.name, err)
	}
	return l, nil
}

// unpinLink unpins the link pinned at pin, which detaches it unless
// another process holds it.
func unpinLink(pin string) error {
	old, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return errors.Join(old.Unpin(), old.Close())
}

// machine is this process's hold on a machine-wide attachment.
type machine struct {
	r      *Redirector
	root   *os.File
	pinDir string
	links  []link.Link
}

// Close lets go of this process's handles; the attachment stays.
func (m *machine) Close() error {
	m.r.mu.Lock()
	defer m.r.mu.Unlock()
	return m.releaseLocked()
}

func (m *machine) releaseLocked() error {
	if m.root == nil {
		return nil
	}
	var errs []error
	for _, l := range m.links {
		errs = append(errs, l.Close()) // pinned: stays attached
	}
	errs = append(errs, m.root.Close())
	m.root, m.links = nil, nil
	if m.r.machine == m {
		m.r.machine = nil
	}
	return errors.Join(errs...)
}

// RemoveMachine releases r's hold on the machine-wide attachment with
// pinDir, if it has one, and removes it (see the function RemoveMachine).
func (r *Redirector) RemoveMachine(pinDir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.machine != nil && filepath.Clean(r.machine.pinDir) == filepath.Clean(pinDir) {
		if err := r.machine.releaseLocked(); err != nil {
			return fmt.Errorf("redirect: remove machine: %w", err)
		}
	}
	return RemoveMachine(pinDir)
}

// RemoveMachine detaches everything that AttachMachine attached with
// pinDir, by this process or another, living or dead: the marker's
// tracepoints, then the programs at the cgroup root. It unpins the marks
// map (the marks are lost) and removes pinDir. A pinDir that does not
// exist is no error. It needs no Redirector: `daemon --remove` calls it
// without loading anything.
func RemoveMachine(pinDir string) error {
	if _, err := os.Stat(pinDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	// Stop marking first, then redirecting.
	for _, tp := range markerTracepointNames {
		if err := unpinLink(filepath.Join(pinDir, pinTracepoint+tp)); err != nil {
			errs = append(errs, fmt.Errorf("redirect: remove machine: %s: %w", tp, err))
		}
	}
	rootPath, err := CgroupRoot()
	if err != nil {
		return fmt.Errorf("redirect: remove machine: %w", err)
	}
	root, err := os.Open(rootPath)
	if err != nil {
		return fmt.Errorf("redirect: remove machine: open cgroup root: %w", err)
	}
	defer root.Close()
	hooks := hooksOf(&redirectPrograms{})
	for i := len(hooks) - 1; i >= 0; i-- {
		h := hooks[i]
		pin := filepath.Join(pinDir, pinCgroup+h.name)
		p, err := ebpf.LoadPinnedProgram(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("redirect: remove machine: open pinned %s: %w", h.name, err))
			continue
		}
		if err := detachRoot(root, h.typ, p); err != nil {
			errs = append(errs, fmt.Errorf("redirect: remove machine: detach %s: %w", h.name, err))
		} else if err := p.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("redirect: remove machine: unpin %s: %w", h.name, err))
		}
		p.Close()
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The marks map, and anything else left there.
	if err := os.RemoveAll(pinDir); err != nil {
		return fmt.Errorf("redirect: remove machine: %w", err)
	}
	return nil
}

// markerTracepointNames are the tracepoints of marker.tracepoints, for
// RemoveMachine, which must not need the programs.
var markerTracepointNames = []string{"sched_process_exec", "sys_enter_execveat", "sys_enter_execve", "sched_process_fork", "sched_process_exit"}

// makePinDir creates pinDir on bpffs, mounting bpffs at /sys/fs/bpf first
// when it is not mounted there.
func makePinDir(pinDir string) error {
	const bpffs = "/sys/fs/bpf"
	if ok, _ := isFS(bpffs, unix.BPF_FS_MAGIC); !ok {
		if err := os.MkdirAll(bpffs, 0o755); err != nil {
			return fmt.Errorf("redirect: mount bpffs: %w", err)
		}
		if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("redirect: mount bpffs at %s: %w", bpffs, err)
		}
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return fmt.Errorf("redirect: create pin directory: %w", err)
	}
	ok, err := isFS(pinDir, unix.BPF_FS_MAGIC)
	if err != nil {
		return fmt.Errorf("redirect: pin directory: %w", err)
	}
	if !ok {
		return fmt.Errorf("redirect: pin directory %s is not on a BPF file system (bpffs)", pinDir)
	}
	return nil
}

func isFS(path string, magic int64) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	return int64(st.Type) == magic, nil
}

// schedOffsets reads, from the tracepoints' format files, the offsets the
// marker cannot fix: sched_process_fork's child_pid and
// sched_process_exit's group_dead (0 when the kernel has none). tracefs
// is mounted at /sys/kernel/tracing when it is not mounted; cilium/ebpf
// needs it to attach tracepoints too.
func schedOffsets() (childPID, groupDead uint32, err error) {
	dir, err := tracefsDir()
	if err != nil {
		return 0, 0, err
	}
	read := func(event string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, "events", "sched", event, "format"))
		if err != nil {
			return nil, fmt.Errorf("redirect: tracepoint %s: %w: %w", event, ErrNotSupported, err)
		}
		return b, nil
	}
	fork, err := read("sched_process_fork")
	if err != nil {
		return 0, 0, err
	}
	off, size, ok := formatField(fork, "child_pid")
	if !ok || size != 4 {
		return 0, 0, fmt.Errorf("redirect: tracepoint sched_process_fork: no 4-byte child_pid field: %w", ErrNotSupported)
	}
	childPID = uint32(off)
	exit, err := read("sched_process_exit")
	if err != nil {
		return 0, 0, err
	}
	if off, size, ok := formatField(exit, "group_dead"); ok && size == 1 && off > 0 {
		groupDead = uint32(off)
	}
	return childPID, groupDead, nil
}

// tracefsDir returns where tracefs is mounted, mounting it at
// /sys/kernel/tracing when it is nowhere.
func tracefsDir() (string, error) {
	dirs := []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}
	for _, d := range dirs {
		if ok, _ := isFS(d, unix.TRACEFS_MAGIC); ok {
			return d, nil
		}
	}
	if err := unix.Mount("tracefs", dirs[0], "tracefs", 0, ""); err != nil {
		return "", fmt.Errorf("redirect: mount tracefs at %s: %w", dirs[0], err)
	}
	return dirs[0], nil
}

// formatField finds field in a tracepoint's format file, whose lines read
// "field:pid_t child_pid;	offset:20;	size:4;	signed:1;".
func formatField(format []byte, field string) (offset, size int, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(format))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, found := strings.CutPrefix(line, "field:")
		if !found {
			continue
		}
		parts := strings.Split(rest, ";")
		decl := strings.Fields(parts[0])
		if len(decl) == 0 {
			continue
		}
		name := decl[len(decl)-1]
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i]
		}
		if name != field {
			continue
		}
		offset, size = -1, -1
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), ":")
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				continue
			}
			switch k {
			case "offset":
				offset = n
			case "size":
				size = n
			}
		}
		return offset, size, offset >= 0 && size >= 0
	}
	return 0, 0, false
}

// Mark gives process pid (a tgid, as the initial pid namespace numbers it:
// /proc's as the daemon sees it) the mark mark, MarkPending or a session
// slot (2 and up): its connections are redirected from its next call on,
// with Origin.Mark set, and its children forked from now on inherit it.
// r must have been loaded with Config.MarkedOnly.
func (r *Redirector) Mark(pid, mark uint32) error {
	if mark == 0 {
		return fmt.Errorf("redirect: mark %d: mark 0 is no mark: use Unmark", pid)
	}
	m, err := r.marks()
	if err != nil {
		return fmt.Errorf("redirect: mark %d: %w", pid, err)
	}
	if err := m.Put(pid, mark); err != nil {
		return fmt.Errorf("redirect: mark %d: %w", pid, err)
	}
	return nil
}

// Unmark removes process pid's mark: its new connections go out directly,
// and its children forked from now on are not marked (those forked before
// keep theirs). Unmarking an unmarked process is no error.
func (r *Redirector) Unmark(pid uint32) error {
	m, err := r.marks()
	if err != nil {
		return fmt.Errorf("redirect: unmark %d: %w", pid, err)
	}
	if err := m.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("redirect: unmark %d: %w", pid, err)
	}
	return nil
}

// Marks returns every entry of the marks map: processes (tgids), and the
// threads created by marked processes (their tids), with their marks.
func (r *Redirector) Marks() (map[uint32]uint32, error) {
	m, err := r.marks()
	if err != nil {
		return nil, fmt.Errorf("redirect: marks: %w", err)
	}
	out := make(map[uint32]uint32)
	var pid, mark uint32
	it := m.Iterate()
	for it.Next(&pid, &mark) {
		out[pid] = mark
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("redirect: marks: %w", err)
	}
	return out, nil
}

// MarksFailed counts the marks the marker could not store (the marks map
// was full) since Load: each is a process that runs unmarked.
func (r *Redirector) MarksFailed() (uint64, error) {
	if r.marker == nil {
		return 0, errors.New("redirect: marks failed: loaded without MarkedOnly")
	}
	n, err := sumPerCPU(r.marker.objs.MarksFailed)
	if err != nil {
		return 0, fmt.Errorf("redirect: marks failed: %w", err)
	}
	return n, nil
}

// MarkEventsDropped counts the mark events that were not reported because
// the ring buffer was full, since Load.
func (r *Redirector) MarkEventsDropped() (uint64, error) {
	if r.marker == nil {
		return 0, errors.New("redirect: dropped mark events: loaded without MarkedOnly")
	}
	n, err := sumPerCPU(r.marker.objs.MarkEventsDropped)
	if err != nil {
		return 0, fmt.Errorf("redirect: dropped mark events: %w", err)
	}
	return n, nil
}

// MarkEvents reports the execs and ends of marked processes, machine-wide,
// once AttachMachine attached the marker. The delivery rules are
// Refusals': when ctx is done the reports already made are delivered,
// then the channel is closed; Close closes it at once; a reader that falls
// 256 KiB (some 4,600 reports) behind loses new ones, which are counted
// (MarkEventsDropped); only one reader may exist.
func (r *Redirector) MarkEvents(ctx context.Context) (<-chan MarkEvent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, errors.New("redirect: mark events: redirector closed")
	case r.marker == nil:
		return nil, errors.New("redirect: mark events: loaded without MarkedOnly")
	case r.marker.events != nil:
		return nil, errors.New("redirect: mark events: already being read")
	}
	rd, err := ringbuf.NewReader(r.marker.objs.MarkEvents)
	if err != nil {
		return nil, fmt.Errorf("redirect: mark events: %w", err)
	}
	r.marker.events = rd
	return deliver(r, ctx, rd, (*markerMarkEvent).event), nil
}

func (v *markerMarkEvent) event() MarkEvent {
	return MarkEvent{
		Kind:     MarkEventKind(v.Kind),
		Reason:   MarkReason(v.Reason),
		PID:      v.Pid,
		Mark:     v.Mark,
		UID:      v.Uid,
		GID:      v.Gid,
		CgroupID: v.CgroupId,
		Comm:     commString(v.Comm),
	}
}

func (r *Redirector) marks() (*ebpf.Map, error) {
	if r.marker == nil {
		return nil, errors.New("loaded without MarkedOnly")
	}
	return r.marker.marks, nil
}
