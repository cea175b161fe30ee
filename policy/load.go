package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chaperone-dev/chaperone/event"
)

// MaxPolicySize is the largest policy file Parse reads.
const MaxPolicySize = 1 << 20

// LoadError is one problem of a policy: where it is and what is wrong.
// Parse and Load return every problem they find, joined with errors.Join.
type LoadError struct {
	Source string
	Line   int    // 0 when unknown
	Rule   string // the rule (or plugin) the problem is in, if any
	Msg    string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString("policy: ")
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Rule != "" {
		b.WriteString(e.Rule)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses and checks a policy file; source names it in messages. It
// returns either a complete policy or every problem found, each a
// *LoadError naming the line, the rule and the reason. Rule conditions are
// compiled and type-checked here, so a policy Parse accepts never fails to
// compile in NewEngine.
func Parse(source string, data []byte) (*Policy, error) {
	if source == "" {
		source = "<policy>"
	}
	if len(data) > MaxPolicySize {
		return nil, &LoadError{Source: source, Msg: fmt.Sprintf("file is larger than %d bytes", MaxPolicySize)}
	}
	s, err := newSchema()
	if err != nil {
		return nil, err
	}
	p := &parser{src: source}
	pol, pos := p.parse(data)
	if pol == nil {
		return nil, errors.Join(p.errs...)
	}
	_, errs := check(s, pol, pos)
	p.errs = append(p.errs, errs...)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	fillDefaults(pol)
	return pol, nil
}

// fillDefaults sets the documented defaults of the judge and plugins.
func fillDefaults(p *Policy) {
	if p.Judge.Configured() {
		if p.Judge.Timeout == 0 {
			p.Judge.Timeout = DefaultJudgeTimeout
		}
		if p.Judge.OnError == "" {
			p.Judge.OnError = ActionDeny
		}
		if p.Judge.URL == "" {
			p.Judge.URL = defaultJudgeURL(p.Judge.Provider)
		}
	}
	if p.Ask.Timeout == 0 {
		p.Ask.Timeout = DefaultAskTimeout
	}
	if p.Ask.Unattended == "" {
		p.Ask.Unattended = ActionDeny
	}
	if p.Ask.OnTimeout == "" {
		p.Ask.OnTimeout = ActionDeny
	}
	for i := range p.Plugins {
		if p.Plugins[i].Timeout == 0 {
			p.Plugins[i].Timeout = DefaultPluginTimeout
		}
		if p.Plugins[i].OnError == "" {
			p.Plugins[i].OnError = ActionDeny
		}
	}
}

func defaultJudgeURL(provider string) string {
	switch provider {
	case "openai":
		return "https://api.openai.com/v1"
	case "anthropic":
		return "https://api.anthropic.com"
	}
	return ""
}

// rulePos holds where a rule's parts are in the file, for messages.
type rulePos struct {
	action, on, when int
	// whenBlock is set when the condition is a block scalar, whose text
	// starts on the line after the key.
	whenBlock bool
}

// filePos holds the lines of the file's parts; nil for a policy built by
// hand, whose messages use Rule.Line.
type filePos struct {
	rules        []rulePos
	defaultLine  int
	judgeLine    int
	judgeOnError int
}

type parser struct {
	src  string
	errs []error
}

func (p *parser) errorf(line int, rule, format string, args ...any) {
	p.errs = append(p.errs, &LoadError{Source: p.src, Line: line, Rule: rule, Msg: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parse reads the YAML structure. It returns nil when the file is not a
// policy at all; otherwise the policy as far as it could be read, with the
// problems recorded.
func (p *parser) parse(data []byte) (*Policy, *filePos) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(0, "", "empty policy: a policy needs at least default:")
			return nil, nil
		}
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		p.errorf(line, "", "yaml: %s", msg)
		return nil, nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(extra.Line, "", "a policy file holds one YAML document")
		return nil, nil
	} else if !errors.Is(err, io.EOF) {
		p.errorf(0, "", "yaml: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(root.Line, "", "empty policy: a policy needs at least default:")
			return nil, nil
		}
		root = root.Content[0]
	}
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "a policy is a mapping with intent, rules, default, judge and plugins")
		return nil, nil
	}

	pol := &Policy{Source: p.src}
	pos := &filePos{}
	sawDefault := false
	p.mapping(root, "", func(key string, kn, v *yaml.Node) {
		switch key {
		case "intent":
			pol.Intent, _ = p.scalar(v, "", "intent")
		case "default":
			sawDefault = true
			s, _ := p.scalar(v, "", "default")
			pol.Default = Action(s)
			pos.defaultLine = kn.Line
		case "rules":
			p.rules(v, pol, pos)
		case "judge":
			pos.judgeLine = kn.Line
			p.judge(v, &pol.Judge, pos)
		case "plugins":
			p.plugins(v, pol)
		case "ask":
			p.ask(v, &pol.Ask)
		case "secrets":
			p.secrets(v, &pol.Secrets)
		default:
			p.errorf(kn.Line, "", "unknown key %q (want intent, rules, default, judge, plugins, ask or secrets)", key)
		}
	})
	if !sawDefault {
		p.errorf(root.Line, "", "default: is required (allow, deny, ask or judge)")
	}
	return pol, pos
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// mapping calls f for each key of a mapping node in order, refusing
// duplicate and non-scalar keys.
func (p *parser) mapping(n *yaml.Node, rule string, f func(key string, kn, v *yaml.Node)) {
	n = deref(n)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := deref(n.Content[i]), n.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			p.errorf(kn.Line, rule, "a key must be a plain word")
			continue
		}
		if seen[kn.Value] {
			p.errorf(kn.Line, rule, "key %q appears twice", kn.Value)
			continue
		}
		seen[kn.Value] = true
		f(kn.Value, kn, deref(v))
	}
}

// scalar returns a scalar's text; null gives "".
func (p *parser) scalar(n *yaml.Node, rule, what string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		p.errorf(n.Line, rule, "%s must be a single value", what)
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

// kinds reads "on": one kind or a list of kinds. Validity is checked later.
func (p *parser) kinds(n *yaml.Node, rule string) []event.Kind {
	n = deref(n)
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" || n.Value == "" {
			return nil
		}
		return []event.Kind{event.Kind(n.Value)}
	case yaml.SequenceNode:
		out := make([]event.Kind, 0, len(n.Content))
		for _, c := range n.Content {
			if s, ok := p.scalar(c, rule, "each kind of on"); ok {
				out = append(out, event.Kind(s))
			}
		}
		return out
	}
	p.errorf(n.Line, rule, "on must be a kind or a list of kinds")
	return nil
}

func (p *parser) duration(n *yaml.Node, rule, what string) time.Duration {
	s, ok := p.scalar(n, rule, what)
	if !ok || s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errorf(n.Line, rule, "%s %q is not a positive duration such as 10s", what, s)
		return 0
	}
	return d
}

func (p *parser) rules(n *yaml.Node, pol *Policy, pos *filePos) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "", "rules must be a list")
		return
	}
	for i, item := range n.Content {
		item = deref(item)
		r := Rule{Line: item.Line}
		rp := rulePos{action: item.Line, on: item.Line, when: item.Line}
		if item.Kind != yaml.MappingNode {
			p.errorf(item.Line, "", "rule %d must be a mapping with name, on, when and action", i+1)
			continue
		}
		// The name first, so that every message about the rule carries it.
		for j := 0; j+1 < len(item.Content); j += 2 {
			if k := deref(item.Content[j]); k.Kind == yaml.ScalarNode && k.Value == "name" {
				r.Name, _ = p.scalar(item.Content[j+1], "", "name")
			}
		}
		label := ruleLabel(r.Name, i)
		var rewriteLine int
		p.mapping(item, label, func(key string, kn, v *yaml.Node) {
			switch key {
			case "name":
			case "on":
				rp.on = kn.Line
				r.On = p.kinds(v, label)
			case "when":
				rp.when = v.Line
				rp.whenBlock = v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0
				r.When, _ = p.scalar(v, label, "when")
			case "action":
				rp.action = kn.Line
				s, _ := p.scalar(v, label, "action")
				r.Action = Action(s)
			case "reason":
				r.Reason, _ = p.scalar(v, label, "reason")
			case "rewrite":
				rewriteLine = kn.Line
				if v.Kind != yaml.MappingNode {
					p.errorf(v.Line, label, "rewrite must be a mapping of parameters, e.g. redact_secrets: true")
					return
				}
				m := map[string]any{}
				if err := v.Decode(&m); err != nil {
					p.errorf(v.Line, label, "rewrite: %s", strings.TrimPrefix(err.Error(), "yaml: "))
					return
				}
				r.Rewrite = m
				if len(m) == 0 {
					r.Rewrite = nil
				}
				p.rewriteParams(v, label, m)
			default:
				p.errorf(kn.Line, label, "unknown key %q (want name, on, when, action, reason or rewrite)", key)
			}
		})
		if r.Rewrite != nil && r.Action != ActionRewrite && r.Action != "" {
			p.errorf(rewriteLine, label, "rewrite parameters given but action is %s, not rewrite", r.Action)
		}
		pol.Rules = append(pol.Rules, r)
		pos.rules = append(pos.rules, rp)
	}
}

func ruleLabel(name string, i int) string {
	if name == "" {
		return fmt.Sprintf("rule %d", i+1)
	}
	return fmt.Sprintf("rule %q", name)
}

func (p *parser) judge(n *yaml.Node, j *JudgeConfig, pos *filePos) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "judge", "judge must be a mapping with provider, url, model, api_key_env, timeout and on_error")
		return
	}
	p.mapping(n, "judge", func(key string, kn, v *yaml.Node) {
		switch key {
		case "provider":
			j.Provider, _ = p.scalar(v, "judge", key)
		case "url":
			j.URL, _ = p.scalar(v, "judge", key)
		case "model":
			j.Model, _ = p.scalar(v, "judge", key)
		case "api_key_env":
			j.APIKeyEnv, _ = p.scalar(v, "judge", key)
		case "timeout":
			j.Timeout = p.duration(v, "judge", key)
		case "on_error":
			pos.judgeOnError = kn.Line
			s, _ := p.scalar(v, "judge", key)
			j.OnError = Action(s)
		default:
			p.errorf(kn.Line, "judge", "unknown key %q (want provider, url, model, api_key_env, timeout or on_error)", key)
		}
	})
}

// rewriteParams checks the parameters of action rewrite: each is known
// and of its type.
func (p *parser) rewriteParams(n *yaml.Node, label string, m map[string]any) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, m[n.Content[i].Value]
		line := n.Content[i].Line
		switch k {
		case "redact_secrets":
			if _, ok := v.(bool); !ok {
				p.errorf(line, label, "rewrite: redact_secrets must be true or false")
			}
		case "on_signed":
			if s, _ := v.(string); s != string(ActionAllow) && s != string(ActionDeny) {
				p.errorf(line, label, "rewrite: on_signed must be allow or deny (what to do with a signed request that holds secrets)")
			}
		default:
			p.errorf(line, label, "rewrite: unknown parameter %q (want redact_secrets or on_signed)", k)
		}
	}
}

func (p *parser) ask(n *yaml.Node, a *AskConfig) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "ask", "ask must be a mapping with timeout, on_timeout and unattended")
		return
	}
	p.mapping(n, "ask", func(key string, kn, v *yaml.Node) {
		switch key {
		case "timeout":
			a.Timeout = p.duration(v, "ask", key)
		case "on_timeout":
			s, _ := p.scalar(v, "ask", key)
			switch Action(s) {
			case ActionAllow, ActionDeny:
				a.OnTimeout = Action(s)
			default:
				p.errorf(kn.Line, "ask", "on_timeout %q is not allow or deny", s)
			}
		case "unattended":
			s, _ := p.scalar(v, "ask", key)
			switch Action(s) {
			case ActionAllow, ActionDeny, AskWait:
				a.Unattended = Action(s)
			default:
				p.errorf(kn.Line, "ask", "unattended %q is not allow, deny or wait", s)
			}
		default:
			p.errorf(kn.Line, "ask", "unknown key %q (want timeout, on_timeout or unattended)", key)
		}
	})
}

func (p *parser) secrets(n *yaml.Node, sc *SecretsConfig) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "secrets", "secrets must be a mapping with allow_rules and allow_literals")
		return
	}
	p.mapping(n, "secrets", func(key string, kn, v *yaml.Node) {
		switch key {
		case "allow_rules":
			sc.AllowRules = p.stringList(v, "secrets", key)
		case "allow_literals":
			sc.AllowLiterals = p.stringList(v, "secrets", key)
			for _, l := range sc.AllowLiterals {
				if l == "" {
					p.errorf(v.Line, "secrets", "allow_literals holds an empty string, which would allow nothing")
				}
			}
		default:
			p.errorf(kn.Line, "secrets", "unknown key %q (want allow_rules or allow_literals)", key)
		}
	})
}

// stringList reads a list of strings (or one string).
func (p *parser) stringList(n *yaml.Node, rule, what string) []string {
	n = deref(n)
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil
		}
		s, _ := p.scalar(n, rule, what)
		return []string{s}
	case yaml.SequenceNode:
		out := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if s, ok := p.scalar(c, rule, "each of "+what); ok {
				out = append(out, s)
			}
		}
		return out
	}
	p.errorf(n.Line, rule, "%s must be a list of strings", what)
	return nil
}

func (p *parser) plugins(n *yaml.Node, pol *Policy) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "", "plugins must be a list")
		return
	}
	for i, item := range n.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			p.errorf(item.Line, "", "plugin %d must be a mapping with name, command, on, timeout and on_error", i+1)
			continue
		}
		pc := PluginConfig{Line: item.Line}
		for j := 0; j+1 < len(item.Content); j += 2 {
			if k := deref(item.Content[j]); k.Kind == yaml.ScalarNode && k.Value == "name" {
				pc.Name, _ = p.scalar(item.Content[j+1], "", "name")
			}
		}
		label := pluginLabel(pc.Name, i)
		p.mapping(item, label, func(key string, kn, v *yaml.Node) {
			switch key {
			case "name":
			case "command":
				switch v.Kind {
				case yaml.ScalarNode:
					pc.Command = strings.Fields(v.Value)
				case yaml.SequenceNode:
					for _, c := range v.Content {
						if s, ok := p.scalar(c, label, "each word of command"); ok {
							pc.Command = append(pc.Command, s)
						}
					}
				default:
					p.errorf(v.Line, label, "command must be a list of words or a string")
				}
			case "on":
				pc.On = p.kinds(v, label)
			case "timeout":
				pc.Timeout = p.duration(v, label, key)
			case "on_error":
				s, _ := p.scalar(v, label, key)
				pc.OnError = Action(s)
			default:
				p.errorf(kn.Line, label, "unknown key %q (want name, command, on, timeout or on_error)", key)
			}
		})
		pol.Plugins = append(pol.Plugins, pc)
	}
}

func pluginLabel(name string, i int) string {
	if name == "" {
		return fmt.Sprintf("plugin %d", i+1)
	}
	return fmt.Sprintf("plugin %q", name)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check validates a policy's meaning and compiles its conditions. pos
// gives precise lines for a parsed file and is nil for a policy built by
// hand. It returns one program per rule (nil for an empty condition).
func check(s *schema, pol *Policy, pos *filePos) ([]compiled, []error) {
	var errs []error
	fail := func(line int, rule, format string, args ...any) {
		errs = append(errs, &LoadError{Source: pol.Source, Line: line, Rule: rule, Msg: fmt.Sprintf(format, args...)})
	}
	defLine, jl, jol := 0, 0, 0
	if pos != nil {
		defLine, jl, jol = pos.defaultLine, pos.judgeLine, pos.judgeOnError
	}
	// An empty judge: section counts as present, so that it gets the
	// precise complaints about its missing provider and model.
	hasJudge := pol.Judge.Configured() || jl != 0
	switch pol.Default {
	case ActionAllow, ActionDeny, ActionAsk:
	case ActionJudge:
		if !hasJudge {
			fail(defLine, "", "default judge needs a judge: section")
		}
	case "":
		if pos == nil || pos.defaultLine != 0 {
			fail(defLine, "", "default must be allow, deny, ask or judge")
		}
	default:
		fail(defLine, "", "default %q is not allow, deny, ask or judge", pol.Default)
	}

	progs := make([]compiled, len(pol.Rules))
	names := map[string]int{}
	for i, r := range pol.Rules {
		rp := rulePos{action: r.Line, on: r.Line, when: r.Line}
		if pos != nil && i < len(pos.rules) {
			rp = pos.rules[i]
		}
		label := ruleLabel(r.Name, i)
		switch {
		case r.Name == "":
			fail(r.Line, label, "name is required")
		case names[r.Name] != 0:
			fail(r.Line, label, "duplicate rule name (first at line %d)", names[r.Name])
		default:
			names[r.Name] = max(r.Line, 1)
		}
		switch r.Action {
		case ActionAllow, ActionDeny, ActionAsk:
		case ActionRewrite:
			if len(r.Rewrite) == 0 {
				fail(rp.action, label, "action rewrite needs rewrite parameters, e.g. rewrite: {redact_secrets: true}")
			}
		case ActionJudge:
			if !hasJudge {
				fail(rp.action, label, "action judge needs a judge: section")
			}
		case "":
			fail(rp.action, label, "action is required (allow, deny, rewrite, ask or judge)")
		default:
			fail(rp.action, label, "unknown action %q (want allow, deny, rewrite, ask or judge)", r.Action)
		}
		for _, k := range r.On {
			if !k.Valid() {
				fail(rp.on, label, "unknown event kind %q (want one of %s)", k, kindList())
			}
		}
		if strings.TrimSpace(r.When) == "" {
			continue
		}
		prg, issues := s.compile(r.When)
		for _, is := range issues {
			line := rp.when
			if line > 0 {
				line += is.line - 1
				if rp.whenBlock {
					line++
				}
			}
			fail(line, label, "when: %s (column %d)", is.msg, is.col)
		}
		progs[i] = prg
	}

	if j := pol.Judge; hasJudge {
		switch j.Provider {
		case "openai", "anthropic":
		case "":
			fail(jl, "judge", "provider is required (openai or anthropic)")
		default:
			fail(jl, "judge", "unknown provider %q (want openai or anthropic)", j.Provider)
		}
		if j.Model == "" {
			fail(jl, "judge", "model is required")
		}
		if j.URL != "" {
			u, err := url.Parse(j.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				fail(jl, "judge", "url must be an http or https URL")
			} else if u.User != nil {
				fail(jl, "judge", "url must not hold credentials; name them with api_key_env")
			}
		}
		if j.APIKeyEnv != "" && !envName.MatchString(j.APIKeyEnv) {
			// Never echo the value: it may be the key itself.
			fail(jl, "judge", "api_key_env must name an environment variable (letters, digits, _), not hold the key")
		}
		switch j.OnError {
		case "", ActionAllow, ActionDeny, ActionAsk:
		default:
			fail(jol, "judge", "on_error %q is not allow, deny or ask", j.OnError)
		}
	}

	plugins := map[string]bool{}
	for i, pc := range pol.Plugins {
		label := pluginLabel(pc.Name, i)
		switch {
		case pc.Name == "":
			fail(pc.Line, label, "name is required")
		case plugins[pc.Name]:
			fail(pc.Line, label, "duplicate plugin name")
		}
		plugins[pc.Name] = true
		if len(pc.Command) == 0 || pc.Command[0] == "" {
			fail(pc.Line, label, "command is required")
		}
		for _, k := range pc.On {
			if !k.Valid() {
				fail(pc.Line, label, "unknown event kind %q (want one of %s)", k, kindList())
			}
		}
		switch pc.OnError {
		case "", ActionAllow, ActionDeny, ActionAsk:
		default:
			fail(pc.Line, label, "on_error %q is not allow, deny or ask", pc.OnError)
		}
	}
	return progs, errs
}

func kindList() string {
	s := make([]string, len(event.Kinds))
	for i, k := range event.Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
