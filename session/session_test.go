package session

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/redirect"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// testConfig is a session's configuration in dir: its own state, audit
// log and a listener on this package's loopback addresses. The session is
// transparent when the test runs as root on Linux.
func testConfig(t *testing.T, dir string) Config {
	t.Helper()
	c := config.Default(nil, os.Geteuid())
	c.StateDir = filepath.Join(dir, "state")
	c.Log = filepath.Join(dir, "audit.jsonl")
	c.Listen = "127.0.33.1:0"
	c.Mode = config.ModeProxy
	if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		c.Mode = config.ModeTransparent
	}
	c.DNSUpstreams = []string{"127.0.33.1:53"} // never asked: nothing resolves in these tests
	c.MediateFiles = false
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return Config{Settings: c, Agent: "test", KillOnExit: true}
}

// testEnv is the environment the sessions of these tests read: the
// debug listener on, nothing else.
func testEnv(k string) string {
	if k == debugAddrEnv {
		return "127.0.33.2:0"
	}
	return ""
}

// TestCloseAfterPartialStart fails Start at each of its steps in turn
// and checks that Close closes everything the steps before opened: no
// descriptor (listeners, the audit log, BPF programs and links, the
// cgroup, the control socket), goroutine, temporary directory, cgroup or
// socket file is left, and the event bus is closed.
func TestCloseAfterPartialStart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd: Linux only")
	}
	tmp := shortTempDir(t)
	t.Setenv("TMPDIR", tmp) // the trust bundle's directory is made here
	var names []string
	for _, st := range (&Session{}).steps() {
		names = append(names, st.name)
	}
	for _, failAt := range append(names, "") {
		name := failAt
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			dir := shortTempDir(t)
			fds, goroutines := openFDs(), runtime.NumGoroutine()

			s, err := New(testConfig(t, dir), Deps{Getenv: testEnv, Stderr: &bytes.Buffer{}})
			if err != nil {
				t.Fatal(err)
			}
			sub := s.Subscribe("test", event.SubscribeOptions{Queue: 16})
			injected := errors.New("injected")
			ran := []string{}
			s.beforeStep = func(step string) error {
				if step == failAt {
					return injected
				}
				ran = append(ran, step)
				return nil
			}
			err = s.Start(context.Background())
			switch {
			case failAt == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case failAt != "" && !errors.Is(err, injected):
				t.Fatalf("Start = %v, want the error injected at %s", err, failAt)
			}
			want := names
			if failAt != "" {
				want = names[:indexOf(names, failAt)]
			}
			if diff := cmp.Diff(want, ran); diff != "" {
				t.Errorf("steps run (-want +got):\n%s", diff)
			}
			proxyAddr := s.ProxyAddr()
			cgroup := ""
			if ts := s.ts.Load(); ts != nil {
				cgroup = ts.cg.Path
			}

			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close again: %v", err)
			}

			if _, ok := <-sub.Events(); ok {
				t.Error("the bus still delivers after Close")
			}
			if proxyAddr.IsValid() {
				if c, err := net.DialTimeout("tcp", proxyAddr.String(), time.Second); err == nil {
					c.Close()
					t.Errorf("the proxy's listener %s still accepts", proxyAddr)
				}
			}
			if cgroup != "" {
				if _, err := os.Stat(cgroup); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the session's cgroup %s is left: %v", cgroup, err)
				}
			} else if root, err := redirect.CgroupRoot(); err == nil {
				if _, err := os.Stat(filepath.Join(root, CgroupParent, "session-"+s.ID())); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a cgroup of the session is left: %v", err)
				}
			}
			if _, err := os.Stat(filepath.Join(AskDir(filepath.Join(dir, "state")), s.ID()+".sock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the control socket is left: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "chaperone-trust-*")); len(left) > 0 {
				t.Errorf("temporary directories left: %v", left)
			}
			waitFor(t, "no descriptor opened since the session was made", func() (bool, string) {
				var opened []string
				for fd := range openFDs() {
					if !fds[fd] {
						opened = append(opened, fd)
					}
				}
				return len(opened) == 0, strings.Join(opened, "\n")
			})
			waitFor(t, "goroutines back to their number before the session", func() (bool, string) {
				return runtime.NumGoroutine() <= goroutines, goroutineStacks()
			})
			// Until here: the finalizers of what s holds would close what
			// Close left open.
			runtime.KeepAlive(s)
		})
	}
}

// TestRunRecordsTheSession runs a command as a session's agent and reads
// the audit log: the session's start and end are recorded, with the exit
// status, and Run returns it.
func TestRunRecordsTheSession(t *testing.T) {
	dir := shortTempDir(t)
	t.Setenv("TMPDIR", dir)
	cfg := testConfig(t, dir)
	cfg.Settings.Mode = config.ModeProxy
	s, err := New(cfg, Deps{Getenv: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		s.Close()
		t.Fatal(err)
	}
	var out bytes.Buffer
	code, err := s.Run(ctx, Command{Argv: []string{"sh", "-c", `echo "$CHAPERONE_SESSION"; exit 3`}, Env: []string{"PATH=" + os.Getenv("PATH")}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, Command{Argv: []string{"true"}}); err == nil {
		t.Error("a second Run succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if got := strings.TrimSpace(out.String()); got != s.ID() {
		t.Errorf("the agent's CHAPERONE_SESSION is %q, want %q", got, s.ID())
	}
	f, err := os.Open(s.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kinds []event.Kind
	var exit *int
	err = telemetry.ReadRecords(bufio.NewReader(f), telemetry.Filter{Session: s.ID()}, func(r telemetry.Record) error {
		kinds = append(kinds, r.Kind)
		if r.Kind == event.KindSessionEnd {
			exit = r.ExitCode
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]event.Kind{event.KindSessionStart, event.KindSessionEnd}, kinds); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
	if exit == nil || *exit != 3 {
		t.Errorf("session_end's exit_code = %v, want 3", exit)
	}
}

func TestRunBeforeStartAndAdopt(t *testing.T) {
	dir := shortTempDir(t)
	s, err := New(testConfig(t, dir), Deps{Getenv: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Run(context.Background(), Command{Argv: []string{"true"}}); err == nil {
		t.Error("Run before Start succeeded")
	}
	if _, err := s.Adopt(context.Background(), os.Getpid(), ""); err == nil || !strings.Contains(err.Error(), "only a started daemon") {
		t.Errorf("Adopt by a session that is not a daemon = %v, want refused", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name   string
		change func(*config.Config)
		want   string
	}{
		{"mode", func(c *config.Config) { c.Mode = "warp" }, `session: mode "warp" is not available`},
		{"deny_hosts", func(c *config.Config) { c.DenyHosts = []string{"a b"} }, "policy: deny_hosts:"},
		{"tls_passthrough", func(c *config.Config) { c.TLSPassthrough = []string{"*"} }, "session: tls_passthrough:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			tt.change(&cfg.Settings)
			_, err := New(cfg, Deps{Getenv: testEnv})
			var ue UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want a usage error saying %q", err, tt.want)
			}
		})
	}
}

// shortTempDir is a temporary directory with a short path: the control
// socket's path in its state directory must fit a sockaddr_un.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "chs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func indexOf(l []string, s string) int {
	for i, v := range l {
		if v == s {
			return i
		}
	}
	return -1
}

// waitFor polls cond until it holds or a minute passes (goroutines and
// descriptors of a closed server end a moment after Close returns).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not after a minute:\n%s", what, detail)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openFDs lists this process's descriptors, each as its number and what
// it is ("7 → socket:[1234]"): a socket's inode names it, so a socket
// closed and another opened with the same number differ.
func openFDs() map[string]bool {
	ents, _ := os.ReadDir("/proc/self/fd")
	fds := map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil { // the directory's own descriptor is gone by now
			fds[e.Name()+" → "+target] = true
		}
	}
	return fds
}

func goroutineStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
