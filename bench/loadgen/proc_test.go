package loadgen

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const statLine = "4242 (my (odd) proc) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 12345 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"name with spaces and parentheses", statLine, Stat{Comm: "my (odd) proc", PPID: 17, Ticks: 300}, false},
		{"no name", "4242 S 17", Stat{}, true},
		{"truncated", "4242 (x) S 17 1 1", Stat{}, true},
		{"bad utime", "1 (x) S 0 1 1 0 -1 0 0 0 0 0 u 5 0 0", Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStat error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Memory
		wantErr bool
	}{
		{"both", "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n", Memory{RSSKB: 1024, PeakKB: 2048}, false},
		{"kernel thread has neither", "Name:\tkthreadd\nState:\tS\n", Memory{}, true},
		{"garbage value", "VmHWM:\tlots kB\nVmRSS:\t1 kB\n", Memory{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStatus error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeProc lays out a proc tree: 10 (proxy) → 11 (helper) → 12, and 20
// elsewhere; 12's parent chain leads to a process named "chaperone".
func fakeProc(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	procs := []struct {
		pid, ppid  int
		comm       string
		ticks, rss int
	}{
		{10, 1, "chaperone", 100, 1000},
		{11, 10, "helper", 20, 200},
		{12, 11, "leaf", 3, 30},
		{20, 1, "other", 999, 9999},
	}
	for _, p := range procs {
		dir := filepath.Join(root, itoa(p.pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := itoa(p.pid) + " (" + p.comm + ") S " + itoa(p.ppid) + " 0 0 0 -1 0 0 0 0 0 " + itoa(p.ticks) + " 0 0 0\n"
		status := "VmHWM:\t" + itoa(2*p.rss) + " kB\nVmRSS:\t" + itoa(p.rss) + " kB\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestWatchTake(t *testing.T) {
	proc := fakeProc(t)
	tests := []struct {
		name    string
		w       Watch
		want    Sample
		wantErr bool
	}{
		{"one process", Watch{PIDs: []int{10}, Proc: proc}, Sample{Processes: 1, CPUSec: 1, RSSKB: 1000, PeakKB: 2000}, false},
		{"tree adds descendants only", Watch{PIDs: []int{10}, Tree: true, Proc: proc}, Sample{Processes: 3, CPUSec: 1.23, RSSKB: 1230, PeakKB: 2460}, false},
		{"gone", Watch{PIDs: []int{99}, Proc: proc}, Sample{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.w.Take()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Take error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Take (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAncestor(t *testing.T) {
	proc := fakeProc(t)
	tests := []struct {
		name    string
		pid     int
		comm    string
		want    int
		wantErr bool
	}{
		{"grandparent", 12, "chaperone", 10, false},
		{"parent", 12, "helper", 11, false},
		{"none", 20, "chaperone", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Ancestor(proc, tt.pid, tt.comm)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Ancestor(%d, %q) = %d, %v; want %d, error %v", tt.pid, tt.comm, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine))
	f.Add([]byte("1 (a) S 0"))
	f.Add([]byte(")( 1 2 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStat(b)
		if err == nil && len(s.Comm) > len(b) {
			t.Errorf("name %q longer than the input", s.Comm)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("VmHWM:\t2 kB\nVmRSS:\t1 kB\n"))
	f.Add([]byte("VmRSS:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := ParseStatus(b); err != nil && m != (Memory{}) {
			t.Errorf("error %v with a result %+v", err, m)
		}
	})
}
