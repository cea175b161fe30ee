package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCredentialFiles(t *testing.T) {
	home := t.TempDir()
	for _, rel := range []string{".aws/credentials", ".ssh/id_ed25519", ".ssh/id_ed25519.pub", ".netrc", ".ssh/known_hosts"} {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(home, ".docker", "config.json"), 0o700) // a directory, not a file
	want := []string{filepath.Join(home, ".aws/credentials"), filepath.Join(home, ".netrc"), filepath.Join(home, ".ssh/id_ed25519")}
	if d := cmp.Diff(want, CredentialFiles(home)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := CredentialFiles(""); got != nil {
		t.Errorf("no home: %q", got)
	}
}

func TestPluginFiles(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "plugin.py")
	os.WriteFile(script, []byte("print()\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "rel.sh"), []byte("true\n"), 0o755)
	p := &Policy{Plugins: []PluginConfig{
		{Command: []string{"sh", "plugin.py", "--flag", "missing.py"}},
		{Command: []string{"./rel.sh"}},
		{Command: []string{script}},
		{Command: []string{"no-such-program-anywhere"}},
	}}
	want := []string{sh, script, filepath.Join(dir, "rel.sh"), script}
	if d := cmp.Diff(want, p.PluginFiles(dir)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
