package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitCmd runs the real git as a client: a private HOME, no system config,
// no proxy and no inherited GIT_* variables, trusting only caFile.
func gitCmd(t *testing.T, caFile string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GIT_"), k == "HOME", k == "XDG_CONFIG_HOME", strings.HasSuffix(strings.ToLower(k), "_proxy"):
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env,
		"HOME="+t.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_SSL_CAINFO="+caFile,
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", args[0], err, stderr.Bytes())
	}
	return string(out), nil
}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is not installed: %v", err)
	}
}

func TestGitOverHTTPS(t *testing.T) {
	needGit(t)
	root := t.TempDir()
	head, err := InitRepo(root, "demo")
	if err != nil {
		t.Fatal(err)
	}
	gh, err := GitHandler(root)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skipf("git http-backend is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ca := newCA(t)
	caFile, err := ca.WriteFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/git/", http.StripPrefix("/git", gh))
	mux.Handle("/", DefaultHandler("git.example.test"))
	s := start(t, Options{Name: "git.example.test", Addr: "127.0.0.20:0", CA: ca, Handler: mux})

	resolve := fmt.Sprintf("http.curloptResolve=%s:%d:%s", s.Name, s.Addr.Port(), s.Addr.Addr())
	tests := []struct {
		name string
		args []string
	}{
		// The name is pinned to the server's address in curl, never resolved.
		{"by name", []string{"-c", resolve, "ls-remote", s.URL + "/git/demo.git"}},
		// The certificate carries the IP as well.
		{"by IP", []string{"ls-remote", "https://" + s.Addr.String() + "/git/demo.git"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.args[0] == "-c" {
				needResolve(t)
			}
			out, err := gitCmd(t, caFile, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s\tHEAD\n%s\trefs/heads/main\n", head, head)
			if diff := diffStrings(want, out); diff != "" {
				t.Errorf("ls-remote (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("clone", func(t *testing.T) {
		needResolve(t)
		dst := filepath.Join(t.TempDir(), "demo")
		if _, err := gitCmd(t, caFile, "-c", resolve, "clone", "--quiet", s.URL+"/git/demo.git", dst); err != nil {
			t.Fatal(err)
		}
		got, err := gitCmd(t, caFile, "-C", dst, "rev-parse", "HEAD")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != head {
			t.Errorf("cloned HEAD = %s, want %s", got, head)
		}
		if _, err := os.Stat(filepath.Join(dst, "README.md")); err != nil {
			t.Errorf("clone lacks README.md: %v", err)
		}

		var sawRefs, sawPack bool
		for _, r := range s.Requests() {
			sawRefs = sawRefs || (r.Path == "/git/demo.git/info/refs" && r.RawQuery == "service=git-upload-pack" && r.ServerName == s.Name)
			sawPack = sawPack || (r.Method == http.MethodPost && r.Path == "/git/demo.git/git-upload-pack" && len(r.Body) > 0)
		}
		if !sawRefs || !sawPack {
			t.Errorf("recorded info/refs: %v, upload-pack POST with body: %v; want both", sawRefs, sawPack)
		}
	})

	t.Run("missing repo", func(t *testing.T) {
		needResolve(t)
		if _, err := gitCmd(t, caFile, "-c", resolve, "ls-remote", s.URL+"/git/nope.git"); err == nil {
			t.Error("ls-remote of a missing repository succeeded")
		}
	})
}

// needResolve skips unless git knows http.curloptResolve (2.37 and later):
// an older git would ignore it and ask DNS for the name.
func needResolve(t *testing.T) {
	t.Helper()
	out, err := exec.Command("git", "version").Output()
	if err != nil {
		t.Skipf("git version: %v", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(string(out), "git version "), "%d.%d", &major, &minor); err != nil {
		t.Skipf("cannot read %q: %v", out, err)
	}
	if major < 2 || major == 2 && minor < 37 {
		t.Skipf("git %d.%d lacks http.curloptResolve, and the name must not go to DNS", major, minor)
	}
}

func diffStrings(want, got string) string {
	if want == got {
		return ""
	}
	return fmt.Sprintf("- %q\n+ %q", want, got)
}

func TestInitRepo(t *testing.T) {
	needGit(t)
	root1, root2 := t.TempDir(), t.TempDir()
	h1, err := InitRepo(root1, "same")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := InitRepo(root2, "same")
	if err != nil {
		t.Fatal(err)
	}
	if len(h1) < 40 || h1 != h2 {
		t.Errorf("commit ids %q and %q: want the same full id from the same name", h1, h2)
	}
	headRef, err := os.ReadFile(filepath.Join(root1, "same.git", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(headRef)); got != "ref: refs/heads/main" {
		t.Errorf("HEAD = %q, want ref: refs/heads/main", got)
	}

	bad := []struct {
		name string
		root string
		repo string
	}{
		{"exists", root1, "same"},
		{"empty", root1, ""},
		{"slash", root1, "a/b"},
		{"dotdot", root1, ".."},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := InitRepo(tt.root, tt.repo); err == nil {
				t.Errorf("InitRepo(%q) succeeded, want error", tt.repo)
			}
		})
	}
}

func TestGitHandlerWithoutGit(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := GitHandler(t.TempDir()); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("GitHandler without git: error %v, want one wrapping exec.ErrNotFound", err)
	}
}
