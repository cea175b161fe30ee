package secrets

import (
	"regexp"
	"strings"
)

// Our detectors, for secrets gitleaks' default rules miss or cut short.
// "private-key" replaces gitleaks' rule of that id: ours also takes the
// "\n"-escaped form found inside JSON strings, and a key cut before its END
// line.

const (
	idPrivateKey = "private-key"
	idGCP        = "gcp-service-account"
	idAWSSecret  = "aws-secret-access-key"
	idDatabase   = "database-url"
	idEnv        = "env-secret"
)

// pemBody is what may sit between a PEM key's BEGIN and END lines, raw or
// escaped inside a JSON string ("\n", "\/").
const pemBody = `(?:[A-Za-z0-9+/=\s:,.-]|\\[nr/])`

func ownRules() ([]*rule, error) {
	var rules []*rule
	add := func(r *rule, src string) error {
		re, err := regexp.Compile(src)
		if err != nil {
			return err
		}
		r.re = re
		if r.rank == 0 {
			r.rank = rankSpecific
		}
		rules = append(rules, r)
		return nil
	}

	// The whole PEM block; when the END line is missing, the BEGIN line and
	// the base64 lines after it.
	begin := `-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----`
	end := `-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----`
	nl := `(?:\r?\n|\\r?\\n)`
	pk := &rule{id: idPrivateKey, keywords: []string{"-----begin"},
		valid: func(s string, m []int, _, _ int) bool { return m[1]-m[0] >= 64+2*27 }}
	if err := add(pk, begin+pemBody+`*?`+end+`|`+begin+`(?:`+nl+`[A-Za-z0-9+/=:, -]*){0,4}?(?:`+nl+`[A-Za-z0-9+/=]{16,}){2,}`); err != nil {
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

	// An AWS secret key assigned by name.
	awsByName := &rule{id: idAWSSecret, group: 1, entropy: 3,
		keywords: []string{"secret_access", "secretaccess", "aws_secret", "awssecret"},
		valid:    func(s string, _ []int, a, b int) bool { return !strings.Contains(s[a:b], "EXAMPLE") }}
	if err := add(awsByName, `(?i)(?:secret_?access_?key|aws_?secret(?:_?key)?)["'\x60]?(?:\s*(?:=|:=|:|=>)\s*|[ \t]+)["'\x60]?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)`); err != nil {
		return nil, err
	}

	// A 40-byte base64 value within a few lines of an access key id.
	keyID := regexp.MustCompile(`^(?:AKIA|ASIA)[A-Z2-7]{16}$`)
	awsNear := &rule{id: idAWSSecret, group: 1, entropy: 4.2,
		keywords: []string{"akia", "asia"},
		window: func(s string, start, end int) (int, int, bool) {
			if start+20 > len(s) || !keyID.MatchString(s[start:start+20]) ||
				(start > 0 && isAlnum(s[start-1])) || (start+20 < len(s) && isAlnum(s[start+20])) {
				return 0, 0, false
			}
			return linesAround(s, start, 3, 512), linesAfter(s, start+20, 3, 512), true
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

	// NAME=value lines of .env files and shell exports.
	env := &rule{id: idEnv, rank: rankEnv, entropy: 1.5,
		keywords: []string{"secret", "token", "password", "passwd", "pwd", "key", "credential"},
		anchor:   envLine,
		valid:    envValid}
	if err := add(env, `(?m)^[ \t]*(?:(?:export|ENV|set)[ \t]+)?[A-Za-z_][A-Za-z0-9_.-]*[ \t]*=[ \t]*(?:"([^"\r\n]*)"|'([^'\r\n]*)'|([^\s'"#;]+))[ \t]*(?:#[^\r\n]*)?\r?$`); err != nil {
		return nil, err
	}
	return rules, nil
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

// envLine accepts a keyword hit inside the NAME of a NAME=value line and
// returns the start of that line.
func envLine(s string, start, end int) (int, bool) {
	i := start
	for i > 0 && start-i < 128 && isNameByte(s[i-1]) {
		i--
	}
	ls := i
	for ls > 0 && start-ls < 256 && (s[ls-1] == ' ' || s[ls-1] == '\t' || isAlnum(s[ls-1])) {
		ls-- // indentation or "export "
	}
	if ls > 0 && s[ls-1] != '\n' {
		return 0, false
	}
	j := end
	for j < len(s) && j-end < 128 && isNameByte(s[j]) {
		j++
	}
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	if j >= len(s) || s[j] != '=' || (j+1 < len(s) && s[j+1] == '=') {
		return 0, false
	}
	return ls, true
}

// envName reports whether a variable name says it holds a secret: its last
// part (or the one before a qualifier such as _BASE64) names one.
func envName(name string) bool {
	parts := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '_' || r == '-' || r == '.' })
	if len(parts) == 0 {
		return false
	}
	last := parts[len(parts)-1]
	switch last {
	case "base", "b64", "base64", "hex", "value", "raw", "str", "string", "data", "enc", "encoded":
		if len(parts) > 1 {
			last = parts[len(parts)-2]
		}
	}
	switch {
	case strings.Contains(last, "secret"), strings.Contains(last, "passw"), strings.Contains(last, "credential"),
		strings.HasSuffix(last, "pwd") && last != "oldpwd" && len(parts) > 1,
		last == "key" || last == "keys", last == "token" || last == "tokens" || strings.HasSuffix(last, "token"):
		return true
	}
	for _, k := range [...]string{"apikey", "secretkey", "accesskey", "privatekey", "authkey", "masterkey", "licensekey", "signingkey", "encryptionkey"} {
		if last == k {
			return true
		}
	}
	return false
}

func envValid(s string, m []int, a, b int) bool {
	line := strings.TrimLeft(s[m[0]:m[1]], " \t\r\n")
	for _, p := range []string{"export", "ENV", "set"} {
		if rest, ok := strings.CutPrefix(line, p); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimLeft(rest, " \t")
			break
		}
	}
	name := line[:strings.IndexAny(line, " \t=")]
	if !envName(name) {
		return false
	}
	v := s[a:b]
	if isPlaceholder(v) || len(v) < 4 {
		return false
	}
	if strings.Trim(v, "0123456789") == "" ||
		strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") ||
		strings.ContainsAny(v, "()[]") || dottedIdent(v) {
		return false
	}
	if (strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://")) && !strings.Contains(v, "@") {
		return false
	}
	return true
}

// dottedIdent reports code references such as os.environ or settings.KEY.
func dottedIdent(v string) bool {
	if !strings.Contains(v, ".") {
		return false
	}
	for part := range strings.SplitSeq(v, ".") {
		if part == "" || !(part[0] == '_' || 'a' <= part[0] && part[0] <= 'z' || 'A' <= part[0] && part[0] <= 'Z') {
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

// isPlaceholder reports values that are templates or examples, not secrets.
func isPlaceholder(v string) bool {
	if v == "" {
		return true
	}
	last := v[len(v)-1]
	switch {
	case v[0] == '$', v[0] == '%' && (last == '%' || len(v) <= 3), v[0] == '<' && last == '>',
		v[0] == '{' && last == '}', v[0] == '@' && last == '@':
		return true
	}
	lv := strings.ToLower(v)
	for _, w := range [...]string{
		"changeme", "change_me", "change-me", "changeit", "password", "passwd", "pass", "pwd", "secret",
		"token", "apikey", "api_key", "api-key", "example", "sample", "placeholder", "dummy", "test",
		"testing", "todo", "tbd", "fixme", "none", "null", "nil", "undefined", "true", "false", "yes",
		"no", "on", "off", "default", "redacted", "hidden", "mysecret", "mypassword", "secret123",
		"password123", "s3cr3t", "p@ssw0rd", "letmein", "foobar", "foo", "bar", "value", "xxx",
	} {
		if lv == w {
			return true
		}
	}
	// Parts of values that are templates or examples.
	for _, w := range [...]string{
		"your_", "your-", "yourkey", "yoursecret", "yourpassword", "example", "placeholder", "changeme",
		"replace_me", "replace-me", "replaceme", "xxxx", "****", "....", "redacted", "insert_", "insert-",
		"{{", "}}", "${",
	} {
		if strings.Contains(lv, w) {
			return true
		}
	}
	return strings.Trim(lv, lv[:1]) == ""
}
