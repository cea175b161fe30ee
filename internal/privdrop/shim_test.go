package privdrop

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseShimArgs(t *testing.T) {
	// A variable, so the test compiles where int has 32 bits.
	largestID := uint64(maxID)
	tests := []struct {
		name    string
		args    []string
		want    shimSpec
		wantErr string
		bits64  bool // ids above 2^31 need a 64-bit int
	}{
		{
			name: "program only",
			args: []string{"--", "/bin/cat", "cat", "/proc/self/status"},
			want: shimSpec{Gate: -1, UID: -1, GID: -1, Path: "/bin/cat", Argv: []string{"cat", "/proc/self/status"}},
		},
		{
			name: "all flags",
			args: []string{"--uid", "1000", "--gid", "100", "--groups", "4,27,100", "--pdeathsig", "9", "--", "/bin/sh", "sh"},
			want: shimSpec{Gate: -1, UID: 1000, GID: 100, Groups: []int{4, 27, 100}, Pdeathsig: 9, Path: "/bin/sh", Argv: []string{"sh"}},
		},
		{
			name: "empty groups clears them",
			args: []string{"--uid", "0", "--gid", "0", "--groups", "", "--", "p", "a0"},
			want: shimSpec{Gate: -1, UID: 0, GID: 0, Groups: []int{}, Path: "p", Argv: []string{"a0"}},
		},
		{
			name: "argv keeps empty and flag-like arguments",
			args: []string{"--", "/x", "", "--uid", "--", " a b "},
			want: shimSpec{Gate: -1, UID: -1, GID: -1, Path: "/x", Argv: []string{"", "--uid", "--", " a b "}},
		},
		{
			name:   "largest id",
			args:   []string{"--uid", "4294967294", "--gid", "4294967294", "--", "/x", "x"},
			want:   shimSpec{Gate: -1, UID: int(largestID), GID: int(largestID), Path: "/x", Argv: []string{"x"}},
			bits64: true,
		},
		{
			name: "gated",
			args: []string{"--gate", "5", "--mountns", "1", "--exec-notify", "1", "--", "/x", "x"},
			want: shimSpec{Gate: 5, UID: -1, GID: -1, MountNS: true, Notify: true, Path: "/x", Argv: []string{"x"}},
		},
		{name: "namespace without gate", args: []string{"--mountns", "1", "--", "/x", "x"}, wantErr: "need --gate"},
		{name: "gate on stdio", args: []string{"--gate", "1", "--", "/x", "x"}, wantErr: "not an inherited extra file"},
		{name: "bad switch", args: []string{"--gate", "3", "--exec-notify", "yes", "--", "/x", "x"}, wantErr: "want 1"},
		{name: "no separator", args: []string{"--uid", "1"}, wantErr: "missing --"},
		{name: "nothing", args: nil, wantErr: "missing --"},
		{name: "no argv0", args: []string{"--", "/bin/true"}, wantErr: "want a path and argv[0]"},
		{name: "empty path", args: []string{"--", "", "x"}, wantErr: "empty program path"},
		{name: "unknown flag", args: []string{"--user", "root", "--", "/x", "x"}, wantErr: "unknown flag"},
		{name: "flag twice", args: []string{"--uid", "1", "--uid", "0", "--", "/x", "x"}, wantErr: "given twice"},
		{name: "flag without value", args: []string{"--uid"}, wantErr: "needs a value"},
		{name: "negative uid", args: []string{"--uid", "-1", "--", "/x", "x"}, wantErr: "bad number"},
		{name: "signed uid", args: []string{"--uid", "+1", "--", "/x", "x"}, wantErr: "bad number"},
		{name: "reserved uid", args: []string{"--uid", "4294967295", "--", "/x", "x"}, wantErr: "out of range"},
		{name: "huge gid", args: []string{"--gid", "99999999999", "--", "/x", "x"}, wantErr: "bad number"},
		{name: "empty uid", args: []string{"--uid", "", "--", "/x", "x"}, wantErr: "bad number"},
		{name: "bad group", args: []string{"--groups", "1,,2", "--", "/x", "x"}, wantErr: "bad number"},
		{name: "signal zero", args: []string{"--pdeathsig", "0", "--", "/x", "x"}, wantErr: "signal 0"},
		{name: "signal too large", args: []string{"--pdeathsig", "65", "--", "/x", "x"}, wantErr: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bits64 && strconv.IntSize < 64 {
				t.Skip("needs a 64-bit int")
			}
			got, err := parseShimArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseShimArgs(%q) error = %v, want it to contain %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseShimArgs(%q): %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseShimArgs(%q) (-want +got):\n%s", tt.args, diff)
			}
			if diff := cmp.Diff(tt.args, got.args()); diff != "" {
				t.Errorf("args() does not reproduce the input (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseShimArgs checks that the parser never panics and that whatever it
// accepts renders back to arguments that parse to the same spec.
func FuzzParseShimArgs(f *testing.F) {
	for _, args := range [][]string{
		{"--", "/bin/cat", "cat"},
		{"--uid", "1000", "--gid", "100", "--groups", "4,27", "--pdeathsig", "15", "--", "/bin/sh", "sh", "-c", "exit 7"},
		{"--groups", "", "--", "p", ""},
		{"--uid", "4294967295", "--", "/x", "x"},
		{"--uid", "1", "--uid", "2", "--", "/x", "x"},
		{"--pdeathsig"},
		{"--", ""},
	} {
		f.Add(strings.Join(args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := parseShimArgs(strings.Split(in, "\x00"))
		if err != nil {
			return
		}
		if s.Path == "" || len(s.Argv) == 0 {
			t.Fatalf("accepted %q without a path and argv[0]: %+v", in, s)
		}
		if s.UID < -1 || s.GID < -1 || int64(s.UID) > maxID || int64(s.GID) > maxID || s.Pdeathsig < 0 || s.Pdeathsig > 64 {
			t.Fatalf("accepted %q with ids out of range: %+v", in, s)
		}
		again, err := parseShimArgs(s.args())
		if err != nil {
			t.Fatalf("rendered %+v as %q, which does not parse: %v", s, s.args(), err)
		}
		if diff := cmp.Diff(s, again); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", in, diff)
		}
	})
}
