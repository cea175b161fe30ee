//go:build linux

package redirect

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestQUIC sends UDP to port 443 from a process in the cgroup with QUIC
// listeners configured: it reaches the listener of its family (a stand-in
// answering like the resolver's), never the resolver nor the upstream,
// LookupUDP gives its origin, and the reply comes from the original
// destination.
func TestQUIC(t *testing.T) {
	python := lookPath(t, "python3")
	res := newResolverStandIn(t)
	quic := newResolverStandIn(t)
	cfg := newStandIn(t).config()
	cfg.DNSV4, cfg.DNSV6 = res.addrs()
	cfg.QUICV4, cfg.QUICV6 = quic.addrs()
	r := loadRedirector(t, cfg)
	res.serve(t, r.LookupUDP)
	quic.serve(t, r.LookupUDP)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	udpUpstream(t, upstreamUDPHost+":443")

	type want struct {
		Listener string // the QUIC listener that got the datagram; "" for none
		Dst      string // LookupUDP's Origin.Dst
		Peer     string
		Src      string
		Data     string
		Err      string
	}
	tests := []struct {
		name string
		args []string
		want want
	}{
		{
			name: "sendto v4",
			args: []string{"4", "sendto", upstreamUDPHost, "443"},
			want: want{Listener: "v4", Dst: upstreamUDPHost + ":443", Src: upstreamUDPHost + "|443", Data: "r"},
		},
		{
			name: "connect v4",
			args: []string{"4", "connect", upstreamUDPHost, "443"},
			want: want{Listener: "v4", Dst: upstreamUDPHost + ":443", Peer: upstreamUDPHost + "|443", Src: upstreamUDPHost + "|443", Data: "r"},
		},
		{
			name: "sendto v6",
			args: []string{"6", "sendto", "::1", "443"},
			want: want{Listener: "v6", Dst: "[::1]:443", Src: "::1|443", Data: "r"},
		},
		{
			name: "connect v6",
			args: []string{"6", "connect", "::1", "443"},
			want: want{Listener: "v6", Dst: "[::1]:443", Peer: "::1|443", Src: "::1|443", Data: "r"},
		},
		{
			name: "sendto v4-mapped on a dual-stack socket",
			args: []string{"6", "sendto", "::ffff:" + upstreamUDPHost, "443"},
			want: want{Listener: "v4", Dst: "[::ffff:" + upstreamUDPHost + "]:443", Src: "::ffff:" + upstreamUDPHost + "|443", Data: "r"},
		},
		{
			name: "connect v4-mapped on a dual-stack socket",
			args: []string{"6", "connect", "::ffff:" + upstreamUDPHost, "443"},
			want: want{Listener: "v4", Dst: "[::ffff:" + upstreamUDPHost + "]:443", Peer: "::ffff:" + upstreamUDPHost + "|443", Src: "::ffff:" + upstreamUDPHost + "|443", Data: "r"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := runUDPClient(t, &leaf, python, tt.args...)
			got := want{Peer: rep.Peer, Src: rep.Src, Data: rep.Data, Err: rep.Err}
			q, ok := nextQuery(quic)
			if ok {
				got.Listener = q.listener
				if q.err != nil {
					t.Fatalf("LookupUDP: %v", q.err)
				}
				got.Dst = q.origin.Dst.String()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if q, ok := nextQuery(res); ok {
				t.Errorf("the resolver received %+v", q)
			}
			if n, err := r.QUICRefused(); err != nil || n != 0 {
				t.Errorf("QUICRefused = %d, %v; want 0", n, err)
			}
			if ok {
				checkOrigin(t, q.origin, rep.PID, rep.Comm, leaf)
			}
		})
	}
}

// TestQUICConfig covers a QUIC listener for one family only (the other
// fails closed and is counted), and that a Config cannot both allow QUIC
// and send it to a listener.
func TestQUICConfig(t *testing.T) {
	python := lookPath(t, "python3")
	quic := newResolverStandIn(t)
	quic4, quic6 := quic.addrs()
	udpUpstream(t, upstreamUDPHost+":443")
	var current atomic.Pointer[Redirector]
	quic.serve(t, func(a netip.AddrPort) (Origin, error) { return current.Load().LookupUDP(a) })
	proxy := newStandIn(t).config()

	if os.Geteuid() == 0 {
		_, err := Load(Config{ProxyV4: proxy.ProxyV4, QUICV4: quic4, AllowQUIC: true})
		if err == nil || errors.Is(err, ErrNotSupported) {
			t.Errorf("Load with QUIC allowed and a QUIC listener: %v, want a config error", err)
		}
	}

	tests := []struct {
		name        string
		cfg         Config
		args        []string
		wantData    string // "r" (the listener), "u" (the upstream), or the errno
		wantRefused uint64
	}{
		{"v4 listener only: v4", Config{QUICV4: quic4}, []string{"4", "sendto", upstreamUDPHost, "443"}, "r", 0},
		{"v4 listener only: v6 refused", Config{QUICV4: quic4}, []string{"6", "sendto", "::1", "443"}, "EPERM", 1},
		{"v4 listener only: v6 connect refused", Config{QUICV4: quic4}, []string{"6", "connect", "::1", "443"}, "EPERM", 1},
		{"v4 listener only: v4-mapped", Config{QUICV4: quic4}, []string{"6", "sendto", "::ffff:" + upstreamUDPHost, "443"}, "r", 0},
		{"v6 listener only: v4 refused", Config{QUICV6: quic6}, []string{"4", "sendto", upstreamUDPHost, "443"}, "EPERM", 1},
		{"v6 listener only: v6", Config{QUICV6: quic6}, []string{"6", "connect", "::1", "443"}, "r", 0},
		{"no listener: refused", Config{}, []string{"4", "sendto", upstreamUDPHost, "443"}, "EPERM", 1},
		{"allowed: passes", Config{AllowQUIC: true}, []string{"4", "sendto", upstreamUDPHost, "443"}, "u", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.ProxyV4, cfg.ProxyV6 = proxy.ProxyV4, proxy.ProxyV6
			r := loadRedirector(t, cfg)
			current.Store(r)
			rep, leaf, got := sendFromNewLeaf(t, r, python, tt.args...)
			if got != tt.wantData {
				t.Errorf("client got %q, want %q (%+v)", got, tt.wantData, rep)
			}
			q, ok := nextQuery(quic)
			if ok != (tt.wantData == "r") {
				t.Errorf("the QUIC listener received a datagram: %v, want %v", ok, tt.wantData == "r")
			}
			if ok {
				if q.err != nil {
					t.Fatalf("LookupUDP: %v", q.err)
				}
				checkOrigin(t, q.origin, rep.PID, rep.Comm, leaf)
			}
			if n, err := r.QUICRefused(); err != nil || n != tt.wantRefused {
				t.Errorf("QUICRefused = %d, %v; want %d", n, err, tt.wantRefused)
			}
		})
	}
}

// pyInitials sends, from one unconnected socket, a QUIC version 1
// Handshake packet with DCID dddd to 127.0.46.3:443, a version 2 Initial
// with DCID bbbb to 127.0.46.2:443, then a version 1 Initial with DCID
// aaaaaaaa to 127.0.46.1:443, each padded to 1200 bytes as Initials are.
const pyInitials = `
import socket
def pkt(first, version, dcid):
    b = bytes([first]) + version.to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([0])
    return b + bytes(1200 - len(b))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(pkt(0xe0, 1, b"dddd"), ("127.0.46.3", 443))
s.sendto(pkt(0xd0, 0x6b3343cf, b"bbbb"), ("127.0.46.2", 443))
s.sendto(pkt(0xc0, 1, b"aaaaaaaa"), ("127.0.46.1", 443))
`

// TestQUICByDCID sends three long-header packets from one socket to three
// servers: LookupQUIC finds each Initial's own destination by its DCID
// (versions 1 and 2), and falls back to the socket's latest datagram for
// a DCID of no Initial (the Handshake packet's, an unknown one).
func TestQUICByDCID(t *testing.T) {
	python := lookPath(t, "python3")
	res := newResolverStandIn(t)
	quic := newResolverStandIn(t)
	cfg := newStandIn(t).config()
	cfg.DNSV4, cfg.DNSV6 = res.addrs()
	cfg.QUICV4, cfg.QUICV6 = quic.addrs()
	r := loadRedirector(t, cfg)
	leaf := newTestLeaf(t)
	closer, err := r.Attach(leaf.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	cmd := exec.Command(python, "-c", pyInitials)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: leaf.fd}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	var from netip.AddrPort
	buf := make([]byte, 1500)
	for i := range 3 {
		if err := quic.v4.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, src, err := quic.v4.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if n != 1200 || (from.IsValid() && src != from) {
			t.Fatalf("datagram %d: %d bytes from %s (first from %s)", i, n, src, from)
		}
		from = src
	}
	got := map[string]string{}
	for _, dcid := range []string{"aaaaaaaa", "bbbb", "dddd", "unknown"} {
		o, err := r.LookupQUIC(from, []byte(dcid))
		if err != nil {
			t.Fatalf("LookupQUIC(%s, %q): %v", from, dcid, err)
		}
		got[dcid] = o.Dst.String()
	}
	want := map[string]string{
		"aaaaaaaa": "127.0.46.1:443",
		"bbbb":     "127.0.46.2:443",
		"dddd":     "127.0.46.1:443", // a Handshake packet's: the latest datagram's
		"unknown":  "127.0.46.1:443",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LookupQUIC destinations (-want +got):\n%s", diff)
	}
}
