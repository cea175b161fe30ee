package rewrite

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/andybalholm/brotli"
	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

const (
	marker   = "AKIAZZZZZZZZZZZZZZZZ"
	markerPH = "[REDACTED:aws-access-token:7f3a]"
)

// fakeRedact stands in for rewrite/secrets: it replaces marker.
func fakeRedact(s string) (string, bool) {
	if !strings.Contains(s, marker) {
		return s, false
	}
	return strings.ReplaceAll(s, marker, markerPH), true
}

func TestRewriteStringsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no request fixtures: %v", err)
	}
	for _, in := range files {
		t.Run(filepath.Base(in), func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			out, changed, err := RewriteStrings(body, fakeRedact)
			if err != nil {
				t.Fatal(err)
			}
			if !changed {
				t.Fatal("changed = false, want true: every fixture carries the marker")
			}
			if !json.Valid(out) {
				t.Fatalf("output is not valid JSON:\n%s", out)
			}
			golden := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(out)); diff != "" {
				t.Errorf("redacted body (-want +got):\n%s", diff)
			}
			// Only string values change: keys named like the secret stay, and
			// decoding both sides agrees once the placeholder is put back.
			if n, m := bytes.Count(body, []byte(marker)), bytes.Count(out, []byte(markerPH)); n == 0 || m == 0 {
				t.Errorf("marker count %d, placeholder count %d", n, m)
			}
			var a, b any
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(bytes.ReplaceAll(out, []byte(markerPH), []byte(marker)), &b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(a, b); diff != "" {
				t.Errorf("decoded body changed beyond the placeholder (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRewriteStrings(t *testing.T) {
	upper := func(s string) (string, bool) { return strings.ToUpper(s), true }
	tests := []struct {
		name    string
		in      string
		fn      func(string) (string, bool)
		want    string
		changed bool
		seen    []string // values fn must see, in order
	}{
		{name: "keys untouched", in: `{"a":"b","c":["d",{"e":"f"}]}`, fn: upper, want: `{"a":"B","c":["D",{"e":"F"}]}`, changed: true, seen: []string{"b", "d", "f"}},
		{name: "whitespace before colon", in: "{\"k\" \n\t: \"v\" , \"x\":[ \"y\" ]}", fn: upper, want: "{\"k\" \n\t: \"V\" , \"x\":[ \"Y\" ]}", changed: true, seen: []string{"v", "y"}},
		{name: "escapes decoded", in: `["a\"b\\c\/d\n\t\r\b\f"]`, seen: []string{"a\"b\\c/d\n\t\r\b\f"}},
		{name: "unicode escapes", in: `["\u00e9\u4e2d\ud83d\ude80"]`, seen: []string{"é中🚀"}},
		{name: "lone surrogates", in: `["\ud83d x \ude80 \ud83d\u0041"]`, seen: []string{"\ufffd x \ufffd \ufffdA"}},
		{name: "raw utf8 and invalid bytes kept", in: "[\"h\xc3\xa9\xff\"]", seen: []string{"h\xc3\xa9\xff"}},
		{name: "escaped quote at end", in: `["x\\", "y\\\""]`, seen: []string{`x\`, `y\"`}},
		{
			name: "replacement escaped, no html escaping",
			in:   `{"a":"S","b":"keep\u00e9"}`,
			fn: func(s string) (string, bool) {
				if s == "S" {
					return "q\"b\\n\n<&>\x01\u2028", true
				}
				return s, false
			},
			want: `{"a":"q\"b\\n\n<&>\u0001` + "\u2028" + `","b":"keep\u00e9"}`, changed: true,
		},
		{name: "same value reported changed is no change", in: `{"a":"\u0041"}`, fn: func(s string) (string, bool) { return s, true }, want: `{"a":"\u0041"}`},
		{name: "nested", in: `{"a":{"b":[[["x"]]],"c":{"d":{"e":"x"}}}}`, fn: func(s string) (string, bool) { return s + s, true }, want: `{"a":{"b":[[["xx"]]],"c":{"d":{"e":"xx"}}}}`, changed: true},
		{name: "scalars only", in: `[1, true, null, -2.5e3]`, want: `[1, true, null, -2.5e3]`},
		{name: "top-level string", in: ` "s" `, fn: upper, want: ` "S" `, changed: true},
		{name: "empty strings", in: `{"":""}`, fn: func(s string) (string, bool) { return "x", true }, want: `{"":"x"}`, changed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []string
			fn := tt.fn
			if fn == nil {
				fn = func(s string) (string, bool) { return s, false }
			}
			out, changed, err := RewriteStrings([]byte(tt.in), func(s string) (string, bool) {
				seen = append(seen, s)
				return fn(s)
			})
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if diff := cmp.Diff(want, string(out)); diff != "" {
				t.Errorf("out (-want +got):\n%s", diff)
			}
			if changed != tt.changed {
				t.Errorf("changed = %v, want %v", changed, tt.changed)
			}
			if tt.seen != nil {
				if diff := cmp.Diff(tt.seen, seen); diff != "" {
					t.Errorf("values seen (-want +got):\n%s", diff)
				}
			}
			if !json.Valid(out) {
				t.Errorf("output is not valid JSON: %s", out)
			}
		})
	}
}

func TestRewriteStringsNoChangeSameSlice(t *testing.T) {
	body, err := os.ReadFile("testdata/requests/anthropic.json")
	if err != nil {
		t.Fatal(err)
	}
	out, changed, err := RewriteStrings(body, func(s string) (string, bool) { return s, false })
	if err != nil || changed {
		t.Fatalf("changed = %v, err = %v", changed, err)
	}
	if &out[0] != &body[0] || len(out) != len(body) {
		t.Error("out is not body itself")
	}
}

func TestRewriteStringsInvalid(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":}`, `["x"`, `{"a":"b"}x`, "[\"\x01\"]", `'a'`} {
		t.Run(in, func(t *testing.T) {
			called := false
			_, _, err := RewriteStrings([]byte(in), func(s string) (string, bool) { called = true; return s, false })
			if err == nil {
				t.Error("no error for invalid JSON")
			}
			if called {
				t.Error("fn was called on invalid JSON")
			}
		})
	}
}

func FuzzRewriteStrings(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `["\u00e9\ud83d\ude80", "x\"y", 1, null]`, `{"k" : "AKIAZZZZZZZZZZZZZZZZ"}`, `"\ud800"`, `{`, "[\"\xff\"]", `[{"a":[{"b":"c"}]}]`} {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/requests/openai-chat.json"); err == nil {
		f.Add(b)
	}
	// mangle changes every value that contains an 'a' into something that needs escaping.
	mangle := func(s string) (string, bool) {
		if !strings.Contains(s, "a") {
			return s, false
		}
		return strings.ReplaceAll(s, "a", "\"\\\n\x00\u2028<"), true
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		out, changed, err := RewriteStrings(b, mangle)
		if valid != (err == nil) {
			t.Fatalf("valid = %v, err = %v", valid, err)
		}
		if !valid {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("output not valid JSON: %q -> %q", b, out)
		}
		if !changed && !bytes.Equal(out, b) {
			t.Fatal("changed = false but output differs")
		}
		same, changed, err := RewriteStrings(b, func(s string) (string, bool) { return s, true })
		if err != nil || changed || !bytes.Equal(same, b) {
			t.Fatalf("identity fn: changed = %v, err = %v", changed, err)
		}
		// The output decodes to the input's decoding with fn applied to every
		// value (encoding/json replaces invalid UTF-8, so only for valid input).
		if !utf8.Valid(b) {
			return
		}
		in, err := decodeNumbers(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeNumbers(out)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(mapStrings(in, mangle), got); diff != "" {
			t.Fatalf("decoded output (-want +got):\n%s", diff)
		}
	})
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// mapStrings applies fn to every string value of a decoded JSON document.
func mapStrings(v any, fn func(string) (string, bool)) any {
	switch v := v.(type) {
	case string:
		s, _ := fn(v)
		return s
	case []any:
		for i := range v {
			v[i] = mapStrings(v[i], fn)
		}
	case map[string]any:
		for k := range v {
			v[k] = mapStrings(v[k], fn)
		}
	}
	return v
}

func TestEncodingRoundTrip(t *testing.T) {
	body := bytes.Repeat([]byte(`{"text":"hello AKIA"}`), 500)
	for _, ce := range []string{"", "identity", "gzip", "x-gzip", "br", "zstd", "GZIP", " Br ", "ZSTD", "deflate", "gzip, br", "zstd,deflate, gzip"} {
		t.Run(ce, func(t *testing.T) {
			enc, err := EncodeBody(ce, body)
			if err != nil {
				t.Fatal(err)
			}
			if c := strings.ToLower(strings.TrimSpace(ce)); c != "" && c != "identity" && bytes.Equal(enc, body) {
				t.Error("encoding left the body as it was")
			}
			dec, err := DecodeBody(ce, enc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dec, body) {
				t.Error("round trip changed the body")
			}
		})
	}
}

func TestEncodingErrors(t *testing.T) {
	tests := []struct {
		ce   string
		body []byte
		want error
	}{
		{"compress", []byte("x"), ErrUnsupportedEncoding},
		{"gzip, br, zstd, deflate, gzip", []byte("x"), ErrUnsupportedEncoding},
		{"gzip, br", []byte("x"), nil},
		{"deflate", []byte("x"), nil},
		{"gzip", []byte("not gzip"), nil},
		{"zstd", []byte("not zstd"), nil},
		{"br", []byte("not brotli at all, really"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.ce, func(t *testing.T) {
			_, err := DecodeBody(tt.ce, tt.body)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "rewrite: ") {
				t.Errorf("err = %q, want the package prefix", err)
			}
			if tt.want != nil {
				if _, err := EncodeBody(tt.ce, tt.body); !errors.Is(err, tt.want) {
					t.Errorf("EncodeBody err = %v, want %v", err, tt.want)
				}
			}
		})
	}
}

// compressFast compresses zeros quickly, to build bombs.
func compressFast(t *testing.T, ce string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch ce {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	case "br":
		w = brotli.NewWriterLevel(&buf, brotli.BestSpeed)
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<15))
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeBodyBomb(t *testing.T) {
	zeros := make([]byte, MaxDecodedBytes+1)
	const small = 1 << 16
	for _, ce := range []string{"gzip", "br", "zstd"} {
		t.Run(ce, func(t *testing.T) {
			bomb := compressFast(t, ce, zeros)
			if len(bomb) > 1<<20 {
				t.Fatalf("bomb is %d bytes, expected a small one", len(bomb))
			}
			if _, err := DecodeBody(ce, bomb); !errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want ErrTooLarge", err)
			}
			// The bound is inclusive.
			if out, err := decodeBody(ce, compressFast(t, ce, zeros[:small]), small); err != nil || len(out) != small {
				t.Errorf("at the bound: len %d, err %v", len(out), err)
			}
			if _, err := decodeBody(ce, compressFast(t, ce, zeros[:small+1]), small); !errors.Is(err, ErrTooLarge) {
				t.Errorf("one past the bound: err = %v, want ErrTooLarge", err)
			}
		})
	}
}

// anthropicBody builds an Anthropic request of about size bytes, with n
// markers in tool results.
func anthropicBody(size, n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"func", "main", "return", "err", "nil", "if", "for", "range", "café", "\"quoted\"", "tab\t", "line\n", "{", "}"}
	var msgs []any
	secrets := 0
	for i := 0; ; i++ {
		var sb strings.Builder
		for sb.Len() < 2000 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		text := sb.String()
		if secrets < n {
			text += " AWS_ACCESS_KEY_ID=" + marker
			secrets++
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "Let me look."},
				map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i), "name": "Read", "input": map[string]any{"file_path": "/src/main.go"}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_%d", i), "content": text},
			}},
		)
		b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": true, "messages": msgs})
		if len(b) >= size {
			return b
		}
	}
}

func BenchmarkRewriteStrings(b *testing.B) {
	clean := anthropicBody(100<<10, 0)
	dirty := anthropicBody(100<<10, 5)
	b.Run("nothing-to-change", func(b *testing.B) {
		b.SetBytes(int64(len(clean)))
		for b.Loop() {
			if _, changed, err := RewriteStrings(clean, fakeRedact); err != nil || changed {
				b.Fatal(err, changed)
			}
		}
	})
	b.Run("baseline-unmarshal-marshal", func(b *testing.B) {
		b.SetBytes(int64(len(clean)))
		for b.Loop() {
			var v any
			if err := json.Unmarshal(clean, &v); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-json-valid", func(b *testing.B) {
		b.SetBytes(int64(len(clean)))
		for b.Loop() {
			if !json.Valid(clean) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("5-secrets", func(b *testing.B) {
		b.SetBytes(int64(len(dirty)))
		for b.Loop() {
			if _, changed, err := RewriteStrings(dirty, fakeRedact); err != nil || !changed {
				b.Fatal(err, changed)
			}
		}
	})
}
