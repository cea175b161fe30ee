package proxy

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package inside its layer: the standard library,
// and of Chaperone only the packages below it.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/chaperone-dev/chaperone/event":       true,
		"github.com/chaperone-dev/chaperone/tls":         true,
		"github.com/chaperone-dev/chaperone/policy":      true,
		"github.com/chaperone-dev/chaperone/rewrite":     true,
		"github.com/chaperone-dev/chaperone/attribution": true,
	}
	checkImports(t, allowed)
}

func checkImports(t *testing.T, allowed map[string]bool) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range af.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
	if n == 0 {
		t.Fatal("no source files checked")
	}
}
