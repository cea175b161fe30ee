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
// session's start. Outside, the same shell runs without Chaperone; all
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

	workloads := []struct{ name, script string }{
		{"find-cat-5000", `find "$T" -type f -exec cat {} + >/dev/null`},
		{"git-status-5000", `git -C "$T" status --porcelain >/dev/null`},
		{"exec-true-100", `i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done`},
	}
	// One line in, one workload run, "done" (or "fail") out.
	const loop = `while read -r _; do if sh -c "$W" >/dev/null; then echo done; else echo fail; fi; done`
	for _, w := range workloads {
		for _, mode := range []string{"outside", "network-only", "mediated", "mediated-user"} {
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
