package secrets

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// found is a finding as tests compare it: the rule and the secret's span.
// Test failures print it, never the secret.
type found struct {
	Rule       string
	Start, End int
}

func spans(fs []Finding) []found {
	var out []found
	for _, f := range fs {
		out = append(out, found{f.RuleID, f.Start, f.End})
	}
	return out
}

// at returns the finding expected for secret inside text.
func at(rule, text, secret string) found {
	i := strings.Index(text, secret)
	if i < 0 {
		panic("test secret not in its text")
	}
	return found{rule, i, i + len(secret)}
}

func TestScan(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 42)
	ghp, akia, awsKey := g.make("ghp"), g.make("akia"), g.make("awssecret")
	pass, envVal, pemKey := g.make("dbpass"), g.make("envval"), g.make("pem-ec")
	escaped := strings.ReplaceAll(pemKey, "\n", `\n`)
	saKey := strings.ReplaceAll(g.pemRSA(true), "\n", `\n`)
	lines := strings.Split(strings.TrimSpace(pemKey), "\n")
	cut := strings.Join(lines[:len(lines)-1], "\n") // no END line

	tests := []struct {
		name string
		text string
		want func(text string) []found
	}{
		{"empty", "", nil},
		{"prose", "the key to the token is a password nobody knows", nil},
		{"github pat", "use " + ghp + " here", func(x string) []found { return []found{at("github-pat", x, ghp)} }},
		{"specific beats env", "GITHUB_TOKEN=" + ghp, func(x string) []found { return []found{at("github-pat", x, ghp)} }},
		{"aws id and secret nearby", "id " + akia + "\nkey " + awsKey + "\n", func(x string) []found {
			return []found{at("aws-access-token", x, akia), at("aws-secret-access-key", x, awsKey)}
		}},
		{"aws secret by name", "aws_secret_access_key = " + awsKey, func(x string) []found {
			return []found{at("aws-secret-access-key", x, awsKey)}
		}},
		{"aws documentation example", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", nil},
		{"database url password", "postgres://app:" + pass + "@db:5432/app", func(x string) []found {
			return []found{at("database-url", x, pass)}
		}},
		{"redis url without user", "rediss://:" + pass + "@cache:6380", func(x string) []found {
			return []found{at("database-url", x, pass)}
		}},
		{"database url placeholder", "postgres://user:password@localhost/db and mysql://u:${PASS}@h/db", nil},
		{"env secret", "SESSION_SECRET=" + envVal + "\n", func(x string) []found { return []found{at("env-secret", x, envVal)} }},
		{"env secret quoted export", "export DB_PASSWORD=\"" + envVal + "\"\n", func(x string) []found {
			return []found{at("env-secret", x, envVal)}
		}},
		{"env placeholders", "password=changeme\nAPI_KEY=${API_KEY}\nTOKEN=<token>\nSECRET=xxxxxxxx\nTOKEN_TTL=3600\n", nil},
		{"env in code is not env", "\ttoken = strings.TrimSpace(raw)\n", nil},
		{"pem", "key:\n" + pemKey, func(x string) []found {
			return []found{at("private-key", x, strings.TrimSuffix(pemKey, "\n"))}
		}},
		{"pem escaped in json", `{"key": "` + escaped + `"}`, func(x string) []found {
			return []found{at("private-key", x, strings.TrimSuffix(escaped, `\n`))}
		}},
		{"pem without end", cut + "\n\nthat's all", func(x string) []found { return []found{at("private-key", x, cut)} }},
		{"pem placeholder", "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----", nil},
		{"service account", `{"type": "service_account", "private_key": "` + saKey + `", "client_email": "a@b"}`, func(x string) []found {
			return []found{at("gcp-service-account", x, saKey)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []found
			if tt.want != nil {
				want = tt.want(tt.text)
			}
			got := spans(s.ScanString(tt.text))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ScanString (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(got, spans(s.Scan([]byte(tt.text)))); diff != "" {
				t.Errorf("Scan differs from ScanString (-ScanString +Scan):\n%s", diff)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	g := newSecretGen(t, 5)
	ghp := g.make("ghp")
	text := "GITHUB_TOKEN=" + ghp + "\n"
	tests := []struct {
		name string
		o    Options
		want []found
	}{
		{"none", Options{}, []found{at("github-pat", text, ghp)}},
		{"allow rule falls back to env", Options{AllowRules: []string{"github-pat"}}, []found{at("env-secret", text, ghp)}},
		{"then to generic", Options{AllowRules: []string{"github-pat", "env-secret"}}, []found{at("generic-api-key", text, ghp)}},
		{"allow all three", Options{AllowRules: []string{"github-pat", "env-secret", "generic-api-key"}}, nil},
		{"allow literal", Options{AllowLiterals: []string{ghp}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewScanner(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, spans(s.ScanString(text))); diff != "" {
				t.Errorf("ScanString (-want +got):\n%s", diff)
			}
			if slices.Contains(s.Rules(), "github-pat") == slices.Contains(tt.o.AllowRules, "github-pat") {
				t.Errorf("Rules() and AllowRules disagree about github-pat")
			}
		})
	}
	if _, err := NewScanner(Options{AllowRules: []string{"no-such-rule"}}); err == nil {
		t.Error("NewScanner accepted an unknown rule id")
	}
}

func TestRules(t *testing.T) {
	ids := newTestScanner(t).Rules()
	if !slices.IsSorted(ids) {
		t.Error("Rules() not sorted")
	}
	if len(ids) < 200 {
		t.Errorf("Rules() has %d ids, want gitleaks' rules and ours", len(ids))
	}
	for _, want := range []string{"aws-access-token", "github-pat", "generic-api-key", idPrivateKey, idGCP, idAWSSecret, idDatabase, idEnv} {
		if !slices.Contains(ids, want) {
			t.Errorf("Rules() lacks %s", want)
		}
	}
	valid := regexp.MustCompile(`^[a-z0-9-]+$`)
	for _, id := range ids {
		if !valid.MatchString(id) {
			t.Errorf("rule id %q is not [a-z0-9-]+", id)
		}
		// Room for 8 hex digits keeps placeholders of one session distinct.
		if n := len(PlaceholderPrefix) + len(id) + 1 + 8 + 1; n > MaxPlaceholderLen {
			t.Errorf("rule id %q leaves too little room in a placeholder (%d > %d)", id, n, MaxPlaceholderLen)
		}
	}
}

// TestKeywordlessRule checks that a rule without keywords runs on the whole
// text.
func TestKeywordlessRule(t *testing.T) {
	s, err := newScanner(Options{}, []*rule{{id: "number", re: regexp.MustCompile(`n=(\d{6})\b`), rank: rankSpecific}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := "a n=123456 b n=12 c n=654321"
	want := []found{{"number", 4, 10}, {"number", 22, 28}}
	if diff := cmp.Diff(want, spans(s.ScanString(text))); diff != "" {
		t.Errorf("ScanString (-want +got):\n%s", diff)
	}
}

func TestResolve(t *testing.T) {
	rules := []*rule{{id: "generic", rank: rankGeneric}, {id: "specific", rank: rankSpecific}, {id: "other", rank: rankSpecific}}
	tests := []struct {
		name  string
		cands []candidate
		want  []Finding
	}{
		{"disjoint sorted", []candidate{{1, 10, 20, 10}, {0, 0, 5, 5}}, []Finding{{"generic", 0, 5}, {"specific", 10, 20}}},
		{"longer wins", []candidate{{1, 5, 10, 5}, {0, 0, 20, 20}}, []Finding{{"generic", 0, 20}}},
		{"same span: specific wins", []candidate{{0, 3, 9, 6}, {1, 3, 9, 6}}, []Finding{{"specific", 3, 9}}},
		{"same span and rank: tighter match wins", []candidate{{1, 3, 9, 30}, {2, 3, 9, 6}}, []Finding{{"other", 3, 9}}},
		{"partial overlap", []candidate{{1, 0, 10, 10}, {0, 8, 12, 4}}, []Finding{{"specific", 0, 10}}},
		{"duplicates", []candidate{{1, 2, 4, 2}, {1, 2, 4, 2}}, []Finding{{"specific", 2, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, resolve(rules, tt.cands)); diff != "" {
				t.Errorf("resolve (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlaceholderValues(t *testing.T) {
	tests := []struct {
		v    string
		want bool
	}{
		{"changeme", true}, {"${API_KEY}", true}, {"$API_KEY", true}, {"<your-key>", true}, {"xxxxxxxx", true},
		{"{{ .Values.key }}", true}, {"%API_KEY%", true}, {"your_api_key_here", true}, {"", true},
		{"change-me", true}, {"change_me", true}, {"CHANGEME", true}, {"your-token-here", true}, {"<token>", true},
		{"[api key]", true}, {"xxx-xxx-xxx", true}, {"***", true}, {"********", true}, {"$(cat key)", true},
		{"REPLACE_ME", true}, {"TODO", true}, {"example", true}, {"dummy", true}, {"test", true},
		{"dummy0123456789abc", true}, {"not-a-real-key-123", true}, {"0000-0000-0000", true}, {"…", true},
		{"hunter2-test", true}, {"fake_key_1", true}, {"Mock.Token.7", true},
		{"hunter2x!", false}, {"%Ab3kd92", false}, {"q8Zr1mP0", false}, {"$up3r-S3cret!", false}, {"$2b$12$abc", false},
	}
	for _, tt := range tests {
		if got := isPlaceholder(tt.v); got != tt.want {
			t.Errorf("isPlaceholder(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestEnvName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"API_KEY", true}, {"GITHUB_TOKEN", true}, {"db_password", true}, {"SMTP_PASSWD", true}, {"DB_PWD", true},
		{"CLIENT_SECRET", true}, {"SECRET_KEY_BASE", true}, {"AZURE_CREDENTIALS", true}, {"STRIPE_APIKEY", true},
		{"PWD", false}, {"OLDPWD", false}, {"TOKEN_TTL", false}, {"KEY_PREFIX", false}, {"MONKEY", false},
		{"TOKENIZER", false}, {"NODE_ENV", false},
	}
	for _, tt := range tests {
		if got := envName(tt.name); got != tt.want {
			t.Errorf("envName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestAgreesWithGitleaks checks the engine against gitleaks' own on the
// corpus: every secret gitleaks finds, we find too (inside one finding),
// except where a rule of ours deliberately replaces or extends gitleaks'.
func TestAgreesWithGitleaks(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	s := newTestScanner(t)
	d := newGitleaks(t)
	c := loadCorpus(t, 2)
	total, missing := 0, 0
	for _, smp := range append(c.pos, c.neg...) {
		var ours []string
		for _, f := range s.ScanString(smp.text) {
			ours = append(ours, smp.text[f.Start:f.End])
		}
		for _, f := range d.DetectString(smp.text) {
			if smp.ruleID == "" || isPlaceholder(strings.Trim(f.Secret, `"`)) {
				// In a text labeled clean, or a placeholder: ours drop
				// gitleaks' false positives on purpose.
				continue
			}
			total++
			secret := strings.Trim(f.Secret, `"'`)
			if f.RuleID == "curl-auth-user" {
				// basic-auth replaces it: the password alone is the secret.
				_, secret, _ = strings.Cut(secret, ":")
			}
			ok := slices.ContainsFunc(ours, func(o string) bool { return strings.Contains(o, secret) })
			if !ok {
				missing++
				t.Logf("%s: gitleaks finds %s, we do not", smp.name, f.RuleID)
			}
		}
	}
	t.Logf("gitleaks findings also found by us: %d/%d", total-missing, total)
	if missing > 0 {
		t.Errorf("%d gitleaks findings missed", missing)
	}
}

// A URL's port and path after an "api" host are not an API key; a real
// assignment of one still is.
func TestURLsAreNotKeys(t *testing.T) {
	s, err := NewScanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, clean := range []string{
		"GET https://api.e2e.test:38467/grandchild",
		"curl https://api.example.com:8443/v1/chat/completions",
		"connect api.internal:443",
	} {
		if fs := s.ScanString(clean); len(fs) != 0 {
			t.Errorf("ScanString(%q) = %v, want nothing", clean, fs)
		}
	}
	if fs := s.ScanString("api_key: 8f3aQ9c0d5e7Zb1f2a4c6e"); len(fs) != 1 || fs[0].RuleID != "generic-api-key" && fs[0].RuleID != idNamed {
		t.Errorf("an api_key assignment: %v", fs)
	}
}

// A token's pattern inside a longer run of letters and digits (a model's
// encrypted reasoning, base64url) is a piece of that blob, not a token;
// the same token set apart, or glued on one side only, is found.
func TestTokenInsideBlob(t *testing.T) {
	s := newTestScanner(t)
	g := newSecretGen(t, 33)
	tok := "ghs_" + g.Str(36, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
	blob := g.Str(300, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
	for _, tt := range []struct {
		name, text string
		want       int
	}{
		{"inside a blob", blob[:150] + "x" + tok + "Q" + blob[150:], 0},
		{"inside a base64url blob", blob[:150] + "-" + tok + "Q" + blob[150:], 0},
		{"alone", tok, 1},
		{"assigned", "GH_TOKEN=" + tok + "\n", 1},
		{"glued before", "token" + tok + " ", 1},
		{"glued after", "\"" + tok + "abc", 1},
	} {
		if fs := s.ScanString(tt.text); len(fs) != tt.want {
			t.Errorf("%s: %d findings, want %d", tt.name, len(fs), tt.want)
		}
	}
}
