package attribution

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// statLine formats a /proc/PID/stat line the way the kernel does, with the
// fields this package reads set and the others plausible.
func statLine(pid int, comm string, ppid int, startTicks uint64) string {
	return fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
		pid, comm, ppid, pid, pid, startTicks)
}

// netTCPHeader is the first line of /proc/net/tcp.
const netTCPHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// netTCPLine formats one socket line of /proc/net/tcp{,6} as the kernel of
// this host would: each 32-bit word of the address in host order.
func netTCPLine(sl int, local, remote netip.AddrPort, state string, inode uint64) string {
	return fmt.Sprintf("%4d: %s %s %s 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 20 4 30 10 -1\n",
		sl, hexAddrPort(local), hexAddrPort(remote), state, inode)
}

func hexAddrPort(ap netip.AddrPort) string {
	var b strings.Builder
	a := ap.Addr().AsSlice()
	for i := 0; i < len(a); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(a[i:]))
	}
	fmt.Fprintf(&b, ":%04X", ap.Port())
	return b.String()
}

// skipUnlessLittleEndian skips tests whose fixtures are the literal output
// of a little-endian kernel.
func skipUnlessLittleEndian(t testing.TB) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("fixtures are /proc/net/tcp output of a little-endian kernel")
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    procStat
		wantErr bool
	}{
		{
			name: "plain",
			in:   statLine(1234, "bash", 1000, 98765),
			want: procStat{pid: 1234, comm: "bash", state: 'S', ppid: 1000, startTicks: 98765},
		},
		{
			name: "comm with spaces",
			in:   statLine(7, "Web Content", 1, 5),
			want: procStat{pid: 7, comm: "Web Content", state: 'S', ppid: 1, startTicks: 5},
		},
		{
			name: "comm with parentheses that look like the end",
			in:   statLine(42, "a) (b) S 1 2 3 (", 41, 300),
			want: procStat{pid: 42, comm: "a) (b) S 1 2 3 (", state: 'S', ppid: 41, startTicks: 300},
		},
		{
			name: "empty comm",
			in:   statLine(9, "", 0, 1),
			want: procStat{pid: 9, comm: "", state: 'S', ppid: 0, startTicks: 1},
		},
		{
			name: "kernel line without trailing newline, fields up to starttime only",
			in:   "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3",
			want: procStat{pid: 2, comm: "kthreadd", state: 'S', ppid: 0, startTicks: 3},
		},
		{name: "empty", in: "", wantErr: true},
		{name: "no parentheses", in: "1 init S 0", wantErr: true},
		{name: "close before open", in: "1 )init( S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 3", wantErr: true},
		{name: "truncated before starttime", in: "1 (init) S 0 1 1 0 -1 0 0 0 0 0", wantErr: true},
		{name: "pid not a number", in: strings.Replace(statLine(5, "x", 1, 1), "5", "five", 1), wantErr: true},
		{name: "pid zero", in: statLine(0, "x", 1, 1), wantErr: true},
		{name: "negative ppid", in: "5 (x) S -1 5 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1", wantErr: true},
		{name: "state too long", in: "5 (x) SS 1 5 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1", wantErr: true},
		{name: "starttime not a number", in: "5 (x) S 1 5 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1x", wantErr: true},
		{name: "starttime overflows", in: "5 (x) S 1 5 5 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(procStat{})); diff != "" {
				t.Errorf("parseStat(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseBtimeAndUID(t *testing.T) {
	stat := "cpu  1 2 3\ncpu0 1 2 3\nintr 5 0\nctxt 100\nbtime 1700000000\nprocesses 9\n"
	if got, ok := parseBtime([]byte(stat)); !ok || got != 1700000000 {
		t.Errorf("parseBtime = %d, %v; want 1700000000, true", got, ok)
	}
	if _, ok := parseBtime([]byte("cpu 1\nbtime x\n")); ok {
		t.Error("parseBtime accepted a non-numeric btime")
	}
	status := "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t5\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n"
	if got, ok := parseStatusUID([]byte(status)); !ok || got != 1000 {
		t.Errorf("parseStatusUID = %d, %v; want 1000 (real uid), true", got, ok)
	}
	if _, ok := parseStatusUID([]byte("Name:\tx\n")); ok {
		t.Error("parseStatusUID accepted a status without Uid")
	}
}

type tcpEntry struct {
	Local, Remote netip.AddrPort
	Inode         uint64
}

func TestParseNetTCP(t *testing.T) {
	skipUnlessLittleEndian(t)
	ap := netip.MustParseAddrPort
	tests := []struct {
		name string
		in   string
		want []tcpEntry
	}{
		{
			name: "tcp",
			in: netTCPHeader +
				"   0: 0100007F:0277 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n" +
				"   1: 020200C0:B26A 507100CB:01BB 06 00000000:00000000 03:00000D8D 00000000     0        0 0 3 000000000cb52acc\n",
			want: []tcpEntry{
				{ap("127.0.0.1:631"), ap("0.0.0.0:0"), 12345},
				{ap("192.0.2.2:45674"), ap("203.0.113.80:443"), 0},
			},
		},
		{
			name: "tcp6 with loopback, v4-mapped and link-local",
			in: "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
				"   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:D431 01 00000000:00000000 00:00000000 00000000  1000        0 67890 1 0000000000000000 20 4 30 10 -1\n" +
				"   1: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 67891 1 0000000000000000 20 4 30 10 -1\n" +
				"   2: 000080FE000000000000000001000000:0016 000080FE000000000000000002000000:C350 01 00000000:00000000 00:00000000 00000000     0        0 67892 1 0000000000000000 20 4 30 10 -1\n",
			want: []tcpEntry{
				{ap("[::1]:8080"), ap("[::1]:54321"), 67890},
				{ap("[::ffff:127.0.0.1]:40000"), ap("[::ffff:127.0.0.1]:8080"), 67891},
				{ap("[fe80::1]:22"), ap("[fe80::2]:50000"), 67892},
			},
		},
		{
			name: "lowercase hex, CRLF and garbage lines skipped",
			in: "garbage\n" +
				"   0: 0100007f:1f90 0100007F:0050 01 0 0 0 0 0 777\r\n" +
				"   1: 0100007F:1F90 0100007F 01 0 0 0 0 0 778\n" +
				"   2: 01007F:1F90 0100007F:0050 01 0 0 0 0 0 779\n" +
				"   3: 0100007F:1F90 0100007F:0050 01 0 0 0 0 0 -1\n" +
				"   4 0100007F:1F90 0100007F:0050 01 0 0 0 0 0 780\n" +
				"   5: 0100007F:1F900 0100007F:0050 01 0 0 0 0 0 781\n" +
				"   6: 0100007F:1F90 0100007F:0050 01 0 0 0 0\n",
			want: []tcpEntry{{ap("127.0.0.1:8080"), ap("127.0.0.1:80"), 777}},
		},
		{name: "empty", in: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []tcpEntry
			parseNetTCP([]byte(tt.in), func(l, r netip.AddrPort, ino uint64) bool {
				got = append(got, tcpEntry{l, r, ino})
				return true
			})
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("parseNetTCP (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("stops when fn returns false", func(t *testing.T) {
		in := netTCPLine(0, ap("127.0.0.1:1"), ap("127.0.0.1:2"), "01", 1) + netTCPLine(1, ap("127.0.0.1:3"), ap("127.0.0.1:4"), "01", 2)
		calls := 0
		parseNetTCP([]byte(in), func(netip.AddrPort, netip.AddrPort, uint64) bool { calls++; return false })
		if calls != 1 {
			t.Errorf("fn called %d times after returning false, want 1", calls)
		}
	})
}

func TestNetTCPLineFormatterMatchesKernel(t *testing.T) {
	skipUnlessLittleEndian(t)
	// The formatter builds the fake /proc trees; check it against lines a
	// kernel wrote.
	for in, want := range map[string]string{
		"127.0.0.1:631":            "0100007F:0277",
		"[::1]:8080":               "00000000000000000000000001000000:1F90",
		"[::ffff:127.0.0.1]:40000": "0000000000000000FFFF00000100007F:9C40",
	} {
		if got := hexAddrPort(netip.MustParseAddrPort(in)); got != want {
			t.Errorf("hexAddrPort(%s) = %s, want %s", in, got, want)
		}
	}
}

func FuzzParseNetTCP(f *testing.F) {
	f.Add([]byte(netTCPHeader + "   0: 0100007F:0277 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n"))
	f.Add([]byte("   0: 0000000000000000FFFF00000100007F:9C40 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 67891 1 0000000000000000 20 4 30 10 -1\n"))
	f.Add([]byte("   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:D431 01 0 0 0 0 0 1\n"))
	f.Add([]byte("0: :  : : 1"))
	f.Add([]byte(":\n:\n\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parseNetTCP(data, func(l, r netip.AddrPort, ino uint64) bool {
			if !l.IsValid() || !r.IsValid() {
				t.Fatalf("invalid address parsed from %q: %v %v", data, l, r)
			}
			// What was parsed survives a trip through the kernel's format.
			var again []tcpEntry
			parseNetTCP([]byte(netTCPLine(0, l, r, "01", ino)), func(l, r netip.AddrPort, ino uint64) bool {
				again = append(again, tcpEntry{l, r, ino})
				return true
			})
			if len(again) != 1 || again[0] != (tcpEntry{l, r, ino}) {
				t.Fatalf("round trip of %v %v %d gave %v", l, r, ino, again)
			}
			return true
		})
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(1234, "bash", 1000, 98765)))
	f.Add([]byte(statLine(42, "a) (b) S 1 2 3 (", 41, 300)))
	f.Add([]byte("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3"))
	f.Add([]byte("1 ()"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseStat(data)
		if err != nil {
			return
		}
		if st.pid <= 0 || st.ppid < 0 {
			t.Fatalf("parseStat(%q) = %+v: pid must be positive, ppid not negative", data, st)
		}
		again, err := parseStat([]byte(statLine(st.pid, st.comm, st.ppid, st.startTicks)))
		if err != nil || again.pid != st.pid || again.comm != st.comm || again.ppid != st.ppid || again.startTicks != st.startTicks {
			t.Fatalf("round trip of %+v gave %+v, %v", st, again, err)
		}
	})
}
