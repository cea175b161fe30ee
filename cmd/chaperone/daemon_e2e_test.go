//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/certs"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// The daemon's tests use the loopback addresses 127.0.34.0/24: the world's
// upstreams on .2 (allowed) and .3 (denied), echo servers from .4 on.

// daemonConfig makes the daemon find one agent only, claude by its command
// name: what other tests run at the same time (node, python) is no
// candidate of its.
const daemonConfig = `builtin_agents: false
agents:
  - name: claude
    commands: [claude]
`

// daemonProc is a daemon the test started.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	socket string
	pinDir string
}

// startDaemon starts `chaperone daemon` for w: the world's upstream CA
// trusted, its exfil host denied, its state and audit log w's. The hooks
// are removed when the test ends.
func (w *world) startDaemon(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	lockMachine(t)
	cfg := filepath.Join(w.dir, "daemon.yaml")
	if err := os.WriteFile(cfg, []byte(daemonConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{
		socket: filepath.Join(w.dir, "daemon.sock"),
		pinDir: "/sys/fs/bpf/chaperone-e2e-" + strconv.Itoa(os.Getpid()),
	}
	t.Cleanup(func() {
		d.stop(t)
		if out, err := exec.Command(binary, "daemon", "remove", "--pin-dir", d.pinDir).CombinedOutput(); err != nil {
			t.Errorf("daemon remove: %v: %s", err, out)
		}
	})
	d.start(t, w, cfg, extra)
	return d
}

func (d *daemonProc) start(t *testing.T, w *world, cfg string, extra []string) {
	t.Helper()
	args := append([]string{"daemon", "--config", cfg, "--daemon-socket", d.socket, "--pin-dir", d.pinDir,
		"--dns-upstream", fakeDNSUpstreamAt(t, "127.0.34.9").String(),
		"--upstream-ca", w.caFile, "--deny-host", w.exfil.Addr.Addr().String(), "--log", w.log}, extra...)
	d.cmd = exec.Command(binary, args...)
	d.cmd.Env = baseEnv(w.dir)
	d.stderr = &syncBuffer{}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.done) }()
	waitUntil(t, 30*time.Second, "the daemon to be ready", func() bool {
		select {
		case <-d.done:
			t.Fatalf("the daemon exited: %s", d.stderr)
		default:
		}
		return strings.Contains(d.stderr.String(), "daemon ready")
	})
}

// stop stops the daemon (SIGTERM) and waits for it.
func (d *daemonProc) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("the daemon did not stop on SIGTERM: %s", d.stderr)
	}
}

// kill kills the daemon as a crash would.
func (d *daemonProc) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// lockMachine holds, until the test ends, the lock that every test of any
// package takes before it attaches kernel hooks at the cgroup root (the
// redirect package's too): two at once would each redirect the other's
// marked processes.
func lockMachine(tb testing.TB) {
	tb.Helper()
	f, err := os.OpenFile("/run/chaperone-machine-test.lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// echoServer answers each connection's first line with "pong <line>" and
// counts the connections it accepted.
type echoServer struct {
	addr     string
	accepted atomic.Int64
}

func startEcho(t *testing.T, ip string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e := &echoServer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					io.WriteString(c, "pong "+line)
				}
			}()
		}
	}()
	return e
}

// installAgent puts the fake agent in a directory of its own under name,
// and returns its path.
func installAgent(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(fakeAgent)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// sessionsOf returns the session_start records of agent, by root pid.
func (w *world) sessionsOf(agent string) map[int]telemetry.Record {
	out := map[int]telemetry.Record{}
	for _, r := range w.records() {
		if r.Kind == event.KindSessionStart && r.Agent == agent {
			out[r.RootPID] = r
		}
	}
	return out
}

// waitSession waits until the audit log has the session whose agent's
// first process is pid.
func (w *world) waitSession(t *testing.T, agent string, pid int) telemetry.Record {
	t.Helper()
	var rec telemetry.Record
	waitUntil(t, 10*time.Second, fmt.Sprintf("the session of %s (pid %d)", agent, pid), func() bool {
		r, ok := w.sessionsOf(agent)[pid]
		rec = r
		return ok
	})
	return rec
}

// waitRecord waits until the audit log has a record that match accepts.
func (w *world) waitRecord(t *testing.T, what string, match func(telemetry.Record) bool) telemetry.Record {
	t.Helper()
	var found telemetry.Record
	waitUntil(t, 10*time.Second, what, func() bool {
		for _, r := range w.records() {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// An agent started with no wrapper becomes a session; its children's
// connections are its session's, decided by its policy; a process that is
// no agent is left alone; run joins the daemon; attach adopts a process.
func TestDaemon(t *testing.T) {
	needTransparent(t)
	need(t, "curl", "sh")
	w := newWorldAt(t, t.TempDir(), "127.0.34.2", "127.0.34.3")
	d := w.startDaemon(t, "--resolve", "named.daemon.test:127.0.34.2")
	// The daemon's CA, outside its state, which is not the agents' to read.
	daemonCA := filepath.Join(w.dir, "daemon-ca.pem")
	if b, err := os.ReadFile(certs.CertFile(filepath.Join(w.dir, "state"))); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(daemonCA, b, 0o644); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(int(w.api.Addr.Port()))
	exfilPort := strconv.Itoa(int(w.exfil.Addr.Port()))
	claude := installAgent(t, "claude")

	t.Run("agent found at its exec", func(t *testing.T) {
		script := `curl -fsS --cacert "$1" --resolve "api.e2e.test:$2:127.0.34.2" "https://api.e2e.test:$2/found" && echo
curl -fsS --cacert "$1" --resolve "exfil.e2e.test:$3:127.0.34.3" "https://exfil.e2e.test:$3/leak" && echo LEAKED`
		cmd := exec.Command(claude, "exec", "sh", "-c", script, "sh", daemonCA, port, exfilPort)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "hello from api.e2e.test") || strings.Contains(string(out), "LEAKED") {
			t.Fatalf("the agent's curls printed %q", out)
		}
		s := w.waitSession(t, "claude", cmd.Process.Pid)
		if s.Mode != "daemon" || s.ParentPID != os.Getpid() {
			t.Errorf("session_start mode %q parent %d, want daemon and the test (%d)", s.Mode, s.ParentPID, os.Getpid())
		}
		// Its working tree and its user's home, which tell routine reads.
		wd, _ := os.Getwd()
		if u, err := user.Current(); err != nil || s.Workdir != wd || s.Home != u.HomeDir {
			t.Errorf("session_start workdir %q home %q, want %q and the user's home (%v)", s.Workdir, s.Home, wd, err)
		}
		r := w.waitRecord(t, "the agent's request", func(r telemetry.Record) bool {
			return r.Session == s.Session && r.Kind == event.KindHTTP && strings.HasSuffix(r.URL, "/found")
		})
		if l := r.Process.Lineage; len(l) < 2 || l[0] != "claude" || l[len(l)-1] != "curl" {
			t.Errorf("the request's lineage %q, want claude ... curl", l)
		}
		w.waitRecord(t, "the agent's denied connection", func(r telemetry.Record) bool {
			return r.Session == s.Session && r.Verdict == event.Deny && strings.HasPrefix(r.Dst, "127.0.34.3:")
		})
		if n := len(w.exfil.Requests()); n != 0 {
			t.Errorf("the denied host received %d requests", n)
		}
	})

	t.Run("the agent's DNS is its session's", func(t *testing.T) {
		need(t, "python3")
		// glibc's resolver: a connected UDP socket, whose port the kernel
		// picks after connect4.
		cmd := exec.Command(claude, "exec", "python3", "-c", `import socket; print(socket.gethostbyname("named.daemon.test"))`)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "127.0.34.2" {
			t.Fatalf("the agent's lookup: %v: %s", err, out)
		}
		s := w.waitSession(t, "claude", cmd.Process.Pid)
		r := w.waitRecord(t, "the agent's query", func(r telemetry.Record) bool {
			return r.Session == s.Session && r.Kind == event.KindDNS && r.Name == "named.daemon.test"
		})
		if r.Process == nil || !strings.HasPrefix(filepath.Base(r.Process.Exe), "python3") {
			t.Errorf("the query's process: %+v", r.Process)
		}
	})

	t.Run("unrelated process untouched", func(t *testing.T) {
		out, err := exec.Command("curl", "-sS", "--cacert", w.caFile, "--resolve", "api.e2e.test:"+port+":127.0.34.2", "https://api.e2e.test:"+port+"/direct").CombinedOutput()
		if err != nil {
			t.Fatalf("curl outside any session (trusting the upstream's CA only): %v: %s", err, out)
		}
		for _, r := range w.records() {
			if strings.HasSuffix(r.URL, "/direct") {
				t.Errorf("an unrelated process's request was recorded: %+v", r)
			}
		}
	})

	t.Run("run joins the daemon", func(t *testing.T) {
		r := w.chaperone(nil, "run", "--daemon-socket", d.socket, "--", "curl", "-sS", "--resolve", "api.e2e.test:"+port+":127.0.34.2", "https://api.e2e.test:"+port+"/joined")
		mustSucceed(t, r)
		if !strings.Contains(r.stderr, "of the daemon") || strings.Contains(r.stderr, "ended, exit status") {
			t.Errorf("run did not join the daemon: %s", r.stderr)
		}
		rec := w.waitRecord(t, "the joined session's request in the daemon's audit log", func(r telemetry.Record) bool {
			return r.Kind == event.KindHTTP && strings.HasSuffix(r.URL, "/joined")
		})
		if s := w.sessionsOf("curl"); len(s) != 1 {
			t.Errorf("sessions of curl: %v", s)
		} else {
			for _, start := range s {
				if start.Session != rec.Session {
					t.Errorf("the request is in session %s, the joined session is %s", rec.Session, start.Session)
				}
			}
		}
	})

	t.Run("a run session's agent is the run session's", func(t *testing.T) {
		echo := startEcho(t, "127.0.34.7")
		// No daemon at this socket: run starts a transparent session of
		// its own, whose agent the daemon marks as a candidate too; run
		// from within a daemon's agent, the run session's processes
		// inherit that agent's mark too.
		run := []string{binary, "run", "--mode", "transparent", "--daemon-socket", filepath.Join(w.dir, "none.sock"),
			"--log", filepath.Join(w.dir, "run.jsonl"), "--", claude, "connect", echo.addr}
		for _, argv := range [][]string{run, append([]string{claude, "exec"}, run...)} {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = baseEnv(t.TempDir()) // a state of its own: the daemon's is not its agents' to read
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "pong ping") {
				t.Fatalf("%s: the run session's agent: %v\n%s", argv[0], err, out)
			}
		}
		// The run session's own proxy, a process of the daemon's agent in
		// the second case, is the daemon's to mediate; its agent is not.
		for _, rec := range w.records() {
			if rec.Kind == event.KindConnect && rec.Dst == echo.addr && (rec.Process == nil || rec.Process.Exe != binary) {
				t.Errorf("the daemon mediated a run session's agent's connection: %+v", rec.Process)
			}
		}
	})

	t.Run("attach adopts a running process", func(t *testing.T) {
		echo := startEcho(t, "127.0.34.4")
		cmd := exec.Command(fakeAgent, "wait", echo.addr)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "ready" {
			t.Fatalf("the process said %q", lines.Text())
		}
		r := w.chaperone(nil, "attach", "--daemon-socket", d.socket, "--agent", "worker", strconv.Itoa(cmd.Process.Pid))
		mustSucceed(t, r)
		io.WriteString(stdin, "go\n")
		if !lines.Scan() || lines.Text() != "pong ping" {
			t.Fatalf("the adopted process's connection: %q", lines.Text())
		}
		stdin.Close()
		s := w.waitSession(t, "worker", cmd.Process.Pid)
		w.waitRecord(t, "the adopted process's connect record", func(r telemetry.Record) bool {
			return r.Session == s.Session && r.Kind == event.KindConnect && r.Dst == echo.addr
		})
	})

	t.Run("Chaperone's state is not the agent's to read", func(t *testing.T) {
		key := certs.KeyFile(filepath.Join(w.dir, "state"))
		cmd := exec.Command(claude, "exec", "cat", key)
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), "PRIVATE KEY") {
			t.Fatalf("the agent read the CA key: %v", err)
		}
		if !strings.Contains(string(out), "Operation not permitted") {
			t.Errorf("the agent's cat: %s", out)
		}
		s := w.waitSession(t, "claude", cmd.Process.Pid)
		w.waitRecord(t, "the refused open", func(r telemetry.Record) bool {
			return r.Session == s.Session && r.Kind == event.KindFile && r.Path == key && r.Verdict == event.Deny
		})
		if b, err := os.ReadFile(key); err != nil || !strings.Contains(string(b), "PRIVATE KEY") {
			t.Errorf("an unrelated process (the test) cannot read the key: %v", err)
		}
	})

	t.Run("reload: a bad configuration keeps the last good one", func(t *testing.T) {
		cfg := filepath.Join(w.dir, "daemon.yaml")
		reloads := func() []telemetry.Record {
			var out []telemetry.Record
			for _, r := range w.records() {
				if r.Kind == event.KindPolicyReload {
					out = append(out, r)
				}
			}
			return out
		}
		if err := os.WriteFile(cfg, []byte("builtin_agents: false\nagents:\n  - name: Bad Name\n    commands: [worker2]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d.cmd.Process.Signal(syscall.SIGHUP)
		waitUntil(t, 10*time.Second, "the failed reload's record", func() bool { return len(reloads()) == 1 })
		if r := reloads()[0]; r.Verdict != event.Deny || !strings.Contains(r.Reason, "agents[0].name") {
			t.Errorf("the failed reload's record: %s %q", r.Verdict, r.Reason)
		}
		worker := installAgent(t, "worker2")
		if out, err := exec.Command(worker, "exec", "true").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if err := os.WriteFile(cfg, []byte(daemonConfig+"  - name: reloaded\n    commands: [worker2]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d.cmd.Process.Signal(syscall.SIGHUP)
		waitUntil(t, 10*time.Second, "the reload's record", func() bool { return len(reloads()) == 2 })
		if r := reloads()[1]; r.Verdict != event.Allow {
			t.Errorf("the reload's record: %s %q", r.Verdict, r.Reason)
		}
		cmd := exec.Command(worker, "exec", "true")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		w.waitSession(t, "reloaded", cmd.Process.Pid)
		if n := len(w.sessionsOf("reloaded")); n != 1 {
			t.Errorf("%d sessions of the reloaded agent, want 1 (the run after the good reload)", n)
		}
	})

	t.Run("a malformed control message gets a clear error", func(t *testing.T) {
		c, err := net.Dial("unix", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, `{"op":"adopt","pid":"one"}`+"\n")
		reply, _ := io.ReadAll(c)
		if !strings.Contains(string(reply), "pid") || !strings.Contains(string(reply), "error") {
			t.Errorf("reply %s, want an error naming pid", reply)
		}
	})
}

// The daemon dies: its agents' connections fail, other processes' do not;
// a new daemon takes the surviving agent up again.
func TestDaemonFailsClosed(t *testing.T) {
	needTransparent(t)
	w := newWorldAt(t, t.TempDir(), "127.0.34.2", "127.0.34.3")
	d := w.startDaemon(t)
	echo := startEcho(t, "127.0.34.5")
	claude := installAgent(t, "claude")
	cmd := exec.Command(claude, "wait", echo.addr, echo.addr, echo.addr, echo.addr) // one more than asked: it stays
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	ask := func() string {
		io.WriteString(stdin, "go\n")
		if !lines.Scan() {
			t.Fatal("the agent is gone")
		}
		return lines.Text()
	}
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the agent said %q", lines.Text())
	}
	if got := ask(); got != "pong ping" {
		t.Fatalf("with the daemon: %q", got)
	}
	w.waitSession(t, "claude", cmd.Process.Pid)

	d.kill()
	if got := ask(); !strings.HasPrefix(got, "error:") {
		t.Errorf("the agent connected with the daemon dead: %q", got)
	}
	out, err := exec.Command(fakeAgent, "connect", echo.addr).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "pong ping" {
		t.Errorf("an unrelated process with the daemon dead: %v: %s", err, out)
	}

	d.start(t, w, filepath.Join(w.dir, "daemon.yaml"), nil)
	if got := ask(); got != "pong ping" {
		t.Errorf("after the restart: %q", got)
	}
	r := w.chaperone(nil, "daemon", "sessions", "--daemon-socket", d.socket)
	mustSucceed(t, r)
	if !strings.Contains(r.stdout, " "+strconv.Itoa(cmd.Process.Pid)+" ") {
		t.Errorf("daemon sessions after the restart does not list the agent (pid %d):\n%s\ndaemon: %s\n%+v", cmd.Process.Pid, r.stdout, d.stderr, w.sessionsOf("claude"))
	}
}

// An agent that connects first thing, started 1,000 times with no
// wrapper, is mediated 1,000 times: its destination is denied, and the
// server never sees a connection.
func TestDaemonThousandStarts(t *testing.T) {
	needTransparent(t)
	if testing.Short() {
		t.Skip("1,000 starts")
	}
	w := newWorldAt(t, t.TempDir(), "127.0.34.2", "127.0.34.3")
	echo := startEcho(t, "127.0.34.6")
	w.startDaemon(t, "--deny-host", "127.0.34.6")
	claude := installAgent(t, "claude")
	const starts, workers = 1000, 4
	var leaked atomic.Int64
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				out, _ := exec.Command(claude, "connect", echo.addr).Output()
				if strings.Contains(string(out), "pong") {
					leaked.Add(1)
				}
			}
		}()
	}
	for i := range starts {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if n := leaked.Load(); n != 0 || echo.accepted.Load() != 0 {
		t.Errorf("%d of %d starts reached the denied server (it accepted %d connections)", n, starts, echo.accepted.Load())
	}
	var denied int
	waitUntil(t, 30*time.Second, "every start's denial in the audit log", func() bool {
		denied = 0
		for _, r := range w.records() {
			if r.Kind == event.KindConnect && r.Verdict == event.Deny && r.Dst == echo.addr {
				denied++
			}
		}
		return denied >= starts
	})
	if sessions := len(w.sessionsOf("claude")); sessions != starts {
		t.Errorf("%d sessions of claude, want %d", sessions, starts)
	}
}

// BenchmarkDaemonIdleRSS reports the resident memory of a daemon on its
// built-in defaults (every agent Chaperone knows) once it is idle: the
// target is at most 40 MB.
func BenchmarkDaemonIdleRSS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the daemon needs root")
	}
	lockMachine(b)
	dir := b.TempDir()
	pinDir := "/sys/fs/bpf/chaperone-bench-" + strconv.Itoa(os.Getpid())
	defer exec.Command(binary, "daemon", "remove", "--pin-dir", pinDir).Run()
	var rss, anon float64
	for b.Loop() {
		cmd := exec.Command(binary, "daemon", "--daemon-socket", filepath.Join(dir, "daemon.sock"), "--pin-dir", pinDir,
			"--dns-upstream", "127.0.34.9:53", "--log", filepath.Join(dir, "audit.jsonl"))
		cmd.Env = baseEnv(dir)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(stderr.String(), "daemon ready") {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				b.Fatalf("the daemon is not ready: %s", stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Idle: two readings a quarter of a second apart within 1%.
		var last float64
		for range 40 {
			r, a := residentKB(b, cmd.Process.Pid)
			if last > 0 && r > 0 && (r-last)/last < 0.01 && (last-r)/last < 0.01 {
				rss, anon = r, a
				break
			}
			last = r
			time.Sleep(250 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	b.ReportMetric(rss/1024, "rss-MB")
	b.ReportMetric(anon/1024, "anon-MB")
}

// residentKB reads a process's resident and anonymous memory, in kB.
func residentKB(b *testing.B, pid int) (rss, anon float64) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "RssAnon:":
			anon = v
		}
	}
	return rss, anon
}

// An exec the policy denies is killed: the daemon sees an agent's execs
// only after the kernel ran them.
func TestDaemonExecDenied(t *testing.T) {
	needTransparent(t)
	need(t, "sh", "sleep")
	w := newWorldAt(t, t.TempDir(), "127.0.34.2", "127.0.34.3")
	policy := filepath.Join(w.dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`rules:
  - name: no-forbidden
    on: exec
    when: exec.argv.exists(a, a == "forbidden")
    action: deny
    reason: the argument is forbidden
default: allow
`), 0o644); err != nil {
		t.Fatal(err)
	}
	w.startDaemon(t, "--policy", policy)
	claude := installAgent(t, "claude")
	cmd := exec.Command(claude, "exec", "sh", "-c", "sleep 5; echo survived", "forbidden")
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "survived") {
		t.Fatalf("the denied program ran to its end: %s", out)
	}
	s := w.waitSession(t, "claude", cmd.Process.Pid)
	r := w.waitRecord(t, "the denied exec", func(r telemetry.Record) bool {
		return r.Session == s.Session && r.Kind == event.KindExec && r.Verdict == event.Deny
	})
	if r.Rule != "no-forbidden" || !strings.Contains(r.Reason, "killed") {
		t.Errorf("the exec's record: rule %q reason %q", r.Rule, r.Reason)
	}
	// Allowed execs are recorded too.
	cmd = exec.Command(claude, "exec", "sh", "-c", "sleep 0.3", "allowed")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s = w.waitSession(t, "claude", cmd.Process.Pid)
	w.waitRecord(t, "the agent's allowed exec", func(r telemetry.Record) bool {
		return r.Session == s.Session && r.Kind == event.KindExec && r.Verdict == event.Allow && slices.Contains(r.Process.Argv, "allowed")
	})
}
