package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkFileWorkload runs `find | cat` over 2,000 files, and 200 execs
// of /bin/true, outside any session, in a session that mediates only the
// network, and in one that mediates files and execs too: side by side, so
// the ratios read directly (each session run includes starting it).
//
//	go test -run '^$' -bench FileWorkload -benchtime 5x ./cmd/chaperone/
func BenchmarkFileWorkload(b *testing.B) {
	if ok, why := canMediateFiles(); !ok {
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
