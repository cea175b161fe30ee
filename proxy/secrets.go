package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// Where a session's requests are searched for secrets, before the http
// event is decided, with the session's Scanner and its known values (the
// Redactor's Known: every secret found before, and brokered credentials'
// real values, also encoded):
//
//   - every header's name, and every value but those of credential headers
//     (isCredentialHeader: Authorization, Cookie, X-Api-Key, …), which are
//     how a client authenticates and keep their own handling; in those,
//     only a brokered credential's real value counts, on a host it is not
//     bound to;
//   - the URL's path, decoded (and as sent, for known values);
//   - every query parameter's name and value, decoded, except a signed
//     URL's access key id (X-Amz-Credential, AWSAccessKeyId, in AWS's own
//     form, which leaves no room for anything else) and a Gemini call's API
//     key (key=, the provider's own way to take it);
//   - the body, decoded (prepare): whole up to maxScanBody, as it streams
//     beyond (bodyScan).
//
// What is found joins http.secrets (the rule ids), the session's known
// values (the values, never logged) and the reason of a refusal (where).
// Header values and query parameters that hold one are shown redacted in
// the event, and so is a path that holds one (all of it).

// secretAt is a secret found in a request: its rule, and where.
type secretAt struct{ rule, where string }

// part says which part of a request a text is, for a reason.
type part uint8

const (
	partHeader part = iota
	partHeaderName
	partQuery
	partQueryName
	partPath
	partBody
	partMessage // a WebSocket message
)

func (pt part) where(name string) string {
	switch pt {
	case partHeader:
		return "request header " + printableName(name)
	case partHeaderName:
		return "the name of a request header"
	case partQuery:
		return "query parameter " + printableName(name)
	case partQueryName:
		return "the name of a query parameter"
	case partPath:
		return "the URL path"
	case partMessage:
		return "WebSocket message"
	}
	return "request body"
}

// printableName is a header's or parameter's name for a reason: at most
// 64 bytes, quoted unless it is a plain token.
func printableName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '-' || c == '_' || c == '.') {
			return strconv.Quote(s)
		}
	}
	return s
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// known is the session's set of known secret values, if it has one.
func (rw *Rewrites) known() *secrets.Known {
	if rw.Redactor == nil {
		return nil
	}
	return rw.Redactor.Known()
}

// cleanValues remembers, for one session, header and query values in
// which the scanner found nothing: the same User-Agent, Accept and beta
// lists come with every request, the scanner's verdict on a text never
// changes, and a value whose words wake a rule (curl/8.14 wakes the curl
// rules) costs its regexes each time. At most maxCleanValues values,
// each of minCleanLen to maxCleanLen bytes (shorter ones cost less to
// scan than to look up). A lookup reads an immutable map without a lock;
// each value added copies it (at most maxCleanValues times a session, and
// most sessions see a few dozen values). The zero value is ready.
type cleanValues struct {
	m  atomic.Pointer[map[string]struct{}]
	mu sync.Mutex // serialises adds
}

const (
	minCleanLen    = 8
	maxCleanLen    = 512
	maxCleanValues = 4096
)

func (c *cleanValues) has(s string) bool {
	if len(s) < minCleanLen || len(s) > maxCleanLen {
		return false
	}
	m := c.m.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[s]
	return ok
}

func (c *cleanValues) add(s string) {
	if len(s) < minCleanLen || len(s) > maxCleanLen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		if _, ok := (*old)[s]; ok {
			return
		}
		n = len(*old)
	}
	if n >= maxCleanValues {
		return
	}
	m := make(map[string]struct{}, n+1)
	if old != nil {
		for k := range *old {
			m[k] = struct{}{}
		}
	}
	m[strings.Clone(s)] = struct{}{}
	c.m.Store(&m)
}

// scanValue runs the scanner on a header's or parameter's value s (part
// pt, named name), and adds it to the session's clean values if it finds
// nothing; found says whether it found anything.
func (x *exchange) scanValue(s string, pt part, name string) (found bool) {
	if x.rw.Scanner == nil {
		return false
	}
	found = x.findValue(s, pt, name)
	if !found {
		x.rw.clean.add(s)
	}
	return found
}

// findValue is scanValue without remembering a clean s: for a text that
// rarely comes again, such as a URL's path.
func (x *exchange) findValue(s string, pt part, name string) (found bool) {
	sc := x.rw.Scanner
	if sc == nil {
		return false
	}
	fs := sc.ScanString(s)
	for _, f := range fs {
		x.found = append(x.found, secretAt{f.RuleID, pt.where(name)})
		x.learn(f.RuleID, s[f.Start:f.End])
	}
	return len(fs) > 0
}

// knownFound adds to what was found the known values ms (matches in a
// part of the request to host, at where), but a brokered credential's on
// its own host; it reports whether it added any.
func (x *exchange) knownFound(ms []secrets.KnownMatch, where, host string) (found bool) {
	for _, m := range ms {
		if m.Credential != "" && x.rw.Credentials.Matches(m.Credential, host) {
			continue
		}
		x.found = append(x.found, secretAt{m.RuleID, where})
		found = true
	}
	return found
}

// scanPart looks for secrets in s, which is part pt (named name) of the
// request to host; found says whether there was any. In a credential
// header's value (cred says whether s is one), only a brokered
// credential's value counts. cred is asked only when it matters: a value
// found clean before is clean in any header.
func (x *exchange) scanPart(s string, pt part, name, host string, cred func(string) bool) (found bool) {
	rw := x.rw
	isCred, asked := false, false
	if rw.Scanner != nil && !rw.clean.has(s) {
		isCred, asked = cred != nil && cred(name), true
		if !isCred {
			found = x.scanValue(s, pt, name)
		}
	}
	if k := rw.known(); k != nil {
		ms := k.Find(s)
		if len(ms) > 0 && !asked {
			isCred = cred != nil && cred(name)
		}
		for _, m := range ms {
			if isCred && m.Credential == "" || m.Credential != "" && rw.Credentials.Matches(m.Credential, host) {
				continue // a credential header's own value; a brokered credential on its host
			}
			x.found = append(x.found, secretAt{m.RuleID, pt.where(name)})
			found = true
		}
	}
	return found
}

// learn adds a secret found in the request to the session's known values.
func (x *exchange) learn(rule, value string) {
	if k := x.rw.known(); k != nil {
		k.Add(rule, value)
	}
}

// scanHead looks for secrets in r's header and query (see above), and
// redacts in the event the header values and parameters that hold them.
func (x *exchange) scanHead(r *http.Request, api rewrite.API, isLLM bool) {
	rw := x.rw
	if rw.Scanner == nil && rw.known() == nil {
		return
	}
	host := r.Host
	var names, values []string // headers to redact in the event: whole, or their values
	for k, vs := range r.Header {
		if x.scanPart(k, partHeaderName, "", host, nil) {
			names = append(names, k)
			continue
		}
		for _, v := range vs {
			if x.scanPart(v, partHeader, k, host, isCredentialHeader) {
				values = append(values, k)
				break
			}
		}
	}
	if len(names) > 0 || len(values) > 0 {
		x.redactEventHeader(names, values)
	}
	x.pathSecret = len(r.URL.Path) > 1 && x.scanPath(r.URL, host)
	var flags []uint8
	if q := r.URL.RawQuery; q != "" {
		flags = x.scanQuery(q, host, isLLM && api.Provider == rewrite.Gemini)
	}
	if x.pathSecret || flags != nil {
		u := x.url
		if x.pathSecret {
			u.Path, u.RawPath = redactedPath, redactedPath
		}
		x.http.URL = redactURL(&u, flags)
	}
}

// redactedPath is what events show of a path that holds a secret.
const redactedPath = "/" + Redacted

// eventPath is r's path as events show it.
func (x *exchange) eventPath(r *http.Request) string {
	if x.pathSecret {
		return redactedPath
	}
	return r.URL.Path
}

// scanPath looks for secrets in a URL's path: decoded, and as sent for
// known values (whose search decodes it), as a query's values are. Paths
// rarely come twice: a clean one is not remembered.
func (x *exchange) scanPath(u *url.URL, host string) bool {
	found := x.findValue(u.Path, partPath, "")
	if k := x.rw.known(); k != nil {
		ms := k.Find(u.Path)
		if raw := u.EscapedPath(); raw != u.Path {
			ms = append(ms, k.Find(raw)...)
		}
		found = x.knownFound(ms, partPath.where(""), host) || found
	}
	return found
}

// scanQuery looks for secrets in the parameters of a raw query (split on
// '&' and ';', as RedactURL splits it), and returns for each one whether
// its name (queryName) or value (queryValue) holds one, or nil when none
// does.
func (x *exchange) scanQuery(q, host string, gemini bool) []uint8 {
	var flags []uint8
	for i := 0; q != ""; i++ {
		seg := q
		if sep := strings.IndexAny(q, "&;"); sep >= 0 {
			seg, q = q[:sep], q[sep+1:]
		} else {
			q = ""
		}
		rawKey, rawVal, _ := strings.Cut(seg, "=")
		key := queryUnescape(rawKey)
		if gemini && key == "key" || signedURLKeyID(key, rawVal) {
			continue
		}
		var f uint8
		if x.scanPart(key, partQueryName, "", host, nil) {
			f |= queryName
		}
		if rawVal != "" {
			name := key
			if f != 0 {
				name = "" // not to be shown: it holds a secret too
			}
			if x.scanQueryValue(rawVal, name, host) {
				f |= queryValue
			}
		}
		if f != 0 {
			for len(flags) < i {
				flags = append(flags, 0)
			}
			flags = append(flags, f)
		}
	}
	return flags
}

// scanQueryValue scans a parameter's value decoded (for the scanner) and
// as sent (for known values, whose search decodes it).
func (x *exchange) scanQueryValue(raw, key, host string) bool {
	pt := partQuery
	if key == "" {
		pt = partQueryName // the name holds a secret: not to be shown
	}
	v := queryUnescape(raw)
	found := false
	if !x.rw.clean.has(v) {
		found = x.scanValue(v, pt, key)
	}
	if k := x.rw.known(); k != nil {
		// As sent (a '+' of base64 is still one), and as the server reads
		// it (what it decodes to may be percent-encoded again).
		ms := k.Find(raw)
		if v != raw {
			ms = append(ms, k.Find(v)...)
		}
		if len(ms) > 0 {
			found = x.knownFound(ms, queryWhere(pt, key), host) || found
		}
	}
	return found
}

func queryWhere(pt part, key string) string {
	if pt == partQueryName {
		return "a query parameter whose name holds a secret too"
	}
	return pt.where(key)
}

// queryUnescape decodes a query's name or value as a server would ('+'
// is a space); one that does not decode is taken as it is.
func queryUnescape(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	if d, err := url.QueryUnescape(s); err == nil {
		return d
	}
	return s
}

// signedURLKeyID reports whether a query parameter is the access key id
// of an AWS signed URL, in the one form AWS writes it, which has room for
// nothing else: X-Amz-Credential=AKIA…/20240101/us-east-1/s3/aws4_request
// (SigV4) or AWSAccessKeyId=AKIA… (SigV2). gitleaks takes the key id for
// a secret; it is not one by itself, and a refused GitHub release download
// (which redirects to such a URL) would be a false alarm.
func signedURLKeyID(key, rawVal string) bool {
	switch {
	case strings.EqualFold(key, "X-Amz-Credential"):
		v := queryUnescape(rawVal)
		id, scope, ok := strings.Cut(v, "/")
		if !ok || !awsKeyID(id) {
			return false
		}
		parts := strings.Split(scope, "/")
		return len(parts) == 4 && len(parts[0]) == 8 && isDigits(parts[0]) && lowerToken(parts[1]) && lowerToken(parts[2]) &&
			parts[3] == "aws4_request"
	case strings.EqualFold(key, "AWSAccessKeyId"):
		return awsKeyID(rawVal)
	}
	return false
}

func awsKeyID(s string) bool {
	if len(s) != 20 || !(strings.HasPrefix(s, "AKIA") || strings.HasPrefix(s, "ASIA")) {
		return false
	}
	for i := 4; i < len(s); i++ {
		if c := s[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func lowerToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// redactEventHeader gives the event a header of its own in which the
// values of the headers named in values are Redacted, and the headers
// named in names (whose name holds a secret) are replaced by one named
// Redacted.
func (x *exchange) redactEventHeader(names, values []string) {
	h := make(http.Header, len(x.http.Header))
	for k, vs := range x.http.Header {
		h[k] = vs
	}
	for _, k := range values {
		if _, ok := h[k]; ok {
			h[k] = []string{Redacted}
		}
	}
	for _, k := range names {
		if _, ok := h[k]; ok {
			delete(h, k)
			h[Redacted] = append(h[Redacted], Redacted)
		}
	}
	x.http.Header = h
	x.sharedHeader = false // the request's header is its own now
}

// scanBody looks for secrets in a request body as sent (decoded), whole.
func (x *exchange) scanBody(b []byte, host string) {
	x.found = x.rw.findIn(b, partBody, host, x.found)
}

// findIn appends to found the secrets in b, part pt of what goes to host
// (a request body, a WebSocket message), whole: those the scanner finds,
// which the session learns, and known values (a brokered credential's on
// a host it is not bound to).
func (rw *Rewrites) findIn(b []byte, pt part, host string, found []secretAt) []secretAt {
	if sc := rw.Scanner; sc != nil {
		for _, f := range sc.Scan(b) {
			found = append(found, secretAt{f.RuleID, pt.where("")})
			if k := rw.known(); k != nil {
				k.Add(f.RuleID, string(b[f.Start:f.End]))
			}
		}
	}
	if k := rw.known(); k != nil {
		for _, m := range k.FindBytes(b) {
			if m.Credential != "" && rw.Credentials.Matches(m.Credential, host) {
				continue
			}
			found = append(found, secretAt{m.RuleID, pt.where("")})
		}
	}
	return found
}

// secretIDs lists the rule ids of what was found, each once, sorted.
func (x *exchange) secretIDs() []string { return ruleIDs(x.found) }

// ruleIDs lists the rule ids of found, each once, sorted.
func ruleIDs(found []secretAt) []string {
	if len(found) == 0 {
		return nil
	}
	ids := make([]string, 0, len(found))
	for _, f := range found {
		ids = append(ids, f.rule)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// maxReasonPlaces bounds the places a reason lists.
const maxReasonPlaces = 6

// withPlaces adds to a refusal's reason where the request's secrets are:
// "…: github-pat in request header X-Custom, aws-access-token in query
// parameter key". It never names a value.
func withPlaces(reason string, found []secretAt) string {
	if len(found) == 0 {
		return reason
	}
	seen := map[secretAt]bool{}
	var places []string
	for _, f := range found {
		if seen[f] {
			continue
		}
		seen[f] = true
		places = append(places, f.rule+" in "+f.where)
	}
	more := ""
	if len(places) > maxReasonPlaces {
		more = " and " + strconv.Itoa(len(places)-maxReasonPlaces) + " more"
		places = places[:maxReasonPlaces]
	}
	if reason == "" {
		reason = "the request carries a secret"
	}
	return reason + " (" + strings.Join(places, ", ") + more + ")"
}

// Rules the secret scan applies by itself.
const ruleUndecodable = "undecodable_body"

// refuseUndecodable refuses a request whose body's Content-Encoding could
// not be undone to be checked: 415 for a coding not supported (saying
// which are), 413 for one that inflates past the limit, else 400.
func (p *Proxy) refuseUndecodable(w http.ResponseWriter, x *exchange, err error) {
	status, reason := http.StatusBadRequest, "request body: could not be decoded"
	var ee *rewrite.EncodingError
	if errors.As(err, &ee) {
		reason = "request body: " + ee.Reason()
		switch {
		case errors.Is(err, rewrite.ErrUnsupportedEncoding):
			status = http.StatusUnsupportedMediaType
			w.Header().Set("Accept-Encoding", "gzip, deflate, br, zstd")
		case errors.Is(err, rewrite.ErrTooLarge):
			status = http.StatusRequestEntityTooLarge
		}
	}
	x.http.Secrets = x.secretIDs()
	p.refuse(w, x.ev, status, proxyVerdict(ruleUndecodable, reason))
	if x.llm != nil {
		x.llm.ev.Verdict = x.ev.Verdict
		p.finishLLM(x, status)
	}
}

// contentEncoding is a request's Content-Encoding, all its fields.
func contentEncoding(h http.Header) string {
	vs := h["Content-Encoding"]
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ",")
}

// bodyScan is a request body too large to hold, checked as it goes
// upstream: a StreamScanner whose windows are searched as a whole body is
// (scanBody), whose new findings are decided again (the http event with
// them in http.secrets), and which stops the request when the verdict
// does not allow them, or when the body cannot be decoded: the upstream
// request is cancelled before its end is sent (the connection closed, or
// the HTTP/2 stream reset), and the exchange answers 403 with the verdict
// (if no response has begun). It reads on whatever goroutine sends the
// body; what the handler reads of it is behind mu.
type bodyScan struct {
	p    *Proxy
	x    *exchange // read only for rw and found's places; the event is ev
	ss   *rewrite.StreamScanner
	ctx  context.Context
	host string
	ev   event.Event // the http event as decided, with http.secrets growing
	http event.HTTP

	mu      sync.Mutex
	cancel  context.CancelFunc // of the upstream request
	ids     []string           // rule ids found in the body so far
	found   []secretAt
	verdict *event.Verdict // why the body was stopped; nil while it goes on
	done    bool           // the scanner ended (EOF or failure)
}

// errStopped is what a stopped body returns to the transport.
var errStopped = errors.New("proxy: the request body was stopped: it carries a secret")

// newBodyScan checks the body made of raw (read already) and rest, as it
// streams.
func (p *Proxy) newBodyScan(r *http.Request, x *exchange, raw []byte, rest io.Reader) (*bodyScan, error) {
	enc, err := rewrite.ParseEncoding(contentEncoding(r.Header))
	if err != nil {
		return nil, err
	}
	b := &bodyScan{p: p, x: x, ctx: r.Context(), host: r.Host}
	b.ss, err = rewrite.NewStreamScanner(raw, rest, enc, b.check, rewrite.StreamOptions{Overlap: secrets.StreamOverlap})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// start is called on the handler's goroutine before the body is sent: it
// takes the event as decided, and the cancel of the upstream request.
func (b *bodyScan) start(cancel context.CancelFunc) {
	b.ev = *b.x.ev
	b.http = *b.x.http
	b.http.Secrets = slices.Clone(b.http.Secrets)
	b.ev.HTTP = &b.http
	b.mu.Lock()
	b.cancel = cancel
	b.mu.Unlock()
}

func (b *bodyScan) Read(p []byte) (int, error) {
	n, err := b.ss.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		b.ss.Close()
	}
	if err == io.EOF {
		return n, err
	}
	var ee *rewrite.EncodingError
	if b.verdict == nil && errors.As(err, &ee) {
		v := proxyVerdict(ruleUndecodable, "request body: "+ee.Reason())
		b.verdict = &v
	}
	if b.cancel != nil {
		b.cancel() // the upstream request ends here, short of its end
	}
	return n, err
}

func (b *bodyScan) Close() error { return nil }

// check searches one window of the body's text; a finding not seen before
// has the event decided again, and a verdict that does not allow it stops
// the body.
func (b *bodyScan) check(window []byte, final bool) error {
	// The window's findings, on a scratch exchange: its places are the body.
	sx := exchange{rw: b.x.rw}
	sx.scanBody(window, b.host)
	var leaked []string
	if br := b.x.rw.Credentials; br != nil {
		for _, name := range br.FindPlaceholders(window) {
			if !br.Matches(name, b.host) {
				leaked = append(leaked, name)
			}
		}
	}
	if len(sx.found) == 0 && len(leaked) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(leaked) > 0 {
		v := proxyVerdict(ruleCredentialLeak, "the request body carries the placeholder of credential "+
			strings.Join(slices.Compact(leaked), ", ")+" to a host it is not bound to")
		b.verdict = &v
		return errStopped
	}
	grew := false
	for _, f := range sx.found {
		if !slices.Contains(b.ids, f.rule) {
			b.ids = append(b.ids, f.rule)
			b.found = append(b.found, f)
			grew = true
		}
	}
	if !grew {
		return nil
	}
	slices.Sort(b.ids)
	b.http.Secrets = mergeIDs(b.http.Secrets, b.ids)
	v := b.p.decide(b.ctx, &b.ev)
	switch v.Action {
	case event.Allow:
		return nil
	case event.Rewrite:
		v = proxyVerdict(ruleRedactFailed, "the request body is too large to redact (over "+
			strconv.Itoa(maxScanBody>>20)+" MiB) and carries secrets")
	}
	v.Reason = withPlaces(v.Reason, b.found)
	b.verdict = &v
	return errStopped
}

// mergeIDs is the sorted union of two sorted lists of rule ids.
func mergeIDs(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// outcome is what the body scan found and decided so far: the rule ids
// found in the body, and the verdict that stopped it (nil if none did).
func (b *bodyScan) outcome() ([]string, *event.Verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ids), b.verdict
}

// settleStream brings what the body scan found and decided into the
// exchange's event, once the round trip is over.
func (x *exchange) settleStream() {
	ids, v := x.stream.outcome()
	if len(ids) > 0 {
		x.http.Secrets = mergeIDs(x.http.Secrets, ids)
	}
	if v != nil {
		x.ev.Verdict = *v
		if x.http.Error == "" {
			x.http.Error = "the request body was stopped before its end"
		}
	}
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
