package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CredentialFiles returns the user's credential files under home that
// exist now: those the default policy's no-credential-files rule keeps
// the agent from reading, and ~/.git-credentials. A session remembers them
// by inode, so that one reached by another path is decided as itself.
func CredentialFiles(home string) []string {
	if home == "" {
		return nil
	}
	var out []string
	for _, rel := range []string{".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".docker/config.json", ".git-credentials"} {
		if p := filepath.Join(home, rel); isRegular(p) {
			out = append(out, p)
		}
	}
	keys, _ := filepath.Glob(filepath.Join(home, ".ssh", "id_*"))
	for _, k := range keys {
		if !strings.HasSuffix(k, ".pub") && isRegular(k) {
			out = append(out, k)
		}
	}
	return out
}

// PluginFiles returns the files p's plugins run: each command's program
// (looked up on PATH, as the plugin is started, when it names no
// directory) and each argument that names an existing regular file (the
// script an interpreter runs), relative paths taken from dir, where
// Chaperone starts them. A session protects them: a plugin the agent could
// rewrite would decide for it once restarted.
func (p *Policy) PluginFiles(dir string) []string {
	var out []string
	for _, c := range p.Plugins {
		for i, a := range c.Command {
			switch {
			case a == "":
				continue
			case i == 0 && !strings.Contains(a, "/"):
				if path, err := exec.LookPath(a); err == nil {
					out = append(out, path)
				}
				continue
			case !filepath.IsAbs(a):
				a = filepath.Join(dir, a)
			}
			if isRegular(a) {
				out = append(out, a)
			}
		}
	}
	return out
}

func isRegular(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
