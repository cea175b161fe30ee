package ws

import (
	"bytes"
	"compress/flate"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseExtensions(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []Extension
		bad  bool
	}{
		{"none", nil, nil, false},
		{"bare", []string{"permessage-deflate"}, []Extension{{Name: "permessage-deflate"}}, false},
		{"node ws", []string{"permessage-deflate; client_max_window_bits"},
			[]Extension{{Name: "permessage-deflate", Params: []Param{{Name: "client_max_window_bits"}}}}, false},
		{"two offers, two fields", []string{"permessage-deflate; server_max_window_bits=10", " x-webkit ,permessage-deflate"},
			[]Extension{
				{Name: "permessage-deflate", Params: []Param{{Name: "server_max_window_bits", Value: "10", HasValue: true}}},
				{Name: "x-webkit"}, {Name: "permessage-deflate"},
			}, false},
		{"quoted value", []string{`foo; a="1\"2"; b = 3 ;c`},
			[]Extension{{Name: "foo", Params: []Param{{Name: "a", Value: `1"2`, HasValue: true}, {Name: "b", Value: "3", HasValue: true}, {Name: "c"}}}}, false},
		{"empty elements", []string{",, foo ,"}, []Extension{{Name: "foo"}}, false},
		{"no name", []string{"; a"}, nil, true},
		{"no parameter name", []string{"foo; =1"}, nil, true},
		{"open quote", []string{`foo; a="1`}, nil, true},
		{"junk", []string{"foo bar"}, nil, true},
		{"no value", []string{"foo; a="}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExtensions(tt.in)
			if (err != nil) != tt.bad {
				t.Fatalf("error %v, want one: %v", err, tt.bad)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAcceptDeflate(t *testing.T) {
	tests := []struct {
		name   string
		offer  string
		want   *Deflate
		answer string
	}{
		{"none", "", nil, ""},
		{"other extension", "x-foo", nil, ""},
		{"bare", "permessage-deflate", &Deflate{}, "permessage-deflate"},
		{"node ws", "permessage-deflate; client_max_window_bits", &Deflate{}, "permessage-deflate"},
		{"gorilla", "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			&Deflate{ReadNoContext: true, WriteNoContext: true}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
		{"small server window: sent uncompressed", "permessage-deflate; server_max_window_bits=10",
			&Deflate{WriteOff: true}, "permessage-deflate; server_max_window_bits=10"},
		{"full server window", "permessage-deflate; server_max_window_bits=15", &Deflate{}, "permessage-deflate; server_max_window_bits=15"},
		{"first offer invalid, second taken", "permessage-deflate; server_max_window_bits=16, permessage-deflate; client_max_window_bits=9",
			&Deflate{}, "permessage-deflate"},
		{"server bits without a value", "permessage-deflate; server_max_window_bits", nil, ""},
		{"twice", "permessage-deflate; client_no_context_takeover; client_no_context_takeover", nil, ""},
		{"unknown parameter", "permessage-deflate; foo", nil, ""},
		{"no_context with a value", "permessage-deflate; server_no_context_takeover=1", nil, ""},
		{"bits with a leading zero", "permessage-deflate; client_max_window_bits=010", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers, err := ParseExtensions([]string{tt.offer})
			if err != nil {
				t.Fatal(err)
			}
			d, answer := AcceptDeflate(offers)
			if diff := cmp.Diff(tt.want, d); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if answer != tt.answer {
				t.Errorf("answer %q, want %q", answer, tt.answer)
			}
		})
	}
}

func TestAcceptDeflateResponse(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		want   *Deflate
		bad    bool
	}{
		{"declined", "", nil, false},
		{"bare", "permessage-deflate", &Deflate{}, false},
		{"gorilla", "permessage-deflate; server_no_context_takeover; client_no_context_takeover", &Deflate{ReadNoContext: true, WriteNoContext: true}, false},
		{"our window limited", "permessage-deflate; client_max_window_bits=12", &Deflate{WriteOff: true}, false},
		{"server window limited", "permessage-deflate; server_max_window_bits=9", &Deflate{}, false},
		{"not offered", "x-foo", nil, true},
		{"two", "permessage-deflate, permessage-deflate", nil, true},
		{"bits without a value", "permessage-deflate; client_max_window_bits", nil, true},
		{"unknown parameter", "permessage-deflate; level=9", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exts, err := ParseExtensions([]string{tt.answer})
			if err != nil {
				t.Fatal(err)
			}
			d, err := AcceptDeflateResponse(exts)
			if (err != nil) != tt.bad {
				t.Fatalf("error %v, want one: %v", err, tt.bad)
			}
			if diff := cmp.Diff(tt.want, d); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandshakeChecks(t *testing.T) {
	good := func() *http.Request {
		r, _ := http.NewRequest("GET", "http://x/ws", nil)
		r.Header.Set("Upgrade", "WebSocket")
		r.Header.Set("Connection", "keep-alive, Upgrade")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		r.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate")
		return r
	}
	key, offers, err := CheckRequest(good())
	if err != nil || key != "dGhlIHNhbXBsZSBub25jZQ==" || len(offers) != 1 {
		t.Fatalf("CheckRequest = %q %v %v", key, offers, err)
	}
	// RFC 6455's own example.
	if got := AcceptKey(key); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Errorf("AcceptKey = %q", got)
	}
	for name, spoil := range map[string]func(*http.Request){
		"POST":       func(r *http.Request) { r.Method = "POST" },
		"HTTP/1.0":   func(r *http.Request) { r.ProtoMinor = 0 },
		"no upgrade": func(r *http.Request) { r.Header.Del("Upgrade") },
		"version 8":  func(r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") },
		"short key":  func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "AAAA") },
		"two keys":   func(r *http.Request) { r.Header.Add("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==") },
	} {
		r := good()
		spoil(r)
		if _, _, err := CheckRequest(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	res := func(ext string) *http.Response {
		h := http.Header{}
		h.Set("Upgrade", "websocket")
		h.Set("Connection", "Upgrade")
		h.Set("Sec-WebSocket-Accept", AcceptKey(key))
		if ext != "" {
			h.Set("Sec-WebSocket-Extensions", ext)
		}
		return &http.Response{StatusCode: 101, Header: h}
	}
	if d, err := CheckResponse(res("permessage-deflate"), key, true); err != nil || d == nil {
		t.Errorf("CheckResponse = %v %v", d, err)
	}
	if _, err := CheckResponse(res("permessage-deflate"), key, false); err == nil {
		t.Error("an extension that was not offered was accepted")
	}
	if _, err := CheckResponse(res(""), "AAAAAAAAAAAAAAAAAAAAAA==", false); err == nil {
		t.Error("a wrong accept value was accepted")
	}
}

// A compressor that keeps its window between messages (context takeover),
// as Node's ws and most browsers do, is read right; what the relay writes
// with context takeover reads back as one deflate stream with the
// standard library's decompressor, as a peer would read it.
func TestDeflateContextTakeover(t *testing.T) {
	msgs := [][]byte{
		[]byte(strings.Repeat(`{"type":"response.output_text.delta","delta":"hello"}`, 3)),
		[]byte(`{"type":"response.output_text.delta","delta":"hello"}`),
		bytes.Repeat([]byte("abcdefgh"), 10000), // more than the window
		[]byte(`{"type":"response.output_text.delta","delta":"hello"}`),
		{},
	}
	// A peer's compressor: one stream, flushed after each message.
	var stream bytes.Buffer
	fw, _ := flate.NewWriter(&stream, flate.BestCompression)
	var payloads [][]byte
	for _, m := range msgs {
		start := stream.Len()
		fw.Write(m)
		fw.Flush()
		p := bytes.Clone(stream.Bytes()[start:])
		if !bytes.HasSuffix(p, deflateTail) {
			t.Fatalf("flush did not end with a sync marker")
		}
		payloads = append(payloads, p[:len(p)-4])
	}
	in := &inflater{}
	for i, p := range payloads {
		got, err := io.ReadAll(in.reader(bytes.NewReader(p)))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got, msgs[i]) {
			t.Errorf("message %d: read %d bytes, want %d", i, len(got), len(msgs[i]))
		}
	}
	// The second message, read without the first's window, fails or
	// differs: the window was needed.
	if got, err := io.ReadAll((&inflater{}).reader(bytes.NewReader(payloads[1]))); err == nil && bytes.Equal(got, msgs[1]) {
		t.Error("the second message read right without the window: the test proves nothing")
	}

	for _, noContext := range []bool{false, true} {
		d := &deflater{noContext: noContext}
		var all bytes.Buffer
		var sizes []int
		for _, m := range msgs {
			var out []byte
			d.start(func(b []byte) error { out = append(out, b...); return nil })
			d.Write(m)
			last, err := d.end()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, last...)
			sizes = append(sizes, len(out))
			if noContext {
				// Each message alone is a stream.
				got, err := io.ReadAll(flate.NewReader(io.MultiReader(bytes.NewReader(out), bytes.NewReader(deflateEnd))))
				if err != nil || !bytes.Equal(got, m) {
					t.Errorf("no context: a message read back as %d bytes, %v", len(got), err)
				}
			}
			all.Write(out)
			all.Write(deflateTail)
		}
		if noContext {
			continue
		}
		got, _ := io.ReadAll(flate.NewReader(&all)) // ends with an unexpected EOF: no final block
		if want := bytes.Join(msgs, nil); !bytes.Equal(got, want) {
			t.Errorf("context takeover: read back %d bytes, want %d", len(got), len(want))
		}
		if sizes[1] >= sizes[0]/2 {
			t.Errorf("the second message took %d bytes compressed against the first's %d: no window kept?", sizes[1], sizes[0])
		}
	}
}
