package inject

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Identity is what the identity headers say about a request: opaque ids and
// names the operating system gave, nothing the agent wrote.
type Identity struct {
	Session string
	Agent   string
	// User is the agent's user name, when Chaperone knows it (a daemon's
	// sessions); empty sets no user header.
	User    string
	Lineage []string // program names from the session's root down to the requesting process
	TraceID [16]byte
	SpanID  [8]byte
}

const (
	maxValueLen    = 256 // bound on any one header value we build from a name
	maxPortkeyLen  = 128 // Portkey rejects metadata values longer than this
	maxLineageName = 64
	unknownValue   = "unknown"
)

// preset describes one gateway's identity headers.
type preset struct {
	names    []string // canonical names it may set; all are removed first
	also     []string // canonical names it removes without setting
	prefixes []string // canonical name prefixes it removes
	build    func(h http.Header, v identityValues) error
}

// identityValues are an Identity's fields, sanitised once.
type identityValues struct {
	id                   Identity
	session, agent, user string // user: "" when unknown
}

// lookupPreset is a switch rather than a table so that the package keeps no
// mutable globals.
func lookupPreset(name string) (preset, bool) {
	switch strings.ToLower(name) {
	case "chaperone":
		return preset{
			names: []string{"X-Chaperone-Session", "X-Chaperone-Agent", "X-Chaperone-User", "X-Chaperone-Lineage"},
			// The whole namespace is ours: an agent-set X-Chaperone-Anything
			// could be mistaken for Chaperone's word downstream.
			prefixes: []string{"X-Chaperone-"},
			build: func(h http.Header, v identityValues) error {
				h.Set("X-Chaperone-Session", v.session)
				h.Set("X-Chaperone-Agent", v.agent)
				if v.user != "" {
					h.Set("X-Chaperone-User", v.user)
				}
				if l := lineage(v.id.Lineage, ">", maxValueLen); l != "" {
					h.Set("X-Chaperone-Lineage", l)
				}
				return nil
			},
		}, true
	case "litellm":
		return preset{
			names: []string{"X-Litellm-Session-Id", "X-Litellm-Tags"},
			build: func(h http.Header, v identityValues) error {
				h.Set("X-Litellm-Session-Id", v.session)
				// Tags are a comma list: a comma in the agent's name would
				// split it into tags of its own.
				tags := "agent:" + strings.ReplaceAll(v.agent, ",", "_")
				if v.user != "" {
					tags += ",user:" + strings.ReplaceAll(v.user, ",", "_")
				}
				h.Set("X-Litellm-Tags", tags+",chaperone")
				return nil
			},
		}, true
	case "portkey":
		return preset{
			names: []string{"X-Portkey-Trace-Id", "X-Portkey-Metadata"},
			build: func(h http.Header, v identityValues) error {
				session, agent := strings.TrimSpace(clip(v.session, maxPortkeyLen)), strings.TrimSpace(clip(v.agent, maxPortkeyLen))
				// Portkey takes string values up to 128 characters; _user is
				// its key for the end user.
				m, err := json.Marshal(struct {
					User    string `json:"_user"`
					Session string `json:"session"`
					Agent   string `json:"agent"`
				}{agent, session, agent})
				if err != nil {
					return err
				}
				h.Set("X-Portkey-Trace-Id", session)
				h.Set("X-Portkey-Metadata", string(m))
				return nil
			},
		}, true
	case "helicone":
		return preset{
			names: []string{"Helicone-Session-Id", "Helicone-Session-Name", "Helicone-Session-Path",
				"Helicone-User-Id", "Helicone-Property-Agent"},
			build: func(h http.Header, v identityValues) error {
				h.Set("Helicone-Session-Id", v.session)
				// Helicone groups a session only when Id, Name and Path are
				// all present; the lineage is the path.
				h.Set("Helicone-Session-Name", "chaperone")
				path := "/" + lineage(v.id.Lineage, "/", maxValueLen-1)
				if path == "/" {
					path += token(v.agent)
				}
				h.Set("Helicone-Session-Path", path)
				h.Set("Helicone-User-Id", v.agent)
				h.Set("Helicone-Property-Agent", v.agent)
				return nil
			},
		}, true
	case "cloudflare":
		return preset{
			names: []string{"Cf-Aig-Metadata"},
			build: func(h http.Header, v identityValues) error {
				// AI Gateway keeps at most five flat entries.
				m, err := json.Marshal(struct {
					Session string `json:"session"`
					Agent   string `json:"agent"`
				}{v.session, v.agent})
				if err != nil {
					return err
				}
				h.Set("Cf-Aig-Metadata", string(m))
				return nil
			},
		}, true
	case "w3c":
		return preset{
			names: []string{"Traceparent", "Baggage"},
			// A tracestate belongs to the agent's traceparent, which is replaced.
			also: []string{"Tracestate"},
			build: func(h http.Header, v identityValues) error {
				if v.id.TraceID == [16]byte{} {
					return fmt.Errorf("w3c preset: zero trace id")
				}
				if v.id.SpanID == [8]byte{} {
					return fmt.Errorf("w3c preset: zero span id")
				}
				h.Set("Traceparent", "00-"+hex.EncodeToString(v.id.TraceID[:])+"-"+hex.EncodeToString(v.id.SpanID[:])+"-01")
				h.Set("Baggage", "chaperone.session="+baggageEscape(v.session)+",chaperone.agent="+baggageEscape(v.agent))
				return nil
			},
		}, true
	}
	return preset{}, false
}

// IdentityHeaders returns the headers of the given presets ("chaperone",
// "litellm", "portkey", "helicone", "cloudflare", "w3c") for id. Every value
// is printable ASCII of bounded length; an empty Session or Agent reads
// "unknown". Errors: an unknown preset, or "w3c" with a zero trace or span id.
func IdentityHeaders(presets []string, id Identity) (http.Header, error) {
	v := identityValues{
		id:      id,
		session: sanitize(id.Session, maxValueLen),
		agent:   sanitize(id.Agent, maxValueLen),
	}
	if id.User != "" {
		v.user = sanitize(id.User, maxValueLen)
	}
	h := http.Header{}
	for _, name := range presets {
		p, ok := lookupPreset(name)
		if !ok {
			return nil, fmt.Errorf("inject: unknown identity preset %q", name)
		}
		if err := p.build(h, v); err != nil {
			return nil, fmt.Errorf("inject: %w", err)
		}
	}
	return h, nil
}

// ApplyIdentity removes every header of h that the presets own, whatever
// its case, then sets the presets' headers for id. It returns the canonical
// names it set, sorted. On error h is unchanged.
func ApplyIdentity(h http.Header, presets []string, id Identity) ([]string, error) {
	if h == nil {
		return nil, fmt.Errorf("inject: nil header")
	}
	set, err := IdentityHeaders(presets, id)
	if err != nil {
		return nil, err
	}
	owned := map[string]bool{}
	var prefixes []string
	for _, name := range presets {
		p, _ := lookupPreset(name)
		for _, n := range p.names {
			owned[strings.ToLower(n)] = true
		}
		for _, n := range p.also {
			owned[strings.ToLower(n)] = true
		}
		for _, pre := range p.prefixes {
			prefixes = append(prefixes, strings.ToLower(pre))
		}
	}
	for k := range h {
		lk := strings.ToLower(k)
		if owned[lk] || slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(lk, pre) }) {
			delete(h, k)
		}
	}
	names := make([]string, 0, len(set))
	for k, vs := range set {
		h[k] = vs
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

// sanitize keeps printable ASCII, turning anything else (CR, LF, other
// controls, non-ASCII runes, invalid UTF-8) into '_', trims spaces and clips
// to max bytes. Empty becomes "unknown".
func sanitize(s string, max int) string {
	var sb strings.Builder
	for _, r := range s {
		if sb.Len() >= max {
			break
		}
		if r >= 0x20 && r < 0x7f {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	out := strings.TrimSpace(sb.String())
	if out == "" {
		return unknownValue
	}
	return out
}

func clip(s string, max int) string {
	if len(s) > max {
		return s[:max]
	}
	return s
}

// token turns a program name into RFC 9110 token characters, without '/'
// (which tokens lack anyway) so that it can be a path segment.
func token(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s) && sb.Len() < maxLineageName; i++ {
		c := s[i]
		if isToken(string(c)) {
			sb.WriteByte(c)
		} else {
			sb.WriteByte('_')
		}
	}
	return sb.String()
}

// lineage joins the names as tokens with sep, at most max bytes. When too
// long it keeps the root and as many of the nearest programs as fit:
// "root>...>parent>self".
func lineage(names []string, sep string, max int) string {
	toks := make([]string, 0, len(names))
	for _, n := range names {
		if t := token(n); t != "" {
			toks = append(toks, t)
		}
	}
	all := strings.Join(toks, sep)
	if len(all) <= max {
		return all
	}
	const gap = "..."
	head := toks[0] + sep + gap
	n := len(head)
	first := len(toks)
	for first > 1 && n+len(sep)+len(toks[first-1]) <= max {
		first--
		n += len(sep) + len(toks[first])
	}
	if first == len(toks) {
		return clip(toks[len(toks)-1], max)
	}
	return head + sep + strings.Join(toks[first:], sep)
}

// baggageEscape percent-encodes every byte outside the W3C baggage-octet
// range, and '%' itself, so that the value decodes back unambiguously.
func baggageEscape(s string) string {
	const hexdig = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0x21 || c >= 0x23 && c <= 0x2b && c != '%' || c >= 0x2d && c <= 0x3a || c >= 0x3c && c <= 0x5b || c >= 0x5d && c <= 0x7e {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('%')
		sb.WriteByte(hexdig[c>>4])
		sb.WriteByte(hexdig[c&0xf])
	}
	return sb.String()
}
