package tls

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestNoInsecureSkipVerify fails if any Go file of the module other than
// this one mentions the option that turns certificate verification off.
func TestNoInsecureSkipVerify(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatal("go.mod not found above the package")
		}
		root = parent
	}
	self, err := filepath.Abs("insecure_test.go")
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte("Insecure" + "SkipVerify")
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == ".git" || name == "vendor" || name[0] == '.') {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".go" || path == self {
			return nil
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			t.Errorf("%s mentions %s: upstream verification must stay on", path, needle)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 2 {
		t.Fatalf("walked %d Go files under %s; the walk is broken", files, root)
	}
}
