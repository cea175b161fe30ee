package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/chaperone-dev/chaperone/attribution"
	"github.com/chaperone-dev/chaperone/config"
)

// AgentEnv is the environment variable that makes any process an agent:
// CHAPERONE_AGENT=<name>.
const AgentEnv = "CHAPERONE_AGENT"

// commLen is how much of a program's name the kernel keeps (TASK_COMM_LEN
// less its NUL): what an exec is matched by before the program runs.
const commLen = 15

// Exec is what a matcher sees of a process: the program it runs, its
// argv and its environment (the interpreter's script is in argv).
type Exec struct {
	Exe  string
	Argv []string
	Env  []string
}

// Matchers tell agents from other processes: the agents Chaperone knows
// (attribution.KnownAgent), the configuration's, and CHAPERONE_AGENT.
type Matchers struct {
	builtin bool
	agents  []config.AgentMatcher
}

// NewMatchers makes the matchers of a validated configuration.
func NewMatchers(c config.Config) Matchers {
	return Matchers{builtin: c.BuiltinAgents, agents: c.Agents}
}

// Candidates are the command names whose exec the kernel marks for a
// look: every agent's command, and the interpreters and launchers agents
// run under. Each is at most 15 bytes, the kernel's length.
func (m Matchers) Candidates() []string {
	var out []string
	seen := map[string]bool{}
	add := func(c string) {
		if len(c) > commLen {
			c = c[:commLen]
		}
		if c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	if m.builtin {
		for _, c := range attribution.AgentCommands() {
			add(c)
		}
	}
	for _, a := range m.agents {
		for _, c := range a.Commands {
			add(c)
		}
		if len(a.Scripts) > 0 {
			for _, c := range []string{"node", "nodejs", "bun", "deno", "python", "python3", "npx", "uvx", "env"} {
				add(c)
			}
		}
	}
	return out
}

// Match names the agent e is, if it is one: CHAPERONE_AGENT first, then
// the configuration's matchers, then the agents Chaperone knows.
func (m Matchers) Match(e Exec) (string, bool) {
	for _, kv := range e.Env {
		if v, ok := strings.CutPrefix(kv, AgentEnv+"="); ok && v != "" {
			return v, true
		}
	}
	for _, a := range m.agents {
		if matchAgent(a, e) {
			return a.Name, true
		}
	}
	if m.builtin {
		return attribution.KnownAgent(e.Argv, e.Exe)
	}
	return "", false
}

// matchAgent tells whether e runs one of a's commands or scripts.
func matchAgent(a config.AgentMatcher, e Exec) bool {
	names := []string{filepath.Base(e.Exe)}
	if len(e.Argv) > 0 {
		names = append(names, filepath.Base(e.Argv[0]))
	}
	for _, c := range a.Commands {
		for _, n := range names {
			if n == c {
				return true
			}
		}
	}
	for _, s := range a.Scripts {
		for _, arg := range e.Argv {
			if strings.Contains(arg, s) {
				return true
			}
		}
	}
	return false
}

// Classify reads a process from /proc and names the agent it is, if it
// is one.
func (m Matchers) Classify(pid int) (string, bool) {
	e, err := ReadExec(pid)
	if err != nil {
		return "", false
	}
	return m.Match(e)
}

// ReadExec reads what a process runs from /proc.
func ReadExec(pid int) (Exec, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	var e Exec
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return e, err
	}
	e.Argv = splitNUL(cmd)
	e.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		e.Env = splitNUL(env)
	}
	return e, nil
}

func splitNUL(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}
