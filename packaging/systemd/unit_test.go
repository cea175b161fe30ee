// Package systemd_test checks the systemd unit that runs `chaperone daemon`.
package systemd_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	unitFile = "chaperone.service"
	binary   = "/usr/local/bin/chaperone"
)

// settings reads a unit file's assignments: section → key → values, in
// order (a key may be assigned more than once).
func settings(t *testing.T, data []byte) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not an assignment in a section: %q", unitFile, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// TestUnitSettings holds the unit to what the daemon needs: a foreground
// process restarted at once, its state, runtime and configuration
// directories, the group of the control socket, and the capabilities for
// eBPF, fanotify and /proc.
func TestUnitSettings(t *testing.T) {
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	s := settings(t, data)
	want := map[string]map[string]string{
		"Unit": {"StartLimitIntervalSec": "0"},
		"Service": {
			"Type":                   "simple",
			"ExecStart":              binary + " daemon --config /etc/chaperone/config.yaml --group chaperone",
			"ExecReload":             "/bin/kill -HUP $MAINPID",
			"KillSignal":             "SIGTERM",
			"Restart":                "always",
			"RestartSec":             "1",
			"StateDirectory":         "chaperone",
			"RuntimeDirectory":       "chaperone",
			"ConfigurationDirectory": "chaperone",
			"SupplementaryGroups":    "chaperone",
			"NoNewPrivileges":        "yes",
		},
		"Install": {"WantedBy": "multi-user.target"},
	}
	for section, keys := range want {
		for k, v := range keys {
			if d := cmp.Diff([]string{v}, s[section][k]); d != "" {
				t.Errorf("[%s] %s (-want +got):\n%s", section, k, d)
			}
		}
	}
	caps := strings.Fields(strings.Join(s["Service"]["CapabilityBoundingSet"], " "))
	for _, c := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_KILL"} {
		if !slices.Contains(caps, c) {
			t.Errorf("CapabilityBoundingSet lacks %s", c)
		}
		if !bytes.Contains(data, []byte("#   "+c)) && !bytes.Contains(data, []byte(" "+c+" ")) {
			t.Errorf("no comment says why the daemon needs %s", c)
		}
	}
	for _, c := range []string{"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_NET_RAW", "CAP_SETFCAP"} {
		if slices.Contains(caps, c) {
			t.Errorf("CapabilityBoundingSet keeps %s", c)
		}
	}
	// A mount namespace of the service's own would put fanotify's mount
	// marks on copies of the mounts, and hide the cgroup tree's writes.
	for _, k := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "ReadWritePaths", "ReadOnlyPaths",
		"InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "PrivateMounts", "MountFlags"} {
		if v, ok := s["Service"][k]; ok {
			t.Errorf("%s=%v gives the daemon a mount namespace of its own", k, v)
		}
	}
	sysusers, err := os.ReadFile("chaperone.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(sysusers), "\n"), "g chaperone -") {
		t.Errorf("chaperone.sysusers does not make the chaperone group:\n%s", sysusers)
	}
}

// TestUnitVerifies runs systemd-analyze verify on the unit, with the
// daemon's binary (not installed here) replaced by an executable that
// exists: any message about the unit fails the test, since verify warns
// of unknown keys and bad values but exits 0.
func TestUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze on this machine")
	}
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte(binary+" ")); n != 1 {
		t.Fatalf("%s names %s %d times, want once (ExecStart)", unitFile, binary, n)
	}
	stand, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to stand in for the daemon's binary")
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, unitFile)
	if err := os.WriteFile(unit, bytes.Replace(data, []byte(binary), []byte(stand), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--man=no", unit)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, unitFile) {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}
