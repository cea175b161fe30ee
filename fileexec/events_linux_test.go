//go:build linux

package fileexec

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// metadata encodes one struct fanotify_event_metadata of length evLen.
func metadata(evLen uint32, vers uint8, mask uint64, fd, pid int32) []byte {
	b := make([]byte, max(int(evLen), metadataLen))
	binary.NativeEndian.PutUint32(b[0:], evLen)
	b[4] = vers
	binary.NativeEndian.PutUint16(b[6:], metadataLen)
	binary.NativeEndian.PutUint64(b[8:], mask)
	binary.NativeEndian.PutUint32(b[16:], uint32(fd))
	binary.NativeEndian.PutUint32(b[20:], uint32(pid))
	return b
}

func TestParseEvents(t *testing.T) {
	v := uint8(unix.FANOTIFY_METADATA_VERSION)
	tests := []struct {
		name    string
		in      []byte
		want    []rawEvent
		wantErr bool
	}{
		{
			name: "two",
			in: append(metadata(24, v, unix.FAN_OPEN_PERM, 5, 100),
				metadata(32, v, unix.FAN_OPEN_EXEC_PERM, 6, 101)...), // the second with 8 bytes of info
			want: []rawEvent{{mask: unix.FAN_OPEN_PERM, fd: 5, tid: 100}, {mask: unix.FAN_OPEN_EXEC_PERM, fd: 6, tid: 101}},
		},
		{name: "no fd", in: metadata(24, v, unix.FAN_Q_OVERFLOW, -1, 0), want: []rawEvent{{mask: unix.FAN_Q_OVERFLOW, fd: -1}}},
		{name: "empty", in: nil},
		{name: "short", in: metadata(24, v, unix.FAN_OPEN_PERM, 5, 100)[:20], wantErr: true},
		{name: "other version", in: metadata(24, v+1, unix.FAN_OPEN_PERM, 5, 100), wantErr: true},
		{name: "length too small", in: metadata(8, v, unix.FAN_OPEN_PERM, 5, 100), wantErr: true},
		{
			name:    "length past the end keeps the events before",
			in:      append(metadata(24, v, unix.FAN_OPEN_PERM, 5, 100), metadata(4096, v, unix.FAN_OPEN_PERM, 6, 100)[:24]...),
			want:    []rawEvent{{mask: unix.FAN_OPEN_PERM, fd: 5, tid: 100}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEvents(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(rawEvent{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseEvents(f *testing.F) {
	v := uint8(unix.FANOTIFY_METADATA_VERSION)
	f.Add(metadata(24, v, unix.FAN_OPEN_PERM, 5, 100))
	f.Add(append(metadata(24, v, unix.FAN_OPEN_PERM, 5, 100), metadata(32, v, unix.FAN_OPEN_EXEC_PERM, 6, 101)...))
	f.Add(metadata(0, v, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, _ := parseEvents(b)
		if len(evs)*metadataLen > len(b) {
			t.Errorf("%d events from %d bytes", len(evs), len(b))
		}
	})
}
