package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// socksParser is one of the SOCKS parsers, as the fuzz target and the
// tables call them: what it read, and its length.
type socksParser struct {
	name  string
	parse func(b []byte) (any, int, error)
}

var socksParsers = []socksParser{
	{"greeting5", func(b []byte) (any, int, error) {
		m, n, err := parseSOCKS5Greeting(b)
		return string(m), n, err
	}},
	{"password5", func(b []byte) (any, int, error) {
		u, p, n, err := parseSOCKS5Password(b)
		return [2]string{u, p}, n, err
	}},
	{"request5", func(b []byte) (any, int, error) {
		r, n, err := parseSOCKS5Request(b)
		return r, n, err
	}},
	{"request4", func(b []byte) (any, int, error) {
		r, n, err := parseSOCKS4Request(b)
		return r, n, err
	}},
	{"reply5", func(b []byte) (any, int, error) {
		r, n, err := parseSOCKS5Reply(b)
		return r, n, err
	}},
}

func socksParserNamed(name string) socksParser {
	for _, p := range socksParsers {
		if p.name == name {
			return p
		}
	}
	panic(name)
}

func TestSOCKSParsers(t *testing.T) {
	tests := []struct {
		parser string
		in     []byte
		want   any
		err    error // nil: parsed, errSOCKSShort for each strict prefix
	}{
		{"greeting5", []byte{5, 1, 0}, "\x00", nil},
		{"greeting5", []byte{5, 2, 0, 2}, "\x00\x02", nil},
		{"greeting5", []byte{5, 0}, nil, errSOCKSMalformed},
		{"greeting5", []byte{4, 1, 0}, nil, errSOCKSMalformed},
		{"password5", []byte{1, 3, 'b', 'o', 'b', 2, 'p', 'w'}, [2]string{"bob", "pw"}, nil},
		{"password5", []byte{1, 0, 0}, [2]string{"", ""}, nil},
		{"password5", []byte{5, 3}, nil, errSOCKSMalformed},
		{"request5", []byte{5, 1, 0, 1, 127, 0, 0, 9, 0x1f, 0x90},
			socksRequest{version: 5, cmd: 1, host: "127.0.0.9", port: 8080}, nil},
		{"request5", append([]byte{5, 1, 0, 4}, append(netip.MustParseAddr("::1").AsSlice(), 0, 80)...),
			socksRequest{version: 5, cmd: 1, host: "::1", port: 80}, nil},
		{"request5", append([]byte{5, 1, 0, 4}, append(netip.MustParseAddr("::ffff:127.0.0.9").AsSlice(), 0, 80)...),
			socksRequest{version: 5, cmd: 1, host: "127.0.0.9", port: 80}, nil},
		{"request5", []byte{5, 2, 0, 3, 4, 'h', '.', 't', 'e', 1, 0},
			socksRequest{version: 5, cmd: 2, host: "h.te", port: 256}, nil},
		{"request5", []byte{5, 1, 0, 3, 0, 0, 80}, nil, errSOCKSMalformed},
		{"request5", []byte{5, 1, 0, 9, 0, 0, 80}, nil, errSOCKSMalformed},
		{"request5", []byte{4, 1, 0, 1, 0, 0, 0, 0, 0, 80}, nil, errSOCKSMalformed},
		{"request4", []byte{4, 1, 0, 80, 127, 0, 0, 9, 'u', 0},
			socksRequest{version: 4, cmd: 1, host: "127.0.0.9", port: 80, user: "u"}, nil},
		{"request4", []byte{4, 1, 0, 80, 0, 0, 0, 7, 0, 'h', '.', 't', 0},
			socksRequest{version: 4, cmd: 1, host: "h.t", port: 80}, nil}, // 4a
		{"request4", []byte{4, 1, 0, 80, 0, 0, 0, 7, 0, 0}, nil, errSOCKSMalformed}, // 4a without a name
		{"request4", append(append([]byte{4, 1, 0, 80, 1, 2, 3, 4}, bytes.Repeat([]byte{'u'}, 256)...), 0), nil, errSOCKSMalformed},
		{"request4", []byte{5, 1, 0, 80, 1, 2, 3, 4, 0}, nil, errSOCKSMalformed},
		{"reply5", []byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}, byte(0), nil},
		{"reply5", []byte{5, 2, 0, 3, 1, 'h', 0, 0}, byte(2), nil},
		{"reply5", []byte{5, 0, 0, 7, 0}, nil, errSOCKSMalformed},
	}
	for _, tt := range tests {
		p := socksParserNamed(tt.parser)
		got, n, err := p.parse(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%s(%x) = %v, %v; want %v", tt.parser, tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || n != len(tt.in) {
			t.Errorf("%s(%x): %d bytes, %v; want %d", tt.parser, tt.in, n, err, len(tt.in))
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(socksRequest{})); diff != "" {
			t.Errorf("%s(%x) (-want +got):\n%s", tt.parser, tt.in, diff)
		}
		for i := range len(tt.in) {
			if _, _, err := p.parse(tt.in[:i]); !errors.Is(err, errSOCKSShort) {
				t.Errorf("%s(%x), a strict prefix: %v, want errSOCKSShort", tt.parser, tt.in[:i], err)
			}
		}
	}
}

// The messages the proxy sends a relay read back as what was meant.
func TestSOCKSRequestsRoundTrip(t *testing.T) {
	for _, host := range []string{"127.0.0.9", "::1", "canary.e2e.test", "2130706433"} {
		d, err := parseRelayDest(host, 8080)
		if err != nil {
			t.Fatal(err)
		}
		r5, n, err := parseSOCKS5Request(appendSOCKS5Request(nil, socksCmdConnect, d))
		if err != nil || r5.host != d.host || r5.port != 8080 || r5.cmd != socksCmdConnect || n == 0 {
			t.Errorf("SOCKS5 request for %s reads back as %+v, %v", host, r5, err)
		}
		if d.addr.Is6() {
			continue
		}
		r4, _, err := parseSOCKS4Request(appendSOCKS4Request(nil, d, "uid"))
		if err != nil || r4.host != d.host || r4.port != 8080 || r4.user != "uid" {
			t.Errorf("SOCKS4 request for %s reads back as %+v, %v", host, r4, err)
		}
	}
	u, p, _, err := parseSOCKS5Password(appendSOCKS5Password(nil, "bob", "s3cret"))
	if err != nil || u != "bob" || p != "s3cret" {
		t.Errorf("password reads back as %q %q, %v", u, p, err)
	}
}

func TestParseRelayDest(t *testing.T) {
	tests := []struct {
		host string
		want string // "" for an error
		addr bool
	}{
		{"127.0.0.9", "127.0.0.9", true},
		{"[::1]", "::1", true},
		{"::ffff:127.0.0.9", "127.0.0.9", true},
		{"2130706433", "127.0.0.1", true}, // inet_aton's shorthands, as a relay's resolver reads them
		{"127.1", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"0177.0.0.01", "127.0.0.1", true},
		{"127.0.0.9.", "127.0.0.9", true},
		{"Canary.E2E.test.", "canary.e2e.test", false},
		{"a_b-c.d", "a_b-c.d", false},
		{"256.1.1.1", "256.1.1.1", false}, // no address: a name to the resolver (which fails)
		{"1.2.3.4.5", "1.2.3.4.5", false},
		{"", "", false},
		{"[h]", "", false},
		{"fe80::1%eth0", "", false},
		{"h\x00.allowed", "", false},
		{"h .x", "", false},
		{"h..x", "", false},
		{".h", "", false},
		{"h/x", "", false},
	}
	for _, tt := range tests {
		d, err := parseRelayDest(tt.host, 80)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("parseRelayDest(%q) = %+v, want an error", tt.host, d)
		case tt.want != "" && (err != nil || d.host != tt.want || d.addr.IsValid() != tt.addr || d.port != 80):
			t.Errorf("parseRelayDest(%q) = %+v, %v; want %s (address %v)", tt.host, d, err, tt.want, tt.addr)
		}
	}
	if _, err := parseRelayDest("h", 0); err == nil {
		t.Error("port 0 accepted")
	}
}

// FuzzSOCKS checks each SOCKS parser on arbitrary bytes: it does not
// panic; a message it reads is no longer than the bytes, reads the same
// alone and through readSOCKS, and each strict prefix of it is short, so a
// reader waiting for more never stops early; a request it reads is, sent
// on as the proxy sends it, read back as the same destination.
func FuzzSOCKS(f *testing.F) {
	for _, s := range [][]byte{{5, 1, 0}, {5, 1, 0, 3, 1, 'h', 0, 80}, {4, 1, 0, 80, 0, 0, 0, 1, 'u', 0, 'h', 0},
		{1, 1, 'u', 1, 'p'}, {5, 0, 0, 1, 1, 2, 3, 4, 0, 1}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range socksParsers {
			v, n, err := p.parse(b)
			if err != nil {
				if !errors.Is(err, errSOCKSShort) && !errors.Is(err, errSOCKSMalformed) {
					t.Fatalf("%s(%x): unexpected error %v", p.name, b, err)
				}
				continue
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("%s(%x): length %d", p.name, b, n)
			}
			again, m, err := p.parse(b[:n])
			if err != nil || m != n || !cmp.Equal(v, again, cmp.AllowUnexported(socksRequest{})) {
				t.Fatalf("%s(%x) alone: %v %d %v, want %v %d", p.name, b[:n], again, m, err, v, n)
			}
			for i := range n {
				if _, _, err := p.parse(b[:i]); errors.Is(err, errSOCKSMalformed) {
					continue // malformed as soon as the start is
				} else if err == nil {
					t.Fatalf("%s(%x): a strict prefix reads as a message", p.name, b[:i])
				}
			}
			msg, err := readSOCKS(bufio.NewReaderSize(bytes.NewReader(b), 16), func(b []byte) (int, error) {
				_, n, err := p.parse(b)
				return n, err
			})
			if err != nil && len(b) <= 16 || err == nil && !bytes.Equal(msg, b[:n]) {
				t.Fatalf("readSOCKS(%s, %x) = %x, %v; want %x", p.name, b, msg, err, b[:n])
			}
			if r, ok := v.(socksRequest); ok && r.cmd == socksCmdConnect {
				d, err := parseRelayDest(r.host, r.port)
				if err != nil {
					continue
				}
				back, _, err := parseSOCKS5Request(appendSOCKS5Request(nil, socksCmdConnect, d))
				if err != nil || back.host != d.host || back.port != d.port {
					t.Fatalf("request for %+v sent on reads back as %+v, %v", d, back, err)
				}
			}
		}
	})
}
