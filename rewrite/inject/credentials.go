package inject

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// PlaceholderPrefix starts every credential placeholder:
// "chaperone-cred-<name>-<32 hex>".
const PlaceholderPrefix = "chaperone-cred-"

const (
	maxNameLen = 64
	redacted   = "[redacted]"
)

// Credential binds a real secret to the hosts that may receive it.
//
// It prints (%v, %+v, %#v, %s, %q, %x), logs and marshals to JSON without its
// Value. It cannot implement fmt.Formatter (it has a field named Format), so
// a non-string verb such as %d would print the fields: do not.
type Credential struct {
	Name   string   // [a-z0-9_-]+, at most 64 bytes
	Value  string   // the real secret; never logged, never in errors
	Hosts  []string // "api.github.com", "*.example.com" (subdomains only), optionally with ":port"
	Header string   // header to set, e.g. "Authorization"; "" = swap the placeholder wherever it appears in headers/URL
	Format string   // e.g. "Bearer {value}", "token {value}", "basic {user}:{value}"; "" = "{value}"
	User   string   // for {user}
}

// String describes c without its Value.
func (c Credential) String() string {
	return fmt.Sprintf("inject.Credential{Name:%q Value:%s Hosts:%q Header:%q Format:%q User:%q}",
		c.Name, redacted, c.Hosts, c.Header, c.Format, c.User)
}

// GoString is String, so that %#v does not print Value either.
func (c Credential) GoString() string { return c.String() }

// MarshalJSON writes c without its Value, so that a credential logged or
// dumped as JSON (slog's JSON handler marshals slices of them) stays secret.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name   string   `json:"name"`
		Value  string   `json:"value"`
		Hosts  []string `json:"hosts"`
		Header string   `json:"header,omitempty"`
		Format string   `json:"format,omitempty"`
		User   string   `json:"user,omitempty"`
	}{c.Name, redacted, c.Hosts, c.Header, c.Format, c.User})
}

// LogValue logs c without its Value.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.Any("hosts", c.Hosts),
		slog.String("header", c.Header),
		slog.String("format", c.Format),
	)
}

// cred is a validated Credential. The secret and the header made from it sit
// behind closures: fmt prints a func as an address, so even a Broker printed
// through reflection (a struct holding one, a bad verb) shows no value.
type cred struct {
	name        string
	value       func() string
	placeholder string
	hosts       []hostPattern
	header      string        // canonical; "" when none
	headerValue func() string // Format applied to value
	idx         int           // position in Broker.creds
}

func hide(s string) func() string { return func() string { return s } }

// Broker swaps credential placeholders for real values on requests to the
// hosts each credential is bound to. It is immutable after NewBroker and safe
// for concurrent use.
type Broker struct {
	creds   []*cred // sorted by name
	byName  map[string]*cred
	longest []*cred // by placeholder length, longest first, for matching
}

// NewBroker validates creds and mints a placeholder for each from random.
// Errors name the credential but never contain its Value.
func NewBroker(creds []Credential, random io.Reader) (*Broker, error) {
	if random == nil {
		return nil, errors.New("inject: nil random reader")
	}
	b := &Broker{byName: make(map[string]*cred, len(creds))}
	seen := map[[16]byte]bool{}
	for i, c := range creds {
		cr, err := validate(c)
		if err != nil {
			if validName(c.Name) {
				return nil, fmt.Errorf("inject: credential %q: %w", c.Name, err)
			}
			return nil, fmt.Errorf("inject: credential %d: %w", i, err)
		}
		if b.byName[cr.name] != nil {
			return nil, fmt.Errorf("inject: credential %q: duplicate name", cr.name)
		}
		var r [16]byte
		if _, err := io.ReadFull(random, r[:]); err != nil {
			return nil, fmt.Errorf("inject: read random: %w", err)
		}
		if seen[r] {
			return nil, errors.New("inject: random reader repeated itself")
		}
		seen[r] = true
		cr.placeholder = PlaceholderPrefix + cr.name + "-" + hex.EncodeToString(r[:])
		b.creds = append(b.creds, cr)
		b.byName[cr.name] = cr
	}
	slices.SortFunc(b.creds, func(x, y *cred) int { return strings.Compare(x.name, y.name) })
	for i, c := range b.creds {
		c.idx = i
	}
	b.longest = slices.Clone(b.creds)
	// A placeholder can be a prefix of another ("a-<hex>" is a valid name),
	// so the longest must be tried first.
	slices.SortStableFunc(b.longest, func(x, y *cred) int { return len(y.placeholder) - len(x.placeholder) })
	return b, nil
}

func validate(c Credential) (*cred, error) {
	if !validName(c.Name) {
		return nil, fmt.Errorf("name must match [a-z0-9_-]{1,%d}", maxNameLen)
	}
	if c.Value == "" {
		return nil, errors.New("empty value")
	}
	if hasControl(c.Value) {
		return nil, errors.New("value contains a control character")
	}
	if len(c.Hosts) == 0 {
		return nil, errors.New("no hosts")
	}
	cr := &cred{name: c.Name, value: hide(c.Value)}
	for _, h := range c.Hosts {
		p, err := parseHostPattern(h)
		if err != nil {
			return nil, fmt.Errorf("host %q: %w", h, err)
		}
		cr.hosts = append(cr.hosts, p)
	}
	if hasControl(c.User) {
		return nil, errors.New("user contains a control character")
	}
	if c.Header == "" {
		if c.Format != "" {
			return nil, errors.New("format needs a header")
		}
		if c.User != "" {
			return nil, errors.New("user needs a header and a format")
		}
		return cr, nil
	}
	if !isToken(c.Header) {
		return nil, fmt.Errorf("header %q: not a valid header name", c.Header)
	}
	cr.header = http.CanonicalHeaderKey(c.Header)
	switch cr.header {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Trailer",
		"Upgrade", "Keep-Alive", "Proxy-Connection":
		return nil, fmt.Errorf("header %q: reserved for the transport", c.Header)
	}
	v, err := formatValue(c.Format, c.User, c.Value)
	if err != nil {
		return nil, err
	}
	cr.headerValue = hide(v)
	return cr, nil
}

// formatValue expands format. A format starting with "basic " (any case)
// means HTTP Basic: the rest is expanded and base64-encoded.
func formatValue(format, user, value string) (string, error) {
	if format == "" {
		format = "{value}"
	}
	if hasControl(format) {
		return "", errors.New("format contains a control character")
	}
	rest := strings.NewReplacer("{value}", "", "{user}", "").Replace(format)
	if strings.ContainsAny(rest, "{}") {
		return "", errors.New("format: only {value} and {user} are known")
	}
	if !strings.Contains(format, "{value}") {
		return "", errors.New("format lacks {value}")
	}
	usesUser := strings.Contains(format, "{user}")
	if usesUser && user == "" {
		return "", errors.New("format uses {user} but user is empty")
	}
	if !usesUser && user != "" {
		return "", errors.New("user is set but format lacks {user}")
	}
	expand := strings.NewReplacer("{value}", value, "{user}", user)
	if len(format) > len("basic ") && strings.EqualFold(format[:len("basic ")], "basic ") {
		if strings.Contains(user, ":") {
			return "", errors.New("basic user contains ':'")
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(expand.Replace(format[len("basic "):]))), nil
	}
	return expand.Replace(format), nil
}

// Placeholder returns what the agent's environment gets instead of the named
// credential's value, or "" for an unknown name.
func (b *Broker) Placeholder(name string) string {
	if b == nil {
		return ""
	}
	if c := b.byName[name]; c != nil {
		return c.placeholder
	}
	return ""
}

// Names returns the credentials' names, sorted.
func (b *Broker) Names() []string {
	if b == nil {
		return nil
	}
	names := make([]string, len(b.creds))
	for i, c := range b.creds {
		names[i] = c.name
	}
	return names
}

// Matches reports whether the named credential may be sent to host (which
// may carry a port; see Apply).
func (b *Broker) Matches(name, host string) bool {
	if b == nil {
		return false
	}
	c := b.byName[name]
	if c == nil {
		return false
	}
	h, p, ok := normalizeHost(host)
	return ok && c.bound(h, p)
}

func (c *cred) bound(host, port string) bool {
	for _, p := range c.hosts {
		if p.match(host, port) {
			return true
		}
	}
	return false
}

// String lists the credentials' names and hosts, never their values.
func (b *Broker) String() string {
	if b == nil {
		return "inject.Broker(nil)"
	}
	var sb strings.Builder
	sb.WriteString("inject.Broker{")
	for i, c := range b.creds {
		if i > 0 {
			sb.WriteString(" ")
		}
		sb.WriteString(c.name)
		sb.WriteString("→")
		for j, h := range c.hosts {
			if j > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(h.String())
		}
	}
	sb.WriteString("}")
	return sb.String()
}

// GoString is String.
func (b *Broker) GoString() string { return b.String() }

// Format prints String for every verb, so that no verb can reach the values.
func (b *Broker) Format(f fmt.State, _ rune) { io.WriteString(f, b.String()) }

// LogValue logs the credentials' names only.
func (b *Broker) LogValue() slog.Value {
	if b == nil {
		return slog.StringValue("nil")
	}
	return slog.GroupValue(slog.Any("credentials", b.Names()))
}

// at returns the credential whose placeholder starts s, or nil.
func (b *Broker) at(s string) *cred {
	for _, c := range b.longest {
		if strings.HasPrefix(s, c.placeholder) {
			return c
		}
	}
	return nil
}

// FindPlaceholders returns the sorted names of the credentials whose
// placeholder occurs in body, or nil.
func (b *Broker) FindPlaceholders(body []byte) []string {
	if b == nil {
		return nil
	}
	prefix := []byte(PlaceholderPrefix)
	var found []bool
	for i := bytes.Index(body, prefix); i >= 0; {
		next := i + 1
		for _, c := range b.longest {
			if len(body)-i >= len(c.placeholder) && string(body[i:i+len(c.placeholder)]) == c.placeholder {
				if found == nil {
					found = make([]bool, len(b.creds))
				}
				found[c.idx] = true
				next = i + len(c.placeholder)
				break
			}
		}
		j := bytes.Index(body[next:], prefix)
		if j < 0 {
			break
		}
		i = next + j
	}
	return b.namesOf(found)
}

func (b *Broker) namesOf(set []bool) []string {
	var names []string
	for i, ok := range set {
		if ok {
			names = append(names, b.creds[i].name)
		}
	}
	return names
}

// Apply rewrites the headers and URL of a request to host. host is the
// request's target as the proxy knows it ("api.github.com:443",
// "[::1]:8443"); it is matched case-insensitively, and a Hosts entry without
// a port matches any port, one with a port only that port (so a host given
// without a port matches only port-less entries).
//
// For each credential bound to host:
//   - without Header, its placeholder in a header value (also inside
//     "Basic base64(user:pass)"), in a query value or in the URL's userinfo is
//     replaced by the real value; a swapped userinfo becomes an
//     "Authorization: Basic" header (unless the request already has one) and
//     is removed from the URL, because a forwarding net/http Transport never
//     sends userinfo on the wire (only http.Client turns it into a header);
//   - with Header, the placeholder anywhere in the headers or URL (path
//     included) makes Apply set that header to the formatted value, replacing
//     whatever the agent put there; the value goes nowhere else, and the
//     placeholder stays where the agent put it. Keeping the value out of
//     query strings and free-form headers keeps it out of what an upstream
//     may echo back (search results, error messages) to the agent.
//
// Placeholders of credentials NOT bound to host are left where they are and
// named in leaked: the caller must deny the request. injected names the
// credentials whose value went into the request. Both are sorted, and nil
// when empty. Nothing is allocated when the request carries no placeholder
// and no Basic authorization.
func (b *Broker) Apply(host string, h http.Header, u *url.URL) (injected, leaked []string) {
	if b == nil || len(b.creds) == 0 || !mayCarry(h, u) {
		return nil, nil
	}
	st := applyState{b: b, state: make([]credState, len(b.creds))}
	st.host, st.port, st.hostOK = normalizeHost(host)

	for _, vs := range h {
		for j, v := range vs {
			vs[j] = st.headerValue(v)
		}
	}
	if u != nil {
		st.url(u, h)
	}
	for i, c := range b.creds {
		s := &st.state[i]
		if !s.seen || c.header == "" || h == nil || !st.bound(i) {
			continue
		}
		deleteFold(h, c.header)
		h.Set(c.header, c.headerValue())
		s.injected = true
	}
	for i := range st.state {
		if st.state[i].injected {
			injected = append(injected, b.creds[i].name)
		}
		if st.state[i].leaked {
			leaked = append(leaked, b.creds[i].name)
		}
	}
	return injected, leaked
}

type credState struct {
	seen, injected, leaked bool
	bound                  int8 // 0 not yet known, 1 bound, -1 not
}

type applyState struct {
	b          *Broker
	state      []credState
	host, port string
	hostOK     bool
}

func (st *applyState) bound(i int) bool {
	s := &st.state[i]
	if s.bound == 0 {
		s.bound = -1
		if st.hostOK && st.b.creds[i].bound(st.host, st.port) {
			s.bound = 1
		}
	}
	return s.bound == 1
}

// scan finds the placeholders in s and records them. With swap, those of
// credentials bound to the host and without a Header are replaced by the
// real value in out, and swapped reports whether any were.
func (st *applyState) scan(s string, swap bool) (out string, swapped bool) {
	i := strings.Index(s, PlaceholderPrefix)
	if i < 0 {
		return s, false
	}
	var sb strings.Builder
	last := 0
	for i >= 0 {
		next := i + 1
		if c := st.b.at(s[i:]); c != nil {
			idx := c.idx
			cs := &st.state[idx]
			cs.seen = true
			next = i + len(c.placeholder)
			switch {
			case !st.bound(idx):
				cs.leaked = true
			case swap && c.header == "":
				sb.WriteString(s[last:i])
				sb.WriteString(c.value())
				last = next
				cs.injected = true
				swapped = true
			}
		}
		j := strings.Index(s[next:], PlaceholderPrefix)
		if j < 0 {
			break
		}
		i = next + j
	}
	if !swapped {
		return s, false
	}
	sb.WriteString(s[last:])
	return sb.String(), true
}

func (st *applyState) headerValue(v string) string {
	v, _ = st.scan(v, true)
	scheme, token, ok := cutBasic(v)
	if !ok {
		return v
	}
	dec, ok := decodeBase64(token)
	if !ok {
		return v
	}
	if out, swapped := st.scan(dec, true); swapped {
		return scheme + " " + base64.StdEncoding.EncodeToString([]byte(out))
	}
	return v
}

func (st *applyState) url(u *url.URL, h http.Header) {
	if u.User != nil {
		user := u.User.Username()
		pass, hasPass := u.User.Password()
		user, su := st.scan(user, true)
		pass, sp := st.scan(pass, true)
		if su || sp {
			switch {
			case h == nil:
				if hasPass {
					u.User = url.UserPassword(user, pass)
				} else {
					u.User = url.User(user)
				}
			default:
				if !hasFold(h, "Authorization") {
					h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
				}
				u.User = nil
			}
		}
	}
	if u.RawQuery != "" {
		u.RawQuery = st.query(u.RawQuery)
	}
	// Elsewhere in the URL a placeholder is only noted: it can trigger a
	// Header, or be a leak, but is never swapped.
	for _, s := range [...]string{u.Path, u.RawPath, u.Fragment, u.RawFragment, u.Opaque, u.Host} {
		st.scan(s, false)
	}
}

// query swaps placeholders in query values, keeping every other byte of raw.
func (st *applyState) query(raw string) string {
	parts := strings.Split(raw, "&")
	changed := false
	for i, part := range parts {
		key, val, hasVal := strings.Cut(part, "=")
		if k, err := url.QueryUnescape(key); err == nil {
			st.scan(k, false)
		} else {
			st.scan(key, false)
		}
		if !hasVal {
			continue
		}
		dec, err := url.QueryUnescape(val)
		if err != nil {
			st.scan(val, false)
			continue
		}
		if out, swapped := st.scan(dec, true); swapped {
			parts[i] = key + "=" + url.QueryEscape(out)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	return strings.Join(parts, "&")
}

// mayCarry is the fast path: false when no placeholder can be in the request.
func mayCarry(h http.Header, u *url.URL) bool {
	for _, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, PlaceholderPrefix) {
				return true
			}
			if _, _, ok := cutBasic(v); ok {
				return true
			}
		}
	}
	if u == nil {
		return false
	}
	if u.User != nil {
		if strings.Contains(u.User.Username(), PlaceholderPrefix) {
			return true
		}
		if p, _ := u.User.Password(); strings.Contains(p, PlaceholderPrefix) {
			return true
		}
	}
	for _, s := range [...]string{u.Path, u.RawPath, u.Fragment, u.RawFragment, u.Opaque, u.Host, u.RawQuery} {
		if strings.Contains(s, PlaceholderPrefix) {
			return true
		}
	}
	if strings.Contains(u.RawQuery, "%") {
		if q, err := url.QueryUnescape(u.RawQuery); err == nil && strings.Contains(q, PlaceholderPrefix) {
			return true
		}
	}
	return false
}

// cutBasic splits "Basic <token>" (scheme matched case-insensitively).
func cutBasic(v string) (scheme, token string, ok bool) {
	const n = len("basic")
	if len(v) <= n+1 || !strings.EqualFold(v[:n], "basic") || (v[n] != ' ' && v[n] != '\t') {
		return "", "", false
	}
	return v[:n], strings.Trim(v[n+1:], " \t"), true
}

func decodeBase64(s string) (string, bool) {
	if d, err := base64.StdEncoding.DecodeString(s); err == nil {
		return string(d), true
	}
	if d, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		return string(d), true
	}
	return "", false
}

// hasFold and deleteFold look at every key, not only the canonical one: a
// header map built by hand can hold "authorization" beside "Authorization".
func hasFold(h http.Header, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

func deleteFold(h http.Header, name string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
}

func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// isToken reports whether s is an RFC 9110 token (a valid header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
