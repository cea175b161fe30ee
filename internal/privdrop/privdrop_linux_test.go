//go:build linux

package privdrop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary, started as a wrapped program, report what
// it sees instead of running tests.
const helperEnv = "PRIVDROP_TEST_HELPER"

// init keeps the pdeathsig helper on the main thread: the parent-death signal
// belongs to a thread, exec leaves it on the one thread left, and threads the
// Go runtime creates after start without one; TestMain runs wherever main's
// goroutine is, which a busy machine can move off the main thread.
func init() {
	if os.Getenv(helperEnv) == "pdeathsig" {
		runtime.LockOSThread()
	}
}

// TestMain lets the test binary stand in for chaperone: started with
// ShimArg it is the shim, as chaperone's main would be.
func TestMain(m *testing.M) {
	if RunShim() {
		return
	}
	switch os.Getenv(helperEnv) {
	case "":
	case "dump":
		_ = json.NewEncoder(os.Stdout).Encode(dump{Args: os.Args, Env: os.Environ()})
		os.Exit(0)
	case "pdeathsig":
		if unix.Gettid() != unix.Getpid() {
			fmt.Fprintln(os.Stderr, "not on the main thread")
			os.Exit(1)
		}
		var sig int32
		// PR_GET_PDEATHSIG stores the signal through the pointer.
		if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(sig)
		os.Exit(0)
	case "attack":
		_ = json.NewEncoder(os.Stdout).Encode(attack())
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

type dump struct{ Args, Env []string }

// run wraps cmd with o, runs it and returns its output and exit code (-1 if
// it did not exit).
func run(t *testing.T, cmd *exec.Cmd, o Options) (stdout, stderr string, code int) {
	t.Helper()
	if err := Wrap(cmd, o); err != nil {
		t.Fatalf("Wrap: %v", err)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
	default:
		t.Fatalf("run: %v", err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// status reads /proc/self/status lines as the process that printed them saw
// them.
func status(t *testing.T, text string) map[string]string {
	t.Helper()
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	if m["CapEff"] == "" || m["NoNewPrivs"] == "" {
		t.Fatalf("not a /proc/self/status: %q", text)
	}
	return m
}

func ownStatus(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return status(t, string(b))
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to change uid and empty the bounding set")
	}
}

const noCaps = "0000000000000000"

func TestWrapDropsCapabilities(t *testing.T) {
	self := ownStatus(t)
	ids := func(n int) string { s := strconv.Itoa(n); return s + "\t" + s + "\t" + s + "\t" + s }
	tests := []struct {
		name     string
		o        Options
		root     bool
		wantUID  string
		wantGID  string
		wantGrps string
	}{
		{name: "keep ids", o: Keep(), wantUID: self["Uid"], wantGID: self["Gid"], wantGrps: self["Groups"]},
		{name: "zero value clears groups", o: Options{}, root: true, wantUID: ids(0), wantGID: ids(0), wantGrps: ""},
		{name: "nobody", o: Options{UID: 65534, GID: 65534}, root: true, wantUID: ids(65534), wantGID: ids(65534), wantGrps: ""},
		{name: "nobody with groups", o: Options{UID: 65534, GID: 65534, Groups: []int{65534, 4, 100}}, root: true, wantUID: ids(65534), wantGID: ids(65534), wantGrps: "4 100 65534"},
		{name: "gid only", o: Options{UID: -1, GID: 65534}, root: true, wantUID: self["Uid"], wantGID: ids(65534), wantGrps: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				needRoot(t)
			}
			out, errOut, code := run(t, exec.Command("cat", "/proc/self/status"), tt.o)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			st := status(t, out)
			want := map[string]string{
				"CapInh": noCaps, "CapPrm": noCaps, "CapEff": noCaps, "CapAmb": noCaps,
				"NoNewPrivs": "1", "Uid": tt.wantUID, "Gid": tt.wantGID, "Groups": tt.wantGrps,
			}
			if os.Geteuid() == 0 {
				want["CapBnd"] = noCaps
			}
			got := map[string]string{}
			for k := range want {
				got[k] = st[k]
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("wrapped process status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnwrappedControl shows that the checks above can fail: without Wrap
// the same command keeps chaperone's capabilities and can gain privileges.
func TestUnwrappedControl(t *testing.T) {
	needRoot(t)
	out, err := exec.Command("cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	st := status(t, string(out))
	if st["CapEff"] == noCaps || st["CapBnd"] == noCaps || st["NoNewPrivs"] != "0" {
		t.Errorf("unwrapped child: CapEff %s CapBnd %s NoNewPrivs %s, want capabilities and no no_new_privs", st["CapEff"], st["CapBnd"], st["NoNewPrivs"])
	}
}

// TestShimWithoutSetpcap covers chaperone run without root: the bounding set
// cannot be emptied, but no capability is left to gain.
func TestShimWithoutSetpcap(t *testing.T) {
	needRoot(t)
	cmd := exec.Command("cat", "/proc/self/status")
	if err := Wrap(cmd, Keep()); err != nil {
		t.Fatal(err)
	}
	// Start the shim itself unprivileged, which Wrap refuses to set up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("cannot start the test binary as uid 65534: %v", err)
	}
	st := status(t, string(out))
	if st["CapBnd"] == noCaps {
		t.Errorf("CapBnd = %s: an unprivileged shim cannot empty the bounding set, so the test did not take that path", st["CapBnd"])
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if st[k] != noCaps {
			t.Errorf("%s = %s, want %s", k, st[k], noCaps)
		}
	}
	if st["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %s, want 1", st["NoNewPrivs"])
	}
}

// TestInheritedCapabilitiesCleared starts the shim with an inheritable and
// ambient capability, which execve would otherwise carry to the program.
func TestInheritedCapabilitiesCleared(t *testing.T) {
	needRoot(t)
	cmd := exec.Command("cat", "/proc/self/status")
	if err := Wrap(cmd, Keep()); err != nil {
		t.Fatal(err)
	}
	// Wrap refuses AmbientCaps; set them on the shim behind its back.
	cmd.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{unix.CAP_NET_ADMIN}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	st := status(t, string(out))
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd"} {
		if st[k] != noCaps {
			t.Errorf("%s = %s, want %s", k, st[k], noCaps)
		}
	}
}

// TestGroupsNotInherited starts the shim with a supplementary group, as
// chaperone may have: a new identity without Groups must get none of them.
func TestGroupsNotInherited(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{name: "new identity", o: Options{UID: 65534, GID: 65534}, want: ""},
		{name: "new gid", o: Options{UID: -1, GID: 65534}, want: ""},
		{name: "keep", o: Keep(), want: "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("cat", "/proc/self/status")
			if err := Wrap(cmd, tt.o); err != nil {
				t.Fatal(err)
			}
			// Root with group 4: Wrap refuses Credential; set it behind its back.
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{4}}}
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if got := status(t, string(out))["Groups"]; got != tt.want {
				t.Errorf("Groups = %q, want %q", got, tt.want)
			}
		})
	}
}

// publicDir makes a directory any user may enter.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "privdrop-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDroppedUserCannotReadRootFiles(t *testing.T) {
	needRoot(t)
	dir := publicDir(t)
	for name, mode := range map[string]os.FileMode{"secret": 0o600, "public": 0o644} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	nobody := Options{UID: 65534, GID: 65534}
	tests := []struct {
		file     string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{file: "public", wantCode: 0, wantOut: "public\n"},
		{file: "secret", wantCode: 1, wantErr: "Permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out, errOut, code := run(t, exec.Command("cat", filepath.Join(dir, tt.file)), nobody)
			if code != tt.wantCode || out != tt.wantOut || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("cat %s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					tt.file, code, out, errOut, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}

// TestSetuidBinaryCannotRegainRoot runs a setuid-root copy of id(1): without
// Wrap it reports euid 0, wrapped it must not.
func TestSetuidBinaryCannotRegainRoot(t *testing.T) {
	needRoot(t)
	idPath, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id(1) to make setuid")
	}
	src, err := os.ReadFile(idPath)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(publicDir(t), "id")
	if err := os.WriteFile(suid, src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	control := exec.Command(suid, "-u")
	control.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := control.Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Skipf("setuid bits have no effect here (nosuid mount?): control printed %q, %v", out, err)
	}
	out, errOut, code := run(t, exec.Command(suid, "-u"), Options{UID: 65534, GID: 65534})
	if code != 0 || strings.TrimSpace(out) != "65534" {
		t.Errorf("wrapped setuid id -u: exit %d, stdout %q, stderr %q; want 65534", code, out, errOut)
	}
}

func TestArgvAndEnvPassThrough(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"argv zero", "a b", "", "--", "--uid", "0", "x=y", " ", "tab\there", "ünïcode"}
	env := []string{helperEnv + "=dump", "A=b=c", "EMPTY=", "SPACE=x y", "HOME=/root", "USER=root"}
	tests := []struct {
		name    string
		o       Options
		wantEnv []string
	}{
		{name: "as is", o: Keep(), wantEnv: env},
		{
			name:    "user environment",
			o:       Options{UID: -1, GID: -1, Name: "alice", Home: "/home/alice"},
			wantEnv: []string{helperEnv + "=dump", "A=b=c", "EMPTY=", "SPACE=x y", "HOME=/home/alice", "USER=alice", "LOGNAME=alice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(self)
			cmd.Args = slices.Clone(args)
			cmd.Env = slices.Clone(env)
			out, errOut, code := run(t, cmd, tt.o)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var got dump
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("helper output %q: %v", out, err)
			}
			if diff := cmp.Diff(dump{Args: args, Env: tt.wantEnv}, got); diff != "" {
				t.Errorf("program saw (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal syscall.Signal
	}{
		{name: "success", script: "exit 0", wantCode: 0},
		{name: "exit 7", script: "exit 7", wantCode: 7},
		{name: "killed by SIGTERM", script: "kill -TERM $$", wantCode: -1, wantSignal: syscall.SIGTERM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tt.script)
			_, errOut, code := run(t, cmd, Keep())
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			var sig syscall.Signal
			if ws.Signaled() {
				sig = ws.Signal()
			}
			if code != tt.wantCode || sig != tt.wantSignal {
				t.Errorf("exit %d signal %v (stderr %q), want exit %d signal %v", code, sig, errOut, tt.wantCode, tt.wantSignal)
			}
		})
	}
}

func TestMissingOrBadProgram(t *testing.T) {
	dir := publicDir(t)
	noExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		wantCode int
		wantErr  string
	}{
		{name: "no such file", path: filepath.Join(dir, "missing"), wantCode: 127, wantErr: "chaperone: exec " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{name: "not executable", path: noExec, wantCode: 126, wantErr: "chaperone: exec " + noExec + ": permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, exec.Command(tt.path), Keep())
			if code != tt.wantCode || out != "" || strings.TrimSpace(errOut) != tt.wantErr {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stderr %q", code, out, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
	t.Run("not in PATH", func(t *testing.T) {
		err := Wrap(exec.Command("chaperone-test-no-such-program"), Keep())
		if !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("Wrap error = %v, want exec.ErrNotFound", err)
		}
	})
}

func TestWrapRefuses(t *testing.T) {
	tests := []struct {
		name    string
		cmd     func() *exec.Cmd
		o       Options
		wantErr string
	}{
		{name: "uid without gid", cmd: func() *exec.Cmd { return exec.Command("true") }, o: Options{UID: 1, GID: -1}, wantErr: "uid set without gid"},
		{name: "bad group", cmd: func() *exec.Cmd { return exec.Command("true") }, o: Options{UID: -1, GID: -1, Groups: []int{-5}}, wantErr: "out of range"},
		{
			name: "credential",
			cmd: func() *exec.Cmd {
				c := exec.Command("true")
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1}}
				return c
			},
			o: Keep(), wantErr: "Credential",
		},
		{
			name: "ambient capabilities",
			cmd: func() *exec.Cmd {
				c := exec.Command("true")
				c.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{unix.CAP_NET_ADMIN}}
				return c
			},
			o: Keep(), wantErr: "AmbientCaps",
		},
		{
			name: "wrapped twice",
			cmd: func() *exec.Cmd {
				c := exec.Command("true")
				if err := Wrap(c, Keep()); err != nil {
					panic(err)
				}
				return c
			},
			o: Keep(), wantErr: "already wrapped",
		},
		{name: "no path", cmd: func() *exec.Cmd { return &exec.Cmd{} }, o: Keep(), wantErr: "no path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cmd()
			before := c.Path
			err := Wrap(c, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Wrap error = %v, want it to contain %q", err, tt.wantErr)
			}
			if c.Path != before {
				t.Errorf("Wrap changed Path to %q on error", c.Path)
			}
		})
	}
}

// TestSignalState checks the shim passes on the signal mask and ignored
// signals it was given, as a direct exec would.
func TestSignalState(t *testing.T) {
	direct, err := exec.Command("cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, exec.Command("cat", "/proc/self/status"), Keep())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want, got := status(t, string(direct)), status(t, out)
	for _, k := range []string{"SigBlk", "SigIgn", "SigCgt"} {
		if want[k] != got[k] {
			t.Errorf("%s = %s, want %s as without the shim", k, got[k], want[k])
		}
	}
}

// TestPdeathsigSurvivesUIDChange checks the parent-death signal, which the
// kernel clears when the uid changes, is armed again before the exec.
func TestPdeathsigSurvivesUIDChange(t *testing.T) {
	needRoot(t)
	// The shim's /proc/self/exe is this test binary, reachable by uid 65534
	// even where its directory is not.
	cmd := exec.Command(selfExe)
	cmd.Env = []string{helperEnv + "=pdeathsig"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, errOut, code := run(t, cmd, Options{UID: 65534, GID: 65534})
	if code != 0 || strings.TrimSpace(out) != strconv.Itoa(int(syscall.SIGKILL)) {
		t.Errorf("exit %d, stdout %q, stderr %q; want parent-death signal %d", code, out, errOut, syscall.SIGKILL)
	}
}

// cgroup2Root finds where cgroup v2 is mounted and the cgroup path of that
// mount's root, from /proc/self/mountinfo.
func cgroup2Root() (mountpoint, root string, ok bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		pre, post, found := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !found || len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" {
			continue
		}
		return unescapeMountinfo(f[4]), unescapeMountinfo(f[3]), true
	}
	return "", "", false
}

func TestUseCgroupFDKept(t *testing.T) {
	needRoot(t)
	mnt, root, ok := cgroup2Root()
	if !ok {
		t.Skip("no cgroup v2 mount in /proc/self/mountinfo")
	}
	leaf, err := os.MkdirTemp(mnt, "privdrop-test-")
	if err != nil {
		t.Skipf("cannot create a cgroup under %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(leaf); err != nil {
			t.Errorf("remove cgroup %s: %v", leaf, err)
		}
	})
	dir, err := os.Open(leaf)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	want := "0::" + filepath.Join(root, filepath.Base(leaf))

	into := func() *exec.Cmd {
		c := exec.Command("cat", "/proc/self/cgroup")
		c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
		return c
	}
	if out, err := into().Output(); err != nil || !strings.Contains(string(out), want) {
		t.Skipf("cannot start a process into a cgroup here (clone3 CLONE_INTO_CGROUP): %q, %v", out, err)
	}
	out, errOut, code := run(t, into(), Options{UID: 65534, GID: 65534})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !slices.Contains(strings.Split(strings.TrimSpace(out), "\n"), want) {
		t.Errorf("wrapped process cgroups:\n%s\nwant the line %q", out, want)
	}
}

func TestForUser(t *testing.T) {
	want := Options{UID: 0, GID: 0, Groups: []int{0}, Name: "root", Home: "/root"}
	for _, spec := range []string{"root", "0"} {
		t.Run(spec, func(t *testing.T) {
			got, err := ForUser(spec)
			if err != nil {
				t.Skipf("root is not in this system's user database: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ForUser(%q) (-want +got):\n%s", spec, diff)
			}
		})
	}
	if _, err := ForUser("chaperone-test-no-such-user"); err == nil {
		t.Error("ForUser of an unknown user: no error")
	}
}
