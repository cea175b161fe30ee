package fileexec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []mount
		wantErr bool
	}{
		{
			name: "lines",
			in: "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
				"27 1 254:0 / / rw,relatime shared:1 master:2 - ext4 /dev/vda rw,discard\n" +
				`41 27 0:38 / /mnt/with\040space\134x rw - tmpfs tmpfs rw` + "\n",
			want: []mount{
				{ID: 22, Parent: 27, Dev: "0:21", Root: "/", Point: "/proc", FSType: "proc"},
				{ID: 27, Parent: 1, Dev: "254:0", Root: "/", Point: "/", FSType: "ext4"},
				{ID: 41, Parent: 27, Dev: "0:38", Root: "/", Point: `/mnt/with space\x`, FSType: "tmpfs"},
			},
		},
		{
			name: "bind mount",
			in:   `52 27 254:0 /home/u/.ssh /tmp/x\040y rw - ext4 /dev/vda rw` + "\n",
			want: []mount{{ID: 52, Parent: 27, Dev: "254:0", Root: "/home/u/.ssh", Point: "/tmp/x y", FSType: "ext4"}},
		},
		{name: "bad parent", in: "22 x 0:21 / /proc rw - proc proc rw\n", wantErr: true},
		{name: "empty", in: "", want: nil},
		{name: "no separator", in: "22 27 0:21 / /proc rw,relatime proc proc rw\n", wantErr: true},
		{name: "separator too early", in: "22 27 - / /proc\n", wantErr: true},
		{name: "bad id", in: "x 27 0:21 / /proc rw - proc proc rw\n", wantErr: true},
		{name: "relative point", in: "22 27 0:21 / proc rw - proc proc rw\n", wantErr: true},
		{name: "no fstype", in: "22 27 0:21 / /proc rw -\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnescapeOctal(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/a`, `/a`},
		{`/a\040b`, `/a b`},
		{`/a\011\012\134`, "/a\t\n\\"},
		{`/a\0`, `/a\0`},     // cut short
		{`/a\777`, `/a\777`}, // not a byte
		{`/a\08x`, `/a\08x`},
	}
	for _, tt := range tests {
		if got := unescapeOctal(tt.in); got != tt.want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAccessFromSyscall(t *testing.T) {
	tests := []struct {
		name, goarch, line string
		want               event.FileAccess
	}{
		{"amd64 openat read", "amd64", "257 0xffffff9c 0x7ffd1234 0x80000 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileRead},
		{"amd64 openat write only", "amd64", "257 0xffffff9c 0x7ffd1234 0x80001 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 openat read write", "amd64", "257 0xffffff9c 0x7ffd1234 0x2 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 openat create", "amd64", "257 0xffffff9c 0x7ffd1234 0x40 0x1a4 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 openat truncate", "amd64", "257 0xffffff9c 0x7ffd1234 0x200 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 openat append", "amd64", "257 0xffffff9c 0x7ffd1234 0x401 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 open read", "amd64", "2 0x7ffd1234 0x0 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileRead},
		{"amd64 open write", "amd64", "2 0x7ffd1234 0x1 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 creat", "amd64", "85 0x7ffd1234 0x1a4 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileWrite},
		{"amd64 open_by_handle_at read", "amd64", "304 0x3 0x7ffd1234 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileRead},
		{"amd64 openat2 is unknown", "amd64", "437 0xffffff9c 0x7ffd1234 0x7ffd2000 0x18 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"amd64 io_uring_enter is unknown", "amd64", "426 0x3 0x1 0x1 0x1 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"amd64 execve", "amd64", "59 0x7ffd1234 0x7ffd2000 0x7ffd3000 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileExec},
		{"amd64 execveat", "amd64", "322 0x3 0x7ffd1234 0x7ffd2000 0x7ffd3000 0x0 0x0 0x7ffd0000 0x7f000000", event.FileExec},
		{"arm64 openat read", "arm64", "56 0xffffffffffffff9c 0xffffd1234 0x80000 0x0 0x0 0x0 0xffffd0000 0xffff00000", event.FileRead},
		{"arm64 openat write", "arm64", "56 0xffffffffffffff9c 0xffffd1234 0x80241 0x1b6 0x0 0x0 0xffffd0000 0xffff00000", event.FileWrite},
		{"arm64 execve", "arm64", "221 0xffffd1234 0xffffd2000 0xffffd3000 0x0 0x0 0x0 0xffffd0000 0xffff00000", event.FileExec},
		{"arm64 nr 2 is not open", "arm64", "2 0x7ffd1234 0x0 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"amd64 nr 56 is not openat", "amd64", "56 0xffffff9c 0x7ffd1234 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"unknown architecture", "riscv64", "56 0xffffff9c 0x7ffd1234 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"running", "amd64", "running", event.FileUnknown},
		{"not in a system call", "amd64", "-1 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"bad flags", "amd64", "257 0xffffff9c 0x7ffd1234 zz 0x0 0x0 0x0 0x7ffd0000 0x7f000000", event.FileUnknown},
		{"empty", "amd64", "", event.FileUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nrs, _ := syscallsFor(tt.goarch)
			if got := accessFromSyscall(nrs, []byte(tt.line)); got != tt.want {
				t.Errorf("access = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseTgid(t *testing.T) {
	tests := []struct {
		name, in string
		want     int
		wantErr  bool
	}{
		{"status", "Name:\tcat\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\n", 4242, false},
		{"name that looks like a field", "Name:\tTgid:\\t1\nTgid:\t7\n", 7, false},
		{"missing", "Name:\tcat\nPid:\t1\n", 0, true},
		{"not a number", "Tgid:\tx\n", 0, true},
		{"zero", "Tgid:\t0\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTgid([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseTgid = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("22 27 0:21 / /proc rw,relatime - proc proc rw\n27 1 254:0 / / rw shared:1 - ext4 /dev/vda rw\n"))
	f.Add([]byte(`41 27 0:38 / /mnt/a\040b rw - tmpfs tmpfs rw`))
	f.Add([]byte("1 2 3 4 5 6 -"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseMountinfo(b)
		if err != nil {
			return
		}
		for _, m := range ms {
			if !strings.HasPrefix(m.Point, "/") || m.ID < 0 {
				t.Errorf("parsed %+v", m)
			}
		}
	})
}

func FuzzAccessFromSyscall(f *testing.F) {
	f.Add([]byte("257 0xffffff9c 0x7ffd1234 0x80000 0x0 0x0 0x0 0x7ffd0000 0x7f000000"))
	f.Add([]byte("2 0x7ffd1234 0x1 0x0 0x0 0x0 0x0 0x7ffd0000 0x7f000000"))
	f.Add([]byte("running"))
	f.Add([]byte("-1 0x0 0x0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, arch := range []string{"amd64", "arm64", "other"} {
			nrs, _ := syscallsFor(arch)
			switch a := accessFromSyscall(nrs, b); a {
			case event.FileRead, event.FileWrite, event.FileExec, event.FileUnknown:
			default:
				t.Errorf("access %q", a)
			}
		}
	})
}

func FuzzParseTgid(f *testing.F) {
	f.Add([]byte("Name:\tcat\nTgid:\t4242\n"))
	f.Add([]byte("Tgid:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := parseTgid(b); err == nil && n <= 0 {
			t.Errorf("tgid %d without error", n)
		}
	})
}
