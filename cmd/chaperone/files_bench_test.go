package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chaperone-dev/chaperone/bench/loadgen"
	"github.com/chaperone-dev/chaperone/session"
)

// BenchmarkFileWorkload runs `find | cat` over 2,000 files, and 200 execs
// of /bin/true, outside any session, in a session that mediates only the
// network, and in one that mediates files and execs too: side by side, so
// the ratios read directly (each session run includes starting it).
//
//	go test -run '^$' -bench FileWorkload -benchtime 5x ./cmd/chaperone/
func BenchmarkFileWorkload(b *testing.B) {
	if ok, why := session.CanMediateFiles(); !ok {
		b.Skip(why)
	}
	dir := b.TempDir()
	tree := filepath.Join(dir, "tree")
	for d := range 4 {
		sub := filepath.Join(tree, fmt.Sprintf("d%d", d))
		os.MkdirAll(sub, 0o755)
		for f := range 500 {
			os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.c", f)), []byte("int x;\n"), 0o644)
		}
	}
	workloads := map[string]string{
		"files": `find "$1" -type f -exec cat {} + >/dev/null`,
		"execs": `i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done`,
	}
	for _, name := range []string{"files", "execs"} {
		script := workloads[name]
		for _, mode := range []string{"outside", "session-network-only", "session-mediated"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				for b.Loop() {
					var cmd *exec.Cmd
					switch mode {
					case "outside":
						cmd = exec.Command("sh", "-c", script, "sh", tree)
					default:
						cmd = exec.Command(binary, "run", "--mode", "proxy", "--mediate-files="+fmt.Sprint(mode == "session-mediated"),
							"--log", filepath.Join(dir, "audit.jsonl"), "--", "sh", "-c", script, "sh", tree)
						cmd.Env = baseEnv(dir)
					}
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
				}
			})
		}
	}
}

// BenchmarkSessionWorkload times one workload at a time inside one live
// session, started once: a shell in the session runs the workload each
// time the benchmark asks, so each op is the workload alone, not the
// session's start (first-ms too: it is timed once the shell runs). Outside, the same shell runs without Chaperone; all
// modes in the same run, side by side. first-ms is the first run (every
// file decided for the first time); ns/op is what follows (decisions
// cached, files the policy always allows ignore-marked in the kernel).
// "mediated-user" runs the agent as nobody, as under sudo.
// chaperone-cpu-ms/op is the CPU the chaperone process spent per op (user
// and system, from /proc): the measure to compare on a busy machine.
//
//	go test -run '^$' -bench SessionWorkload -benchtime 20x ./cmd/chaperone/
func BenchmarkSessionWorkload(b *testing.B) {
	if ok, why := session.CanMediateFiles(); !ok {
		b.Skip(why)
	}
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("git not found")
	}
	// Not b.TempDir: the agent runs as nobody too, and must reach the tree.
	dir, err := os.MkdirTemp("", "chaperone-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tree := filepath.Join(dir, "tree")
	for d := range 20 {
		sub := filepath.Join(tree, fmt.Sprintf("d%02d", d))
		os.MkdirAll(sub, 0o755)
		for f := range 250 {
			os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.c", f)), []byte("int x;\n"), 0o644)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", tree, "-c", "user.email=b@e.test", "-c", "user.name=b"}, args...)...)
		cmd.Env = baseEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "tree")

	type workload struct {
		name, script string
		env          []string
		rootOnly     bool // root's caches: nobody cannot read them
	}
	workloads := []workload{
		{name: "find-cat-5000", script: `find "$T" -type f -exec cat {} + >/dev/null`},
		{name: "git-status-5000", script: `git -C "$T" status --porcelain >/dev/null`},
		{name: "exec-true-100", script: `i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done`},
	}
	if env, err := goBuildEnv(); err != nil {
		b.Logf("go-build left out: %v", err)
	} else {
		// A package of this module with 287 packages under it, every one
		// in the build cache already.
		workloads = append(workloads, workload{"go-build-policy", `cd "$M" && go build ./policy/`, env, true})
	}
	if env, err := npmCIEnv(dir); err != nil {
		b.Logf("npm-ci left out: %v", err)
	} else {
		workloads = append(workloads, workload{"npm-ci-undici", `cd "$N" && npm ci --offline --no-audit --no-fund --silent`, env, true})
	}

	// "ready" once the session runs; then one line in, one workload run,
	// "done" (or "fail") out.
	const loop = `echo ready; while read -r _; do if sh -c "$W" >/dev/null; then echo done; else echo fail; fi; done`
	for _, w := range workloads {
		for _, mode := range []string{"outside", "network-only", "mediated", "mediated-user"} {
			if mode == "mediated-user" && w.rootOnly {
				continue
			}
			b.Run(w.name+"/"+mode, func(b *testing.B) {
				var cmd *exec.Cmd
				switch mode {
				case "outside":
					cmd = exec.Command("sh", "-c", loop)
				default:
					args := []string{"run", "--mode", "proxy", "--mediate-files=" + fmt.Sprint(mode != "network-only"),
						"--log", filepath.Join(dir, "audit.jsonl")}
					if mode == "mediated-user" {
						args = append(args, "--user", "nobody")
					}
					cmd = exec.Command(binary, append(args, "--", "sh", "-c", loop)...)
				}
				// git refuses a tree another user owns unless told it is safe.
				cmd.Env = append(baseEnv(dir), "T="+tree, "W="+w.script,
					"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
				cmd.Env = append(cmd.Env, w.env...)
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				outPipe, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				out := bufio.NewReader(outPipe)
				if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
					b.Fatalf("session start: %q, %v; stderr: %s", line, err, stderr.String())
				}
				once := func() {
					if _, err := io.WriteString(in, "go\n"); err != nil {
						b.Fatal(err)
					}
					line, err := out.ReadString('\n')
					if err != nil || line != "done\n" {
						b.Fatalf("workload: %q, %v; stderr: %s", line, err, stderr.String())
					}
				}
				// Chaperone's own CPU per op: unlike the time, it hardly
				// depends on what else the machine runs.
				cpu := func() float64 {
					s, err := loadgen.Watch{PIDs: []int{cmd.Process.Pid}}.Take()
					if err != nil {
						b.Fatal(err)
					}
					return s.CPUSec
				}
				start := time.Now()
				once()
				first := time.Since(start)
				cpuBefore := cpu()
				for b.Loop() {
					once()
				}
				if mode != "outside" {
					b.ReportMetric((cpu()-cpuBefore)*1000/float64(b.N), "chaperone-cpu-ms/op")
				}
				b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
				in.Close()
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// goBuildEnv is the environment of `go build` in this module with the
// build and module caches the machine's go uses (warm: the tests were
// built with them), and no network.
func goBuildEnv() ([]string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 2 {
		return nil, fmt.Errorf("go env: %q", out)
	}
	// The agent's home is the machine's (its caches are there, as for an
	// agent run in a developer's own account).
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, err
	}
	env := []string{"M=" + root, "HOME=" + home, "GOCACHE=" + dirs[0], "GOMODCACHE=" + dirs[1], "GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS="}
	warm := exec.Command("go", "build", "./policy/")
	warm.Dir, warm.Env = root, append(os.Environ(), env...)
	if out, err := warm.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./policy/: %v: %s", err, out)
	}
	return env, nil
}

// npmCIEnv makes a project of dir's that depends on undici (the package
// the Node end-to-end tests use), from a tarball packed out of the
// machine's npm cache, and returns the environment of `npm ci` in it,
// offline, with npm's cache in the agent's home (baseEnv's); an error
// when npm or the package in its cache is missing.
func npmCIEnv(dir string) ([]string, error) {
	if _, err := exec.LookPath("npm"); err != nil {
		return nil, err
	}
	proj := filepath.Join(dir, "npm-project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		return nil, err
	}
	env := append(baseEnv(dir), "npm_config_update_notifier=false")
	npm := func(home bool, args ...string) error {
		cmd := exec.Command("npm", args...)
		cmd.Dir, cmd.Env = proj, env
		if !home {
			cmd.Env = os.Environ() // the machine's cache
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("npm %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := npm(false, "pack", "undici@6.22.0", "--offline", "--silent"); err != nil {
		return nil, fmt.Errorf("is undici in npm's cache? make test-deps puts it there: %w", err)
	}
	pkg := `{"name": "bench", "private": true, "dependencies": {"undici": "file:undici-6.22.0.tgz"}}`
	if err := os.WriteFile(filepath.Join(proj, "package.json"), []byte(pkg), 0o644); err != nil {
		return nil, err
	}
	if err := npm(true, "install", "--offline", "--no-audit", "--no-fund", "--silent"); err != nil {
		return nil, err
	}
	return []string{"N=" + proj, "npm_config_update_notifier=false"}, nil
}
