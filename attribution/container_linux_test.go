package attribution

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted, from
// /proc/self/mountinfo ("/sys/fs/cgroup", or "/sys/fs/cgroup/unified" on
// a hybrid system).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(post); ok && len(f) > 0 && f[0] == "cgroup2" {
			return strings.Fields(line)[4]
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

// TestRealProcessContainer puts a real process in cgroups named as each
// runtime names its containers' (under a cgroup of the test's own) and
// reads its container back from the real /proc.
func TestRealProcessContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups and move a process into them")
	}
	mnt := cgroup2Mount(t)
	base := filepath.Join(mnt, fmt.Sprintf("chaperone-attribution-test-%d", os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(base) })

	tests := []struct {
		name string
		path string // under base
		want ContainerInfo
	}{
		{"docker", "system.slice/docker-" + idDocker2 + ".scope", ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}},
		{"docker cgroupfs", "docker/" + idDocker1, ContainerInfo{Runtime: RuntimeDocker, ID: idDocker1}},
		{"containerd", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice/cri-containerd-" + idCtrd + ".scope",
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podCtrd}},
		{"containerd colon form", "system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice:cri-containerd:" + idCtrd,
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podCtrd}},
		{"cri-o", "kubepods.slice/kubepods-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice/crio-" + idCRIO + ".scope",
			ContainerInfo{Runtime: RuntimeCRIO, ID: idCRIO, PodUID: podCRIO}},
		{"podman rootless", "user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idPodman2 + ".scope/container",
			ContainerInfo{Runtime: RuntimePodman, ID: idPodman2}},
		{"kubepods cgroupfs", "kubepods/burstable/pod" + podKube + "/" + idKube, ContainerInfo{ID: idKube, PodUID: podKube}},
	}
	table := NewTable(OSProc())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(base, tt.path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for d := dir; d != base; d = filepath.Dir(d) {
					os.Remove(d)
				}
			})
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Killed and reaped before the cgroups are removed (cleanups
			// run last first).
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				t.Fatalf("move %d into %s: %v", pid, dir, err)
			}
			got, ok, err := table.ProcessContainer(pid)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
				t.Fatalf("no container found in\n%s", cg)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ProcessContainer (-want +got):\n%s", d)
			}
		})
	}

	t.Run("this process", func(t *testing.T) {
		// The test runs in no container of these names; whatever its
		// cgroup, reading it works.
		if _, _, err := table.ProcessContainer(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	})
}
