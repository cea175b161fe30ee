package attribution

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// nlMsg frames body as one netlink message, padded to 4 bytes.
func nlMsg(typ uint16, seq uint32, body []byte) []byte {
	n := nlmsgHdrLen + len(body)
	b := make([]byte, (n+3)&^3)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(n))
	ne.PutUint16(b[4:], typ)
	ne.PutUint32(b[8:], seq)
	copy(b[nlmsgHdrLen:], body)
	return b
}

// inetDiagMsg encodes s as the kernel does, followed by attrs.
func inetDiagMsg(s diagSocket, attrs []byte) []byte {
	m := make([]byte, inetDiagMsgLen, inetDiagMsgLen+len(attrs))
	m[0], m[1] = s.family, s.state
	id := m[4:]
	binary.BigEndian.PutUint16(id[0:], s.local.Port())
	binary.BigEndian.PutUint16(id[2:], s.remote.Port())
	if s.family == linuxAFInet {
		l, r := s.local.Addr().As4(), s.remote.Addr().As4()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	} else {
		l, r := s.local.Addr().As16(), s.remote.Addr().As16()
		copy(id[4:], l[:])
		copy(id[20:], r[:])
	}
	rest := m[4+inetDiagSockIDLen:]
	binary.NativeEndian.PutUint32(rest[12:], s.uid)
	binary.NativeEndian.PutUint32(rest[16:], s.inode)
	return append(m, attrs...)
}

func nlErrorMsg(seq uint32, errno int32) []byte {
	body := make([]byte, 4+nlmsgHdrLen) // errno, then the request's header
	binary.NativeEndian.PutUint32(body, uint32(-errno))
	return nlMsg(nlmsgError, seq, body)
}

func TestInetDiagRequest(t *testing.T) {
	ap := netip.MustParseAddrPort
	ne := binary.NativeEndian
	tests := []struct {
		name                 string
		family               uint8
		local, remote        netip.AddrPort
		wantSrc, wantDst     []byte
		wantSport, wantDport uint16
	}{
		{
			name: "ipv4", family: linuxAFInet, local: ap("127.0.0.1:40000"), remote: ap("127.0.0.2:8080"),
			wantSrc:   append([]byte{127, 0, 0, 1}, make([]byte, 12)...),
			wantDst:   append([]byte{127, 0, 0, 2}, make([]byte, 12)...),
			wantSport: 40000, wantDport: 8080,
		},
		{
			name: "ipv4 asked as v4-mapped", family: linuxAFInet6, local: ap("127.0.0.1:40000"), remote: ap("127.0.0.2:8080"),
			wantSrc:   []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1},
			wantDst:   []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2},
			wantSport: 40000, wantDport: 8080,
		},
		{
			name: "ipv6", family: linuxAFInet6, local: ap("[::1]:1"), remote: ap("[fe80::2]:65535"),
			wantSrc:   netip.MustParseAddr("::1").AsSlice(),
			wantDst:   netip.MustParseAddr("fe80::2").AsSlice(),
			wantSport: 1, wantDport: 65535,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := inetDiagRequest(77, tt.family, tt.local, tt.remote)
			if len(b) != 72 {
				t.Fatalf("request is %d bytes, want 16 (nlmsghdr) + 56 (inet_diag_req_v2)", len(b))
			}
			type fields struct {
				Len                  uint32
				Type, Flags          uint16
				Seq, PortID          uint32
				Family, Proto, Ext   uint8
				States               uint32
				Sport, Dport         uint16
				Src, Dst             []byte
				If, Cookie0, Cookie1 uint32
			}
			got := fields{
				Len: ne.Uint32(b[0:]), Type: ne.Uint16(b[4:]), Flags: ne.Uint16(b[6:]), Seq: ne.Uint32(b[8:]), PortID: ne.Uint32(b[12:]),
				Family: b[16], Proto: b[17], Ext: b[18], States: ne.Uint32(b[20:]),
				Sport: binary.BigEndian.Uint16(b[24:]), Dport: binary.BigEndian.Uint16(b[26:]),
				Src: b[28:44], Dst: b[44:60], If: ne.Uint32(b[60:]), Cookie0: ne.Uint32(b[64:]), Cookie1: ne.Uint32(b[68:]),
			}
			want := fields{
				Len: 72, Type: 20, Flags: 1, Seq: 77,
				Family: tt.family, Proto: 6, States: 0xffffffff,
				Sport: tt.wantSport, Dport: tt.wantDport, Src: tt.wantSrc, Dst: tt.wantDst,
				Cookie0: 0xffffffff, Cookie1: 0xffffffff,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("request fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseInetDiag(t *testing.T) {
	ap := netip.MustParseAddrPort
	v4 := diagSocket{family: linuxAFInet, state: 1, local: ap("127.0.0.1:40000"), remote: ap("127.0.0.1:8080"), uid: 1000, inode: 4242}
	v6 := diagSocket{family: linuxAFInet6, state: 1, local: ap("[::ffff:127.0.0.1]:40001"), remote: ap("[::ffff:127.0.0.1]:8080"), uid: 0, inode: 4243}
	attrs := []byte{8, 0, 8, 0, 0, 0, 0, 0} // INET_DIAG_SHUTDOWN, which the kernel always adds
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name    string
		reply   []byte
		want    diagSocket
		wantErr error // nil: success
	}{
		{name: "ipv4", reply: nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil)), want: v4},
		{name: "v4-mapped with attributes", reply: nlMsg(sockDiagByFamily, 7, inetDiagMsg(v6, attrs)), want: v6},
		{name: "last message unpadded", reply: nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, []byte{1, 2, 3}))[:nlmsgHdrLen+inetDiagMsgLen+3], want: v4},
		{name: "another request's message is skipped", reply: cat(nlMsg(sockDiagByFamily, 6, inetDiagMsg(v6, nil)), nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil))), want: v4},
		{name: "acknowledgement then answer", reply: cat(nlErrorMsg(7, 0), nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil))), want: v4},
		{name: "ENOENT", reply: nlErrorMsg(7, linuxENOENT), wantErr: ErrNotFound},
		{name: "other errno", reply: nlErrorMsg(7, 13), wantErr: syscall.Errno(13)},
		{name: "negative errno", reply: nlErrorMsg(7, -5), wantErr: errDiagMalformed},
		{name: "done", reply: nlMsg(nlmsgDone, 7, []byte{0, 0, 0, 0}), wantErr: ErrNotFound},
		{name: "empty", reply: nil, wantErr: errDiagMalformed},
		{name: "only other requests", reply: nlMsg(sockDiagByFamily, 8, inetDiagMsg(v4, nil)), wantErr: errDiagMalformed},
		{name: "short error", reply: nlMsg(nlmsgError, 7, []byte{1, 2}), wantErr: errDiagMalformed},
		{name: "short inet_diag_msg", reply: nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil)[:inetDiagMsgLen-1]), wantErr: errDiagMalformed},
		{name: "length beyond the reply", reply: nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil))[:40], wantErr: errDiagMalformed},
		{name: "length below a header", reply: func() []byte {
			b := nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil))
			binary.NativeEndian.PutUint32(b, 15)
			return b
		}(), wantErr: errDiagMalformed},
		{name: "unknown family", reply: func() []byte {
			b := nlMsg(sockDiagByFamily, 7, inetDiagMsg(v4, nil))
			b[nlmsgHdrLen] = 1 // AF_UNIX
			return b
		}(), wantErr: errDiagMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseInetDiag(tt.reply, 7)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("parseInetDiag error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(diagSocket{}), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("parseInetDiag (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatchDiag(t *testing.T) {
	ap := netip.MustParseAddrPort
	local, remote := ap("127.0.0.1:40000"), ap("127.0.0.1:8080")
	tests := []struct {
		name    string
		s       diagSocket
		want    uint64
		wantErr error
	}{
		{"ipv4", diagSocket{family: linuxAFInet, local: local, remote: remote, inode: 9}, 9, nil},
		{"v4-mapped", diagSocket{family: linuxAFInet6, local: ap("[::ffff:127.0.0.1]:40000"), remote: ap("[::ffff:127.0.0.1]:8080"), inode: 9}, 9, nil},
		{"listener the kernel fell back to", diagSocket{family: linuxAFInet, local: local, remote: ap("0.0.0.0:0"), inode: 9}, 0, ErrNotFound},
		{"other direction", diagSocket{family: linuxAFInet, local: remote, remote: local, inode: 9}, 0, ErrNotFound},
		{"TIME_WAIT without inode", diagSocket{family: linuxAFInet, local: local, remote: remote}, 0, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := matchDiag(tt.s, local, remote)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("matchDiag = %d, %v; want %d, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDiagFamilies(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		local, remote string
		want          []uint8
	}{
		{"127.0.0.1:1", "127.0.0.1:2", []uint8{linuxAFInet, linuxAFInet6}},
		{"[::1]:1", "[::1]:2", []uint8{linuxAFInet6}},
		{"127.0.0.1:1", "[::1]:2", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, diagFamilies(ap(tt.local), ap(tt.remote))); diff != "" {
			t.Errorf("diagFamilies(%s, %s) (-want +got):\n%s", tt.local, tt.remote, diff)
		}
	}
}

func FuzzParseInetDiag(f *testing.F) {
	ap := netip.MustParseAddrPort
	v4 := diagSocket{family: linuxAFInet, state: 1, local: ap("127.0.0.1:40000"), remote: ap("127.0.0.1:8080"), uid: 1000, inode: 4242}
	v6 := diagSocket{family: linuxAFInet6, state: 1, local: ap("[::1]:40001"), remote: ap("[::1]:8080"), inode: 1}
	f.Add(nlMsg(sockDiagByFamily, 1, inetDiagMsg(v4, nil)))
	f.Add(nlMsg(sockDiagByFamily, 1, inetDiagMsg(v6, []byte{8, 0, 8, 0, 0, 0, 0, 0})))
	f.Add(append(nlErrorMsg(1, 0), nlMsg(sockDiagByFamily, 1, inetDiagMsg(v4, nil))...))
	f.Add(nlErrorMsg(1, linuxENOENT))
	f.Add(nlMsg(nlmsgDone, 1, nil))
	f.Add(nlMsg(sockDiagByFamily, 1, inetDiagMsg(v4, nil))[:50])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseInetDiag(data, 1)
		if err != nil {
			return
		}
		switch {
		case s.family == linuxAFInet && s.local.Addr().Is4() && s.remote.Addr().Is4():
		case s.family == linuxAFInet6 && s.local.Addr().Is6() && s.remote.Addr().Is6():
		default:
			t.Fatalf("parseInetDiag(%x) = %+v: family and addresses disagree", data, s)
		}
		// What was parsed survives a trip through the kernel's format.
		again, err := parseInetDiag(nlMsg(sockDiagByFamily, 1, inetDiagMsg(s, nil)), 1)
		if err != nil || again != s {
			t.Fatalf("round trip of %+v gave %+v, %v", s, again, err)
		}
	})
}
