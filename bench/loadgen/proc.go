package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// Stat is what /proc/PID/stat says of one process that matters here.
type Stat struct {
	Comm  string
	PPID  int
	Ticks uint64 // utime + stime, in clock ticks
}

// ParseStat parses the contents of /proc/PID/stat. The command name sits
// between the first '(' and the last ')' and may hold spaces and parentheses.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, errors.New("loadgen: stat: no command name")
	}
	// After the name: state(3) ppid(4) … utime(14) stime(15).
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("loadgen: stat: %d fields after the name, want at least 13", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, fmt.Errorf("loadgen: stat: ppid: %w", err)
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("loadgen: stat: utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("loadgen: stat: stime: %w", err)
	}
	return Stat{Comm: string(b[open+1 : closing]), PPID: ppid, Ticks: utime + stime}, nil
}

// Memory is a process's resident memory from /proc/PID/status, in KiB.
type Memory struct {
	RSSKB  uint64 // VmRSS
	PeakKB uint64 // VmHWM, the peak of VmRSS
}

// ParseStatus reads VmRSS and VmHWM from the contents of /proc/PID/status.
func ParseStatus(b []byte) (Memory, error) {
	var m Memory
	var seen int
	for line := range strings.SplitSeq(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			return Memory{}, fmt.Errorf("loadgen: status: empty %s", key)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("loadgen: status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSSKB = n
		} else {
			m.PeakKB = n
		}
		seen++
	}
	if seen < 2 {
		return Memory{}, errors.New("loadgen: status: no VmRSS or VmHWM (a kernel thread or a zombie?)")
	}
	return m, nil
}

// Watch names the proxy's processes whose CPU and memory are sampled.
type Watch struct {
	PIDs []int
	// Tree adds every descendant of PIDs at each sample (a proxy's helper
	// processes). Off when the watched process is the load generator's own
	// ancestor: the generator would count itself.
	Tree bool
	// Proc is the proc file system's mount point; "" means /proc.
	Proc string
}

// Sample is the watched processes' summed CPU time and memory at a moment.
type Sample struct {
	Processes int     `json:"processes"`
	CPUSec    float64 `json:"cpu_s"`
	RSSKB     uint64  `json:"rss_kb"`
	PeakKB    uint64  `json:"peak_kb"`
}

// Take samples the watched processes. A process that exits between listing
// and reading is skipped; none at all is an error.
func (w Watch) Take() (Sample, error) {
	proc := w.Proc
	if proc == "" {
		proc = "/proc"
	}
	pids := w.PIDs
	if w.Tree {
		var err error
		if pids, err = descendants(proc, w.PIDs); err != nil {
			return Sample{}, err
		}
	}
	var s Sample
	var ticks uint64
	for _, pid := range pids {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		sb, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		st, err := ParseStat(sb)
		if err != nil {
			return Sample{}, err
		}
		mb, err := os.ReadFile(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		m, err := ParseStatus(mb)
		if err != nil {
			return Sample{}, fmt.Errorf("%w (pid %d)", err, pid)
		}
		s.Processes++
		ticks += st.Ticks
		s.RSSKB += m.RSSKB
		s.PeakKB += m.PeakKB
	}
	if s.Processes == 0 {
		return Sample{}, fmt.Errorf("loadgen: watch: none of %v is running", w.PIDs)
	}
	s.CPUSec = float64(ticks) / clockTicks
	return s, nil
}

// descendants returns roots and every process below them.
func descendants(proc string, roots []int) ([]int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("loadgen: watch: %w", err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := ParseStat(b)
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], pid)
	}
	out := append([]int(nil), roots...)
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}

// Ancestor returns the nearest ancestor of pid whose command name is comm.
func Ancestor(proc string, pid int, comm string) (int, error) {
	if proc == "" {
		proc = "/proc"
	}
	for range 64 {
		b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
		if err != nil {
			return 0, fmt.Errorf("loadgen: ancestor %q: %w", comm, err)
		}
		st, err := ParseStat(b)
		if err != nil {
			return 0, err
		}
		if st.PPID <= 1 {
			break
		}
		pb, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(st.PPID), "stat"))
		if err != nil {
			return 0, fmt.Errorf("loadgen: ancestor %q: %w", comm, err)
		}
		parent, err := ParseStat(pb)
		if err != nil {
			return 0, err
		}
		if parent.Comm == comm {
			return st.PPID, nil
		}
		pid = st.PPID
	}
	return 0, fmt.Errorf("loadgen: no ancestor named %q", comm)
}
