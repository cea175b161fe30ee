package secrets

import "strings"

// Values given to a name that says secret, in the layouts agents' tools
// show: .env and shell lines (NAME=value, export, a line number or diff mark
// before them), environment variables set inline in a command (docker -e,
// --env, --build-arg, export … &&, NAME=value cmd), Kubernetes, ECS and
// HTML name/value pairs, YAML, TOML, JSON and code keys (name: value,
// "name": "value", name = "value", 'name' => 'value'), command-line flags
// (--password=value) and URL queries (?token=value&). Matched by hand
// around a keyword hit: the name holding the keyword decides, then the
// operator and the value's quoting.

// layout is where an assignment was found.
type layout int

const (
	layoutEnvLine   layout = iota // NAME=value starting a line
	layoutEnvInline               // NAME=value after export, -e, --env, &&, ; …
	layoutKey                     // name: value, "name": value, name = "value" in code
	layoutFlag                    // --name=value, --name value
	layoutQuery                   // ?name=value, &name=value
)

// assignment is a name, the value given to it, and where.
type assignment struct {
	layout     layout
	name       string // without a flag's dashes
	start, end int    // the whole match
	vs, ve     int    // the value, without its quotes
	quoted     bool
}

// maxName and maxValue bound an assignment's parts.
const (
	maxName  = 128
	maxValue = 512
)

// parseAssignment finds the assignment whose name holds the keyword hit
// [start, end).
func parseAssignment(s string, start, end int) (assignment, bool) {
	var a assignment
	ns, ne := nameAround(s, start, end)
	flag := strings.HasPrefix(s[ns:ne], "--")
	a.name = strings.Trim(s[ns:ne], "-.")
	if a.name == "" {
		return a, false
	}
	a.start = ns
	if ns > 0 {
		switch pc := s[ns-1]; {
		case pc == '$' || pc == '{' && ns > 1 && s[ns-2] == '$' || pc == '%' || pc == '@' && ns > 1 && s[ns-2] == '@':
			return a, false // a reference to a variable, not its value
		}
	}
	q := quoteBefore(s, ns)
	i := ne
	quotedKey := q != "" && strings.HasPrefix(s[i:], q)
	if quotedKey {
		i += len(q)
		a.start = ns - len(q)
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i >= len(s) {
		return a, false
	}
	var op string
	switch {
	case s[i] == '=' && (i+1 >= len(s) || s[i+1] != '=' && s[i+1] != '~'):
		op = "="
		if i+1 < len(s) && s[i+1] == '>' {
			op = "=>"
		}
	case s[i] == ':' && i+1 < len(s) && s[i+1] == '=':
		op = "="
		i++
	case s[i] == ':' && (i+1 >= len(s) || s[i+1] != ':'):
		op = ":"
	case flag && i > ne && i-ne == 1:
		op = " " // --password value
		i--
	case quotedKey && s[i] == ',' && envDefault(s, a.start):
		// os.getenv("DB_PASSWORD", "…"), ENV.fetch("TOKEN", "…")
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if quoteAt(s, i) == "" {
			return a, false
		}
		a.layout = layoutEnvInline
		return quotedValue(s, i, a)
	case !flag && !quotedKey && i > ne && proseColon(s, ne) > 0:
		// Prose: "the SMTP password for staging: `…`".
		i = proseColon(s, ne)
		op = ":"
	case i > ne && ghSecretSet(s, ns):
		// gh secret set NAME --body "…"
		b, ok := strings.CutPrefix(s[i:], "--body")
		if !ok {
			b, ok = strings.CutPrefix(s[i:], "-b")
		}
		if !ok || b == "" || b[0] != ' ' && b[0] != '=' {
			return a, false
		}
		i = len(s) - len(b) + 1
		for i < len(s) && s[i] == ' ' {
			i++
		}
		a.layout = layoutEnvInline
		if quoteAt(s, i) != "" {
			return quotedValue(s, i, a)
		}
		op = " "
		i--
	default:
		return a, false
	}
	i += len(op)
	for op != " " && i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if a.layout == layoutEnvInline && op == " " {
		return unquotedValue(s, i, a)
	}

	// The layout, from what precedes the name and the operator.
	switch {
	case flag:
		if op != "=" && op != " " {
			return a, false
		}
		a.layout = layoutFlag
	case quotedKey:
		a.layout = layoutKey
	case op == "=" && q != "":
		// "NAME=value" quoted whole: docker -e "…", a compose list, a
		// form body in a string.
		qs := ns - len(q)
		switch {
		case lineStart(s, qs):
			a.layout = layoutEnvLine
		case commandBefore(s, qs):
			a.layout = layoutEnvInline
		default:
			a.layout = layoutQuery
		}
		a.start = qs
		v, ok := valueUntil(s, i, q)
		if !ok {
			return a, false
		}
		a.vs, a.ve, a.end, a.quoted = i, v, v+len(q), true
		return a, a.ve > a.vs
	case op == "=" && ns > 0 && (s[ns-1] == '?' || s[ns-1] == '&'):
		a.layout = layoutQuery
	case op == "=" && lineStart(s, ns):
		a.layout = layoutEnvLine
	case op == "=" && commandBefore(s, ns):
		a.layout = layoutEnvInline
	default:
		a.layout = layoutKey
	}

	// The value.
	if quoteAt(s, i) != "" {
		return quotedValue(s, i, a)
	}
	// A default after a reference: process.env.X ?? "…", os.environ.get(…) or "…"
	if f := fallback(s, i); f >= 0 && a.layout != layoutQuery && a.layout != layoutFlag {
		return quotedValue(s, f, a)
	}
	if a.layout == layoutKey && op == "=" {
		return a, false // name = expression, in code
	}
	return unquotedValue(s, i, a)
}

// quotedValue completes a with the quoted value starting at i.
func quotedValue(s string, i int, a assignment) (assignment, bool) {
	vq := quoteAt(s, i)
	v, ok := valueUntil(s, i+len(vq), vq)
	if !ok {
		return a, false
	}
	a.vs, a.ve, a.end, a.quoted = i+len(vq), v, v+len(vq), true
	// A quoted part of an expression ("user:" + id, "%s" % x) is no value.
	j := a.end
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	if j < len(s) && (s[j] == '+' || s[j] == '%') {
		return a, false
	}
	return a, a.ve > a.vs
}

// unquotedValue completes a with the unquoted value starting at i.
func unquotedValue(s string, i int, a assignment) (assignment, bool) {
	j := i
	for j < len(s) && j-i < maxValue && !stopsValue(s[j], a.layout) {
		j++
	}
	if j < len(s) && !endsValue(s, j) {
		return a, false // the value goes on as code: get("…"), x[…], a call
	}
	if a.layout == layoutFlag && j > i && s[i] == '-' {
		return a, false // --password --next-flag
	}
	a.vs, a.ve, a.end = i, j, j
	return a, j > i
}

// fallback returns where the quoted default of an expression at i starts
// (process.env.API_KEY ?? "…", os.getenv("X") or "…", ENV["X"] || '…'),
// or -1: the expression before it must be a reference, on the same line.
func fallback(s string, i int) int {
	lim := min(len(s), i+160)
	for j := i; j < lim; j++ {
		switch c := s[j]; {
		case c == '\n' || c == ';' || c == ',' && s[j-1] != '"' && s[j-1] != '\'':
			return -1
		case c == '?' && j+1 < lim && s[j+1] == '?', c == '|' && j+1 < lim && s[j+1] == '|', c == ' ' && strings.HasPrefix(s[j:lim], " or "):
			k := j + 2
			if c == ' ' {
				k = j + 4
			}
			k = skipBlanks(s, k, lim)
			if k < lim && quoteAt(s, k) != "" && j > i {
				return k
			}
			return -1
		}
	}
	return -1
}

// envDefault reports whether the quoted name starting at q is the first
// argument of a call that reads an environment variable with a default:
// getenv(, environ.get(, .get(, fetch(, env(.
func envDefault(s string, q int) bool {
	j := q
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	if j == 0 || s[j-1] != '(' {
		return false
	}
	w := s[max(0, j-16) : j-1]
	return hasSuffixFold(w, "getenv") || hasSuffixFold(w, ".get") || hasSuffixFold(w, "fetch") || hasSuffixFold(w, "env")
}

// proseColon returns where the ':' is that follows a name at ne after a
// few words of prose (" for staging", " of the admin"), or -1.
func proseColon(s string, ne int) int {
	words := 0
	for j := ne; j < len(s) && j-ne <= 24; j++ {
		switch c := s[j]; {
		case c == ':':
			if words == 0 || j+1 < len(s) && s[j+1] != ' ' || s[j-1] == ' ' {
				return -1
			}
			return j
		case c == ' ':
			if j+1 < len(s) && s[j+1] != ' ' && s[j+1] != ':' {
				words++
			}
		case !isNameByte(c):
			return -1
		}
	}
	return -1
}

// ghSecretSet reports whether the name at i follows "gh secret set ".
func ghSecretSet(s string, i int) bool {
	return strings.HasSuffix(s[max(0, i-16):i], "secret set ")
}

// nameAround returns the name ([\w.-]+) holding the keyword hit [start,
// end); the letter of an escape before it (the n of "\n") is not its.
func nameAround(s string, start, end int) (int, int) {
	ns := start
	for ns > 0 && start-ns < maxName && isNameByte(s[ns-1]) && !(ns > 1 && s[ns-2] == '\\') {
		ns--
	}
	ne := end
	for ne < len(s) && ne-end < maxName && isNameByte(s[ne]) {
		ne++
	}
	return ns, ne
}

// stopsValue reports whether c ends an unquoted value. A blank, a quote,
// an escape and code's brackets end every one; '#' a query's (a fragment;
// elsewhere a comment starts only after a blank); the shell's operators an
// inline assignment's and a query's ('&'); closing brackets and ',' all
// but a line's own (a flow mapping, an object, a call).
func stopsValue(c byte, l layout) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '\\', '(', '[', '{', ';', '|':
		return true
	case '#':
		return l == layoutQuery
	case '&', '<', '>':
		return l == layoutQuery || l == layoutEnvInline
	case ',', ')', ']', '}':
		return l != layoutEnvLine
	}
	return false
}

// endsValue reports whether an unquoted value may end before s[j]: at a
// blank, a line's end (raw or escaped), a comment, a shell operator or a
// closing bracket; not where code goes on.
func endsValue(s string, j int) bool {
	switch s[j] {
	case ' ', '\t', '\n', '\r', '#', ';', '&', '|', ',', ')', ']', '}', '<', '>':
		return true
	case '\\':
		k := j
		for k < len(s) && s[k] == '\\' {
			k++
		}
		return k < len(s) && strings.IndexByte(`nrt"'`, s[k]) >= 0
	}
	return false
}

// quoteBefore returns the quote (with the backslashes escaping it) that
// ends right before i, or "".
func quoteBefore(s string, i int) string {
	if i == 0 || s[i-1] != '"' && s[i-1] != '\'' && s[i-1] != '`' {
		return ""
	}
	j := i - 1
	for j > 0 && i-j < 8 && s[j-1] == '\\' {
		j--
	}
	return s[j:i]
}

// quoteAt returns the quote (with the backslashes escaping it) that starts
// at i, or "".
func quoteAt(s string, i int) string {
	j := i
	for j < len(s) && j-i < 8 && s[j] == '\\' {
		j++
	}
	if j < len(s) && (s[j] == '"' || s[j] == '\'' || s[j] == '`') {
		return s[i : j+1]
	}
	return ""
}

// valueUntil returns where the quoted value starting at i ends: at the
// next q escaped exactly as q is, on the same line.
func valueUntil(s string, i int, q string) (int, bool) {
	nb := len(q) - 1 // backslashes before the quote
	qc := q[nb]
	for j := i; j < len(s) && j-i <= maxValue; j++ {
		switch s[j] {
		case '\n':
			return 0, false
		case qc:
			k := j
			for k > i && s[k-1] == '\\' {
				k--
			}
			if j-k == nb {
				return k, true
			}
		}
	}
	return 0, false
}

// lineStart reports whether only a line's prefix comes before i on its line
// (the line may end in an escaped "\n"): blanks, a line number ("  3→",
// "  3\t"), a diff or list mark ("+", "-", "- "), and a word such as export,
// ENV or set.
func lineStart(s string, i int) bool {
	ls := i
	for ls > 0 && i-ls < 256 && s[ls-1] != '\n' && !(s[ls-1] == 'n' && ls > 1 && s[ls-2] == '\\') {
		ls--
	}
	if ls > 0 && i-ls >= 256 {
		return false
	}
	p := skipBlanks(s, ls, i)
	if p < i && '0' <= s[p] && s[p] <= '9' {
		j := p
		for j < i && '0' <= s[j] && s[j] <= '9' {
			j++
		}
		for j < i && s[j] == ' ' {
			j++
		}
		if e := lineNumberEnd(s, j, i); e > 0 {
			p = skipBlanks(s, e, i)
		}
	}
	if p < i && (s[p] == '+' || s[p] == '-' || s[p] == '>') {
		p = skipBlanks(s, p+1, i)
	}
	for _, w := range [...]string{"export ", "ENV ", "set ", "setenv ", "declare -x ", "env ", "local ", "readonly ", "typeset -x "} {
		if strings.HasPrefix(s[p:i], w) {
			p = skipBlanks(s, p+len(w), i)
			break
		}
	}
	return p == i
}

func skipBlanks(s string, i, lim int) int {
	for i < lim && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// commandBefore reports whether the word before i (and the blanks after it)
// sets environment variables for a command: docker's -e, --env and
// --build-arg, export, env, a shell operator, or another NAME=value.
func commandBefore(s string, i int) bool {
	j := i
	if j > 0 && s[j-1] == '=' { // --env=NAME=value
		j--
	} else {
		for j > 0 && i-j < 16 && (s[j-1] == ' ' || s[j-1] == '\t') {
			j--
		}
		if j == i {
			return false
		}
	}
	k := j
	for k > 0 && j-k < 64 && s[k-1] != ' ' && s[k-1] != '\t' && s[k-1] != '\n' {
		k--
	}
	w := s[k:j]
	if p := strings.LastIndexAny(w, "\"'`;|&("); p >= 0 && p < len(w)-1 {
		w = w[p+1:] // {"command":"export, 0;export, $(export
	}
	switch w {
	case "-e", "--env", "--build-arg", "--set-env-vars", "--update-env-vars", "--env-vars", "-var", "--var",
		"--from-literal", "export", "env", "set", "setenv", "local", "readonly", "sudo", "&&", "||", ";", "|", "(",
		"$(", "then", "do":
		return true
	}
	if eq := strings.IndexByte(w, '='); eq > 0 && s[j] != '=' {
		// Another assignment before this one: A=1 B=2 cmd, -e A=1 -e B=2;
		// not a keyword argument in code: f(user="app", password=…).
		return isIdent(w[:eq]) && !strings.ContainsAny(w[eq+1:], "\"'(),{}[]")
	}
	return strings.HasSuffix(w, ";") || strings.HasSuffix(w, "&&")
}

// matchEnvAssignment matches an environment variable whose name says secret
// set on a line of its own or inline in a command (rule env-secret).
func matchEnvAssignment(s string, start, end int, loc *[4]int) bool {
	a, ok := parseAssignment(s, start, end)
	if !ok || a.layout != layoutEnvLine && a.layout != layoutEnvInline {
		return false
	}
	// A camelCase name at a line's start is code's (storageKey = "…"),
	// and is read as a config key is.
	env := envName(a.name) && plausibleValue(s[a.vs:a.ve], false)
	if !env && (!a.quoted || !hasAny(a.name, "abcdefghijklmnopqrstuvwxyz") || !secretKeyName(a.name) || !plausibleValue(s[a.vs:a.ve], true)) {
		return false
	}
	*loc = [4]int{a.start, a.end, a.vs, a.ve}
	return true
}

// matchNamedValue matches a key, flag or query parameter whose name says
// secret, and its value (rule named-secret).
func matchNamedValue(s string, start, end int, loc *[4]int) bool {
	a, ok := parseAssignment(s, start, end)
	if !ok || a.layout == layoutEnvLine || a.layout == layoutEnvInline || !secretKeyName(a.name) || !plausibleValue(s[a.vs:a.ve], true) {
		return false
	}
	*loc = [4]int{a.start, a.end, a.vs, a.ve}
	return true
}

// matchEnvPair matches an environment variable given as a name/value pair:
// Kubernetes' "- name: ADMIN_PASSWORD" and "value: …" on a following line,
// the same in JSON ({"name": "…", "value": "…"}, as in ECS task
// definitions), HCL (name = "…" value = "…") and HTML inputs. The keyword
// hit is in the name's value.
func matchEnvPair(s string, start, end int, loc *[4]int) bool {
	ns, ne := nameAround(s, start, end)
	q := quoteBefore(s, ns)
	j := ns - len(q)
	if q != "" && !strings.HasPrefix(s[ne:], q) {
		return false
	}
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	if j == 0 || s[j-1] != ':' && s[j-1] != '=' {
		return false
	}
	j--
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	j -= len(quoteBefore(s, j))
	if j < 4 || !strings.EqualFold(s[j-4:j], "name") || j > 4 && isNameByte(s[j-5]) || !envName(s[ns:ne]) {
		return false
	}
	lim := min(len(s), ne+256)
	for i := ne + len(q); i < lim; i++ {
		switch c := s[i]; {
		case c == '{' || c == '}' || c == '[' || c == ']':
			return false
		case (c == 'n' || c == 'N') && i+4 <= len(s) && strings.EqualFold(s[i:i+4], "name") && !isNameByte(s[i-1]) && (i+4 == len(s) || !isNameByte(s[i+4])):
			return false // the next pair
		case (c == 'v' || c == 'V') && i+5 <= len(s) && strings.EqualFold(s[i:i+5], "value") && !isNameByte(s[i-1]):
			p := i + 5
			p += len(quoteAt(s, p))
			p = skipBlanks(s, p, len(s))
			if p >= len(s) || s[p] != ':' && s[p] != '=' {
				continue // valueFrom, values
			}
			p = skipBlanks(s, p+1, len(s))
			vs, ve, e := p, p, p
			if vq := quoteAt(s, p); vq != "" {
				v, ok := valueUntil(s, p+len(vq), vq)
				if !ok {
					return false
				}
				vs, ve, e = p+len(vq), v, v+len(vq)
			} else {
				for ve < len(s) && ve-vs < maxValue && !stopsValue(s[ve], layoutKey) {
					ve++
				}
				e = ve
			}
			if ve <= vs || !plausibleValue(s[vs:ve], false) {
				return false
			}
			*loc = [4]int{ns - len(q), e, vs, ve}
			return true
		}
	}
	return false
}

// secretKeyName reports whether a key of a config file, a flag or a query
// parameter says it holds a secret. It is stricter than envName: camelCase
// splits into words (secretName is a name, not a secret), and a key named
// key must say which (api_key, signingKey; not cache_key).
func secretKeyName(name string) bool {
	w, ok := splitName(name, true)
	if !ok {
		return false
	}
	last := w.n - 1
	if last > 0 && isQualifier(w.word(last)) {
		last--
	}
	for i := range last {
		if isNotSecretWord(w.word(i)) {
			return false
		}
	}
	lw := w.word(last)
	if foldIs(lw, "key", "keys") {
		return last > 0 && foldIs(w.word(last-1), "api", "secret", "private", "access", "auth", "signing", "sign",
			"encryption", "encrypt", "master", "license", "client", "account", "storage", "subscription", "app", "hmac",
			"jwt", "ssh", "crypto", "cipher", "aes", "webhook", "admin", "service", "consumer", "shared", "root",
			"decryption", "session")
	}
	return secretWord(lw, last > 0)
}

// envName reports whether a variable name says it holds a secret: its last
// part (or the one before a qualifier such as _BASE64) names one.
func envName(name string) bool {
	w, ok := splitName(name, false)
	if !ok {
		return false
	}
	for i := range w.n {
		if foldIs(w.word(i), "csrf", "xsrf") {
			return false
		}
	}
	last := w.n - 1
	if last > 0 && isQualifier(w.word(last)) {
		last--
	}
	lw := w.word(last)
	return foldIs(lw, "key", "keys") || secretWord(lw, w.n > 1)
}

// isQualifier reports last words of a name that say how a value is
// written, not what it is: API_KEY_BASE64.
func isQualifier(w string) bool {
	return foldIs(w, "base", "b64", "base64", "hex", "value", "raw", "str", "string", "data", "enc", "encoded")
}

// isNotSecretWord reports words that, before a name's last, say it is not
// a secret: nextPageToken, csrf_token, cache_key, max_tokens.
func isNotSecretWord(w string) bool {
	return foldIs(w, "csrf", "xsrf", "page", "next", "continuation", "cursor", "sync", "resume", "cache",
		"max", "num", "total", "input", "output", "count", "idempotency", "public", "pub", "ttl", "expires", "expiry",
		"type", "file", "path")
}

// secretWord reports whether the last word of a name names a secret;
// qualified: other words come before it.
func secretWord(w string, qualified bool) bool {
	return containsFold(w, "secret") || containsFold(w, "passw") || containsFold(w, "credential") ||
		hasSuffixFold(w, "pwd") && !strings.EqualFold(w, "oldpwd") && qualified ||
		hasSuffixFold(w, "token") || strings.EqualFold(w, "tokens") ||
		foldIs(w, "apikey", "secretkey", "accesskey", "privatekey", "authkey", "masterkey", "licensekey", "signingkey", "encryptionkey")
}

// notSecretName reports whether a key's name says it is not a secret
// though it holds a word that does (isNotSecretWord).
func notSecretName(name string) bool {
	w, ok := splitName(name, true)
	if !ok {
		return false
	}
	for i := range w.n - 1 {
		if isNotSecretWord(w.word(i)) {
			return true
		}
	}
	return false
}

// notSecretWord reports names of one word that are no secret's, which
// gitleaks' keyword assignments may end with: api_keys WHERE id = '…'.
func notSecretWord(name string) bool {
	return foldIs(name, "id", "uuid", "guid", "name", "version", "type", "region", "url", "uri", "path", "file", "host", "email",
		"sha1", "sha256", "sha384", "sha512", "md5", "digest", "hash", "checksum", "etag", "integrity")
}

// words are the words of a name: name[at[i][0]:at[i][1]].
type words struct {
	name string
	n    int
	at   [16][2]uint16
}

func (w *words) word(i int) string { return w.name[w.at[i][0]:w.at[i][1]] }

// splitName splits a name into words at _ - . and, if camel, at camelCase
// boundaries. ok is false for a name without words, or with too many.
func splitName(name string, camel bool) (w words, ok bool) {
	if len(name) > 1<<15 {
		return w, false
	}
	w.name = name
	start := 0
	for i := 0; i <= len(name); i++ {
		cut, next := i == len(name), i+1
		if !cut {
			switch c := name[i]; {
			case c == '_' || c == '-' || c == '.':
				cut = true
			case camel && 'A' <= c && c <= 'Z' && i > start && 'a' <= name[i-1] && name[i-1] <= 'z':
				cut, next = true, i
			}
		}
		if !cut {
			continue
		}
		if i > start {
			if w.n == len(w.at) {
				return w, false
			}
			w.at[w.n] = [2]uint16{uint16(start), uint16(i)}
			w.n++
		}
		start = next
	}
	return w, w.n > 0
}

// foldIs reports whether w is one of list, in ASCII case folding.
func foldIs(w string, list ...string) bool {
	for _, x := range list {
		if len(w) == len(x) && strings.EqualFold(w, x) {
			return true
		}
	}
	return false
}

func hasSuffixFold(w, suffix string) bool {
	return len(w) >= len(suffix) && strings.EqualFold(w[len(w)-len(suffix):], suffix)
}

func containsFold(w, sub string) bool {
	for i := 0; i+len(sub) <= len(w); i++ {
		if strings.EqualFold(w[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// pathLike reports whether v reads as a file path: it starts with /, ~/,
// ./ or ../, and is not a base64 secret that happens to start with a /
// (one in 64 does): 20 or more bytes of base64's alphabet alone, upper
// and lower case and digits, under no directory a path starts with.
func pathLike(v string) bool {
	if strings.HasPrefix(v, "~/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") {
		return true
	}
	if !strings.HasPrefix(v, "/") {
		return false
	}
	if len(v) < 20 || strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" ||
		!hasAny(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") || !hasAny(v, "abcdefghijklmnopqrstuvwxyz") || !hasAny(v, "0123456789") {
		return true
	}
	for _, dir := range []string{"bin", "boot", "dev", "etc", "home", "lib", "media", "mnt", "nix", "opt", "private", "proc", "root", "run", "sbin", "srv", "sys", "tmp", "usr", "var", "Applications", "Library", "System", "Users", "Volumes", "workspace", "workspaces", "app", "src", "data", "code", "build", "github"} {
		if rest, ok := strings.CutPrefix(v[1:], dir); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// plausibleValue reports whether v, given to a name that says secret, may
// be one: not a placeholder, a reference, a path, a number, a URL without
// credentials, or code. strict (a config key, a flag, a query parameter,
// where names say less than an environment variable's) also asks for six
// bytes or more, no blanks, a digit or a symbol (unless long and of mixed
// case), and some entropy.
func plausibleValue(v string, strict bool) bool {
	if len(v) < 4 || isPlaceholder(v) || strings.Trim(v, "0123456789") == "" {
		return false
	}
	if pathLike(v) || dottedIdent(v) || pairIn(v, '(', ')') || pairIn(v, '[', ']') {
		return false
	}
	if (strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://")) && !strings.Contains(v, "@") {
		return false
	}
	if !strict {
		return true
	}
	if len(v) < 6 || strings.ContainsAny(v, " \t") || entropy(v) <= 2 {
		return false
	}
	var digit, symbol, upper, lower bool
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case '0' <= c && c <= '9':
			digit = true
		case 'A' <= c && c <= 'Z':
			upper = true
		case 'a' <= c && c <= 'z':
			lower = true
		case c != '_' && c != '-' && c != '.':
			symbol = true
		}
	}
	if !digit && !symbol && !(len(v) >= 20 && upper && lower) {
		return false // a word or an identifier: string, my-tls-secret
	}
	if !lower && !symbol && strings.Contains(v, "_") {
		return false // the name of another variable: DB_PASSWORD_2
	}
	if i := strings.IndexByte(v, '<'); i > 0 && !digit && isIdent(v[:i]) {
		return false // a type: Promise<string>, Map<string,
	}
	return true
}

// pairIn reports whether v holds open and, after it, close.
func pairIn(v string, open, close byte) bool {
	i := strings.IndexByte(v, open)
	return i >= 0 && strings.IndexByte(v[i+1:], close) >= 0
}
