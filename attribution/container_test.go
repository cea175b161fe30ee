package attribution

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Container ids and pod UIDs as they appear in the sources cited below.
const (
	idDocker1   = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"
	idDocker2   = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
	idKube      = "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa"
	idK8sDocker = "9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961"
	idCtrd      = "d4e8e05a546c86b6443f101966c618e47753ed01fa9929cae00d3b692f7a9f80"
	idCtrd2     = "6d393320601b821561e43bd46f658284cb172cf297ecc3d3665be657870d32e2"
	idPodman1   = "fffd37123f33f09b0d26b19bdb5012786a5ebf28c905e436ec5ca1dbf188bcea"
	idPodman2   = "3f084b4c7b789c1a0f174da3fcd339e31125d3096b3ff46a0bef4fad71d09362"
	idPodman3   = "974a75c8cf45648fcc6e718ba92ee1f2034463674f0d5b0c50f5cab041a4cbd6"
	idCRIO      = "b2a102854b4969b2ce98dc329c86b4fb2b06e4ad2cc8da9d8a7578c9cd2004a2"

	podKube  = "fd52ef25-a87d-11e9-9423-0800271a638e"
	podBest  = "74c13223-5a00-11e9-b385-42010a80018d"
	podK8sD  = "2c48913c-b29f-11e7-9350-020968147796"
	podCtrd  = "214f3ba8-4b69-4bdb-a7d5-5ecc73f04ae9"
	podCtrd2 = "57e67067-89e4-4001-bdd4-8632d39ea02b"
	podCRIO  = "72f7f152-440c-66ac-9084-e0fc1d8a910c"
	podOTel  = "2c4b2241-5c01-11e9-8e4e-42010a800002"
)

// The paths are copied from where each runtime's path was seen:
//   - dd-trace-go internal/container_linux_test.go (Datadog's tracer):
//     /docker/<id>, /kubepods/burstable/pod<uid>/<id>;
//   - Qard/container-info test/fixtures (used by Elastic's APM agents):
//     /kubepods/besteffort/pod<uid>/<id>;
//   - neuvector share/system/cgroup_test.go (CentOS):
//     /system.slice/docker-<id>.scope;
//   - a Kubernetes node's /proc/self/mountinfo (cgroup v1, containerd's
//     systemd driver) and opentelemetry-js-contrib's container resource
//     detector tests ("containerd v1.5.0+ format with systemd cgroup
//     driver"): /system.slice/containerd.service/<slice>:cri-containerd:<id>;
//     containerd's own getCgroupsPath test gives "b.slice:cri-containerd:id";
//   - k3s' systemd form (kubepods-burstable-pod<uid_>.slice:cri-containerd:<id>);
//   - the cgroup notes of CJLove/rt-operator (Kubernetes 1.23 with docker,
//     1.25 with cri-o): kubepods.slice/kubepods-pod<uid>.slice/{docker,crio}-<id>.scope;
//   - a kernel OOM report and podman inspect's CgroupPath of rootless
//     podman: /user.slice/user-1000.slice/user@1000.service/user.slice/libpod-<id>.scope,
//     with /container below it on Gentoo and openSUSE;
//   - podman's conmon scopes (libpod-conmon-<id>.scope, crio-conmon-<id>.scope)
//     and its cgroupfs manager's parent (/libpod_parent/libpod-<id>).
func TestContainer(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		want   ContainerInfo
		wantOK bool
	}{
		// docker
		{"docker cgroupfs", "/docker/" + idDocker1, ContainerInfo{Runtime: RuntimeDocker, ID: idDocker1}, true},
		{"docker systemd", "/system.slice/docker-" + idDocker2 + ".scope", ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}, true},
		{"docker in docker", "/docker/" + idDocker1 + "/docker/" + idDocker2, ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}, true},
		{"docker sub-cgroup", "/system.slice/docker-" + idDocker2 + ".scope/init", ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}, true},
		{"dockerd itself", "/system.slice/docker.service", ContainerInfo{}, false},
		{"docker short id", "/docker/34dc0b5e626f", ContainerInfo{}, false},
		{"docker id in upper case", "/docker/" + strings.ToUpper(idDocker1), ContainerInfo{}, false},
		{"docker scope without .scope", "/system.slice/docker-" + idDocker2, ContainerInfo{}, false},
		{"bare id under no runtime", "/system.slice/" + idDocker1, ContainerInfo{}, false},

		// containerd
		{"containerd v1 systemd driver under containerd.service",
			"/system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice:cri-containerd:" + idCtrd,
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podCtrd}, true},
		{"containerd colon form, pod uid with dashes (opentelemetry-js)",
			"/system.slice/containerd.service/kubepods-burstable-pod" + podOTel + ".slice:cri-containerd:" + idCtrd,
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podOTel}, true},
		{"k3s colon form", "kubepods-burstable-pod57e67067_89e4_4001_bdd4_8632d39ea02b.slice:cri-containerd:" + idCtrd2,
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd2, PodUID: podCtrd2}, true},
		{"containerd systemd driver v2",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice/cri-containerd-" + idCtrd + ".scope",
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podCtrd}, true},
		{"containerd from a child cgroup namespace", "/../cri-containerd-" + idCtrd + ".scope",
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd}, true},
		{"containerd colon form, unknown prefix", "/system.slice/containerd.service/x.slice:nerd:" + idCtrd, ContainerInfo{}, false},
		{"containerd colon form, short id", "/system.slice/containerd.service/b.slice:cri-containerd:test-id", ContainerInfo{}, false},
		{"containerd itself", "/system.slice/containerd.service", ContainerInfo{}, false},

		// cri-o
		{"cri-o guaranteed pod", "/kubepods.slice/kubepods-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice/crio-" + idCRIO + ".scope",
			ContainerInfo{Runtime: RuntimeCRIO, ID: idCRIO, PodUID: podCRIO}, true},
		{"cri-o besteffort pod", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice/crio-" + idCRIO + ".scope",
			ContainerInfo{Runtime: RuntimeCRIO, ID: idCRIO, PodUID: podCRIO}, true},
		{"cri-o conmon", "/kubepods.slice/kubepods-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice/crio-conmon-" + idCRIO + ".scope", ContainerInfo{}, false},

		// podman
		{"podman rootful", "/machine.slice/libpod-" + idPodman1 + ".scope", ContainerInfo{Runtime: RuntimePodman, ID: idPodman1}, true},
		{"podman rootless", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idPodman1 + ".scope",
			ContainerInfo{Runtime: RuntimePodman, ID: idPodman1}, true},
		{"podman rootless, container sub-cgroup", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idPodman2 + ".scope/container",
			ContainerInfo{Runtime: RuntimePodman, ID: idPodman2}, true},
		{"podman rootful, container sub-cgroup", "/machine.slice/libpod-" + idPodman3 + ".scope/container",
			ContainerInfo{Runtime: RuntimePodman, ID: idPodman3}, true},
		{"podman cgroupfs manager", "/libpod_parent/libpod-" + idPodman3, ContainerInfo{Runtime: RuntimePodman, ID: idPodman3}, true},
		{"podman conmon", "/machine.slice/libpod-conmon-" + idPodman1 + ".scope", ContainerInfo{}, false},
		{"podman API service", "/system.slice/podman.service", ContainerInfo{}, false},

		// kubepods, cgroupfs driver: the runtime is not in the path
		{"kubepods burstable", "/kubepods/burstable/pod" + podKube + "/" + idKube, ContainerInfo{ID: idKube, PodUID: podKube}, true},
		{"kubepods besteffort", "/kubepods/besteffort/pod" + podBest + "/" + idDocker1, ContainerInfo{ID: idDocker1, PodUID: podBest}, true},
		{"kubepods guaranteed", "/kubepods/pod" + podKube + "/" + idKube, ContainerInfo{ID: idKube, PodUID: podKube}, true},
		{"kubepods systemd driver with docker",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2c48913c_b29f_11e7_9350_020968147796.slice/docker-" + idK8sDocker + ".scope",
			ContainerInfo{Runtime: RuntimeDocker, ID: idK8sDocker, PodUID: podK8sD}, true},
		{"kubepods from a child cgroup namespace", "/../../pod" + podK8sD + "/" + idK8sDocker, ContainerInfo{ID: idK8sDocker, PodUID: podK8sD}, true},
		{"pod without a container", "/kubepods/burstable/pod" + podKube, ContainerInfo{}, false},
		{"pod uid malformed", "/kubepods/burstable/podfd52ef25a87d11e994230800271a638e/" + idKube, ContainerInfo{}, false},
		{"pod uid in upper case", "/kubepods.slice/kubepods-podFD52EF25_A87D_11E9_9423_0800271A638E.slice/crio-" + idCRIO + ".scope",
			ContainerInfo{Runtime: RuntimeCRIO, ID: idCRIO}, true},

		// no container
		{"root", "/", ContainerInfo{}, false},
		{"empty", "", ContainerInfo{}, false},
		{"login session", "/user.slice/user-1000.slice/session-3.scope", ContainerInfo{}, false},
		{"init", "/init.scope", ContainerInfo{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Container(tt.path)
			if ok != tt.wantOK {
				t.Fatalf("Container(%q) ok = %v, want %v", tt.path, ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Container(%q) (-want +got):\n%s", tt.path, diff)
			}
		})
	}
}

// TestProcessContainer reads /proc/PID/cgroup files of each layout from a
// fake /proc: cgroup v2 alone, hybrid (v2's line first, the container in v1
// hierarchies), v1 alone.
func TestProcessContainer(t *testing.T) {
	tests := []struct {
		name   string
		cgroup string
		want   ContainerInfo
		wantOK bool
	}{
		{"v2", "0::/system.slice/docker-" + idDocker2 + ".scope\n", ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}, true},
		{"v2 without newline", "0::/machine.slice/libpod-" + idPodman1 + ".scope/container", ContainerInfo{Runtime: RuntimePodman, ID: idPodman1}, true},
		{"v2 no container", "0::/user.slice/user-1000.slice/session-3.scope\n", ContainerInfo{}, false},
		{"hybrid: v2 line names no container, v1 lines do",
			"12:memory:/kubepods/burstable/pod" + podKube + "/" + idKube + "\n" +
				"1:name=systemd:/kubepods/burstable/pod" + podKube + "/" + idKube + "\n" +
				"0::/\n",
			ContainerInfo{ID: idKube, PodUID: podKube}, true},
		{"v2 line first",
			"1:name=systemd:/docker/" + idDocker1 + "\n0::/system.slice/docker-" + idDocker2 + ".scope\n",
			ContainerInfo{Runtime: RuntimeDocker, ID: idDocker2}, true},
		{"v1 only, containerd colon form",
			"12:cpu,cpuacct:/system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice:cri-containerd:" + idCtrd + "\n" +
				"11:pids:/system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice:cri-containerd:" + idCtrd + "\n",
			ContainerInfo{Runtime: RuntimeContainerd, ID: idCtrd, PodUID: podCtrd}, true},
		{"v1 first hierarchies without a container",
			"11:rdma:/\n10:freezer:/docker/" + idDocker1 + "\n",
			ContainerInfo{Runtime: RuntimeDocker, ID: idDocker1}, true},
		{"garbage", "other_line\n::\n0:\n", ContainerInfo{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "42"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "42", "cgroup"), []byte(tt.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			got, ok, err := NewTable(DirFS(root)).ProcessContainer(42)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ProcessContainer (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no such process", func(t *testing.T) {
		_, _, err := NewTable(DirFS(t.TempDir())).ProcessContainer(42)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("err = %v, want ErrNotFound", err)
		}
	})
}

var (
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	uuid  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// FuzzContainer: Container never panics; an id it finds is a runtime's
// (64 lowercase hex digits) and is in the path, a pod UID is a UUID whose
// digits are in the path, the runtime one of the known.
func FuzzContainer(f *testing.F) {
	for _, s := range []string{
		"/docker/" + idDocker1,
		"/system.slice/docker-" + idDocker2 + ".scope",
		"/system.slice/containerd.service/kubepods-besteffort-pod214f3ba8_4b69_4bdb_a7d5_5ecc73f04ae9.slice:cri-containerd:" + idCtrd,
		"/kubepods.slice/kubepods-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice/crio-" + idCRIO + ".scope",
		"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idPodman2 + ".scope/container",
		"/kubepods/burstable/pod" + podKube + "/" + idKube,
		"/machine.slice/libpod-conmon-" + idPodman1 + ".scope",
		"/", "",
	} {
		f.Add(s)
	}
	runtimes := map[string]bool{"": true, RuntimeDocker: true, RuntimeContainerd: true, RuntimeCRIO: true, RuntimePodman: true}
	f.Fuzz(func(t *testing.T, path string) {
		info, ok := Container(path)
		if !ok {
			if info != (ContainerInfo{}) {
				t.Fatalf("Container(%q) = %+v with ok false", path, info)
			}
			return
		}
		if !hex64.MatchString(info.ID) || !strings.Contains(path, info.ID) {
			t.Fatalf("Container(%q): id %q is not 64 hex digits of the path", path, info.ID)
		}
		if !runtimes[info.Runtime] {
			t.Fatalf("Container(%q): unknown runtime %q", path, info.Runtime)
		}
		if info.PodUID != "" {
			if !uuid.MatchString(info.PodUID) {
				t.Fatalf("Container(%q): pod UID %q is not a UUID", path, info.PodUID)
			}
			if !strings.Contains(path, info.PodUID) && !strings.Contains(path, strings.ReplaceAll(info.PodUID, "-", "_")) {
				t.Fatalf("Container(%q): pod UID %q is not in the path", path, info.PodUID)
			}
		}
	})
}
