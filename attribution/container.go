package attribution

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Container runtimes, as ContainerInfo.Runtime names them (the values of
// OpenTelemetry's container.runtime).
const (
	RuntimeDocker     = "docker"
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimePodman     = "podman"
)

// containerIDLen is the length of a container id in hex digits: docker,
// containerd, cri-o and podman all name a container by 32 random bytes.
const containerIDLen = 64

// ContainerInfo says which container a process runs in.
type ContainerInfo struct {
	// Runtime is one of the Runtime* names; empty when the path names a
	// container but not its runtime (Kubernetes' cgroupfs driver:
	// /kubepods/burstable/pod<uid>/<id>).
	Runtime string
	// ID is the container's full id: 64 lowercase hex digits.
	ID string
	// PodUID is the Kubernetes pod's UID (a UUID with dashes) when the
	// container is one of a pod's; else empty.
	PodUID string
}

// runtimeByPrefix maps the prefix a runtime gives a container's systemd
// scope ("<prefix>-<id>.scope"; runc's systemd driver builds it from
// cgroupsPath "slice:prefix:id") to the runtime. conmon's scopes
// (crio-conmon-<id>.scope, libpod-conmon-<id>.scope) hold the monitor, not
// the container: their "id" is not hex, so they never match.
var runtimeByPrefix = [...]struct{ prefix, runtime string }{
	{"docker", RuntimeDocker},
	{"cri-containerd", RuntimeContainerd},
	{"crio", RuntimeCRIO},
	{"libpod", RuntimePodman},
}

// Container reads the container a cgroup path names: the path of a
// process's cgroup as /proc/PID/cgroup shows it (cgroup v2's "0::" line,
// or a v1 hierarchy's), from the root cgroup namespace. The forms known
// are those of docker (/docker/<id>, /system.slice/docker-<id>.scope),
// containerd (cri-containerd-<id>.scope, and cgroup v1's
// /system.slice/containerd.service/<slice>:cri-containerd:<id>), cri-o
// (crio-<id>.scope), podman (libpod-<id>.scope under machine.slice, a
// user's user@UID.service when rootless, or /libpod_parent/libpod-<id>)
// and Kubernetes' pods (/kubepods/<qos>/pod<uid>/<id>, and the systemd
// form kubepods-<qos>-pod<uid_with_underscores>.slice). The deepest
// component that names a container is the container (a sub-cgroup inside
// it, such as podman's "container", is still in it); the pod is the
// nearest above it. ok is false when no component names a container.
// Container never panics, whatever the path.
func Container(cgroupPath string) (info ContainerInfo, ok bool) {
	parts := strings.Split(cgroupPath, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		runtime, id, pod, found := containerOf(parts[i], parts[:i])
		if !found {
			continue
		}
		if pod == "" {
			for j := i - 1; j >= 0 && pod == ""; j-- {
				pod = podOf(parts[j])
			}
		}
		return ContainerInfo{Runtime: runtime, ID: id, PodUID: pod}, true
	}
	return ContainerInfo{}, false
}

// containerOf reads the container one path component names, given the
// components above it; pod is set when the component names the pod too.
func containerOf(c string, above []string) (runtime, id, pod string, ok bool) {
	// cgroup v1 under containerd's systemd driver: the cgroupsPath
	// "slice:prefix:id" left as it is, under containerd.service.
	if slice, rest, found := strings.Cut(c, ":"); found {
		prefix, id, found := strings.Cut(rest, ":")
		if !found || !isContainerID(id) {
			return "", "", "", false
		}
		for _, r := range runtimeByPrefix {
			if r.prefix == prefix {
				return r.runtime, id, podOf(slice), true
			}
		}
		return "", "", "", false
	}
	// A runtime's scope: "<prefix>-<id>.scope"; podman's cgroupfs manager
	// leaves off ".scope" (/libpod_parent/libpod-<id>).
	name, scope := strings.CutSuffix(c, ".scope")
	for _, r := range runtimeByPrefix {
		if id, found := strings.CutPrefix(name, r.prefix+"-"); found && isContainerID(id) {
			if !scope && r.runtime != RuntimePodman {
				return "", "", "", false
			}
			return r.runtime, id, "", true
		}
	}
	// A bare id: docker's cgroupfs driver (/docker/<id>), and Kubernetes'
	// (/kubepods/<qos>/pod<uid>/<id>), which says nothing of the runtime.
	if !isContainerID(c) || len(above) == 0 {
		return "", "", "", false
	}
	switch parent := above[len(above)-1]; {
	case parent == "docker":
		return RuntimeDocker, c, "", true
	case podOf(parent) != "":
		return "", c, "", true
	}
	return "", "", "", false
}

// podOf returns the pod UID a path component names: "pod<uid>" (cgroupfs
// driver) or "kubepods[-<qos>]-pod<uid_with_underscores>.slice" (systemd
// driver, which turns the UID's dashes into underscores since a dash
// separates a slice's parents; containerd's colon form keeps the dashes).
// A UID written with both is no UID. Else "".
func podOf(c string) string {
	var uid string
	if s, ok := strings.CutPrefix(c, "pod"); ok {
		uid = s
	} else if s, ok := strings.CutSuffix(c, ".slice"); ok && strings.HasPrefix(s, "kubepods-") {
		i := strings.LastIndex(s, "-pod")
		if i < 0 {
			return ""
		}
		// Underscores for the UID's dashes, or (containerd's colon form)
		// the dashes themselves; never a mix of the two.
		if u := s[i+len("-pod"):]; !strings.Contains(u, "-") || !strings.Contains(u, "_") {
			uid = strings.ReplaceAll(u, "_", "-")
		}
	}
	if !isUUID(uid) {
		return ""
	}
	return uid
}

// isContainerID reports whether s is a full container id: 64 lowercase
// hex digits.
func isContainerID(s string) bool {
	if len(s) != containerIDLen {
		return false
	}
	for i := range len(s) {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

// isUUID reports whether s is a UUID in its canonical form: 8-4-4-4-12
// lowercase hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isLowerHex(s[i]) {
				return false
			}
		}
	}
	return true
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// ProcessContainer reads /proc/PID/cgroup and returns the container pid
// runs in: the cgroup v2 line's ("0::"), else the first cgroup v1
// hierarchy's that names one (a hybrid system may keep containers in v1
// hierarchies only). ok is false for a process in no container. The
// error wraps ErrNotFound when pid does not exist. Paths are those of the
// reader's cgroup namespace: the daemon reads from the root one.
func (t *Table) ProcessContainer(pid int) (ContainerInfo, bool, error) {
	if pid <= 0 {
		return ContainerInfo{}, false, fmt.Errorf("%w: process %d", ErrNotFound, pid)
	}
	data, err := t.fsys.ReadFile(strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ContainerInfo{}, false, notFound(fmt.Errorf("attribution: process %d: read cgroup: %w", pid, err))
	}
	info, ok := containerOfCgroupFile(data)
	return info, ok, nil
}

// containerOfCgroupFile reads /proc/PID/cgroup's lines,
// "hierarchy-ID:controller-list:cgroup-path", v2's first.
func containerOfCgroupFile(data []byte) (ContainerInfo, bool) {
	var v1 [][]byte
	for rest := data; len(rest) > 0; {
		var line []byte
		line, rest = nextLine(rest)
		id, tail, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		_, path, ok := bytes.Cut(tail, []byte(":"))
		if !ok {
			continue
		}
		if string(id) == "0" && len(tail) > 0 && tail[0] == ':' {
			if info, ok := Container(string(path)); ok {
				return info, true
			}
			continue
		}
		v1 = append(v1, path)
	}
	for _, path := range v1 {
		if info, ok := Container(string(path)); ok {
			return info, true
		}
	}
	return ContainerInfo{}, false
}
