package secrets

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/chaperone-dev/chaperone/rewrite"
)

func fuzzSeeds(f *testing.F) {
	c := loadCorpus(f, 1)
	for _, s := range c.pos[:20] {
		f.Add(s.text)
	}
	for _, s := range c.neg[:10] {
		f.Add(s.text)
	}
	f.Add("")
	f.Add("key=")
	f.Add("-----BEGIN PRIVATE KEY-----")
	f.Add("AKIA")
	f.Add("postgres://:@")
	f.Add("X_TOKEN=\"")
	f.Add(`{"type":"service_account","private_key":"-----BEGIN PRIVATE KEY-----\n`)
	// The layouts of our matchers, cut short and whole.
	f.Add("     1→-----BEGIN RSA PRIVATE KEY-----\n     2→MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n     3→aNgu")
	f.Add(`-----BEGIN EC PRIVATE KEY-----\\nProc-Type: 4,ENCRYPTED\\n\\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oBkMJ3oPX3kNoAoGCCqGSM49\\n+AwEH`)
	f.Add("apiVersion: v1\ndata:\n  A: cG9zdGdyZXM6Ly91OnBAaC9k\n  B: |\nkind: Secret\n")
	f.Add(`{\"data\": {\"K\": \"eA==\"}, \"kind\": \"Secret\"}`)
	f.Add("env:\n  - name: DB_PASSWORD\n    value: \"")
	f.Add(`{"name": "API_TOKEN", "value"`)
	f.Add("curl -u admin:\"x")
	f.Add("https://u:p@")
	f.Add(`password: process.env.X ?? '`)
	f.Add(`os.getenv("DB_PASSWORD", "`)
	f.Add("gh secret set TOKEN --body")
	f.Add("SMTP_PASSWORD for staging: `")
	f.Add("Z2hwX2FiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6MDEyMzQ1Njc4OQ==")
}

func FuzzScan(f *testing.F) {
	fuzzSeeds(f)
	s := newTestScanner(f)
	f.Fuzz(func(t *testing.T, text string) {
		fs := s.ScanString(text)
		end := 0
		for i, x := range fs {
			if x.Start < end || x.Start >= x.End || x.End > len(text) {
				t.Fatalf("finding %d (%s) [%d,%d) out of bounds, unsorted or overlapping (previous end %d, len %d)",
					i, x.RuleID, x.Start, x.End, end, len(text))
			}
			end = x.End
		}
		if got := s.Scan([]byte(text)); len(got) != len(fs) {
			t.Fatalf("Scan found %d, ScanString %d", len(got), len(fs))
		}
	})
}

func FuzzRedact(f *testing.F) {
	fuzzSeeds(f)
	s := newTestScanner(f)
	f.Fuzz(func(t *testing.T, text string) {
		r := NewRedactor(s, testKey)
		out, ids := r.Redact(text)
		checkFindSecrets(t, s, text, out, ids)
		fs := s.ScanString(text)
		checkNested(t, s, text, fs)
		if len(fs) == 0 {
			if out != text || ids != nil {
				t.Fatal("text without secrets changed")
			}
			return
		}
		if len(ids) < len(fs) {
			t.Fatalf("%d ids for %d findings", len(ids), len(fs))
		}
		for i, x := range fs {
			secret := text[x.Start:x.End]
			if !strings.Contains(secret, "[") && !strings.Contains(secret, "]") && strings.Contains(out, secret) {
				t.Fatalf("finding %d (%s) survives redaction", i, x.RuleID)
			}
		}
		if restore(r, out) != text {
			t.Fatal("restoring the placeholders does not give back the text")
		}
		if again, ids := r.Redact(out); again != out {
			t.Fatalf("redacting the redacted text again replaced %v", ids)
		}
	})
}

// checkFindSecrets checks that FindSecrets, in a new session, gives what
// Redact replaced: in order, apart, the same placeholders.
func checkFindSecrets(t *testing.T, s *Scanner, text, out string, ids []string) {
	t.Helper()
	var b strings.Builder
	var got []string
	last := 0
	NewRedactor(s, testKey).FindSecrets(text, func(start, end int, rule, placeholder string) {
		if start < last || end <= start || end > len(text) {
			t.Fatalf("FindSecrets gave [%d,%d) after %d, in %d bytes", start, end, last, len(text))
		}
		b.WriteString(text[last:start])
		b.WriteString(placeholder)
		got = append(got, rule)
		last = end
	})
	b.WriteString(text[last:])
	if b.String() != out || !slices.Equal(got, ids) {
		t.Fatalf("FindSecrets gives %v, Redact replaced %v, or other bytes", got, ids)
	}
}

// checkNested puts text in a request body as an agent's tool would, inside
// JSON inside JSON strings, and checks what rewrite.RedactBody makes of it
// in a new session: JSON, and none of the secrets of text left in the
// innermost string, decoded.
func checkNested(t *testing.T, s *Scanner, text string, fs []Finding) {
	t.Helper()
	inner, _ := json.Marshal(map[string]any{"output": text, "metadata": map[string]int{"exit_code": 0}})
	args, _ := json.Marshal(map[string]string{"result": string(inner)})
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "tool", "content": string(args)}}})
	out, _ := rewrite.RedactBody(body, NewRedactor(s, testKey))
	if !json.Valid(out) {
		t.Fatalf("the nested body is not JSON once redacted")
	}
	var b struct {
		Messages []struct{ Content string }
	}
	var a struct{ Result string }
	var o struct{ Output string }
	if json.Unmarshal(out, &b) != nil || len(b.Messages) != 1 || json.Unmarshal([]byte(b.Messages[0].Content), &a) != nil ||
		json.Unmarshal([]byte(a.Result), &o) != nil {
		t.Fatalf("the nested JSON does not read back")
	}
	for i, x := range fs {
		secret := text[x.Start:x.End]
		if !strings.ContainsAny(secret, "[]\"") && strings.Contains(o.Output, secret) && !strings.Contains(strings.ToValidUTF8(secret, "\ufffd"), "\ufffd") {
			t.Fatalf("finding %d (%s) survives redaction, nested", i, x.RuleID)
		}
	}
}
