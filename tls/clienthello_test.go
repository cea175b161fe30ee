package tls

import (
	"bufio"
	"bytes"
	stdtls "crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseClientHelloRealClients(t *testing.T) {
	tests := []struct {
		name string
		cfg  *stdtls.Config
		want ClientHello
		max  string
	}{
		{
			name: "sni alpn tls13",
			cfg:  &stdtls.Config{ServerName: "api.example.test", NextProtos: []string{"h2", "http/1.1"}},
			want: ClientHello{ServerName: "api.example.test", ALPN: []string{"h2", "http/1.1"}, SupportedVersions: []uint16{0x0304, 0x0303}, LegacyVersion: 0x0303},
			max:  "1.3",
		},
		{
			name: "no sni for an ip literal",
			cfg:  &stdtls.Config{ServerName: "127.0.0.1"},
			want: ClientHello{SupportedVersions: []uint16{0x0304, 0x0303}, LegacyVersion: 0x0303},
			max:  "1.3",
		},
		{
			name: "tls12 only",
			cfg:  &stdtls.Config{ServerName: "old.example.test", MaxVersion: stdtls.VersionTLS12, NextProtos: []string{"http/1.1"}},
			want: ClientHello{ServerName: "old.example.test", ALPN: []string{"http/1.1"}, SupportedVersions: []uint16{0x0303}, LegacyVersion: 0x0303},
			max:  "1.2",
		},
		{
			name: "tls13 only",
			cfg:  &stdtls.Config{ServerName: "new.example.test", MinVersion: stdtls.VersionTLS13, NextProtos: []string{"http/1.1", "h2"}},
			want: ClientHello{ServerName: "new.example.test", ALPN: []string{"http/1.1", "h2"}, SupportedVersions: []uint16{0x0304}, LegacyVersion: 0x0303},
			max:  "1.3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := captureHello(t, tt.cfg)
			orig := bytes.Clone(raw)
			for _, framing := range []struct {
				name string
				data []byte
			}{
				{"one record", raw},
				{"split in handshake header", reframe(t, raw, 2)},
				{"three records", reframe(t, raw, 40, 100)},
				{"one byte records then rest", reframe(t, raw, 1, 1, 1, 1, 1)},
				{"trailing bytes", append(bytes.Clone(raw), 0x17, 3, 3, 0, 1, 0)},
			} {
				got, err := ParseClientHello(framing.data)
				if err != nil {
					t.Fatalf("%s: %v", framing.name, err)
				}
				if diff := cmp.Diff(&tt.want, got); diff != "" {
					t.Errorf("%s: hello (-want +got):\n%s", framing.name, diff)
				}
				if v := got.MaxVersion(); v != tt.max {
					t.Errorf("%s: MaxVersion = %q, want %q", framing.name, v, tt.max)
				}
			}
			if !bytes.Equal(raw, orig) {
				t.Error("ParseClientHello modified its input")
			}
		})
	}
}

func TestParseClientHelloRejects(t *testing.T) {
	real := captureHello(t, &stdtls.Config{ServerName: "a.example.test", NextProtos: []string{"h2"}})
	multi := reframe(t, real, 30)
	big := func() []byte { // a hello whose message claims more than one record can carry
		b := bytes.Clone(real)
		b[6], b[7], b[8] = 0x00, 0x40, 0x00
		return b
	}()
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"header only", real[:5], ErrTruncated},
		{"half a hello", real[:len(real)/2], ErrTruncated},
		{"all but one byte", real[:len(real)-1], ErrTruncated},
		{"first record of two", multi[:5+30], ErrTruncated},
		{"second record header cut", multi[:5+30+3], ErrTruncated},
		{"http request", []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), ErrNotClientHello},
		{"one byte of http", []byte("G"), ErrNotClientHello},
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.6\r\n"), ErrNotClientHello},
		{"application data record", []byte{0x17, 3, 3, 0, 1, 0}, ErrNotClientHello},
		{"bad record version", []byte{0x16, 2, 0, 0, 1, 1}, ErrNotClientHello},
		{"zero length record", []byte{0x16, 3, 1, 0, 0}, ErrNotClientHello},
		{"oversized record", []byte{0x16, 3, 1, 0x40, 0x01}, ErrNotClientHello},
		{"server hello", []byte{0x16, 3, 3, 0, 4, 2, 0, 0, 0}, ErrNotClientHello},
		{"hello larger than a record", big, ErrNotClientHello},
		{"alert after handshake record", append(reframe(t, real, 30)[:35], 0x15, 3, 3, 0, 2, 2, 40), ErrNotClientHello},
		{"short body", []byte{0x16, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3}, ErrNotClientHello},
		{"no extensions block but trailing byte", append(buildHello()[:0:0], fixLen(append(buildHello(), 0x00))...), ErrNotClientHello},
		{"duplicate sni extension", buildHello(sniExt("a.test"), sniExt("b.test")), ErrNotClientHello},
		{"two host names", buildHello(sniExt("a.test", "b.test")), ErrNotClientHello},
		{"sni with nul", buildHello(sniExt("evil.test\x00.good.test")), ErrNotClientHello},
		{"sni with trailing dot", buildHello(sniExt("a.test.")), ErrNotClientHello},
		{"sni with space", buildHello(sniExt("a test")), ErrNotClientHello},
		{"empty sni", buildHello(sniExt("")), ErrNotClientHello},
		{"empty sni list", buildHello(ext{0, []byte{0, 0}}), ErrNotClientHello},
		{"empty alpn name", buildHello(ext{16, []byte{0, 1, 0}}), ErrNotClientHello},
		{"odd supported_versions", buildHello(ext{43, []byte{3, 3, 4, 3}}), ErrNotClientHello},
		{"extension overruns", buildHello(ext{0, []byte{0, 9, 0}}), ErrNotClientHello},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := ParseClientHello(tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseClientHello = %+v, %v; want error wrapping %v", ch, err, tt.want)
			}
			other := ErrTruncated
			if tt.want == ErrTruncated {
				other = ErrNotClientHello
			}
			if errors.Is(err, other) {
				t.Errorf("error %v wraps both sentinels", err)
			}
		})
	}
}

// fixLen rewrites the record and handshake lengths of a hand-built hello
// after bytes were appended to it.
func fixLen(b []byte) []byte {
	n := len(b) - 5
	b[3], b[4] = byte(n>>8), byte(n)
	m := n - 4
	b[6], b[7], b[8] = byte(m>>16), byte(m>>8), byte(m)
	return b
}

func TestParseClientHelloCrafted(t *testing.T) {
	grease := ext{43, []byte{6, 0x1a, 0x1a, 3, 4, 3, 3}}
	tests := []struct {
		name string
		data []byte
		want ClientHello
		max  string
	}{
		{"no extensions", buildHello(), ClientHello{LegacyVersion: 0x0303}, "1.2"},
		{"grease dropped", buildHello(grease), ClientHello{LegacyVersion: 0x0303, SupportedVersions: []uint16{0x0304, 0x0303}}, "1.3"},
		{"unknown name type skipped", buildHello(ext{0, []byte{0, 8, 7, 0, 1, 'x', 0, 0, 1, 'y'}}), ClientHello{LegacyVersion: 0x0303, ServerName: "y"}, "1.2"},
		{"unknown version", buildHello(ext{43, []byte{2, 3, 5}}), ClientHello{LegacyVersion: 0x0303, SupportedVersions: []uint16{0x0305}}, "0x0305"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClientHello(tt.data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tt.want, got); diff != "" {
				t.Errorf("hello (-want +got):\n%s", diff)
			}
			if v := got.MaxVersion(); v != tt.max {
				t.Errorf("MaxVersion = %q, want %q", v, tt.max)
			}
		})
	}
}

func TestLooksLikeTLS(t *testing.T) {
	real := captureHello(t, &stdtls.Config{ServerName: "a.test"})
	tests := []struct {
		name  string
		first []byte
		want  bool
	}{
		{"real hello", real, true},
		{"three bytes", real[:3], true},
		{"two bytes", real[:2], false},
		{"http", []byte("GET / HTTP/1.1"), false},
		{"tls 1.0 record", []byte{0x16, 3, 1}, true},
		{"sslv2", []byte{0x80, 0x2e, 0x01}, false},
		{"record version 3.9", []byte{0x16, 3, 9}, false},
		{"alert", []byte{0x15, 3, 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LooksLikeTLS(tt.first); got != tt.want {
				t.Errorf("LooksLikeTLS(% x) = %v, want %v", tt.first, got, tt.want)
			}
		})
	}
}

func TestLooksLikeSSLv2Hello(t *testing.T) {
	real := captureHello(t, &stdtls.Config{ServerName: "a.test"})
	tests := []struct {
		name  string
		first []byte
		want  bool
	}{
		{"tls 1.0 in sslv2 format", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, true},
		{"ssl 3.0 in sslv2 format", []byte{0x80, 0x2e, 0x01, 0x03, 0x00}, true},
		{"ssl 2.0", []byte{0x80, 0x2e, 0x01, 0x00, 0x02}, true},
		{"four bytes", []byte{0x80, 0x2e, 0x01, 0x03}, false},
		{"tls record", real, false},
		{"high bit clear", []byte{0x00, 0x2e, 0x01, 0x03, 0x01}, false},
		{"not a client hello", []byte{0x80, 0x2e, 0x04, 0x03, 0x01}, false},
		{"version 3.9", []byte{0x80, 0x2e, 0x01, 0x03, 0x09}, false},
		{"version 1.0", []byte{0x80, 0x2e, 0x01, 0x01, 0x00}, false},
		{"too short for a hello", []byte{0x80, 0x08, 0x01, 0x03, 0x01}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LooksLikeSSLv2Hello(tt.first); got != tt.want {
				t.Errorf("LooksLikeSSLv2Hello(% x) = %v, want %v", tt.first, got, tt.want)
			}
			if LooksLikeSSLv2Hello(tt.first) && LooksLikeTLS(tt.first) {
				t.Errorf("% x looks like both an SSLv2 hello and a TLS record", tt.first)
			}
		})
	}
}

// TestSniffThenHandshake checks that Sniff consumes nothing: a TLS server
// reading from the same bufio.Reader afterwards completes the handshake.
func TestSniffThenHandshake(t *testing.T) {
	cert, pool := testCert(t, "api.example.test")
	asked := make(chan string, 1)
	srvCfg := ServerConfig(staticCerts{cert: &cert, asked: asked})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	clientErr := make(chan error, 1)
	go func() {
		c, err := stdtls.Dial("tcp", ln.Addr().String(), &stdtls.Config{
			ServerName: "api.example.test", RootCAs: pool, NextProtos: []string{"h2", "http/1.1"},
		})
		if err == nil {
			_, err = c.Write([]byte("ping"))
			c.Close()
		}
		clientErr <- err
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(raw, SniffBufferSize)
	ch, err := Sniff(br)
	if err != nil {
		t.Fatal(err)
	}
	if ch.ServerName != "api.example.test" || ch.MaxVersion() != "1.3" {
		t.Errorf("sniffed %+v", ch)
	}
	srv := stdtls.Server(&bufferedConn{Conn: raw, r: br}, srvCfg)
	if err := srv.Handshake(); err != nil {
		t.Fatalf("handshake after Sniff: %v", err)
	}
	if got := <-asked; got != "api.example.test" {
		t.Errorf("certificate asked for %q", got)
	}
	if p := srv.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("negotiated %q, want h2", p)
	}
	b, err := io.ReadAll(srv)
	if err != nil || string(b) != "ping" {
		t.Errorf("read %q, %v", b, err)
	}
	if err := <-clientErr; err != nil {
		t.Fatal(err)
	}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func TestSniffIncremental(t *testing.T) {
	real := captureHello(t, &stdtls.Config{ServerName: "drip.example.test"})
	tests := []struct {
		name    string
		data    []byte
		closeIt bool
		want    error
	}{
		{"byte by byte", reframe(t, real, 7, 1, 300), false, nil},
		{"garbage does not wait", []byte("G"), false, ErrNotClientHello},
		{"eof mid hello", real[:100], true, ErrTruncated},
		{"eof mid header", real[:3], true, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c1, c2 := net.Pipe()
			defer c1.Close()
			go func() {
				for i := range tt.data {
					if _, err := c2.Write(tt.data[i : i+1]); err != nil {
						return
					}
				}
				if tt.closeIt {
					c2.Close()
				}
			}()
			defer c2.Close()
			// A guard against hanging: Sniff must finish long before it.
			c1.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReaderSize(c1, SniffBufferSize)
			ch, err := Sniff(br)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if ch.ServerName != "drip.example.test" {
					t.Errorf("ServerName = %q", ch.ServerName)
				}
				if br.Buffered() != len(tt.data) {
					t.Errorf("buffered %d bytes, want the whole hello (%d) unconsumed", br.Buffered(), len(tt.data))
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Sniff = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSniffSmallBuffer(t *testing.T) {
	real := captureHello(t, &stdtls.Config{ServerName: "a.test"})
	_, err := Sniff(bufio.NewReaderSize(bytes.NewReader(real), 4096))
	if err == nil {
		t.Fatal("Sniff accepted a reader smaller than SniffBufferSize")
	}
}

// FuzzParseClientHello checks that the parser never panics, that Sniff
// agrees with it, and that what it accepts is sane.
func FuzzParseClientHello(f *testing.F) {
	for _, cfg := range []*stdtls.Config{
		{ServerName: "api.example.test", NextProtos: []string{"h2", "http/1.1"}},
		{ServerName: "127.0.0.1"},
		{ServerName: "old.example.test", MaxVersion: stdtls.VersionTLS12},
	} {
		h := captureHello(f, cfg)
		f.Add(h)
		f.Add(reframe(f, h, 3, 50))
		f.Add(h[:len(h)/2])
	}
	f.Add(buildHello(sniExt("a.test"), ext{16, []byte{0, 3, 2, 'h', '2'}}, ext{43, []byte{2, 3, 4}}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10})
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		ch, err := ParseClientHello(data)
		if LooksLikeSSLv2Hello(data) && (err == nil || LooksLikeTLS(data)) {
			t.Fatalf("an SSLv2-format hello was taken for TLS: %v", err)
		}
		if !bytes.Equal(data, orig) {
			t.Fatal("input modified")
		}
		if err != nil {
			if !errors.Is(err, ErrNotClientHello) && !errors.Is(err, ErrTruncated) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
		} else if ch.ServerName != "" && !validServerName([]byte(ch.ServerName)) {
			t.Fatalf("accepted server name %q", ch.ServerName)
		}
		sch, serr := Sniff(bufio.NewReaderSize(bytes.NewReader(data), SniffBufferSize))
		if (err == nil) != (serr == nil) || (err != nil && errors.Is(err, ErrTruncated) != errors.Is(serr, ErrTruncated)) {
			t.Fatalf("ParseClientHello: %v; Sniff: %v", err, serr)
		}
		if diff := cmp.Diff(ch, sch); diff != "" {
			t.Fatalf("Sniff disagrees (-parse +sniff):\n%s", diff)
		}
	})
}
