package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GitHandler serves the bare repositories under projectRoot over Git's smart
// HTTP protocol (fetch and clone; push is off, as git http-backend's default
// is without authentication), by running `git http-backend` as a CGI
// program. A repository projectRoot/NAME.git is served at /NAME.git; to
// mount the handler under a prefix, wrap it in http.StripPrefix.
//
// It returns an error wrapping exec.ErrNotFound if git or its http-backend
// is not installed.
func GitHandler(projectRoot string) (http.Handler, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("upstream: git handler: %w", err)
	}
	out, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("upstream: git handler: git --exec-path: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("upstream: git handler: %s: %w", backend, errors.Join(exec.ErrNotFound, err))
	}
	root, err := filepath.Abs(projectRoot)
	if err != nil {
		return nil, fmt.Errorf("upstream: git handler: %w", err)
	}
	return &cgi.Handler{
		Path: backend,
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			// Keep the backend away from the machine's git config; net/http/cgi
			// passes no HOME, so the user's is not read either.
			"GIT_CONFIG_NOSYSTEM=1",
		},
		// The backend's failures reach the client as its HTTP response.
		Logger: log.New(io.Discard, "", 0),
		Stderr: io.Discard,
	}, nil
}

// InitRepo creates the bare repository projectRoot/name.git holding one
// commit (a README) on branch main, which is also its HEAD, and returns that
// commit's id. It runs git with a temporary HOME and no system config, so it
// needs no git configuration and changes none. Author, committer and dates
// are fixed, so the same name always yields the same commit id.
func InitRepo(projectRoot, name string) (headCommit string, err error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("upstream: init repo: invalid name %q", name)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("upstream: init repo: %w", err)
	}
	tmp, err := os.MkdirTemp("", "upstream-git-")
	if err != nil {
		return "", fmt.Errorf("upstream: init repo: %w", err)
	}
	defer os.RemoveAll(tmp)
	bare, err := filepath.Abs(filepath.Join(projectRoot, name+".git"))
	if err != nil {
		return "", fmt.Errorf("upstream: init repo: %w", err)
	}
	if _, err := os.Stat(bare); err == nil {
		return "", fmt.Errorf("upstream: init repo: %s already exists", bare)
	}
	work := filepath.Join(tmp, "work")
	env := gitEnv(tmp)
	run := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(git, append([]string{
			"-c", "user.name=Chaperone Upstream",
			"-c", "user.email=upstream@example.test",
			"-c", "init.defaultBranch=main",
			"-c", "commit.gpgSign=false",
		}, args...)...)
		cmd.Dir = dir
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("upstream: init repo: git %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run(tmp, "init", "--quiet", work); err != nil {
		return "", err
	}
	readme := fmt.Sprintf("# %s\n\nA repository served by a local upstream test server.\n", name)
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte(readme), 0o644); err != nil {
		return "", fmt.Errorf("upstream: init repo: %w", err)
	}
	if _, err := run(work, "add", "README.md"); err != nil {
		return "", err
	}
	if _, err := run(work, "commit", "--quiet", "-m", "Initial commit"); err != nil {
		return "", err
	}
	if _, err := run(tmp, "init", "--quiet", "--bare", bare); err != nil {
		return "", err
	}
	if _, err := run(work, "push", "--quiet", bare, "main"); err != nil {
		return "", err
	}
	return run(bare, "rev-parse", "refs/heads/main")
}

// gitEnv is the process environment without any GIT_* variables (a caller
// running inside a git hook would otherwise leak GIT_DIR into ours), with
// home as HOME, no system config and fixed identities and dates.
func gitEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	const date = "2000-01-01T00:00:00Z"
	return append(env,
		"HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_DATE="+date,
		"GIT_COMMITTER_DATE="+date,
	)
}
