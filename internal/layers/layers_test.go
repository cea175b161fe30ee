package layers

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/chaperone-dev/chaperone"

// allowed lists, for each package, the project packages and the outside
// modules (by path prefix) its non-test code may import. The standard
// library is always allowed. A package missing from the table fails the
// test, so a new package has to take its place in the layering.
var allowed = map[string]struct{ project, external []string }{
	"event":                 {},
	"policy":                {project: []string{"event", "plugin"}, external: []string{"github.com/google/cel-go", "cel.dev/", "go.yaml.in/yaml", "github.com/hashicorp/golang-lru"}},
	"rewrite":               {project: []string{"event", "rewrite/placeholder"}, external: []string{"github.com/klauspost/compress/zstd", "github.com/andybalholm/brotli"}},
	"rewrite/placeholder":   {},
	"rewrite/secrets":       {project: []string{"event", "rewrite/placeholder"}, external: []string{"github.com/zricethezav/gitleaks/v8/config", "github.com/spf13/viper"}},
	"rewrite/inject":        {},
	"certs":                 {external: []string{"github.com/hashicorp/golang-lru", "golang.org/x/sync"}},
	"attribution":           {project: []string{"event"}, external: []string{"golang.org/x/sys"}},
	"config":                {project: []string{"event"}, external: []string{"github.com/spf13/", "go.yaml.in/yaml", "gopkg.in/yaml"}},
	"tls":                   {external: []string{"golang.org/x/crypto"}},
	"proxy":                 {project: []string{"event", "policy", "rewrite", "rewrite/secrets", "rewrite/inject", "tls", "attribution", "proxy/internal/ws", "proxy/internal/h3", "proxy/internal/netx", "proxy/internal/reqctx", "proxy/internal/h1", "proxy/internal/h2"}, external: []string{"golang.org/x/net", "github.com/hashicorp/golang-lru", "github.com/quic-go/quic-go"}},
	"proxy/internal/ws":     {},
	"proxy/internal/netx":   {},
	"proxy/internal/reqctx": {},
	"proxy/internal/h1":     {project: []string{"proxy/internal/netx", "proxy/internal/reqctx"}, external: []string{"golang.org/x/net"}},
	"proxy/internal/h2":     {project: []string{"proxy/internal/netx", "proxy/internal/reqctx", "proxy/internal/h1", "proxy/internal/ws"}, external: []string{"golang.org/x/net"}},
	"proxy/internal/h3":     {external: []string{"github.com/quic-go/quic-go"}},
	"dns":                   {project: []string{"event"}, external: []string{"github.com/miekg/dns", "codeberg.org/miekg/dns"}},
	"redirect":              {project: []string{"event"}, external: []string{"github.com/cilium/ebpf", "golang.org/x/sys"}},
	"fileexec":              {project: []string{"event", "attribution"}, external: []string{"golang.org/x/sys", "github.com/hashicorp/golang-lru"}},
	"fileexec/execs":        {project: []string{"event"}, external: []string{"golang.org/x/sys", "github.com/cilium/ebpf"}},
	"telemetry":             {project: []string{"event"}, external: []string{"go.opentelemetry.io/"}},
	"internal/upstream":     {external: []string{"github.com/gorilla/websocket", "github.com/miekg/dns"}},
	"internal/netns":        {external: []string{"golang.org/x/sys"}},
	"internal/layers":       {},
	"internal/privdrop":     {external: []string{"golang.org/x/sys"}},
	"internal/testpty":      {external: []string{"golang.org/x/sys"}},
	"internal/ask":          {project: []string{"event"}, external: []string{"golang.org/x/sys"}},
	"ui":                    {project: []string{"event", "telemetry", "internal/ask"}},
	// chaperone demo: a scripted agent in a real session.
	"internal/demo": {project: []string{"event", "config", "rewrite", "session", "telemetry", "internal/upstream"}},
	// Labeled agent traffic for the tests of rewrite, rewrite/secrets and
	// proxy: standard library only, so that their tests may import it.
	"internal/secretcorpus": {},
	// A headless Chromium for the live view's browser tests.
	"internal/testbrowser": {external: []string{"github.com/chromedp/"}},
	"cmd/chaperone":        {project: []string{"*"}, external: []string{"*"}},

	"plugin":                   {project: []string{"event"}},
	"examples/denyhost-plugin": {project: []string{"plugin", "event"}},

	// session assembles the I/O and kernel packages into one agent's
	// session; only cmd is above it.
	"session": {project: []string{"event", "config", "policy", "attribution", "certs", "tls", "rewrite/secrets", "rewrite/inject",
		"proxy", "dns", "redirect", "fileexec", "fileexec/execs", "telemetry", "internal/ask", "internal/privdrop"},
		external: []string{"golang.org/x/sys"}},

	// Benchmarks and soak: programs of their own, apart from Chaperone's.
	"daemon": {project: []string{"event", "config", "attribution", "certs", "redirect", "session", "internal/ask"},
		external: []string{"golang.org/x/sys"}},

	"bench/loadgen":      {external: []string{"github.com/quic-go/quic-go"}},
	"bench/origin":       {external: []string{"github.com/quic-go/quic-go"}},
	"bench/report":       {},
	"bench/relay":        {},
	"bench/benchca":      {},
	"bench/gomitm":       {project: []string{"bench/benchca"}, external: []string{"github.com/elazarl/goproxy"}},
	"bench/tlsfloor":     {project: []string{"bench/benchca"}},
	"bench/cmd/loadgen":  {project: []string{"bench/loadgen"}},
	"bench/cmd/origin":   {project: []string{"bench/origin"}},
	"bench/cmd/relay":    {project: []string{"bench/relay"}},
	"bench/cmd/gomitm":   {project: []string{"bench/benchca", "bench/gomitm"}},
	"bench/cmd/tlsfloor": {project: []string{"bench/benchca", "bench/tlsfloor"}},
	"bench/cmd/bench":    {project: []string{"bench/loadgen", "bench/origin", "bench/report"}},
	"bench/soak":         {project: []string{"internal/upstream"}},
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		pkgs[rel] = true
		rule, ok := allowed[rel]
		if !ok {
			t.Errorf("%s: package %q has no place in the import rules; add it to this test's table (see DESIGN.md)", path, rel)
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if msg := check(p, rule.project, rule.external); msg != "" {
				t.Errorf("%s: %s imports %s: %s", path, rel, p, msg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"event", "cmd/chaperone"} {
		if !pkgs[must] {
			t.Errorf("walked the module but did not see package %q: the walk is broken", must)
		}
	}
}

// The proxy's protocol machinery (proxy/internal/*) sits behind handler
// seams: policy, events and rewriting reach it only through them, so it
// may import nothing of the project but its own siblings.
func TestProxyInternalsImportNoPolicy(t *testing.T) {
	for pkg, rule := range allowed {
		if !strings.HasPrefix(pkg, "proxy/internal/") {
			continue
		}
		for _, imp := range rule.project {
			if !strings.HasPrefix(imp, "proxy/internal/") {
				t.Errorf("%s may import %s: the proxy's protocol machinery must not import event, policy, rewrite or anything else of the project", pkg, imp)
			}
		}
	}
}

func check(path string, project, external []string) string {
	if rest, ok := strings.CutPrefix(path, module+"/"); ok {
		if slices.Contains(project, "*") || slices.Contains(project, rest) {
			return ""
		}
		return "not allowed by DESIGN.md's layering"
	}
	if first, _, _ := strings.Cut(path, "/"); !strings.Contains(first, ".") {
		return "" // standard library
	}
	for _, pre := range external {
		if pre == "*" || strings.HasPrefix(path, pre) {
			return ""
		}
	}
	return "outside module not allowed for this package"
}

func TestCheck(t *testing.T) {
	tests := []struct {
		path     string
		project  []string
		external []string
		ok       bool
	}{
		{"net/http", nil, nil, true},
		{module + "/event", []string{"event"}, nil, true},
		{module + "/proxy", []string{"event"}, nil, false},
		{"github.com/cilium/ebpf/link", nil, []string{"github.com/cilium/ebpf"}, true},
		{"github.com/cilium/ebpf", nil, nil, false},
	}
	for _, tt := range tests {
		if got := check(tt.path, tt.project, tt.external) == ""; got != tt.ok {
			t.Errorf("check(%q) ok = %v, want %v", tt.path, got, tt.ok)
		}
	}
}
