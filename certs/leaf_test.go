package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clock is an adjustable test clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func caPool(ca *CA) *x509.CertPool       { p := x509.NewCertPool(); p.AddCert(ca.Certificate()); return p }
func stats(l *Leaves) [2]uint64          { h, m := l.Stats(); return [2]uint64{h, m} }
func verifyOpts(ca *CA, now time.Time, name string) x509.VerifyOptions {
	return x509.VerifyOptions{
		DNSName:     name,
		Roots:       caPool(ca),
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func TestLeafVerifies(t *testing.T) {
	ca := newTestCA(t, t0)
	now := t0.Add(time.Minute)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(now), Rand: seededRand(3)})

	type leafFields struct {
		CN          string
		DNSNames    []string
		IPs         []string
		NotBefore   time.Time
		NotAfter    time.Time
		ExtKeyUsage []x509.ExtKeyUsage
		IsCA        bool
		Chain       int
	}
	tests := []struct {
		host     string
		verifyAs string // DNSName for x509.Verify (Go parses IP literals there)
		wantDNS  []string
		wantIPs  []string
		wantCN   string
	}{
		{host: "example.test", verifyAs: "example.test", wantDNS: []string{"example.test"}, wantCN: "example.test"},
		{host: "API.Example.TEST.", verifyAs: "api.example.test", wantDNS: []string{"api.example.test"}, wantCN: "api.example.test"},
		{host: "under_score.example.test", verifyAs: "under_score.example.test", wantDNS: []string{"under_score.example.test"}, wantCN: "under_score.example.test"},
		{host: "127.0.0.1", verifyAs: "127.0.0.1", wantIPs: []string{"127.0.0.1"}, wantCN: "127.0.0.1"},
		{host: "::1", verifyAs: "::1", wantIPs: []string{"::1"}, wantCN: "::1"},
		{host: "[2001:DB8::1]", verifyAs: "2001:db8::1", wantIPs: []string{"2001:db8::1"}, wantCN: "2001:db8::1"},
		{host: "fe80::1%eth0", verifyAs: "fe80::1", wantIPs: []string{"fe80::1"}, wantCN: "fe80::1"},
		{host: "::ffff:192.0.2.7", verifyAs: "192.0.2.7", wantIPs: []string{"192.0.2.7"}, wantCN: "192.0.2.7"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			cert, err := l.Certificate(tt.host)
			if err != nil {
				t.Fatal(err)
			}
			leaf := cert.Leaf
			if leaf == nil {
				t.Fatal("Leaf not set")
			}
			if _, err := leaf.Verify(verifyOpts(ca, now, tt.verifyAs)); err != nil {
				t.Errorf("verify as %q: %v", tt.verifyAs, err)
			}
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			got := leafFields{
				CN: leaf.Subject.CommonName, DNSNames: leaf.DNSNames, IPs: ips,
				NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
				ExtKeyUsage: leaf.ExtKeyUsage, IsCA: leaf.IsCA, Chain: len(cert.Certificate),
			}
			want := leafFields{
				CN: tt.wantCN, DNSNames: tt.wantDNS, IPs: tt.wantIPs,
				NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: false, Chain: 1,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("leaf for %q (-want +got):\n%s", tt.host, diff)
			}
			if !bytes.Equal(cert.Certificate[0], leaf.Raw) {
				t.Error("Certificate[0] is not the leaf")
			}
		})
	}
	// A name that differs from the leaf's must not verify: the checks above can fail.
	cert, _ := l.Certificate("example.test")
	if _, err := cert.Leaf.Verify(verifyOpts(ca, now, "other.test")); err == nil {
		t.Error("leaf for example.test verified as other.test")
	}
}

func TestLeafLongNameHasNoCN(t *testing.T) {
	ca := newTestCA(t, t0)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(t0)})
	host := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + ".test"
	cert, err := l.Certificate(host)
	if err != nil {
		t.Fatal(err)
	}
	if cn := cert.Leaf.Subject.CommonName; cn != "" {
		t.Errorf("CN = %q, want empty for a %d-byte name", cn, len(host))
	}
	if _, err := cert.Leaf.Verify(verifyOpts(ca, t0, host)); err != nil {
		t.Errorf("verify: %v", err)
	}
}

func TestLeafNotAfterCappedByCA(t *testing.T) {
	ca := newTestCA(t, t0)
	now := ca.Certificate().NotAfter.Add(-48 * time.Hour)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(now)})
	cert, err := l.Certificate("example.test")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cert.Leaf.NotAfter, ca.Certificate().NotAfter; !got.Equal(want) {
		t.Errorf("leaf NotAfter = %v, want the CA's %v", got, want)
	}

	expired := NewLeaves(ca, LeafOptions{Now: fixedClock(ca.Certificate().NotAfter.Add(time.Second))})
	if _, err := expired.Certificate("example.test"); err == nil || !strings.Contains(err.Error(), "ca expired") {
		t.Errorf("mint after CA expiry: err = %v, want ca expired", err)
	}
}

func TestLeafInvalidHosts(t *testing.T) {
	l := NewLeaves(newTestCA(t, t0), LeafOptions{Now: fixedClock(t0)})
	tests := []struct {
		name, host, want string
	}{
		{"empty", "", "empty"},
		{"only dot", ".", "no name"},
		{"space", "a b.test", "contains a space"},
		{"slash", "a/b.test", "contains a slash"},
		{"backslash", `a\b.test`, "contains a slash"},
		{"NUL", "a\x00b.test", "contains NUL"},
		{"control", "a\nb.test", "control character"},
		{"too long", strings.Repeat("abcdefghi.", 25) + "test", "longer than 253"},
		{"long label", strings.Repeat("a", 64) + ".test", "label longer than 63"},
		{"empty label", "a..test", "empty label"},
		{"leading dot", ".a.test", "empty label"},
		{"two trailing dots", "a.test..", "empty label"},
		{"wildcard", "*.example.test", `contains '*'`},
		{"port", "example.test:443", `contains ':'`},
		{"non-ASCII", "bücher.test", "not ASCII"},
		{"bracketed name", "[example.test]", "not an IP address"},
		{"IP with trailing dot", "192.0.2.1.", "trailing dot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := l.Certificate(tt.host)
			if err == nil {
				t.Fatalf("Certificate(%q) = %v, want error", tt.host, cert.Leaf.DNSNames)
			}
			if !errors.Is(err, ErrInvalidHost) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Certificate(%q) error = %q, want ErrInvalidHost mentioning %q", tt.host, err, tt.want)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes; a hostile host must not make it long", len(err.Error()))
			}
		})
	}
	if _, m := l.Stats(); m != 0 {
		t.Errorf("misses = %d after invalid hosts only, want 0", m)
	}
}

func TestLeafCache(t *testing.T) {
	ca := newTestCA(t, t0)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(t0)})
	a, err := l.Certificate("example.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"example.test", "EXAMPLE.test", "example.test."} {
		b, err := l.Certificate(h)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("Certificate(%q) returned a new leaf, want the cached pointer", h)
		}
	}
	if diff := cmp.Diff([2]uint64{3, 1}, stats(l)); diff != "" {
		t.Errorf("stats [hits misses] (-want +got):\n%s", diff)
	}
}

func TestLeafRefresh(t *testing.T) {
	validity := 7 * 24 * time.Hour
	tests := []struct {
		name      string
		advance   time.Duration
		wantFresh bool
	}{
		{"half of validity", validity / 2, false},
		{"just under three quarters", validity*3/4 - 2*time.Hour, false},
		{"past three quarters", validity*3/4 + time.Second, true},
		{"past expiry", validity + time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0)
			ca := newTestCA(t, t0)
			l := NewLeaves(ca, LeafOptions{Now: clk.Now, Validity: validity})
			first, err := l.Certificate("example.test")
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(tt.advance)
			second, err := l.Certificate("example.test")
			if err != nil {
				t.Fatal(err)
			}
			if fresh := first != second; fresh != tt.wantFresh {
				t.Errorf("after %v: new leaf = %v, want %v", tt.advance, fresh, tt.wantFresh)
			}
			if tt.wantFresh {
				if !second.Leaf.NotAfter.Equal(clk.Now().Add(validity)) {
					t.Errorf("re-minted NotAfter = %v, want %v", second.Leaf.NotAfter, clk.Now().Add(validity))
				}
				if _, err := second.Leaf.Verify(verifyOpts(ca, clk.Now(), "example.test")); err != nil {
					t.Errorf("re-minted leaf: %v", err)
				}
			}
		})
	}
}

func TestLeafLRUEviction(t *testing.T) {
	l := NewLeaves(newTestCA(t, t0), LeafOptions{Now: fixedClock(t0), Size: 2})
	get := func(h string) *tls.Certificate {
		t.Helper()
		c, err := l.Certificate(h)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := get("a.test"), get("b.test")
	if get("a.test") != a { // a is now the most recently used
		t.Fatal("a.test not cached")
	}
	get("c.test") // evicts b, the least recently used
	if get("a.test") != a {
		t.Error("a.test was evicted; want b.test evicted")
	}
	if get("b.test") == b {
		t.Error("b.test still cached with Size 2 after a third host")
	}
	// hits: a, a, a; misses: a, b, c, b
	if diff := cmp.Diff([2]uint64{2, 4}, stats(l)); diff != "" {
		t.Errorf("stats [hits misses] (-want +got):\n%s", diff)
	}
}

// gatedReader blocks every Read until open is closed, holding the first mint
// in flight while the other callers arrive.
type gatedReader struct {
	open chan struct{}
	r    io.Reader
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}

func TestLeafConcurrentMintOnce(t *testing.T) {
	gate := &gatedReader{open: make(chan struct{}), r: seededRand(9)}
	l := NewLeaves(newTestCA(t, t0), LeafOptions{Now: fixedClock(t0), Rand: gate})
	const n = 32
	var started, done sync.WaitGroup
	certs := make([]*tls.Certificate, n)
	errs := make([]error, n)
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			certs[i], errs[i] = l.Certificate("same.test")
		}()
	}
	started.Wait()
	// Let the callers reach the mint before it may finish; correctness does
	// not depend on this delay, only how much overlap the test exercises.
	time.Sleep(20 * time.Millisecond)
	close(gate.open)
	done.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if certs[i] != certs[0] {
			t.Errorf("call %d got a different leaf", i)
		}
	}
	if diff := cmp.Diff([2]uint64{n - 1, 1}, stats(l)); diff != "" {
		t.Errorf("stats [hits misses] (-want +got):\n%s", diff)
	}
}

// fakeConn supplies only the local address that GetCertificate reads.
type fakeConn struct {
	net.Conn
	local net.Addr
}

func (c fakeConn) LocalAddr() net.Addr { return c.local }

type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }

func TestGetCertificate(t *testing.T) {
	ca := newTestCA(t, t0)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(t0)})
	tests := []struct {
		name    string
		hello   *tls.ClientHelloInfo
		wantSAN string // DNS name or IP, "" for an error
	}{
		{"SNI", &tls.ClientHelloInfo{ServerName: "example.test"}, "example.test"},
		{"SNI wins over local address", &tls.ClientHelloInfo{ServerName: "example.test",
			Conn: fakeConn{local: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 443}}}, "example.test"},
		{"local IPv4", &tls.ClientHelloInfo{Conn: fakeConn{local: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 443}}}, "192.0.2.1"},
		{"local IPv6", &tls.ClientHelloInfo{Conn: fakeConn{local: &net.TCPAddr{IP: net.ParseIP("2001:db8::2"), Port: 443}}}, "2001:db8::2"},
		{"other addr type", &tls.ClientHelloInfo{Conn: fakeConn{local: strAddr("[2001:db8::3]:443")}}, "2001:db8::3"},
		{"no SNI, no conn", &tls.ClientHelloInfo{}, ""},
		{"no SNI, unix socket", &tls.ClientHelloInfo{Conn: fakeConn{local: &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}}}, ""},
		{"nil hello", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := l.GetCertificate(tt.hello)
			if tt.wantSAN == "" {
				if err == nil {
					t.Fatalf("GetCertificate succeeded, want error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Leaf.Verify(verifyOpts(ca, t0, tt.wantSAN)); err != nil {
				t.Errorf("leaf does not verify for %s: %v", tt.wantSAN, err)
			}
		})
	}
}

func TestTLSHandshake(t *testing.T) {
	now := time.Now()
	ca := newTestCA(t, now)
	l := NewLeaves(ca, LeafOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := tls.NewListener(ln, &tls.Config{GetCertificate: l.GetCertificate, MinVersion: tls.VersionTLS12})
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "hello")
			}()
		}
	}()

	addr := ln.Addr().String()
	tests := []struct {
		name       string
		serverName string // "" dials the IP, so the client sends no SNI
		version    uint16
	}{
		{"SNI TLS 1.3", "example.test", tls.VersionTLS13},
		{"SNI TLS 1.2", "example.test", tls.VersionTLS12},
		{"IP without SNI", "", tls.VersionTLS13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d := tls.Dialer{Config: &tls.Config{
				RootCAs:    caPool(ca),
				ServerName: tt.serverName,
				MinVersion: tt.version, MaxVersion: tt.version,
			}}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			defer c.Close()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "hello" {
				t.Errorf("read %q, want hello", got)
			}
			state := c.(*tls.Conn).ConnectionState()
			wantSAN := tt.serverName
			if wantSAN == "" {
				wantSAN = netip.MustParseAddrPort(addr).Addr().String()
			}
			if err := state.PeerCertificates[0].VerifyHostname(wantSAN); err != nil {
				t.Errorf("peer leaf: %v", err)
			}
		})
	}

	// A client that does not trust the CA must fail: the test above can fail.
	d := tls.Dialer{Config: &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "example.test"}}
	if c, err := d.DialContext(context.Background(), "tcp", addr); err == nil {
		c.Close()
		t.Error("handshake succeeded for a client that does not trust the CA")
	}
}

func FuzzLeafHost(f *testing.F) {
	for _, s := range []string{
		"example.test", "EXAMPLE.test.", "a", "127.0.0.1", "::1", "[::1]", "[2001:db8::1]",
		"fe80::1%eth0", "::ffff:10.0.0.1", "192.0.2.1.", "1.2.3", "01.2.3.4", "", ".", "..",
		"a b", "a/b", "a\x00b", "*.x.test", "x.test:443", "bücher.test", "_srv._tcp.x.test",
		"-lead.test", strings.Repeat("a.", 126) + "a", strings.Repeat("a", 64),
	} {
		f.Add(s)
	}
	ca := newTestCA(f, t0)
	l := NewLeaves(ca, LeafOptions{Now: fixedClock(t0), Size: 64})
	f.Fuzz(func(t *testing.T, host string) {
		cert, err := l.Certificate(host)
		if err != nil {
			if !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("Certificate(%q): unexpected error kind: %v", host, err)
			}
			return
		}
		h, err := parseHost(host)
		if err != nil {
			t.Fatalf("parseHost(%q) failed after Certificate succeeded: %v", host, err)
		}
		if _, err := cert.Leaf.Verify(verifyOpts(ca, t0, h.name)); err != nil {
			t.Fatalf("leaf for %q does not verify as %q: %v", host, h.name, err)
		}
		if h.ip.IsValid() != (len(cert.Leaf.IPAddresses) == 1) {
			t.Fatalf("leaf for %q: IP host %v but IP SANs %v", host, h.ip.IsValid(), cert.Leaf.IPAddresses)
		}
	})
}
