package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// LoadOptions says where Load reads from.
type LoadOptions struct {
	// File is the config file; "" means the file named by CHAPERONE_CONFIG,
	// or none.
	File string
	// Env looks up an environment variable. When nil, Environ is used; when
	// both are nil, the process environment. An empty value counts as unset.
	Env func(string) string
	// Environ is the environment as KEY=VALUE entries (os.Environ's form),
	// used when Env is nil.
	Environ []string
	// Flags are the parsed command-line flags; only those the user set
	// override. May be nil.
	Flags *pflag.FlagSet
	// EUID is the effective user id, for the default state directory.
	EUID int
}

func (o LoadOptions) lookup() func(string) string {
	switch {
	case o.Env != nil:
		return o.Env
	case o.Environ != nil:
		m := make(map[string]string, len(o.Environ))
		for _, kv := range o.Environ {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
		return func(k string) string { return m[k] }
	default:
		return os.Getenv
	}
}

// maxConfigSize bounds the config file Load reads.
const maxConfigSize = 4 << 20

// Load builds the configuration from defaults, the file, the environment and
// the flags (flags > env > file > defaults) and validates it. On a
// validation error the loaded Config is returned with the error, so that it
// can still be shown.
func Load(opts LoadOptions) (Config, error) {
	env := opts.lookup()
	def := Default(env, opts.EUID)

	v := viper.New()
	leaves := leafKeys()
	for _, k := range leaves {
		v.SetDefault(k.name, defaultValue(def, k.name))
	}

	file := opts.File
	if file == "" {
		file = env(EnvConfigFile)
	}
	if file != "" {
		data, err := readFile(file)
		if err != nil {
			return Config{}, err
		}
		if err := checkFile(file, data); err != nil {
			return Config{}, err
		}
		var layer map[string]any
		if err := yaml.Unmarshal(data, &layer); err != nil {
			return Config{}, fmt.Errorf("config: %s: %w", file, err)
		}
		// checkFile has vetted the booleans, which may be written as the
		// environment writes them ("yes", "on").
		for _, k := range keys {
			if val, ok := layer[k.name]; ok && val != nil && k.kind == kindBool {
				layer[k.name], _ = parseBool(fmt.Sprint(val))
			}
		}
		if len(layer) > 0 {
			if err := v.MergeConfigMap(layer); err != nil {
				return Config{}, fmt.Errorf("config: %s: %w", file, err)
			}
		}
	}

	// viper's AutomaticEnv reads the process environment itself; merging the
	// looked-up values as a layer above the file keeps tests hermetic and
	// gives the same precedence.
	envLayer := map[string]any{}
	for _, k := range leaves {
		val := env(EnvVar(k.name))
		if val == "" {
			continue
		}
		switch k.kind {
		case kindList:
			envLayer[k.name] = splitList(k.name, val)
		case kindBool:
			b, ok := parseBool(val)
			if !ok {
				return Config{}, fmt.Errorf("config: %s: %q is not a boolean (want true or false, 1 or 0, yes or no, on or off)", EnvVar(k.name), val)
			}
			envLayer[k.name] = b
		case kindMappings:
			// Refused rather than ignored, so that nobody believes it works.
			return Config{}, fmt.Errorf("config: %s: %s can be set in the config file only", EnvVar(k.name), k.name)
		default:
			envLayer[k.name] = val // a section's field by its dotted name, which viper nests
		}
	}
	if len(envLayer) > 0 {
		if err := v.MergeConfigMap(envLayer); err != nil {
			return Config{}, fmt.Errorf("config: environment: %w", err)
		}
	}

	if opts.Flags != nil {
		for _, k := range leaves {
			if k.flag == "" {
				continue
			}
			if f := opts.Flags.Lookup(k.flag); f != nil {
				if err := v.BindPFlag(k.name, f); err != nil {
					return Config{}, fmt.Errorf("config: bind flag --%s: %w", k.flag, err)
				}
			}
		}
	}

	var c Config
	if err := v.Unmarshal(&c); err != nil {
		// checkFile has vetted the file's types, so this is unexpected.
		return Config{}, fmt.Errorf("config: decode: %w", err)
	}
	for i := range c.Credentials {
		if cr := &c.Credentials[i]; len(cr.AgentEnv) == 0 && cr.Env != "" {
			cr.AgentEnv = []string{cr.Env}
		}
	}
	return c, c.Validate()
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: open config file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config: open config file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("config: config file %s is not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxConfigSize+1)); err != nil {
		return nil, fmt.Errorf("config: read config file: %w", err)
	}
	if buf.Len() > maxConfigSize {
		return nil, fmt.Errorf("config: config file %s is larger than 4 MiB", path)
	}
	return buf.Bytes(), nil
}

func defaultValue(c Config, name string) any {
	switch name {
	case "state_dir":
		return c.StateDir
	case "mode":
		return c.Mode
	case "listen":
		return c.Listen
	case "log":
		return c.Log
	case "audit.file_reads":
		return c.Audit.FileReads
	case "ui.listen":
		return c.UI.Listen
	case "policy":
		return c.Policy
	case "deny_hosts":
		return c.DenyHosts
	case "upstream_ca":
		return c.UpstreamCA
	case "resolve":
		return c.Resolve
	case "quic":
		return c.QUIC
	case "udp":
		return c.UDP
	case "tls_passthrough":
		return c.TLSPassthrough
	case "dns_upstreams":
		return c.DNSUpstreams
	case "log_level":
		return c.LogLevel
	case "llm_hosts":
		return c.LLMHosts
	case "identity_headers":
		return c.IdentityHeaders
	case "identity_hosts":
		return c.IdentityHosts
	case "restore_secrets":
		return c.RestoreSecrets
	case "mediate_files":
		return c.MediateFiles
	case "otlp_endpoint":
		return c.OTLPEndpoint
	case "otlp_protocol":
		return c.OTLPProtocol
	case "capture_content":
		return c.CaptureContent
	case "credentials":
		return c.Credentials
	case "daemon_socket":
		return c.DaemonSocket
	case "builtin_agents":
		return c.BuiltinAgents
	case "agents":
		return c.Agents
	}
	panic("config: no default for key " + name) // keys and this switch disagree
}

// splitList splits an environment list. Host and resolve lists split on
// commas and white space; path lists on commas and newlines only, since
// paths may contain spaces.
func splitList(name, s string) []string {
	sep := func(r rune) bool { return r == ',' || unicode.IsSpace(r) }
	if name == "upstream_ca" {
		sep = func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }
	}
	var out []string
	for _, f := range strings.FieldsFunc(s, sep) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// checkFile parses a config file on its own so that errors carry line
// numbers: a syntax error, a key that does not exist, a value of the wrong
// shape.
func checkFile(file string, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config: %s: %w", file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config: %s: line %d: want a mapping of keys to values, got %s", file, root.Line, nodeKind(root))
	}
	var errs []error
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], root.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("line %d: a key must be a plain name, got %s", kn.Line, nodeKind(kn)))
			continue
		}
		name := kn.Value
		k, ok := lookupKey(name)
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: unknown key %q%s", kn.Line, name, suggest(name, keys)))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("line %d: key %q appears twice", kn.Line, name))
			continue
		}
		seen[name] = true
		errs = append(errs, checkValue(k.name, k, vn)...)
	}
	for i, err := range errs {
		errs[i] = fmt.Errorf("config: %s: %w", file, err)
	}
	return errors.Join(errs...)
}

// checkValue checks the shape of the value n of key k, named path in errors.
func checkValue(path string, k key, n *yaml.Node) []error {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // unset
	}
	switch k.kind {
	case kindBool:
		if n.Kind == yaml.ScalarNode {
			if _, ok := parseBool(n.Value); ok {
				return nil
			}
			return []error{fmt.Errorf("line %d: %s: want true or false, got %q", n.Line, path, n.Value)}
		}
		return []error{fmt.Errorf("line %d: %s: want true or false, got %s", n.Line, path, nodeKind(n))}
	case kindSection:
		return checkMapping(path, k.fields, n)
	case kindMappings:
		if n.Kind != yaml.SequenceNode {
			return []error{fmt.Errorf("line %d: %s: want a list of mappings, got %s", n.Line, path, nodeKind(n))}
		}
		var errs []error
		for i, e := range n.Content {
			errs = append(errs, checkMapping(fmt.Sprintf("%s[%d]", path, i), k.fields, e)...)
		}
		return errs
	}
	if n.Kind == yaml.ScalarNode {
		return nil // a string (for a list: one entry, or comma separated)
	}
	if k.kind == kindList && n.Kind == yaml.SequenceNode {
		for _, e := range n.Content {
			e = deref(e)
			if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
				return []error{fmt.Errorf("line %d: %s: want a list of strings, got %s in it", e.Line, path, nodeKind(e))}
			}
		}
		return nil
	}
	want := "a string"
	if k.kind == kindList {
		want = "a list of strings"
	}
	return []error{fmt.Errorf("line %d: %s: want %s, got %s", n.Line, path, want, nodeKind(n))}
}

// checkMapping checks a nested mapping whose keys are fields, named path in
// errors ("credentials[1]").
func checkMapping(path string, fields []key, n *yaml.Node) []error {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("line %d: %s: want a mapping, got %s", n.Line, path, nodeKind(n))}
	}
	var errs []error
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("line %d: %s: a key must be a plain name, got %s", kn.Line, path, nodeKind(kn)))
			continue
		}
		name := path + "." + kn.Value
		i := slices.IndexFunc(fields, func(f key) bool { return f.name == kn.Value })
		if i < 0 {
			errs = append(errs, fmt.Errorf("line %d: %s: unknown key%s", kn.Line, name, suggest(kn.Value, fields)))
			continue
		}
		if seen[kn.Value] {
			errs = append(errs, fmt.Errorf("line %d: %s: appears twice", kn.Line, name))
			continue
		}
		seen[kn.Value] = true
		errs = append(errs, checkValue(name, fields[i], vn)...)
	}
	return errs
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// parseBool reads the booleans of CHAPERONE_* variables and of the file.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "on":
		return true, true
	case "false", "0", "no", "off":
		return false, true
	}
	return false, false
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "a scalar"
	}
	return "a document"
}

// suggest names the key of known a typo probably meant: the same but for
// case, dashes or a plural s, else one edit away.
func suggest(name string, known []key) string {
	n := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, k := range known {
		if n == k.name || n+"s" == k.name || n == k.name+"s" || strings.TrimSuffix(n, "s") == strings.TrimSuffix(k.name, "s") {
			return fmt.Sprintf(" (did you mean %q?)", k.name)
		}
	}
	for _, k := range known {
		if len(n) > 2 && editDistance(n, k.name) <= 1 {
			return fmt.Sprintf(" (did you mean %q?)", k.name)
		}
	}
	return ""
}

// editDistance counts the insertions, deletions, substitutions and swaps of
// adjacent bytes that turn a into b (optimal string alignment). Key names
// are short, and so are the unknown keys worth suggesting for.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// BindFlags registers a flag for every key set by flags on fs: --state-dir,
// --mode, --listen, --log, --audit-file-reads, --ui-listen, --policy, --deny-host, --upstream-ca, --resolve,
// --tls-passthrough, --quic, --udp, --dns-upstream, --log-level, --llm-host,
// --identity-header, --identity-host, --restore-secrets. The list flags are
// repeatable. Flags carry no defaults of their own: Load applies defaults
// only for flags the user did not set.
func BindFlags(fs *pflag.FlagSet) {
	for _, k := range leafKeys() {
		switch {
		case k.flag == "":
		case k.kind == kindList:
			fs.StringArray(k.flag, nil, k.help)
		case k.kind == kindBool:
			fs.Bool(k.flag, false, k.help)
		default:
			fs.String(k.flag, "", k.help)
		}
	}
}
