package attribution

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSocketLookupFake(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	local, remote := ap("127.0.0.1:40000"), ap("127.0.0.1:8080")
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 5, comm: "listed", startTicks: 1, fds: map[int]string{3: "socket:[42]"}})
	f.add(fakeProcess{pid: 6, comm: "unlisted", startTicks: 1, fds: map[int]string{3: "socket:[43]"}})
	f.write("net/tcp", netTCPHeader+netTCPLine(0, local, remote, "01", 42))

	tests := []struct {
		name        string
		local       netip.AddrPort
		ino         uint64
		err         error
		want        int
		wantErr     error
		wantProcNet bool // net/tcp read
	}{
		{name: "the lookup's answer is used", local: local, ino: 42, want: 5},
		{name: "even for a socket /proc/net does not list", local: local, ino: 43, want: 6},
		{name: "unsupported falls back to /proc/net", local: local, err: errors.ErrUnsupported, want: 5, wantProcNet: true},
		{name: "not found falls back to /proc/net", local: local, err: ErrNotFound, want: 5, wantProcNet: true},
		{name: "inode 0 falls back to /proc/net", local: local, want: 5, wantProcNet: true},
		{name: "found by neither", local: ap("127.0.0.1:40001"), err: ErrNotFound, wantErr: ErrNotFound, wantProcNet: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rfs := &recordingFS{FS: DirFS(f.root)}
			var asked []netip.AddrPort
			tbl := NewTable(rfs, WithSocketLookup(func(l, r netip.AddrPort) (uint64, error) {
				asked = append(asked, l, r)
				return tt.ino, tt.err
			}))
			got, err := tbl.SocketOwner(tt.local, remote, nil)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("SocketOwner = %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
			if !slices.Equal(asked, []netip.AddrPort{tt.local, remote}) {
				t.Errorf("lookup asked for %v, want once for %v -> %v", asked, tt.local, remote)
			}
			if read := slices.Contains(rfs.fileReads, "net/tcp"); read != tt.wantProcNet {
				t.Errorf("net/tcp read = %v, want %v", read, tt.wantProcNet)
			}
		})
	}
}

// TestSessionSocketOwner walks one session through its lookups; each step
// depends on those before it.
func TestSessionSocketOwner(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	proxy := ap("127.0.0.1:8080")
	// Socket inode i is 127.0.0.1:(40000+i) -> proxy.
	client := func(inode int) netip.AddrPort { return netip.AddrPortFrom(proxy.Addr(), uint16(40000+inode)) }
	sock := func(inode int) string { return "socket:[" + strconv.Itoa(inode) + "]" }
	var lines strings.Builder
	lines.WriteString(netTCPHeader)
	for i := 1; i <= 9; i++ {
		lines.WriteString(netTCPLine(i, client(i), proxy, "01", uint64(i)))
	}

	f := newFakeProc(t)
	f.write("net/tcp", lines.String())
	f.add(fakeProcess{pid: 1, comm: "init", startTicks: 1})
	f.add(fakeProcess{pid: 100, ppid: 1, comm: "agent", startTicks: 10, fds: map[int]string{3: sock(1)}})
	f.add(fakeProcess{pid: 101, ppid: 100, comm: "tool", startTicks: 20, fds: map[int]string{3: sock(2), 4: sock(3)}})
	f.add(fakeProcess{pid: 104, ppid: 100, comm: "idle", startTicks: 25})
	f.add(fakeProcess{pid: 105, ppid: 100, comm: "idle", startTicks: 26})
	f.add(fakeProcess{pid: 200, ppid: 1, comm: "other", startTicks: 5, fds: map[int]string{3: sock(6)}})

	now := time.Unix(1000, 0)
	rfs := &recordingFS{FS: DirFS(f.root)}
	tbl := NewTable(rfs, WithClock(func() time.Time { return now }))
	const root = 100

	steps := []struct {
		name          string
		before        func() // changes the tree or the clock
		inode         int
		want          int
		wantErr       error
		wantFDReads   []string
		wantStatReads bool // Descendants was read
	}{
		{
			name: "the first lookup reads the session", inode: 2, want: 101,
			wantFDReads: []string{"100/fd", "101/fd"}, wantStatReads: true,
		},
		{
			name: "the last owner is searched first", inode: 3, want: 101,
			wantFDReads: []string{"101/fd"},
		},
		{
			name: "then the session as read before", inode: 1, want: 100,
			wantFDReads: []string{"101/fd", "100/fd"},
		},
		{
			name: "a process younger than that is found by reading the session again",
			before: func() {
				f.add(fakeProcess{pid: 102, ppid: 101, comm: "curl", startTicks: 30, fds: map[int]string{3: sock(4)}})
			},
			inode: 4, want: 102,
			wantFDReads: []string{"100/fd", "101/fd", "104/fd", "105/fd", "102/fd"}, wantStatReads: true,
		},
		{
			name: "within the TTL the session as read before is searched",
			before: func() {
				now = now.Add(descendantsTTL - time.Millisecond)
				f.add(fakeProcess{pid: 104, ppid: 100, comm: "idle", startTicks: 25, fds: map[int]string{3: sock(5)}})
			},
			inode: 5, want: 104,
			wantFDReads: []string{"102/fd", "100/fd", "101/fd", "104/fd"},
		},
		{
			name: "after the TTL the session is read again first",
			before: func() {
				now = now.Add(time.Millisecond)
				f.add(fakeProcess{pid: 105, ppid: 100, comm: "idle", startTicks: 26, fds: map[int]string{3: sock(7)}})
			},
			inode: 7, want: 105,
			wantFDReads: []string{"104/fd", "102/fd", "100/fd", "101/fd", "105/fd"}, wantStatReads: true,
		},
		{
			name: "an owner outside the session is found by the full scan", inode: 6, want: 200,
			wantFDReads: []string{"105/fd", "104/fd", "102/fd", "100/fd", "101/fd", "1/fd", "200/fd"}, wantStatReads: true,
		},
		{
			name: "and is not searched first next time", inode: 3, want: 101,
			wantFDReads: []string{"105/fd", "104/fd", "102/fd", "100/fd", "101/fd"},
		},
		{
			name: "a socket without owner", inode: 8, wantErr: ErrNotFound,
			wantFDReads: []string{"101/fd", "105/fd", "104/fd", "102/fd", "100/fd", "1/fd", "200/fd"}, wantStatReads: true,
		},
		{
			name: "no such socket", inode: 99, wantErr: ErrNotFound,
			wantFDReads: []string{},
		},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		rfs.reset()
		got, err := tbl.SessionSocketOwner(client(st.inode), proxy, root)
		if got != st.want || !errors.Is(err, st.wantErr) {
			t.Errorf("%s: SessionSocketOwner(socket %d) = %d, %v; want %d, %v", st.name, st.inode, got, err, st.want, st.wantErr)
		}
		if diff := cmp.Diff(st.wantFDReads, rfs.fdReads, cmp.Comparer(func(a, b []string) bool {
			return len(a) == 0 && len(b) == 0 || slices.Equal(a, b)
		})); diff != "" {
			t.Errorf("%s: fd directories read (-want +got):\n%s", st.name, diff)
		}
		statReads := slices.ContainsFunc(rfs.fileReads, func(name string) bool { return strings.HasSuffix(name, "/stat") })
		if statReads != st.wantStatReads {
			t.Errorf("%s: process stats read = %v, want %v (files read: %q)", st.name, statReads, st.wantStatReads, rfs.fileReads)
		}
	}
}

func TestSessionBounds(t *testing.T) {
	tbl := NewTable(DirFS(t.TempDir()))
	for pid := 1; pid <= maxRecentOwners+3; pid++ {
		tbl.rememberOwner(1, pid)
	}
	tbl.rememberOwner(1, 5) // moves to the front
	want := []int{5, 11, 10, 9, 8, 7, 6, 4}
	if diff := cmp.Diff(want, tbl.recentOwners(1)); diff != "" {
		t.Errorf("recentOwners (-want +got):\n%s", diff)
	}
	for root := range 2 * maxSessions {
		tbl.rememberOwner(root+2, 1)
	}
	if n := len(tbl.sessions); n > maxSessions {
		t.Errorf("%d sessions remembered, want at most %d", n, maxSessions)
	}
}

func TestSessionSocketOwnerConcurrent(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	proxy := ap("127.0.0.1:8080")
	f := newFakeProc(t)
	f.add(fakeProcess{pid: 100, ppid: 1, comm: "agent", startTicks: 10, fds: map[int]string{3: "socket:[1]"}})
	f.add(fakeProcess{pid: 101, ppid: 100, comm: "tool", startTicks: 20, fds: map[int]string{3: "socket:[2]"}})
	f.write("net/tcp", netTCPHeader+
		netTCPLine(0, ap("127.0.0.1:40001"), proxy, "01", 1)+
		netTCPLine(1, ap("127.0.0.1:40002"), proxy, "01", 2))
	var ticks atomic.Int64 // each reading of the clock is 300ms later
	tbl := NewTable(DirFS(f.root), WithClock(func() time.Time {
		return time.Unix(0, 0).Add(time.Duration(ticks.Add(1)) * 300 * time.Millisecond)
	}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				sock := 1 + (g+i)%2
				got, err := tbl.SessionSocketOwner(netip.AddrPortFrom(proxy.Addr(), uint16(40000+sock)), proxy, 100)
				if want := 99 + sock; err != nil || got != want {
					t.Errorf("SessionSocketOwner(socket %d) = %d, %v; want %d", sock, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
