package secrets

import (
	"regexp"
	"strings"
)

// Our detectors, for secrets gitleaks' default rules miss or cut short.
// "private-key" replaces gitleaks' rule of that id: ours takes a key whole
// in every layout agents' tools show it (pem.go), and a key cut before its
// END line.

const (
	idPrivateKey = "private-key"
	idGCP        = "gcp-service-account"
	idAWSSecret  = "aws-secret-access-key"
	idDatabase   = "database-url"
	idEnv        = "env-secret"
	idNamed      = "named-secret"
	idAzure      = "azure-storage-account-key"
	idBasicAuth  = "basic-auth"
	idKubernetes = "kubernetes-secret"
)

func ownRules() ([]*rule, error) {
	var rules []*rule
	// The keywords of a name that says secret (envName, secretKeyName).
	secretNameKeywords := []string{"secret", "token", "password", "passwd", "pwd", "key", "credential"}
	add := func(r *rule, src string) error {
		if src != "" {
			re, err := regexp.Compile(src)
			if err != nil {
				return err
			}
			r.re = re
		}
		if r.rank == 0 {
			r.rank = rankSpecific
		}
		rules = append(rules, r)
		return nil
	}

	// The whole PEM block, matched by hand (pem.go).
	begin := `-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----`
	if err := add(&rule{id: idPrivateKey, keywords: []string{"-----begin"}, match: matchPrivateKey}, ""); err != nil {
		return nil, err
	}

	// The private_key of a service-account JSON, escaped as in the file.
	saType := regexp.MustCompile(`"type"\s*:\s*"service_account"$`)
	gcp := &rule{id: idGCP, keywords: []string{"service_account"}, group: 1,
		window: func(s string, start, end int) (int, int, bool) {
			if end >= len(s) || s[end] != '"' || !saType.MatchString(s[max(0, start-40):end+1]) {
				return 0, 0, false
			}
			return start - 8192, end + 8192, true
		}}
	if err := add(gcp, `"private_key"\s*:\s*"(`+begin+`(?:[^"\\]|\\.)*)"`); err != nil {
		return nil, err
	}

	// An AWS secret key assigned by name, or named in prose ("… for
	// staging: `…`").
	awsByName := &rule{id: idAWSSecret, group: 1, entropy: 3,
		keywords: []string{"secret_access", "secretaccess", "aws_secret", "awssecret"},
		valid:    func(s string, _ []int, a, b int) bool { return !strings.Contains(s[a:b], "EXAMPLE") }}
	if err := add(awsByName, `(?i)(?:secret_?access_?key|aws_?secret(?:_?key)?)["'\x60]?(?:\s*(?:=|:=|:|=>)\s*|(?:[ \t]+[a-z]{1,12}){1,3}:[ \t]+|[ \t]+)["'\x60]?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`); err != nil {
		return nil, err
	}

	// A 40-byte base64 value within a few lines of an access key id, in
	// the same JSON object. AWS's documentation key ids (AKIAIOSFODNN7EXAMPLE)
	// are no trigger: the value near one is an example too, or unrelated.
	keyID := regexp.MustCompile(`^(?:AKIA|ASIA)[A-Z2-7]{16}$`)
	awsNear := &rule{id: idAWSSecret, group: 1, entropy: 4.2, exact: true,
		keywords: []string{"akia", "asia"},
		window: func(s string, start, end int) (int, int, bool) {
			if start+20 > len(s) || !keyID.MatchString(s[start:start+20]) || strings.Contains(s[start:start+20], "EXAMPLE") ||
				(start > 0 && isAlnum(s[start-1])) || (start+20 < len(s) && isAlnum(s[start+20])) {
				return 0, 0, false
			}
			return objectAround(s, start, start+20, linesAround(s, start, 3, 512), linesAfter(s, start+20, 3, 512))
		},
		valid: func(s string, _ []int, a, b int) bool {
			v := s[a:b]
			return hasAny(v, "abcdefghijklmnopqrstuvwxyz") && hasAny(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") &&
				hasAny(v, "0123456789/+") && hasAny(v, "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ/+") &&
				!strings.Contains(v, "EXAMPLE")
		}}
	if err := add(awsNear, `(?:^|[^A-Za-z0-9/+=])([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`); err != nil {
		return nil, err
	}

	// The password of a database URL.
	db := &rule{id: idDatabase, group: 1,
		keywords: []string{"postgres", "mysql", "mongodb", "redis"},
		valid:    func(s string, _ []int, a, b int) bool { return !isPlaceholder(s[a:b]) }}
	if err := add(db, `(?i)\b(?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|rediss?)(?:\+[a-z0-9]+)?://[^\s:@/?#'"\x60]*:([^\s@/?#'"\x60]+)@[^\s@/'"\x60]`); err != nil {
		return nil, err
	}

	// Environment variables whose name says secret (named.go): NAME=value
	// lines of .env files and shells, set inline in a command, and
	// name/value pairs (Kubernetes env blocks).
	if err := add(&rule{id: idEnv, rank: rankEnv, entropy: 1.5, group: 1, keywords: secretNameKeywords, match: matchEnvAssignment}, ""); err != nil {
		return nil, err
	}
	if err := add(&rule{id: idEnv, rank: rankEnv, entropy: 1.5, group: 1, keywords: secretNameKeywords, match: matchEnvPair}, ""); err != nil {
		return nil, err
	}
	// Keys of YAML, TOML, JSON and code, flags and query parameters whose
	// name says secret.
	if err := add(&rule{id: idNamed, rank: rankEnv, group: 1, keywords: secretNameKeywords, match: matchNamedValue}, ""); err != nil {
		return nil, err
	}

	// A password given with its user (basicauth.go).
	if err := add(&rule{id: idBasicAuth, rank: rankEnv, group: 1, keywords: []string{"-u", "--user"}, match: matchCurlUser}, ""); err != nil {
		return nil, err
	}
	if err := add(&rule{id: idBasicAuth, rank: rankEnv, group: 1, keywords: []string{"://"}, match: matchURLPassword}, ""); err != nil {
		return nil, err
	}

	// Every value of a Kubernetes Secret's data and stringData
	// (kubernetes.go).
	if err := add(&rule{id: idKubernetes, group: 1, keywords: []string{"data:", `data":`, `data\":`}, matchNext: matchSecretData}, ""); err != nil {
		return nil, err
	}

	// An Azure Storage (or Cosmos DB) account key: 64 bytes in base64, after
	// AccountKey= in a connection string or --account-key, or the "value" of
	// an item of az storage account keys list.
	azure := &rule{id: idAzure, group: 1, entropy: 4, exact: true,
		keywords: []string{"accountkey", "account_key", "account-key", `"keyname"`},
		window: func(s string, start, end int) (int, int, bool) {
			return objectAround(s, start, end, start, min(len(s), end+320))
		}}
	if err := add(azure, `(?:^|[^A-Za-z0-9+/])([A-Za-z0-9+/]{86}==)(?:[^A-Za-z0-9+/=]|$)`); err != nil {
		return nil, err
	}
	return rules, nil
}

// publicValues are secrets' values that are published as examples or
// well-known test credentials: never reported.
func publicValues() []string {
	return []string{
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", // AWS's documentation
		// The Azure storage emulator's (Azurite's) account key.
		"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
	}
}

// objectAround narrows the window [lo, hi) around a hit [start, end) to
// the JSON object (or brace-delimited item) holding the hit: a value in
// another item of a list is not this one's.
func objectAround(s string, start, end, lo, hi int) (int, int, bool) {
	for i := start - 1; i >= lo; i-- {
		if s[i] == '{' || s[i] == '}' {
			lo = i + 1
			break
		}
	}
	for i := end; i < hi; i++ {
		if s[i] == '{' || s[i] == '}' {
			hi = i
			break
		}
	}
	return lo, hi, true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isNameByte(c byte) bool {
	return isAlnum(c) || c == '_' || c == '.' || c == '-'
}

func hasAny(s, chars string) bool { return strings.ContainsAny(s, chars) }

// linesAround returns the start of the line n lines above the one holding
// i, going back at most limit bytes.
func linesAround(s string, i, n, limit int) int {
	lo := max(0, i-limit)
	for j := i - 1; j >= lo; j-- {
		if s[j] == '\n' {
			if n == 0 {
				return j + 1
			}
			n--
		}
	}
	return lo
}

// linesAfter returns the end of the line n lines below the one holding i,
// going forward at most limit bytes.
func linesAfter(s string, i, n, limit int) int {
	hi := min(len(s), i+limit)
	for j := i; j < hi; j++ {
		if s[j] == '\n' {
			if n == 0 {
				return j
			}
			n--
		}
	}
	return hi
}

// dottedIdent reports code references such as os.environ or settings.KEY:
// words joined by dots, none of them random (KkWDS8XxuAavYhzI5Qhj.q is a
// password).
func dottedIdent(v string) bool {
	if !strings.Contains(v, ".") {
		return false
	}
	for part := range strings.SplitSeq(v, ".") {
		if part == "" || !(part[0] == '_' || 'a' <= part[0] && part[0] <= 'z' || 'A' <= part[0] && part[0] <= 'Z') || randomWord(part) {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !isAlnum(part[i]) && part[i] != '_' {
				return false
			}
		}
	}
	return true
}

// randomWord reports whether an identifier's bytes read as random rather
// than words: eight or more, with digits, two capitals or more and a fifth
// of its letters or more (camelCase names have a capital a word, and
// CONSTANT_CASE no lower case).
func randomWord(w string) bool {
	if len(w) < 8 {
		return false
	}
	var upper, lower, digit int
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case 'A' <= c && c <= 'Z':
			upper++
		case 'a' <= c && c <= 'z':
			lower++
		case '0' <= c && c <= '9':
			digit++
		}
	}
	letters := upper + lower
	return digit > 0 && upper >= 2 && lower >= 2 && upper*5 >= letters
}

// isPlaceholder reports values that are templates, references or examples,
// not secrets: change-me, your-…-here, <…>, […], xxx…, ***, ${VAR}, $VAR,
// $(cmd), %VAR%, @VAR@, {{ .Values.x }}, REPLACE_ME, TODO, example, dummy,
// test and the like.
func isPlaceholder(v string) bool {
	if v == "" {
		return true
	}
	last := v[len(v)-1]
	switch {
	case strings.HasPrefix(v, "${") || strings.HasPrefix(v, "$(") || strings.HasPrefix(v, "$$") || v[0] == '$' && isIdent(v[1:]),
		v[0] == '%' && (last == '%' || len(v) <= 3), v[0] == '<' && last == '>', v[0] == '[' && last == ']',
		v[0] == '{' && last == '}', v[0] == '@' && last == '@', v[0] == '(' && last == ')':
		return true
	}
	lv := strings.ToLower(v)
	// A word of a test or an example: hunter2-test, fake_key_1.
	for w := range strings.FieldsFuncSeq(lv, func(r rune) bool { return r == '-' || r == '_' || r == '.' || r == ' ' }) {
		switch w {
		case "test", "testing", "fake", "mock", "dummy", "sample", "example", "placeholder", "changeme":
			return true
		}
	}
	for _, w := range [...]string{
		"changeme", "change_me", "change-me", "changeit", "password", "passwd", "pass", "pwd", "secret",
		"token", "apikey", "api_key", "api-key", "example", "sample", "placeholder", "dummy", "test",
		"testing", "todo", "tbd", "fixme", "none", "null", "nil", "undefined", "true", "false", "yes",
		"no", "on", "off", "default", "redacted", "hidden", "mysecret", "mypassword", "secret123",
		"password123", "s3cr3t", "p@ssw0rd", "letmein", "foobar", "foo", "bar", "value", "xxx",
		"string", "str", "required", "optional", "empty", "unset", "notset", "not-set", "not_set", "n/a",
		"mysecretpassword", "supersecret", "supersecretpassword", "topsecret", "secretkey", "secret-key",
		"secret_key", "mytoken", "mykey", "myapikey", "fake", "demo", "sensitive", "masked",
	} {
		if lv == w {
			return true
		}
	}
	// Parts of values that are templates or examples.
	for _, w := range [...]string{
		"your_", "your-", "your.", "yourkey", "yoursecret", "yourpassword", "yourtoken", "yourapikey",
		"_here", "-here", "example", "placeholder", "changeme", "change_me", "change-me", "changeit",
		"replace_me", "replace-me", "replaceme", "replace_with", "replace-with", "xxxx", "****", "....", "…",
		"redacted", "insert_", "insert-", "{{", "}}", "${", "dummy", "fake_", "fake-", "notreal", "not_real",
		"not-real", "not-a-real", "not_a_real", "todo_", "todo-", "put_your", "put-your", "enter_your",
		"enter-your", "<your", "<insert", "<token", "<secret", "<password", "<api",
	} {
		if strings.Contains(lv, w) {
			return true
		}
	}
	// One character repeated, maybe in groups: xxxxxxxx, ****-****, 0000-0000.
	c := lv[0]
	for i := 0; i < len(lv); i++ {
		switch lv[i] {
		case c, '-', '_', '.', ':', ' ':
			continue
		}
		return false
	}
	return true
}

// isIdent reports whether v is an identifier: [A-Za-z_][A-Za-z0-9_]*.
func isIdent(v string) bool {
	if v == "" || !(v[0] == '_' || 'a' <= v[0] && v[0] <= 'z' || 'A' <= v[0] && v[0] <= 'Z') {
		return false
	}
	for i := 1; i < len(v); i++ {
		if !isAlnum(v[i]) && v[i] != '_' {
			return false
		}
	}
	return true
}
