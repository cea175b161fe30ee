//go:build linux

package redirect

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
)

// The machine-wide tests attach at the cgroup root, so they reach every
// process of the machine: their servers are on 127.0.30.0/24, and their
// agent is named agentComm, which no other program is, rather than
// "claude", which other tests (the daemon's) run at the same time.
const (
	agentComm  = "chp30-claude"
	helperEnv  = "CHAPERONE_REDIRECT_TEST_HELPER"
	helperAddr = "CHAPERONE_REDIRECT_TEST_ADDR"
)

// TestMain lets the test binary play the agent: with helperEnv set it
// connects to helperAddr as its first action, prints what it saw and, with
// helperEnv=wait, waits for its standard input to close before it exits.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperReport is what the helper saw.
type helperReport struct {
	PID  int    `json:"pid"`
	Data string `json:"data"` // "x": the proxy stand-in, "u": the server
	Err  string `json:"err"`  // the connection's error: "refused", or another
}

func helperMain(mode string) int {
	if mode == "execveat" {
		// Become the waiting helper through execveat(2), the agent
		// variable in the new environment only.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, helperEnv+"=") {
				env = append(env, kv)
			}
		}
		env = append(env, helperEnv+"=wait", "CHAPERONE_AGENT=x")
		self, err := os.Executable()
		if err == nil {
			err = execveat(self, []string{self}, env)
		}
		fmt.Fprintln(os.Stderr, "execveat:", err)
		return 1
	}
	rep := helperReport{PID: os.Getpid()}
	c, err := net.DialTimeout("tcp4", os.Getenv(helperAddr), 10*time.Second)
	if err == nil {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 1)
		if _, err = io.ReadFull(c, b); err == nil {
			rep.Data = string(b)
		}
		c.Close()
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		rep.Err = "refused"
	case err != nil:
		rep.Err = err.Error()
	}
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	if mode == "wait" {
		io.Copy(io.Discard, os.Stdin)
	}
	return 0
}

// execveat is execve(2) through execveat(2), which the marker sees at
// another tracepoint; it returns only on failure.
func execveat(path string, argv, env []string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	a, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	e, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	atFDCWD := unix.AT_FDCWD
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&e[0])), 0, 0)
	return errno
}

// machineProxy plays the daemon's proxy on 127.0.30.1: it looks up each
// connection, sends the origin on origins, answers "x" and closes.
type machineProxy struct {
	ln      net.Listener
	origins chan originOrErr
	wg      sync.WaitGroup
}

type originOrErr struct {
	o   Origin
	err error
}

func newMachineProxy(tb testing.TB) *machineProxy {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.30.1:0")
	if err != nil {
		tb.Skipf("redirect: no 127.0.30.1: %v", err)
	}
	p := &machineProxy{ln: ln, origins: make(chan originOrErr, 1024)}
	tb.Cleanup(p.close)
	return p
}

func (p *machineProxy) addr() netip.AddrPort { return addrPort(p.ln.Addr()) }

// serve answers with lookup's origins; record: send them on origins.
func (p *machineProxy) serve(lookup func(netip.AddrPort) (Origin, error), record bool) {
	p.wg.Go(func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			o, err := lookup(addrPort(c.RemoteAddr()))
			if record {
				select {
				case p.origins <- originOrErr{o, err}:
				default:
				}
			}
			c.Write([]byte("x"))
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c)
			c.Close()
		}
	})
}

func (p *machineProxy) close() {
	p.ln.Close()
	p.wg.Wait()
}

// next returns the next connection's origin.
func (p *machineProxy) next(tb testing.TB) Origin {
	tb.Helper()
	select {
	case oe := <-p.origins:
		if oe.err != nil {
			tb.Fatalf("proxy lookup: %v", oe.err)
		}
		return oe.o
	case <-time.After(10 * time.Second):
		tb.Fatal("the proxy saw no connection")
	}
	return Origin{}
}

// machineServer is a real server on 127.0.30.2 that answers "u": reaching
// it means the connection was not redirected.
func machineServer(tb testing.TB) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.30.2:0")
	if err != nil {
		tb.Skipf("redirect: no 127.0.30.2: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("u"))
			c.Close()
		}
	})
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	return addrPort(ln.Addr())
}

// pinDir returns a new directory for the test's pins on bpffs, which it
// mounts when it is not mounted; the test's cleanup removes it.
func testPinDir(tb testing.TB) string {
	tb.Helper()
	if err := makePinDir("/sys/fs/bpf"); err != nil {
		tb.Skipf("redirect: no bpffs: %v", err)
	}
	// A test that crashed left its attachment, which would still mark
	// agentComm: remove those of runs that ended long ago.
	stale, _ := filepath.Glob("/sys/fs/bpf/chaperone-redirect-test-*")
	for _, d := range stale {
		if st, err := os.Stat(d); err == nil && time.Since(st.ModTime()) > 15*time.Minute {
			if err := RemoveMachine(d); err != nil {
				tb.Logf("remove stale test attachment: %v", err)
			}
		}
	}
	dir, err := os.MkdirTemp("/sys/fs/bpf", "chaperone-redirect-test-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// loadMachine loads a marked-only Redirector for proxy with the test's
// candidate and pinDir, and attaches it machine-wide; the test's cleanup
// closes it and removes the attachment.
func loadMachine(tb testing.TB, proxy netip.AddrPort, pinDir string) *Redirector {
	tb.Helper()
	r := loadMarked(tb, proxy, pinDir)
	if _, err := r.AttachMachine(pinDir); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.RemoveMachine(pinDir); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// machineTest skips the test without root or cgroup v2, and takes
// machineLock until the test ends.
func machineTest(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("redirect: loading BPF programs needs root")
	}
	if _, err := CgroupRoot(); err != nil {
		tb.Skipf("redirect: no cgroup v2 hierarchy: %v", err)
	}
	f, err := os.OpenFile(machineLock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		tb.Fatalf("lock %s: %v", machineLock, err)
	}
	tb.Cleanup(func() { f.Close() })
}

// machineLock is held by every test, of any package, that attaches at the
// cgroup root: two at once would each redirect the other's marked
// processes (CHAPERONE_AGENT= marks a process for both).
const machineLock = "/run/chaperone-machine-test.lock"

// loadMarked loads without attaching; the test's cleanup closes it.
func loadMarked(tb testing.TB, proxy netip.AddrPort, pinDir string) *Redirector {
	tb.Helper()
	r, err := Load(Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{agentComm}, PinDir: pinDir})
	if errors.Is(err, ErrNotPermitted) || errors.Is(err, ErrNotSupported) {
		tb.Skipf("redirect: this kernel or environment cannot load the programs: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// agentBinary copies the test binary to a file named name, so that it
// runs with that comm.
func agentBinary(tb testing.TB, name string) string {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	return path
}

// running is a helper process that connected and waits for its standard
// input to close.
type running struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	rep   helperReport
}

// startHelper runs bin as the helper connecting to dst, with env added,
// and returns once it has connected; the test's cleanup ends it.
func startHelper(tb testing.TB, bin string, dst netip.AddrPort, env ...string) *running {
	tb.Helper()
	cmd := exec.Command(bin)
	// env's variables come third and on: the marker looks at the first
	// 128.
	cmd.Env = append([]string{helperEnv + "=wait", helperAddr + "=" + dst.String()}, env...)
	cmd.Env = append(cmd.Env, os.Environ()...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	h := &running{cmd: cmd, stdin: stdin}
	tb.Cleanup(func() { h.stop() })
	// A helper that hangs is killed, which ends the read.
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("%s: %v", bin, err)
	}
	if err := json.Unmarshal([]byte(line), &h.rep); err != nil {
		tb.Fatalf("%s printed %q: %v", bin, line, err)
	}
	if h.rep.PID != cmd.Process.Pid {
		tb.Fatalf("helper reports pid %d, started as %d", h.rep.PID, cmd.Process.Pid)
	}
	return h
}

// stop ends the helper and waits for it.
func (h *running) stop() {
	if h.stdin != nil {
		h.stdin.Close()
		h.cmd.Wait()
		h.stdin = nil
	}
}

func TestMachineMarksAtExec(t *testing.T) {
	machineTest(t)
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, true)
	agent := agentBinary(t, agentComm)
	plain := agentBinary(t, "chp30-plain")

	for _, tt := range []struct {
		name     string
		bin      string
		env      []string
		redirect bool
	}{
		{"candidate", agent, nil, true},
		{"env", plain, []string{"CHAPERONE_AGENT=x"}, true},
		{"env at execveat", plain, []string{helperEnv + "=execveat"}, true},
		{"env 128th", plain, append(manyVars(128-3), "CHAPERONE_AGENT="), true},
		{"env 129th", plain, append(manyVars(129-3), "CHAPERONE_AGENT="), false},
		{"neither", plain, nil, false},
		{"similar variable", plain, []string{"CHAPERONE_AGENTS=x", "XCHAPERONE_AGENT=x"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := startHelper(t, tt.bin, server, tt.env...)
			marks, err := r.Marks()
			if err != nil {
				t.Fatal(err)
			}
			mark, marked := marks[uint32(h.rep.PID)]
			if !tt.redirect {
				if h.rep.Data != "u" || h.rep.Err != "" {
					t.Errorf("unmarked helper saw %+v, want the server's answer", h.rep)
				}
				if marked {
					t.Errorf("unmarked helper has mark %d", mark)
				}
				return
			}
			if h.rep.Data != "x" || h.rep.Err != "" {
				t.Fatalf("helper saw %+v, want the proxy's answer", h.rep)
			}
			if !marked || mark != MarkPending {
				t.Errorf("marks[%d] = %d, %v; want MarkPending", h.rep.PID, mark, marked)
			}
			o := proxy.next(t)
			want := Origin{Dst: server, PID: uint32(h.rep.PID), Mark: MarkPending}
			got := Origin{Dst: o.Dst, PID: o.PID, Mark: o.Mark}
			if diff := cmp.Diff(want, got, equateAddrs); diff != "" {
				t.Errorf("origin (-want +got):\n%s", diff)
			}
		})
	}
}

var equateAddrs = cmpopts.EquateComparable(netip.AddrPort{})

// TestMachineEveryStart starts an agent that connects at once (a bash
// script named agentComm: its comm is the script's name) 1,000 times, 8
// at a time, outside any wrapper: every one of its connections must reach
// the proxy, marked, and none the server.
func TestMachineEveryStart(t *testing.T) {
	machineTest(t)
	bash := lookPath(t, "bash")
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, true)
	script := filepath.Join(t.TempDir(), agentComm)
	body := fmt.Sprintf("#!%s\nexec 3<>/dev/tcp/%s/%d\nread -r -n1 x <&3\nprintf %%s \"$x\"\n", bash, server.Addr(), server.Port())
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	n := 1000
	if testing.Short() {
		n = 100
	}
	const parallel = 8
	answers := make(chan string, n)
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range parallel {
		wg.Go(func() {
			for range next {
				out, err := exec.Command(script).Output()
				if err != nil {
					answers <- "error: " + err.Error()
					continue
				}
				answers <- string(out)
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	close(answers)
	got := make(map[string]int)
	for a := range answers {
		got[a]++
	}
	if diff := cmp.Diff(map[string]int{"x": n}, got); diff != "" {
		t.Errorf("what %d starts saw (-want +got):\n%s", n, diff)
	}
	pending := 0
	for range n {
		o := proxy.next(t)
		if o.Mark == MarkPending && o.Dst == server && o.Comm == agentComm {
			pending++
		}
	}
	if pending != n {
		t.Errorf("%d of %d connections looked up marked pending, from %s to %s", pending, n, agentComm, server)
	}
}

func TestMachineSetCandidates(t *testing.T) {
	machineTest(t)
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, false)
	agent := agentBinary(t, agentComm)
	other := agentBinary(t, "chp30-other")
	for _, tt := range []struct {
		candidates   []string
		agent, other string // what each saw
	}{
		{[]string{"chp30-other"}, "u", "x"},
		{[]string{agentComm, "chp30-other"}, "x", "x"},
		{nil, "u", "u"},
	} {
		if err := r.SetCandidates(tt.candidates); err != nil {
			t.Fatal(err)
		}
		got := []string{startHelper(t, agent, server).rep.Data, startHelper(t, other, server).rep.Data}
		if diff := cmp.Diff([]string{tt.agent, tt.other}, got); diff != "" {
			t.Errorf("candidates %q: what %s and chp30-other saw (-want +got):\n%s", tt.candidates, agentComm, diff)
		}
	}
	if err := r.SetCandidates([]string{"ok", "bad/name"}); err == nil || !strings.Contains(err.Error(), `"bad/name"`) {
		t.Errorf("SetCandidates with a bad name: %v, want an error naming it", err)
	}
}

// manyVars returns n environment variables that are not the agent's.
func manyVars(n int) []string {
	vars := make([]string, n)
	for i := range vars {
		vars[i] = fmt.Sprintf("CHAPERONE_TEST_FILLER_%d=%d", i, i)
	}
	return vars
}

// shellParent is a shell that runs the helper as its child for each line
// it reads, and prints what the child saw.
type shellParent struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

func startShellParent(tb testing.TB, bin string, dst netip.AddrPort) *shellParent {
	tb.Helper()
	cmd := exec.Command("/bin/sh", "-c", `while read line; do "$0"; done`, bin)
	cmd.Env = append(os.Environ(), helperEnv+"=once", helperAddr+"="+dst.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sp := &shellParent{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	tb.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return sp
}

func (sp *shellParent) pid() uint32 { return uint32(sp.cmd.Process.Pid) }

// child runs one child and returns what it saw.
func (sp *shellParent) child(tb testing.TB) helperReport {
	tb.Helper()
	// A shell that hangs is killed, which ends the read.
	timer := time.AfterFunc(20*time.Second, func() { sp.cmd.Process.Kill() })
	defer timer.Stop()
	if _, err := io.WriteString(sp.stdin, "go\n"); err != nil {
		tb.Fatal(err)
	}
	line, err := sp.stdout.ReadString('\n')
	if err != nil {
		tb.Fatalf("shell's child: %v", err)
	}
	var rep helperReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		tb.Fatalf("shell's child printed %q: %v", line, err)
	}
	return rep
}

func TestMachineForkInherits(t *testing.T) {
	machineTest(t)
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, true)
	sp := startShellParent(t, agentBinary(t, "chp30-child"), server)

	if rep := sp.child(t); rep.Data != "u" {
		t.Fatalf("unmarked shell's child saw %+v, want the server", rep)
	}
	const slot = 7
	if err := r.Mark(sp.pid(), slot); err != nil {
		t.Fatal(err)
	}
	rep := sp.child(t)
	if rep.Data != "x" {
		t.Fatalf("marked shell's child saw %+v, want the proxy", rep)
	}
	o := proxy.next(t)
	want := Origin{Dst: server, PID: uint32(rep.PID), Mark: slot}
	if diff := cmp.Diff(want, Origin{Dst: o.Dst, PID: o.PID, Mark: o.Mark}, equateAddrs); diff != "" {
		t.Errorf("origin (-want +got):\n%s", diff)
	}
	if err := r.Unmark(sp.pid()); err != nil {
		t.Fatal(err)
	}
	if rep := sp.child(t); rep.Data != "u" {
		t.Errorf("unmarked shell's child saw %+v, want the server", rep)
	}
}

// TestMachineMarksFull: with the marks map full, a marked process's child
// runs unmarked, the limit doc.go states, and is counted.
func TestMachineMarksFull(t *testing.T) {
	machineTest(t)
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, false)
	sp := startShellParent(t, agentBinary(t, "chp30-child"), server)
	if err := r.Mark(sp.pid(), 5); err != nil {
		t.Fatal(err)
	}
	rep := sp.child(t)
	if rep.Data != "x" {
		t.Fatalf("marked shell's child saw %+v, want the proxy", rep)
	}
	// Wait for the child's entry to go: it would make room.
	var marks map[uint32]uint32
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if marks, err = r.Marks(); err != nil {
			t.Fatal(err)
		}
		if _, ok := marks[uint32(rep.PID)]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exited child %d still marked", rep.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Fill the map with ids above any pid_max (2^22), to the last entry.
	n := int(r.marker.marks.MaxEntries()) - len(marks)
	keys, values := make([]uint32, n), make([]uint32, n)
	for i := range keys {
		keys[i], values[i] = 1<<30+uint32(i), 2
	}
	if _, err := r.marker.marks.BatchUpdate(keys, values, nil); err != nil {
		t.Fatalf("fill marks: %v", err)
	}
	for i := uint32(n); ; i++ {
		if err := r.marker.marks.Put(1<<30+i, uint32(2)); err != nil {
			break
		}
		keys = append(keys, 1<<30+i)
	}
	before, err := r.MarksFailed()
	if err != nil {
		t.Fatal(err)
	}
	if rep := sp.child(t); rep.Data != "u" {
		t.Errorf("child with the marks full saw %+v, want the server (unmarked)", rep)
	}
	after, err := r.MarksFailed()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("MarksFailed %d, then %d: the failed mark is not counted", before, after)
	}
	if _, err := r.marker.marks.BatchDelete(keys, nil); err != nil {
		t.Fatal(err)
	}
	if rep := sp.child(t); rep.Data != "x" {
		t.Errorf("marked shell's child with room again saw %+v, want the proxy", rep)
	}
}

func TestMachineExitReported(t *testing.T) {
	machineTest(t)
	proxy := newMachineProxy(t)
	server := machineServer(t)
	r := loadMachine(t, proxy.addr(), testPinDir(t))
	proxy.serve(r.Lookup, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := r.MarkEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, agentBinary(t, agentComm), server)
	pid := uint32(h.rep.PID)
	h.stop()

	var got []MarkEvent
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case e := <-events:
			if e.PID == pid {
				e.UID, e.GID, e.CgroupID = 0, 0, 0
				got = append(got, e)
			}
		case <-deadline:
			t.Fatalf("events for %d: %+v, want its exec and exit", pid, got)
		}
	}
	want := []MarkEvent{
		{Kind: MarkExec, Reason: MarkCandidate, PID: pid, Mark: MarkPending, Comm: agentComm},
		{Kind: MarkExit, PID: pid, Mark: MarkPending, Comm: agentComm},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mark events (-want +got):\n%s", diff)
	}
	marks, err := r.Marks()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := marks[pid]; ok {
		t.Errorf("exited process still has mark %d", m)
	}
}

// TestMachineDaemonDeath: a daemon that dies leaves its marked processes'
// connections failing against its dead listener while the others connect;
// the next daemon takes over the marks and the attachment, and
// RemoveMachine leaves nothing behind.
func TestMachineDaemonDeath(t *testing.T) {
	machineTest(t)
	server := machineServer(t)
	pinDir := testPinDir(t)
	plain := agentBinary(t, "chp30-plain")

	proxy1 := newMachineProxy(t)
	r1 := loadMarked(t, proxy1.addr(), pinDir)
	if _, err := r1.AttachMachine(pinDir); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, leave the machine clean.
	t.Cleanup(func() { r1.RemoveMachine(pinDir) })
	proxy1.serve(r1.Lookup, false)
	sp := startShellParent(t, plain, server)
	const slot = 9
	if err := r1.Mark(sp.pid(), slot); err != nil {
		t.Fatal(err)
	}
	if rep := sp.child(t); rep.Data != "x" {
		t.Fatalf("marked child saw %+v, want the proxy", rep)
	}
	ids1 := rootProgramIDs(t, r1)

	// The daemon dies: its objects are closed, its listener too.
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	proxy1.close()
	if rep := sp.child(t); rep.Err != "refused" {
		t.Errorf("marked child after the daemon died saw %+v, want refused", rep)
	}
	if rep := startHelper(t, plain, server); rep.rep.Data != "u" {
		t.Errorf("unmarked process after the daemon died saw %+v, want the server", rep.rep)
	}

	// The next daemon.
	proxy2 := newMachineProxy(t)
	r2 := loadMarked(t, proxy2.addr(), pinDir)
	marks, err := r2.Marks()
	if err != nil {
		t.Fatal(err)
	}
	if marks[sp.pid()] != slot {
		t.Errorf("new daemon's marks[%d] = %d, want %d", sp.pid(), marks[sp.pid()], slot)
	}
	if _, err := r2.AttachMachine(pinDir); err != nil {
		t.Fatal(err)
	}
	proxy2.serve(r2.Lookup, true)
	rep := sp.child(t)
	if rep.Data != "x" {
		t.Fatalf("marked child under the new daemon saw %+v, want its proxy", rep)
	}
	if o := proxy2.next(t); o.Mark != slot || o.Dst != server {
		t.Errorf("origin %+v, want mark %d to %s", o, slot, server)
	}
	left := rootProgramIDs(t, nil)
	for id := range ids1 {
		if left[id] {
			t.Errorf("the first daemon's program %d is still attached at the root", id)
		}
	}

	// Removed: none of ours at the root, nothing pinned.
	ids2 := rootProgramIDs(t, r2)
	if err := r2.RemoveMachine(pinDir); err != nil {
		t.Fatal(err)
	}
	left = rootProgramIDs(t, nil)
	for id := range ids2 {
		if left[id] {
			t.Errorf("program %d still attached at the root after RemoveMachine", id)
		}
	}
	if _, err := os.Stat(pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after RemoveMachine: %v, want it gone", err)
	}
	if rep := sp.child(t); rep.Data != "u" {
		t.Errorf("child after RemoveMachine saw %+v, want the server", rep)
	}
}

// TestRemoveMachineAfterDeath: `daemon --remove` after the daemon died
// removes its attachment without loading anything.
func TestRemoveMachineAfterDeath(t *testing.T) {
	machineTest(t)
	server := machineServer(t)
	pinDir := testPinDir(t)
	proxy := newMachineProxy(t)
	r := loadMarked(t, proxy.addr(), pinDir)
	if _, err := r.AttachMachine(pinDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveMachine(pinDir) })
	ids := rootProgramIDs(t, r)
	// The daemon dies: its objects are closed, its listener too.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	proxy.close()
	agent := agentBinary(t, agentComm)
	if rep := startHelper(t, agent, server); rep.rep.Err != "refused" {
		t.Fatalf("agent after the daemon died saw %+v, want refused", rep.rep)
	}
	if err := RemoveMachine(pinDir); err != nil {
		t.Fatal(err)
	}
	left := rootProgramIDs(t, nil)
	for id := range ids {
		if left[id] {
			t.Errorf("program %d still attached at the root after RemoveMachine", id)
		}
	}
	if _, err := os.Stat(pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after RemoveMachine: %v, want it gone", err)
	}
	if rep := startHelper(t, agent, server); rep.rep.Data != "u" {
		t.Errorf("agent after RemoveMachine saw %+v, want the server", rep.rep)
	}
}

// rootProgramIDs returns the ids of r's cgroup programs, or with r nil,
// of every program attached at the cgroup root.
func rootProgramIDs(tb testing.TB, r *Redirector) map[ebpf.ProgramID]bool {
	tb.Helper()
	ids := make(map[ebpf.ProgramID]bool)
	if r != nil {
		for _, h := range r.hooks() {
			info, err := h.prog.Info()
			if err != nil {
				tb.Fatal(err)
			}
			id, _ := info.ID()
			ids[id] = true
		}
		return ids
	}
	rootPath, err := CgroupRoot()
	if err != nil {
		tb.Fatal(err)
	}
	root, err := os.Open(rootPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer root.Close()
	for _, h := range hooksOf(&redirectPrograms{}) {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(root.Fd()), Attach: h.typ})
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range res.Programs {
			ids[p.ID] = true
		}
	}
	return ids
}

func TestMarkedConfig(t *testing.T) {
	proxy := netip.MustParseAddrPort("127.0.30.1:1")
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"candidates", Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{"claude", "node", "123456789012345"}}, ""},
		{"empty", Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{""}}, `candidate "": empty`},
		{"too long", Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{"1234567890123456"}}, `candidate "1234567890123456": 16 bytes`},
		{"slash", Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{"bin/claude"}}, `candidate "bin/claude": contains a slash`},
		{"nul", Config{ProxyV4: proxy, MarkedOnly: true, Candidates: []string{"a\x00b"}}, `candidate "a\x00b": contains NUL`},
		{"candidates without marked", Config{ProxyV4: proxy, Candidates: []string{"claude"}}, "candidates need MarkedOnly"},
		{"pin dir without marked", Config{ProxyV4: proxy, PinDir: "/sys/fs/bpf/x"}, "pin directory needs MarkedOnly"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.cfg.kernel()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if k.MarkedOnly != 1 {
					t.Errorf("MarkedOnly = %d, want 1", k.MarkedOnly)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFormatField(t *testing.T) {
	const fork = `name: sched_process_fork
ID: 366
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:__data_loc char[] parent_comm;	offset:8;	size:4;	signed:0;
	field:pid_t parent_pid;	offset:12;	size:4;	signed:1;
	field:__data_loc char[] child_comm;	offset:16;	size:4;	signed:0;
	field:pid_t child_pid;	offset:20;	size:4;	signed:1;
`
	const oldExit = `	field:char comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t pid;	offset:24;	size:4;	signed:1;
	field:bool group_dead;	offset:32;	size:1;	signed:0;
`
	for _, tt := range []struct {
		format, field string
		off, size     int
		ok            bool
	}{
		{fork, "child_pid", 20, 4, true},
		{fork, "parent_comm", 8, 4, true},
		{fork, "child", 0, 0, false},
		{oldExit, "comm", 8, 16, true},
		{oldExit, "group_dead", 32, 1, true},
		{"field:int x;\tsize:4;", "x", -1, 4, false},
		{"", "x", 0, 0, false},
	} {
		off, size, ok := formatField([]byte(tt.format), tt.field)
		if ok != tt.ok || (ok && (off != tt.off || size != tt.size)) {
			t.Errorf("formatField(%q) = %d, %d, %v; want %d, %d, %v", tt.field, off, size, ok, tt.off, tt.size, tt.ok)
		}
	}
}

func FuzzFormatField(f *testing.F) {
	f.Add([]byte("\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n"), "child_pid")
	f.Add([]byte("field:char comm[16];\toffset:8;\tsize:16;"), "comm")
	f.Fuzz(func(t *testing.T, format []byte, field string) {
		off, size, ok := formatField(format, field)
		if ok && (off < 0 || size < 0) {
			t.Errorf("ok with offset %d, size %d", off, size)
		}
		if ok && !strings.Contains(string(format), "offset:"+strconv.Itoa(off)) {
			t.Errorf("offset %d not in the format", off)
		}
	})
}

// BenchmarkMachineConnect measures loopback connect()+close() of an
// unmarked process without the machine hooks and with them, and of a
// marked one (sent to the proxy, which looks it up). The proxy looks up
// every connection in each case, so the server side costs the same.
func BenchmarkMachineConnect(b *testing.B) {
	machineTest(b)
	proxy := newMachineProxy(b)
	pinDir := testPinDir(b)
	r := loadMarked(b, proxy.addr(), pinDir)
	proxy.serve(r.Lookup, false)
	closed := netip.AddrPortFrom(netip.MustParseAddr("127.0.30.2"), closedPort30(b))
	self := uint32(os.Getpid())
	dial := func(b *testing.B, dst netip.AddrPort) {
		d := net.Dialer{}
		for b.Loop() {
			c, err := d.Dial("tcp4", dst.String())
			if err != nil {
				b.Fatal(err)
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}
	// Warm up, so that the first case does not pay for what the loading
	// left (garbage, cold caches).
	for range 2000 {
		c, err := net.Dial("tcp4", proxy.addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	b.Run("unmarked/without", func(b *testing.B) { dial(b, proxy.addr()) })
	if _, err := r.AttachMachine(pinDir); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := r.RemoveMachine(pinDir); err != nil {
			b.Error(err)
		}
	}()
	// The kernel's BPF statistics time every program of the machine while
	// they are on: the wall-clock cases run without them, and the /bpf
	// cases report the programs' own time.
	b.Run("unmarked/machine", func(b *testing.B) { dial(b, proxy.addr()) })
	b.Run("unmarked/machine/bpf", func(b *testing.B) {
		defer bpfCost(b, r)()
		dial(b, proxy.addr())
	})
	marked := func(stats bool) func(b *testing.B) {
		return func(b *testing.B) {
			if err := r.Mark(self, MarkPending); err != nil {
				b.Fatal(err)
			}
			defer r.Unmark(self)
			if stats {
				defer bpfCost(b, r)()
			}
			dial(b, closed)
		}
	}
	b.Run("marked/machine", marked(false))
	b.Run("marked/machine/bpf", marked(true))
}

// bpfCost turns the kernel's BPF statistics on and returns a func that
// reports, as bpf-ns/op, the time r's programs ran since, per iteration.
// They run for every process of the machine, so the figure is an upper
// bound of the benchmark's own.
func bpfCost(b *testing.B, r *Redirector) func() {
	var progs []*ebpf.Program
	for _, h := range r.hooks() {
		progs = append(progs, h.prog)
	}
	for _, tp := range r.marker.tracepoints() {
		progs = append(progs, tp.prog)
	}
	total := func() time.Duration {
		var d time.Duration
		for _, p := range progs {
			st, err := p.Stats()
			if err != nil {
				b.Fatal(err)
			}
			d += st.Runtime
		}
		return d
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no BPF statistics: %v", err)
		return func() {}
	}
	before := total()
	return func() {
		ran := total() - before
		stats.Close()
		b.ReportMetric(float64(ran.Nanoseconds())/float64(b.N), "bpf-ns/op")
	}
}

// BenchmarkMachineExec measures fork+exec+wait of /bin/true by an
// unmarked process without the marker and with it attached, and by a
// marked one (whose child inherits the mark and is reported at exec and
// exit).
func BenchmarkMachineExec(b *testing.B) {
	machineTest(b)
	proxy := newMachineProxy(b)
	pinDir := testPinDir(b)
	r := loadMarked(b, proxy.addr(), pinDir)
	self := uint32(os.Getpid())
	run := func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Warm up, as BenchmarkMachineConnect does.
	for range 50 {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("unmarked/without", run)
	if _, err := r.AttachMachine(pinDir); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := r.RemoveMachine(pinDir); err != nil {
			b.Error(err)
		}
	}()
	// Without the kernel's BPF statistics, then with them (/bpf).
	b.Run("unmarked/machine", run)
	b.Run("unmarked/machine/bpf", func(b *testing.B) {
		defer bpfCost(b, r)()
		run(b)
	})
	marked := func(stats bool) func(b *testing.B) {
		return func(b *testing.B) {
			if err := r.Mark(self, MarkPending); err != nil {
				b.Fatal(err)
			}
			defer r.Unmark(self)
			if stats {
				defer bpfCost(b, r)()
			}
			run(b)
		}
	}
	b.Run("marked/machine", marked(false))
	b.Run("marked/machine/bpf", marked(true))
}

// BenchmarkMachineOpen measures open()+close() of a file by an unmarked
// process without and with the machine hooks: the marker's syscall
// tracepoints put every system call of the machine on the kernel's
// tracing path.
func BenchmarkMachineOpen(b *testing.B) {
	machineTest(b)
	proxy := newMachineProxy(b)
	pinDir := testPinDir(b)
	r := loadMarked(b, proxy.addr(), pinDir)
	path := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B) {
		for b.Loop() {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	}
	for range 100000 {
		fd, _ := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
	}
	b.Run("unmarked/without", run)
	if _, err := r.AttachMachine(pinDir); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := r.RemoveMachine(pinDir); err != nil {
			b.Error(err)
		}
	}()
	b.Run("unmarked/machine", run)
}

// closedPort30 returns a port on which nothing listens on 127.0.30.2.
func closedPort30(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.30.2:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := addrPort(ln.Addr()).Port()
	ln.Close()
	return p
}
