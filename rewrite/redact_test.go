package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/internal/secretcorpus"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// markerFinder stands in for rewrite/secrets: it finds every marker.
var markerFinder = RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
	for i := 0; ; {
		j := strings.Index(s[i:], marker)
		if j < 0 {
			return
		}
		found(i+j, i+j+len(marker), "aws-access-token", markerPH)
		i += j + len(marker)
	}
})

// marshal is v as encoding/json writes it.
func marshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The walk goes into JSON inside strings and into escaped text, and puts
// the placeholder back where the secret's bytes were, escaped as each
// level needs; every other byte stays.
func TestRedactBodyWalk(t *testing.T) {
	const m, p = marker, markerPH
	tests := []struct {
		name, in, want string
		ids            int
	}{
		{name: "plain value", in: `{"a":"x ` + m + ` y"}`, want: `{"a":"x ` + p + ` y"}`, ids: 1},
		{name: "key untouched", in: `{"` + m + `":"v"}`, want: `{"` + m + `":"v"}`},
		{
			name: "JSON in a string",
			in:   `{"arguments":"{\"cmd\":\"x ` + m + `\",\"n\":1}"}`,
			want: `{"arguments":"{\"cmd\":\"x ` + p + `\",\"n\":1}"}`, ids: 1,
		},
		{
			// The marker shows only once the inner string is decoded:
			// its escape is replaced whole, the rest kept as it was.
			name: "hidden by an inner escape",
			in:   `{"arguments":"{\"cmd\":\"\\u00e9 AKIA\\u005aZZZZZZZZZZZZZZZ \\u00e9\"}"}`,
			want: `{"arguments":"{\"cmd\":\"\\u00e9 ` + p + ` \\u00e9\"}"}`, ids: 1,
		},
		{
			name: "three levels",
			in:   marshal(t, map[string]string{"a": marshal(t, map[string]string{"b": marshal(t, map[string]string{"c": "AKIA\u005aZZZZZZZZZZZZZZZ"})})}),
			want: marshal(t, map[string]string{"a": marshal(t, map[string]string{"b": marshal(t, map[string]string{"c": p})})}), ids: 1,
		},
		{
			name: "three levels hidden by escapes",
			in:   `{"a":"{\"b\":\"{\\\"c\\\":\\\"AKIA\\\\u005aZZZZZZZZZZZZZZZ\\\"}\"}"}`,
			want: `{"a":"{\"b\":\"{\\\"c\\\":\\\"` + p + `\\\"}\"}"}`, ids: 1,
		},
		{
			name: "inner key",
			in:   `{"a":"{\"` + m + `\":1}"}`,
			want: `{"a":"{\"` + p + `\":1}"}`, ids: 1,
		},
		{
			// Prose that quotes JSON with escaped quotes is also read
			// with its escapes resolved.
			name: "escaped JSON in prose",
			in:   `{"text":"the tool said {\\\"k\\\": \\\"AKIA\\u005aZZZZZZZZZZZZZZZ\\\"} and stopped"}`,
			want: `{"text":"the tool said {\\\"k\\\": \\\"` + p + `\\\"} and stopped"}`, ids: 1,
		},
		{
			name: "escaped prose without quotes is not decoded",
			in:   `{"text":"AKIA\\u005aZZZZZZZZZZZZZZZ"}`,
			want: `{"text":"AKIA\\u005aZZZZZZZZZZZZZZZ"}`,
		},
		{
			name: "a JSON string in a string",
			in:   `["\"AKIA\\u005aZZZZZZZZZZZZZZZ\""]`,
			want: `["\"` + p + `\""]`, ids: 1,
		},
		{
			name: "not JSON",
			in:   `token ` + m + ` {"a":"` + m + `"}`,
			want: `token ` + p + ` {"a":"` + p + `"}`, ids: 2,
		},
		{
			name: "invalid inner JSON is text",
			in:   `{"a":"{\"b\":\"` + m + `\""}`,
			want: `{"a":"{\"b\":\"` + p + `\""}`, ids: 1,
		},
		{name: "clean", in: `{"a":"{\"b\":\"c\\u00e9\"}","d":[1,2,"\"x\""]}`, want: `{"a":"{\"b\":\"c\\u00e9\"}","d":[1,2,"\"x\""]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ids := RedactBody([]byte(tt.in), markerFinder)
			if d := cmp.Diff(tt.want, string(out)); d != "" {
				t.Errorf("out (-want +got):\n%s", d)
			}
			if len(ids) != tt.ids {
				t.Errorf("%d ids, want %d", len(ids), tt.ids)
			}
		})
	}
}

// crossFinder finds `X","Y`, across two strings of JSON, and W.
var crossFinder = RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
	if i := strings.Index(s, `X","Y`); i >= 0 {
		found(i, i+5, "cross", "[C]")
	}
	if i := strings.Index(s, "W"); i >= 0 {
		found(i, i+1, "w", "[W]")
	}
})

// A finding in JSON inside a string that crosses a string's bounds is
// dropped, so that the JSON stays JSON; the others are kept.
func TestRedactBodyKeepsInnerJSON(t *testing.T) {
	in := `{"a":"{\"p\":\"X\",\"q\":\"Y W\"}"}`
	out, ids := RedactBody([]byte(in), crossFinder)
	if want := `{"a":"{\"p\":\"X\",\"q\":\"Y [W]\"}"}`; string(out) != want {
		t.Errorf("out = %s, want %s", out, want)
	}
	if d := cmp.Diff([]string{"w"}, ids); d != "" {
		t.Errorf("ids (-want +got):\n%s", d)
	}
}

// A body without secrets comes back as it is: the same slice.
func TestRedactBodyCleanSameSlice(t *testing.T) {
	for _, in := range []string{`{"a":"{\"b\":\"c\"}"}`, `plain text`, `[1,"\"q\""]`} {
		body := []byte(in)
		out, ids := RedactBody(body, markerFinder)
		if ids != nil || len(out) != len(body) || &out[0] != &body[0] {
			t.Errorf("%s: changed, or not the same slice", in)
		}
	}
}

// keyFinder finds a value only next to its key: "token":"<16 bytes>".
var keyFinder = RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
	for i := 0; ; {
		j := strings.Index(s[i:], `"token":"`)
		if j < 0 || i+j+9+16 > len(s) {
			return
		}
		a := i + j + 9
		found(a, a+16, "named-secret", "[T]")
		i = a + 16
	}
})

// The objects in which APIs carry a tool's input or output as JSON are
// read as JSON inside a string is, keys and values together; an API's own
// objects are not.
func TestRedactBodyToolObjects(t *testing.T) {
	const v = "abcdefghijklmnop"
	tests := []struct{ name, in, want string }{
		{"anthropic tool_use input", `{"content":[{"type":"tool_use","input":{"env":{"token":"` + v + `"}}}]}`,
			`{"content":[{"type":"tool_use","input":{"env":{"token":"[T]"}}}]}`},
		{"gemini functionResponse", `{"parts":[{"functionResponse":{"name":"sh","response":{"output":{"token":"` + v + `","n":[1,{"token":"` + v + `"}]}}}}]}`,
			`{"parts":[{"functionResponse":{"name":"sh","response":{"output":{"token":"[T]","n":[1,{"token":"[T]"}]}}}}]}`},
		{"gemini functionCall", `{"functionCall":{"name":"sh","args":{"token":"` + v + `"}},"x":"` + v + `!"}`,
			`{"functionCall":{"name":"sh","args":{"token":"[T]"}},"x":"[T]!"}`},
		{"bedrock toolResult json", `{"toolResult":{"content":[{"json":{"token":"` + v + `"}}]}}`,
			`{"toolResult":{"content":[{"json":{"token":"[T]"}}]}}`},
		{"bedrock toolResult json list", `{"toolResult":{"content":[{"json":[{"token":"` + v + `"},{"token":"` + v + `"}]}]}}`,
			`{"toolResult":{"content":[{"json":[{"token":"[T]"},{"token":"[T]"}]}]}}`},
		{"an API's own object", `{"metadata":{"token":"` + v + `"},"input":"x","args":[{"token":"` + v + `"}]}`,
			`{"metadata":{"token":"` + v + `"},"input":"x","args":[{"token":"` + v + `"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := RedactBody([]byte(tt.in), keyFinder)
			if d := cmp.Diff(tt.want, string(out)); d != "" {
				t.Errorf("out (-want +got):\n%s", d)
			}
		})
	}
}

// A secret found once is replaced wherever it occurs in the body, in
// strings walked before and after, at any depth, where no rule would find
// it.
func TestRedactBodyEverywhere(t *testing.T) {
	const value = "s3cr3t-value-42"
	// The finder knows the value only where it follows "PASSWORD=".
	finder := RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
		for i := 0; ; {
			j := strings.Index(s[i:], "PASSWORD="+value)
			if j < 0 {
				return
			}
			a := i + j + len("PASSWORD=")
			found(a, a+len(value), "env-secret", "[REDACTED:env-secret:1234]")
			i = a + len(value)
		}
	})
	in := marshal(t, map[string]any{"messages": []any{
		map[string]string{"role": "assistant", "content": "I will use " + value + " for it"},
		map[string]string{"role": "tool", "content": marshal(t, map[string]string{"output": "$ cat .env\nPASSWORD=" + value + "\n"})},
		map[string]string{"role": "user", "content": "is " + value + " right? and " + value + "1?"},
		map[string]string{"role": "user", "content": marshal(t, map[string]string{"quoted": `say \"` + value + `\"`})},
	}})
	out, ids := RedactBody([]byte(in), finder)
	if strings.Contains(string(out), value) {
		t.Errorf("the value is left in the body:\n%s", out)
	}
	if len(ids) != 5 {
		t.Errorf("%d replacements, want 5: %v", len(ids), ids)
	}
	if !json.Valid(out) {
		t.Fatalf("not JSON: %s", out)
	}
	checkSpliced(t, []byte(in), out)

	// Shorter values are replaced only where found, and in the same text.
	short := RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
		if i := strings.Index(s, "PW=abc"); i >= 0 {
			found(i+3, i+6, "env-secret", "[P]")
		}
	})
	out, _ = RedactBody([]byte(`["PW=abc","abcdef"]`), short)
	if want := `["PW=[P]","abcdef"]`; string(out) != want {
		t.Errorf("short value: %s, want %s", out, want)
	}
}

// checkSpliced fails unless out is in with some spans replaced by
// placeholders: every other byte as it was, in order.
func checkSpliced(t *testing.T, in, out []byte) {
	t.Helper()
	re := regexp.MustCompile(`\[REDACTED:[a-z0-9-]+:[0-9a-f]+\]|\[[A-Z]\]`)
	parts := re.Split(string(out), -1)
	pos := 0
	for i, part := range parts {
		switch {
		case i == 0:
			if !bytes.HasPrefix(in, []byte(part)) {
				t.Fatalf("the output's start changed: %.80q", part)
			}
			pos = len(part)
		case i == len(parts)-1:
			if !bytes.HasSuffix(in[pos:], []byte(part)) {
				t.Fatalf("the output's end changed: %.80q", part)
			}
		default:
			j := bytes.Index(in[pos:], []byte(part))
			if j < 0 {
				t.Fatalf("the output's bytes %.80q are not the input's", part)
			}
			pos += j + len(part)
		}
	}
}

// realSecrets is a session's Redactor with the project's rules.
func realSecrets(t testing.TB) *secrets.Redactor {
	t.Helper()
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return secrets.NewRedactor(sc, []byte("0123456789abcdef0123456789abcdef"))
}

// planted makes secrets shaped as real ones, from rng.
type planted struct{ rng *rand.Rand }

func (p planted) chars(alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[p.rng.IntN(len(alphabet))]
	}
	return string(b)
}

const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b64    = alnum + "+/"
	upper2 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
)

func (p planted) github() string    { return "ghp_" + p.chars(alnum, 36) }
func (p planted) awsSecret() string { return p.chars(alnum, 20) + "/" + p.chars(b64, 19) }
func (p planted) awsID() string     { return "AKIA" + p.chars(upper2, 16) }

// pem is an RSA private key's PEM (its body random: no rule checks it).
func (p planted) pem() string {
	var b strings.Builder
	b.WriteString("-----BEGIN RSA PRIVATE KEY-----\n")
	for range 10 {
		b.WriteString(p.chars(b64, 64) + "\n")
	}
	b.WriteString(p.chars(b64, 20) + "==\n-----END RSA PRIVATE KEY-----\n")
	return b.String()
}

// pemLines is what of a PEM must not be left: each line of its body.
func pemLines(pem string) []string {
	var out []string
	for _, l := range strings.Split(pem, "\n") {
		if len(l) >= 20 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// decodedTexts returns every string of a JSON document at every depth:
// the document's values and keys, and, of each that is JSON itself, its
// own, and so on.
func decodedTexts(t *testing.T, b []byte) []string {
	t.Helper()
	v, err := decodeNumbers(b)
	if err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
			if isJSONDoc(v) {
				if inner, err := decodeNumbers([]byte(v)); err == nil {
					walk(inner)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for k, x := range v {
				out = append(out, k)
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// jsonStrings returns how many strings of a JSON document, at every
// depth, are JSON themselves.
func jsonStrings(t *testing.T, b []byte) int {
	n := 0
	for _, s := range decodedTexts(t, b) {
		if isJSONDoc(s) {
			n++
		}
	}
	return n
}

// Agents' request shapes with secrets inside JSON inside strings, in
// escaped prose, and repeated without their context: none is left, at any
// level, the body and every JSON inside it stay JSON, and only the
// secrets' bytes change.
func TestRedactBodyAgentShapes(t *testing.T) {
	p := planted{rand.New(rand.NewPCG(26, 1))}
	type shape struct {
		name string
		body string
		gone []string // must be left nowhere
	}
	var shapes []shape
	add := func(name, body string, gone ...string) { shapes = append(shapes, shape{name, body, gone}) }

	pem := p.pem()
	add("chat tool call writes a key file", marshal(t, map[string]any{
		"model": "gpt-test",
		"messages": []any{
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function",
				"function": map[string]any{"name": "write_file", "arguments": marshal(t, map[string]string{"path": "key.pem", "content": pem})},
			}}},
		},
	}), pemLines(pem)...)

	awsID, awsSecret := p.awsID(), p.awsSecret()
	add("codex function_call_output with quoted env", marshal(t, map[string]any{
		"model": "gpt-test", "prompt_cache_key": "0b5e2c1c-5d7e-4c55-9a4f-0b3f5c0de0a1",
		"input": []any{
			map[string]any{"type": "function_call", "call_id": "c1", "name": "shell", "arguments": marshal(t, map[string]any{"command": []string{"bash", "-lc", "cat deploy.sh"}})},
			map[string]any{"type": "function_call_output", "call_id": "c1", "output": marshal(t, map[string]any{
				"output":   "#!/bin/sh\nexport AWS_SECRET_ACCESS_KEY=\"" + awsSecret + "\"\n./deploy\n",
				"metadata": map[string]any{"exit_code": 0, "duration_seconds": 0.2},
			})},
		},
	}), awsSecret)

	pem3 := p.pem()
	add("three levels deep", marshal(t, map[string]any{
		"messages": []any{map[string]any{"role": "tool", "tool_call_id": "c", "content": marshal(t, map[string]any{
			"result": marshal(t, map[string]any{"file": marshal(t, map[string]string{"key": pem3})}),
		})}},
	}), pemLines(pem3)...)

	sts := p.awsSecret()
	add("escaped JSON quoted in prose", marshal(t, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text",
			"text": `the script printed "{\"Credentials\": {\"SecretAccessKey\": \"` + sts + `\", \"Expiration\": \"2026-01-01\"}}" and exited`}}}},
	}), sts)

	rep := p.awsSecret()
	add("a secret quoted before and after its context", marshal(t, map[string]any{
		"messages": []any{
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "I found " + rep + " in your notes."}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "t1",
				"content": "AWS_ACCESS_KEY_ID=" + awsID + "\nAWS_SECRET_ACCESS_KEY=" + rep + "\n"}}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "The secret is " + rep + "."},
				map[string]any{"type": "tool_use", "id": "t2", "name": "bash", "input": map[string]any{"command": "echo " + rep}},
			}},
		},
	}), rep)

	nested := p.awsSecret()
	add("found only inside nested JSON, quoted bare elsewhere", marshal(t, map[string]any{
		"input": []any{
			map[string]any{"role": "user", "content": "is " + nested + " still the deploy key?"},
			map[string]any{"type": "function_call_output", "call_id": "c2", "output": marshal(t, map[string]any{"output": "export AWS_SECRET_ACCESS_KEY=\"" + nested + "\"\n"})},
			map[string]any{"role": "user", "content": "rotate " + nested + " please"},
		},
	}), nested)

	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			r := realSecrets(t)
			in := []byte(sh.body)
			out, ids := RedactBody(in, r)
			if len(ids) == 0 {
				t.Fatal("nothing was redacted")
			}
			if !json.Valid(out) {
				t.Fatalf("the output is not JSON:\n%s", out)
			}
			if a, b := jsonStrings(t, in), jsonStrings(t, out); a != b {
				t.Errorf("%d strings were JSON, %d are", a, b)
			}
			texts := decodedTexts(t, out)
			for i, g := range sh.gone {
				if bytes.Contains(out, []byte(g)) {
					t.Errorf("secret %d is left in the body", i)
				}
				for _, s := range texts {
					if strings.Contains(s, g) {
						t.Errorf("secret %d is left in a decoded string", i)
						break
					}
				}
			}
			checkSpliced(t, in, out)
			t.Logf("%d replacements: %v", len(ids), ids)
		})
	}
}

// A secret seen only inside JSON inside a string stays known to the
// session: a later body that quotes it bare has it replaced.
// A secret found inside a longer one (a database URL's password in the
// value of a Secret's DATABASE_URL) is replaced wherever it is alone in
// the same body too, before and after.
func TestRedactBodyInnerSecretEverywhere(t *testing.T) {
	const url, pw = "postgresql://app:Pq7!vX2#kL9zR4@db.internal:5432/app", "Pq7!vX2#kL9zR4"
	// The whole URL where a key names it; its password inside any URL.
	finder := RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
		if i := strings.Index(s, "DATABASE_URL: "+url); i >= 0 {
			a := i + len("DATABASE_URL: ")
			found(a, a+len(url), "kubernetes-secret", "[K]")
			return
		}
		if i := strings.Index(s, "://app:"+pw+"@"); i >= 0 {
			a := i + len("://app:")
			found(a, a+len(pw), "database-url", "[D]")
		}
	})
	in := marshal(t, []string{"the password is " + pw, "stringData:\n  DATABASE_URL: " + url + "\n", "so " + pw + " it is"})
	out, _ := RedactBody([]byte(in), finder)
	want := marshal(t, []string{"the password is [D]", "stringData:\n  DATABASE_URL: [K]\n", "so [D] it is"})
	if d := cmp.Diff(want, string(out)); d != "" {
		t.Errorf("out (-want +got):\n%s", d)
	}
}

func TestRedactBodyNestedSecretStaysKnown(t *testing.T) {
	p := planted{rand.New(rand.NewPCG(26, 2))}
	secret := p.awsSecret()
	r := realSecrets(t)
	first := marshal(t, map[string]any{"input": []any{map[string]any{"type": "function_call_output", "call_id": "c",
		"output": marshal(t, map[string]string{"output": "export AWS_SECRET_ACCESS_KEY=\"" + secret + "\"\n"})}}})
	if out, _ := RedactBody([]byte(first), r); bytes.Contains(out, []byte(secret)) {
		t.Fatal("the nested secret was not redacted")
	}
	later := marshal(t, map[string]any{"input": "remember " + secret + "?"})
	out, ids := RedactBody([]byte(later), r)
	if bytes.Contains(out, []byte(secret)) || len(ids) != 1 {
		t.Errorf("a later request quoting it bare keeps it (%d replacements)", len(ids))
	}
}

// redactBodyOneLevel is RedactBody as it was before it went into strings:
// every string value decoded once, each on its own. The benchmarks'
// baseline.
func redactBodyOneLevel(body []byte, r *secrets.Redactor) (out []byte, ids []string) {
	fn := func(s string) (string, bool) {
		o, found := r.Redact(s)
		ids = append(ids, found...)
		return o, len(found) > 0
	}
	out, changed, err := RewriteStrings(body, fn)
	if err != nil {
		var s string
		s, changed = fn(string(body))
		out = []byte(s)
	}
	if !changed {
		return body, nil
	}
	return out, ids
}

// codexBody builds a Responses request of about size bytes as Codex sends
// them: shell calls whose output is JSON in a string, with n secrets in
// the outputs.
func codexBody(size, n int) []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	p := planted{rng}
	words := []string{"func", "main", "return", "err", "nil", "if", "for", "range", "café", "\"quoted\"", "path\\to", "tab\t", "line\n", "{", "}", "<div>", "&&"}
	var items []any
	for i := 0; ; i++ {
		var sb strings.Builder
		for sb.Len() < 2000 {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		if i < n {
			sb.WriteString("\nGITHUB_TOKEN=" + p.github() + "\n")
		}
		args, _ := json.Marshal(map[string]any{"command": []string{"bash", "-lc", fmt.Sprintf("sed -n 1,80p src/file%d.go", i)}, "workdir": "/src"})
		out, _ := json.Marshal(map[string]any{"output": sb.String(), "metadata": map[string]any{"exit_code": 0, "duration_seconds": 0.1}})
		items = append(items,
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Let me look at the file."}}},
			map[string]any{"type": "function_call", "call_id": fmt.Sprintf("call_%d", i), "name": "shell", "arguments": string(args)},
			map[string]any{"type": "function_call_output", "call_id": fmt.Sprintf("call_%d", i), "output": string(out)},
		)
		b, _ := json.Marshal(map[string]any{"model": "gpt-5-codex", "stream": true, "prompt_cache_key": "0b5e2c1c-5d7e-4c55-9a4f-0b3f5c0de0a1", "input": items})
		if len(b) >= size {
			return b
		}
	}
}

// BenchmarkRedactBody compares the walk with the one-level walk it
// replaced, on bodies with and without secrets, in one run:
// go test -run '^$' -bench RedactBody ./rewrite
func BenchmarkRedactBody(b *testing.B) {
	p := planted{rand.New(rand.NewPCG(5, 6))}
	anth := func(n int) []byte {
		body := anthropicBody(100<<10, 0)
		for range n {
			body = bytes.Replace(body, []byte("Let me look."), []byte("Let me look. GITHUB_TOKEN="+p.github()), 1)
		}
		return body
	}
	bodies := []struct {
		name string
		body []byte
	}{
		{"anthropic-clean", anth(0)},
		{"anthropic-5-secrets", anth(5)},
		{"codex-clean", codexBody(100<<10, 0)},
		{"codex-5-secrets", codexBody(100<<10, 5)},
	}
	for _, bc := range bodies {
		for _, impl := range []struct {
			name string
			fn   func([]byte, *secrets.Redactor) ([]byte, []string)
		}{
			{"one-level", redactBodyOneLevel},
			{"walk", func(body []byte, r *secrets.Redactor) ([]byte, []string) { return RedactBody(body, r) }},
		} {
			b.Run("body="+bc.name+"/impl="+impl.name, func(b *testing.B) {
				r := realSecrets(b)
				b.SetBytes(int64(len(bc.body)))
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					impl.fn(bc.body, r)
				}
				reportCPU(b, cpu0)
			})
		}
	}
}

// normText is what a string of a body says once the walk is done with it,
// read as the walk reads it (JSON inside it parsed, escaped text
// decoded), with the marker replaced: the same for a body and its
// redaction when the walk put every placeholder where its marker was.
func normText(s string, depth int) any {
	if depth < MaxNesting && isJSONDoc(s) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err == nil {
			return normValue(v, depth+1, true)
		}
	}
	if depth < MaxNesting && strings.Contains(s, `\"`) {
		return normText(unescape(s, nil), depth+1)
	}
	return strings.ReplaceAll(s, marker, markerPH)
}

// normValue is normText of each string of a decoded JSON value (keys too
// when keys is set: the walk redacts keys inside strings, not the body's).
func normValue(v any, depth int, keys bool) any {
	switch v := v.(type) {
	case string:
		return normText(v, depth)
	case []any:
		for i := range v {
			v[i] = normValue(v[i], depth, keys)
		}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if _, obj := x.(map[string]any); !keys && obj && toolKey(k) {
				out[k] = normValue(x, depth+1, true) // a tool's data: read as JSON in a string is
				continue
			}
			if keys {
				k = fmt.Sprint(normText(k, depth))
			}
			out[k] = normValue(x, depth, keys)
		}
		return out
	}
	return v
}

// FuzzRedactBody checks the walk against encoding/json on any body, and
// on bodies that nest JSON in strings with the marker inside: the output
// is JSON when the input is, every string that was JSON is still JSON,
// no marker is left anywhere the walk reaches, the output reads as the
// input with each marker replaced, and no other byte changes.
func FuzzRedactBody(f *testing.F) {
	for _, s := range []string{
		`{"a":"b"}`, `{"a":"{\"b\":\"` + marker + `\"}"}`, `{"a":"{\"b\":\"AKIA\\u005aZZZZZZZZZZZZZZZ\"}"}`,
		`["x \"{\\\"k\\\": \\\"AKIA\\u005aZZZZZZZZZZZZZZZ\\\"}\""]`, `"\"AKIA\\u005aZZZZZZZZZZZZZZZ\""`,
		`{"a":"{\"b\":\"{\\\"c\\\":\\\"AKIA\\\\u005aZZZZZZZZZZZZZZZ\\\"}\"}"}`, `[{"a":"\u00e9\ud83d\ude80 AKIAZZZZZZZZZZZZZZZZ"}]`,
		`{"a":"[\"\\u00e9` + marker + `\\ud800\"]"}`, `not json ` + marker, `{`, "[\"\xff" + marker + "\"]",
	} {
		f.Add([]byte(s))
	}
	for _, s := range []string{"output " + marker, `say \"` + marker + `\"` + "\n\t\u00e9<>&"} {
		inner := marshal(f, map[string]any{"output": s, "metadata": map[string]int{"exit_code": 0}})
		f.Add([]byte(marshal(f, map[string]any{"input": []any{map[string]string{"type": "function_call_output", "output": inner}}})))
		f.Add([]byte(marshal(f, []string{marshal(f, []string{inner})})))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		out, ids := RedactBody(body, markerFinder)
		if !bytes.Equal(body, in) {
			t.Fatal("the input was changed")
		}
		if len(ids) == 0 {
			if !bytes.Equal(out, in) {
				t.Fatal("nothing redacted, yet the body changed")
			}
		}
		checkSpliced(t, in, out)
		where := FindBodySecrets(in, markerFinder)
		if len(where) != len(ids) {
			t.Fatalf("FindBodySecrets gives %d, RedactBody replaced %d", len(where), len(ids))
		}
		if !json.Valid(in) {
			return
		}
		for _, w := range where {
			if w.Pointer != "" && w.Pointer[0] != '/' || w.Pointer == "" && bytes.TrimSpace(in)[0] != '"' {
				t.Fatalf("pointer %q in %q", w.Pointer, in)
			}
		}
		if !json.Valid(out) {
			t.Fatalf("the output is not JSON: %q -> %q", in, out)
		}
		if !utf8.Valid(in) {
			return // encoding/json reads invalid UTF-8 as U+FFFD, the walk keeps it
		}
		if a, b := jsonStrings(t, in), jsonStrings(t, out); a != b {
			t.Fatalf("%d strings were JSON, %d are: %q -> %q", a, b, in, out)
		}
		var vin, vout any
		for _, x := range []struct {
			b []byte
			v *any
		}{{in, &vin}, {out, &vout}} {
			d := json.NewDecoder(bytes.NewReader(x.b))
			d.UseNumber()
			if err := d.Decode(x.v); err != nil {
				t.Fatal(err)
			}
		}
		want, got := normValue(vin, 0, false), normValue(vout, 0, false)
		// want has no marker where the walk reaches: nor must got.
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("%q -> %q reads differently (-want +got):\n%s", in, out, d)
		}
	})
}

// isJSONDoc is what the walk takes for JSON inside a string, by
// encoding/json's judgement: an object, array or string, valid.
func isJSONDoc(s string) bool { return firstNonSpace(s) >= 0 && json.Valid([]byte(s)) }

// BenchmarkRedactBodyCorpus compares the walk with the one-level walk on
// the secret corpus's bodies (internal/secretcorpus, seed 1: every API
// shape and serialization, secrets in every layout), a Redactor per
// session as the proxy has, in one run:
// go test -run '^$' -bench RedactBodyCorpus ./rewrite
func BenchmarkRedactBodyCorpus(b *testing.B) {
	sessions := secretcorpus.Generate(secretcorpus.Options{Seed: 1})
	var size int64
	for _, s := range sessions {
		for _, r := range s.Requests {
			size += int64(len(r.Body))
		}
	}
	sc, err := secrets.NewScanner(secrets.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		fn   func([]byte, *secrets.Redactor) ([]byte, []string)
	}{
		{"one-level", redactBodyOneLevel},
		{"walk", func(body []byte, r *secrets.Redactor) ([]byte, []string) { return RedactBody(body, r) }},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				for _, s := range sessions {
					key := sha256.Sum256([]byte(s.Name))
					red := secrets.NewRedactor(sc, key[:])
					for _, r := range s.Requests {
						impl.fn(r.Body, red)
					}
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// FindBodySecrets says where RedactBody would replace: by rule and the
// JSON pointer of the body's string, at any depth inside it; a key that
// is not a plain name is not shown.
func TestFindBodySecrets(t *testing.T) {
	const m = marker
	in := `{"model":"x","messages":[{"role":"user","content":"a ` + m + `"},` +
		`{"role":"tool","content":"{\"out\":\"AKIA\\u005aZZZZZZZZZZZZZZZ\"}"},` +
		`{"content":[{"text":"b"},{"args":{"ghp_k3y":{"x~/y":"` + m + `"},"` + m + `":1}}]}],"n":[1,"` + m + `"],` +
		`"input":[{"output":"` + m + `"}]}`
	want := []BodySecret{
		{"aws-access-token", "/messages/0/content"},
		{"aws-access-token", "/messages/1/content"},
		{"aws-access-token", "/messages/2/content/1/args/*/*"},
		{"aws-access-token", "/messages/2/content/1/args/*"},
		{"aws-access-token", "/n/1"},
		{"aws-access-token", "/input/0/output"},
	}
	if d := cmp.Diff(want, FindBodySecrets([]byte(in), markerFinder)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := FindBodySecrets([]byte("text "+m), markerFinder); len(got) != 1 || got[0].Pointer != "" {
		t.Errorf("a body that is not JSON: %+v", got)
	}
	if got := FindBodySecrets([]byte(`{"a":"b"}`), markerFinder); got != nil {
		t.Errorf("a clean body: %+v", got)
	}
}

// reportCPU reports the process's CPU time per operation since cpu0
// (user and system, garbage collection included): on a machine that other
// work keeps busy, a steadier figure than the time per operation.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu := processCPU(); cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
