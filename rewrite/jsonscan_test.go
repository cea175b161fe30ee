package rewrite

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
)

// FuzzParseJSON checks parseJSON against encoding/json: the same verdict,
// and, on valid JSON, the strings RewriteStrings walks (forStrings).
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":"b"}`, `[1,-0.5e+3,true,false,null,{},[],""]`, ` {"k" : [ "\u00e9\ud83d\ude80", "x\"y\\" ] } `, `01`, `-`, `1.`, `1e`, `.5`,
		`{"a" "b"}`, `{"a":}`, `[1,]`, `{,}`, `"\x"`, `"\u12"`, "\"\x01\"", "[\"\xff\"]", `tru`, `nul`, `[1 2]`, `{"a":1}}`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		f.Add(s)
	}
	for _, name := range []string{"openai-chat", "anthropic", "gemini", "bedrock"} {
		if b, err := os.ReadFile("testdata/requests/" + name + ".json"); err == nil {
			f.Add(string(b))
		}
	}
	f.Add(`{"input":{"a":{"input":{"b":1}}},"x":{"args":{}},"args":{"c":[{"response":{"d":"e"}}]}}`)
	f.Fuzz(func(t *testing.T, s string) {
		strs, ok := parseJSON(s, nil)
		if want := json.Valid([]byte(s)); ok != want {
			t.Fatalf("parseJSON says %v, json.Valid %v: %q", ok, want, s)
		}
		if !ok {
			return
		}
		var want strSpans
		forStrings(s, func(start, end int, key bool) {
			want = append(want, strSpan{start + 1, end - 1, start + 1, end - 1, key})
		})
		if d := cmp.Diff(want, strs, cmp.AllowUnexported(strSpan{})); d != "" {
			t.Fatalf("strings of %q (-forStrings +parseJSON):\n%s", s, d)
		}
		// The tool objects: whole objects, valid, apart, in order.
		var objs []span
		again, ok := scanJSON(s, nil, &objs)
		if !ok || len(again) != len(strs) {
			t.Fatalf("scanJSON disagrees with parseJSON on %q", s)
		}
		end := 0
		for _, o := range objs {
			if o.start < end || s[o.start] != '{' || s[o.end-1] != '}' || !json.Valid([]byte(s[o.start:o.end])) {
				t.Fatalf("tool object [%d,%d) of %q", o.start, o.end, s)
			}
			end = o.end
		}
	})
}

// BenchmarkParseJSON compares parseJSON with json.Valid on the secret
// corpus's bodies (every API shape and serialization).
func BenchmarkParseJSON(b *testing.B) {
	var bodies []string
	var size int64
	for _, s := range secretcorpus.Generate(secretcorpus.Options{Seed: 1}) {
		for _, r := range s.Requests {
			bodies = append(bodies, string(r.Body))
			size += int64(len(r.Body))
		}
	}
	b.Run("parseJSON", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			for _, body := range bodies {
				if _, ok := parseJSON(body, nil); !ok {
					b.Fatal("invalid")
				}
			}
		}
	})
	b.Run("baseline-json-valid", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			for _, body := range bodies {
				if !json.Valid([]byte(body)) {
					b.Fatal("invalid")
				}
			}
		}
	})
}
