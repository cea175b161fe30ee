package policy

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/chaperone-dev/chaperone/event"
)

// A field is one variable of the CEL environment. Dotted names
// ("process.pid") are declared as qualified identifiers, so the checker
// refuses a misspelt field at load time and knows every field's type.
type field struct {
	name  string
	typ   *cel.Type
	kinds string // which kinds set it, for the documentation test
	get   func(e *event.Event) ref.Val
}

const (
	emptyString = types.String("")
	zeroInt     = types.Int(0)
)

func str(s string) ref.Val {
	if s == "" {
		return emptyString
	}
	return types.String(s)
}

func strList(l []string) ref.Val {
	return types.NewStringList(types.DefaultTypeAdapter, l)
}

func strMap(m map[string]string) ref.Val {
	return types.NewStringStringMap(types.DefaultTypeAdapter, m)
}

// fields returns the variables rules may use: the fields of the event's
// flat projection that conditions read as they are (event.Field.CEL), and
// those derived from them here. Absent payloads give zero values (empty
// string, 0, empty list or map) so a rule never fails on an event of
// another kind.
func fields() []field {
	emptyMap := strMap(nil)
	fs := projected()
	return append(fs, []field{
		{"session.id", cel.StringType, "all", func(e *event.Event) ref.Val { return str(sessionID(e)) }},
		{"agent", cel.StringType, "all", func(e *event.Event) ref.Val { return str(agentOf(e)) }},
		{"dst.ip", cel.StringType, "connect", func(e *event.Event) ref.Val {
			if e.Connect == nil || !e.Connect.Dst.IsValid() {
				return emptyString
			}
			return str(e.Connect.Dst.Addr().Unmap().String())
		}},
		{"dst.port", cel.IntType, "connect", func(e *event.Event) ref.Val { return types.Int(dstPort(e)) }},
		{"host", cel.StringType, "connect, tls, http, dns, ws", func(e *event.Event) ref.Val { return str(hostOf(e)) }},
		{"tls.sni", cel.StringType, "tls", func(e *event.Event) ref.Val {
			if e.TLS == nil {
				return emptyString
			}
			return str(normHost(e.TLS.ServerName))
		}},
		{"http.path", cel.StringType, "http", httpStr(func(h *event.HTTP) string { p, _ := splitURL(h.URL); return p })},
		{"http.query", cel.MapType(cel.StringType, cel.StringType), "http", func(e *event.Event) ref.Val {
			if e.HTTP == nil {
				return emptyMap
			}
			_, q := splitURL(e.HTTP.URL)
			if q == "" {
				return emptyMap
			}
			return strMap(queryMap(q))
		}},
		{"http.headers", cel.MapType(cel.StringType, cel.StringType), "http", func(e *event.Event) ref.Val {
			if e.HTTP == nil || len(e.HTTP.Header) == 0 {
				return emptyMap
			}
			return strMap(headerMap(e.HTTP.Header))
		}},
		{"http.upgrade", cel.StringType, "http", httpStr(func(h *event.HTTP) string { return strings.ToLower(h.Upgrade) })},
		{"dns.name", cel.StringType, "dns", func(e *event.Event) ref.Val {
			if e.DNS == nil {
				return emptyString
			}
			return str(normHost(e.DNS.Name))
		}},
		{"dns.qtype", cel.StringType, "dns", func(e *event.Event) ref.Val {
			if e.DNS == nil {
				return emptyString
			}
			return str(strings.ToUpper(e.DNS.Type))
		}},
		{"exec.program", cel.StringType, "exec", func(e *event.Event) ref.Val {
			if e.Exec == nil {
				return emptyString
			}
			if e.Exec.Program == "" {
				return str(e.Exec.Path)
			}
			return str(e.Exec.Program)
		}},
	}...)
}

// projected returns the variables of the event's fields that conditions
// read as they are.
func projected() []field {
	emptyList := strList(nil)
	var out []field
	for _, f := range event.Fields() {
		if f.CEL == "" {
			continue
		}
		kinds := "all"
		if f.Kinds != nil {
			ks := make([]string, len(f.Kinds))
			for i, k := range f.Kinds {
				ks[i] = string(k)
			}
			kinds = strings.Join(ks, ", ")
		}
		var typ *cel.Type
		var zero ref.Val
		var conv func(event.Value) ref.Val
		switch f.Type {
		case event.TypeString:
			typ, zero, conv = cel.StringType, emptyString, func(v event.Value) ref.Val { return str(v.Str) }
		case event.TypeInt:
			typ, zero, conv = cel.IntType, zeroInt, func(v event.Value) ref.Val { return types.Int(v.Int) }
		case event.TypeBool:
			typ, zero, conv = cel.BoolType, types.False, func(v event.Value) ref.Val { return types.Bool(v.Bool) }
		case event.TypeStrings:
			typ, zero, conv = cel.ListType(cel.StringType), emptyList, func(v event.Value) ref.Val {
				if len(v.Strs) == 0 {
					return emptyList
				}
				return strList(v.Strs)
			}
		default:
			// A field of another type is a condition variable only as
			// derived by fields.
			panic(fmt.Sprintf("policy: field %s of type %d cannot be a condition variable as it is", f.Name, f.Type))
		}
		out = append(out, field{name: f.CEL, typ: typ, kinds: kinds, get: func(e *event.Event) ref.Val {
			v, ok := f.Get(e)
			if !ok {
				return zero
			}
			return conv(v)
		}})
	}
	return out
}

func httpStr(get func(*event.HTTP) string) func(*event.Event) ref.Val {
	return func(e *event.Event) ref.Val {
		if e.HTTP == nil {
			return emptyString
		}
		return str(get(e.HTTP))
	}
}

func sessionID(e *event.Event) string {
	if e.Session == "" && e.SessionInfo != nil {
		return e.SessionInfo.ID
	}
	return e.Session
}

// agentOf is the session's agent when the event carries it (session
// events), else the name of the session's root executable.
func agentOf(e *event.Event) string {
	if e.SessionInfo != nil && e.SessionInfo.Agent != "" {
		return e.SessionInfo.Agent
	}
	if e.Process != nil && len(e.Process.LineageNames) > 0 {
		return e.Process.LineageNames[0]
	}
	return ""
}

func dstPort(e *event.Event) int {
	if e.Connect == nil {
		return 0
	}
	if e.Connect.Port != 0 {
		return int(e.Connect.Port)
	}
	return int(e.Connect.Dst.Port())
}

// hostOf is the name the event is about: the connection's host, the SNI,
// the HTTP host without its port, or the DNS name; lower case, without a
// trailing dot.
func hostOf(e *event.Event) string {
	switch {
	case e.Connect != nil:
		return normHost(e.Connect.Host)
	case e.TLS != nil:
		return normHost(e.TLS.ServerName)
	case e.HTTP != nil:
		h := e.HTTP.Host
		if h == "" {
			if u, err := url.Parse(e.HTTP.URL); err == nil {
				h = u.Host
			}
		}
		return normHost(hostOnly(h))
	case e.DNS != nil:
		return normHost(e.DNS.Name)
	case e.WS != nil:
		return normHost(hostOnly(e.WS.Host))
	}
	return ""
}

func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// splitURL returns the path (decoded when possible) and raw query of an
// absolute or origin-form URL.
func splitURL(raw string) (p, query string) {
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw, query = raw[:i], raw[i+1:]
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			raw = rest[j:]
		} else {
			raw = "/"
		}
	}
	if u, err := url.PathUnescape(raw); err == nil {
		raw = u
	}
	return raw, query
}

func queryMap(q string) map[string]string {
	vals, _ := url.ParseQuery(q) // keeps what parsed
	m := make(map[string]string, len(vals))
	for k, v := range vals {
		m[k] = strings.Join(v, ", ")
	}
	return m
}

func headerMap(h map[string][]string) map[string]string {
	m := make(map[string]string, len(h))
	// Names that differ only in case are merged in sorted order, so that
	// the value does not depend on map iteration.
	for _, k := range slices.Sorted(maps.Keys(h)) {
		v := strings.Join(h[k], ", ")
		lk := strings.ToLower(k)
		if old, ok := m[lk]; ok {
			if v != "" {
				m[lk] = old + ", " + v
			}
			continue
		}
		m[lk] = v
	}
	return m
}

// schema is the CEL environment and the variables it declares.
type schema struct {
	env    *cel.Env
	fields []field
	// buckets finds a field by name faster than a map: resolving names is
	// most of the cost of evaluating simple conditions.
	buckets [256][]uint8
}

func nameHash(s string) uint8 {
	if s == "" {
		return 0
	}
	return uint8(len(s)*31 + int(s[0])*7 + int(s[len(s)/2])*5 + int(s[len(s)-1]))
}

// lookup returns the index of the field named name.
func (s *schema) lookup(name string) (int, bool) {
	for _, i := range s.buckets[nameHash(name)] {
		if s.fields[i].name == name {
			return int(i), true
		}
	}
	return 0, false
}

func newSchema() (*schema, error) {
	fs := fields()
	s := &schema{fields: fs}
	opts := []cel.EnvOption{
		ext.Strings(),
		cel.Function("glob",
			cel.Overload("glob_string_string", []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(globBinding))),
	}
	for i, f := range fs {
		h := nameHash(f.name)
		s.buckets[h] = append(s.buckets[h], uint8(i))
		opts = append(opts, cel.Variable(f.name, f.typ))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("policy: cel environment: %w", err)
	}
	s.env = env
	return s, nil
}

// globBinding implements glob(pattern, s): path.Match, where * and ? do
// not cross a "/".
func globBinding(pattern, s ref.Val) ref.Val {
	p, ok1 := pattern.(types.String)
	v, ok2 := s.(types.String)
	if !ok1 || !ok2 {
		return types.NoSuchOverloadErr()
	}
	m, err := path.Match(string(p), string(v))
	if err != nil {
		return types.NewErr("glob: bad pattern %s", strconv.Quote(string(p)))
	}
	return types.Bool(m)
}

// compiled is a rule's condition, type-checked and planned, and its
// guards.
type compiled struct {
	prog   cel.Program
	guards []guard
}

// celIssue is one problem of a condition, at a line and column of the
// condition's text (both from 1).
type celIssue struct {
	line, col int
	msg       string
}

// compile checks a condition and plans its program. It returns the issues
// the checker found, or nil and the program with its guards.
func (s *schema) compile(src string) (compiled, []celIssue) {
	ast, iss := s.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var out []celIssue
		for _, e := range iss.Errors() {
			out = append(out, celIssue{line: e.Location.Line(), col: e.Location.Column() + 1, msg: e.Message})
		}
		if len(out) == 0 {
			out = append(out, celIssue{line: 1, col: 1, msg: iss.Err().Error()})
		}
		return compiled{}, out
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return compiled{}, []celIssue{{line: 1, col: 1, msg: "condition is of type " + cel.FormatCELType(t) + ", want bool"}}
	}
	prg, err := s.env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return compiled{}, []celIssue{{line: 1, col: 1, msg: err.Error()}}
	}
	return compiled{prog: prg, guards: s.guardsOf(ast.NativeRep())}, nil
}

// activation resolves the variables of one event, converting each at most
// once. It is used by one goroutine at a time.
type activation struct {
	s    *schema
	ev   *event.Event
	vals []ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

func (a *activation) ResolveName(name string) (any, bool) {
	i, ok := a.s.lookup(name)
	if !ok {
		return nil, false
	}
	return a.field(i), true
}

// field returns the value of field i for the event.
func (a *activation) field(i int) ref.Val {
	if v := a.vals[i]; v != nil {
		return v
	}
	v := a.s.fields[i].get(a.ev)
	a.vals[i] = v
	return v
}

// passes reports whether the event passes every guard.
func (a *activation) passes(guards []guard) bool {
	for i := range guards {
		if !guards[i].passes(a.field(guards[i].field)) {
			return false
		}
	}
	return true
}

func (a *activation) Parent() interpreter.Activation { return nil }

func (a *activation) reset(e *event.Event) {
	a.ev = e
	clear(a.vals)
}
