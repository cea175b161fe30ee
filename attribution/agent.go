package attribution

import (
	"slices"
	"strings"
)

// maxWrappers bounds how many launchers (env, npx, uv run, an interpreter)
// DetectAgent looks through before it gives up.
const maxWrappers = 8

// DetectAgent names the coding agent that the command argv runs: one of
// "claude" (Claude Code), "codex", "cursor", "aider", "gemini", "goose",
// "opencode" or "amp". It looks through env, interpreters (node, bun, deno,
// python) and package runners (npx, pnpm dlx, yarn dlx, bunx, npm exec, uvx,
// uv run, pipx run), so "python3 -m aider", "npx @anthropic-ai/claude-code"
// and "node /usr/lib/node_modules/@openai/codex/bin/codex.js" are all
// recognised. exe, the resolved executable (event.Process.Exe), is consulted
// when argv says nothing.
//
// When no agent is recognised it returns the base name of argv[0], or of exe
// when argv[0] is missing or empty; "" only when both are empty. It
// reads nothing: argv is untrusted and only matched.
func DetectAgent(argv []string, exe string) string {
	if a := agentOfCommand(argv); a != "" {
		return a
	}
	if a := agentOf(exe); a != "" {
		return a
	}
	if len(argv) > 0 && argv[0] != "" {
		return baseName(argv[0])
	}
	return baseName(exe)
}

// KnownAgent is DetectAgent without its fallback: the agent argv (or exe)
// runs, and false for a command that is no agent it knows.
func KnownAgent(argv []string, exe string) (string, bool) {
	if a := agentOfCommand(argv); a != "" {
		return a, true
	}
	if a := agentOf(exe); a != "" {
		return a, true
	}
	return "", false
}

// AgentCommands are the command names DetectAgent knows agents by, and
// the launchers and interpreters it looks through: the names a process
// that may be an agent runs as.
func AgentCommands() []string {
	return []string{
		"claude", "claude-code", "codex", "cursor-agent", "cursor", "aider", "gemini", "goose", "opencode", "amp", "copilot", "github-copilot-cli",
		"node", "nodejs", "bun", "bunx", "deno", "tsx", "ts-node", "npx", "npm", "pnpm", "yarn",
		"python", "python3", "python3.9", "python3.10", "python3.11", "python3.12", "python3.13", "python3.14",
		"uv", "uvx", "pipx",
	}
}

// agentOfCommand looks through launchers in argv to the program they run.
func agentOfCommand(argv []string) string {
	// Options of package runners that take the next argument as their
	// value, and those whose value is the package providing the command.
	var (
		npxValueOpts    = []string{"-p", "--package", "-c", "--call", "-w", "--workspace", "--registry", "--cache", "--userconfig", "-C", "--dir", "--cwd"}
		npxPackageOpts  = []string{"-p", "--package"}
		uvValueOpts     = []string{"--from", "--with", "--with-editable", "--with-requirements", "-p", "--python", "--index", "--index-url", "--extra-index-url", "--directory", "--project", "--package", "--env-file", "--extra", "--group"}
		uvPackageOpts   = []string{"--from"}
		pipxValueOpts   = []string{"--spec", "--python", "--index-url", "--pip-args"}
		pipxPackageOpts = []string{"--spec"}
	)
	for range maxWrappers {
		if len(argv) == 0 {
			return ""
		}
		if a := agentOf(argv[0]); a != "" {
			return a
		}
		name, args := stem(argv[0]), argv[1:]
		var pkgs []string
		switch {
		case name == "env":
			argv = envCommand(args)
			continue
		case isPython(name):
			return agentOfPython(args)
		case name == "node" || name == "nodejs" || name == "tsx" || name == "ts-node":
			return agentOf(nodeScript(args))
		case name == "deno":
			if len(args) > 0 && args[0] == "run" {
				args = args[1:]
			}
			return agentOf(nodeScript(args))
		case name == "bun":
			switch {
			case len(args) > 0 && args[0] == "x":
				pkgs, argv = runnerCommand(args[1:], npxValueOpts, npxPackageOpts)
			case len(args) > 0 && args[0] == "run":
				return agentOf(nodeScript(args[1:]))
			default:
				return agentOf(nodeScript(args))
			}
		case name == "npx" || name == "pnpx" || name == "bunx":
			pkgs, argv = runnerCommand(args, npxValueOpts, npxPackageOpts)
		case name == "npm" || name == "pnpm" || name == "yarn":
			if len(args) == 0 || (args[0] != "exec" && args[0] != "x" && args[0] != "dlx") {
				return ""
			}
			pkgs, argv = runnerCommand(args[1:], npxValueOpts, npxPackageOpts)
		case name == "uvx":
			pkgs, argv = runnerCommand(args, uvValueOpts, uvPackageOpts)
		case name == "uv":
			switch {
			case len(args) > 1 && args[0] == "tool" && args[1] == "run":
				args = args[2:]
			case len(args) > 0 && (args[0] == "run" || args[0] == "x"):
				args = args[1:]
			default:
				return ""
			}
			if len(args) > 0 && strings.HasPrefix(args[0], "-m") {
				return agentOfPython(args) // uv run -m aider
			}
			pkgs, argv = runnerCommand(args, uvValueOpts, uvPackageOpts)
		case name == "pipx":
			if len(args) == 0 || args[0] != "run" {
				return ""
			}
			pkgs, argv = runnerCommand(args[1:], pipxValueOpts, pipxPackageOpts)
		default:
			return ""
		}
		for _, p := range pkgs {
			if a := agentOf(p); a != "" {
				return a
			}
		}
	}
	return ""
}

// runnerCommand parses the options of a command that runs another command
// (npx, uvx, pipx run): it returns the values of the package options and
// the command line that follows the options.
func runnerCommand(args []string, valueOpts, packageOpts []string) (pkgs, cmd []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return pkgs, args[i+1:]
		case strings.HasPrefix(a, "--") && strings.Contains(a, "="):
			opt, val, _ := strings.Cut(a, "=")
			if slices.Contains(packageOpts, opt) {
				pkgs = append(pkgs, val)
			}
		case slices.Contains(valueOpts, a):
			if i+1 < len(args) && slices.Contains(packageOpts, a) {
				pkgs = append(pkgs, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-"):
			// A flag (-y, --yes, --quiet).
		default:
			return pkgs, args[i:]
		}
	}
	return pkgs, nil
}

// envCommand returns the command env runs: what follows its options and
// NAME=value assignments.
func envCommand(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return args[i+1:]
		case a == "-S" || a == "--split-string":
			if i+1 < len(args) {
				return append(strings.Fields(args[i+1]), args[i+2:]...)
			}
			return nil
		case strings.HasPrefix(a, "--split-string="):
			return append(strings.Fields(strings.TrimPrefix(a, "--split-string=")), args[i+1:]...)
		case a == "-u" || a == "--unset" || a == "-C" || a == "--chdir":
			i++
		case strings.HasPrefix(a, "-"):
		case strings.Contains(a, "="):
		default:
			return args[i:]
		}
	}
	return nil
}

// nodeScript returns the script a node-like interpreter runs, or "" when it
// runs inline code, stdin or nothing.
func nodeScript(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case a == "-" || a == "-e" || a == "-p" || a == "-pe" || a == "--eval" || a == "--print" ||
			strings.HasPrefix(a, "--eval=") || strings.HasPrefix(a, "--print="):
			return ""
		case a == "-r" || a == "--require" || a == "--import" || a == "--loader" ||
			a == "--experimental-loader" || a == "-C" || a == "--conditions" ||
			a == "--input-type" || a == "--title" || a == "--env-file" || a == "--config":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// agentOfPython names the agent that python's arguments run: a module
// (-m aider) or a script (.../bin/aider).
func agentOfPython(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return agentOf(args[i+1])
			}
			return ""
		case a == "-":
			return ""
		case a == "--check-hash-based-pycs":
			i++
		case strings.HasPrefix(a, "--"):
		case strings.HasPrefix(a, "-"):
			// Short options combine (-Im aider, -maider); m, c, W and X
			// take the rest of the argument or the next one as their value.
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'm', 'c', 'W', 'X':
					val := a[j+1:]
					if val == "" && i+1 < len(args) {
						i++
						val = args[i]
					}
					if a[j] == 'm' {
						mod, _, _ := strings.Cut(val, ".")
						return agentByName(strings.ToLower(mod))
					}
					if a[j] == 'c' {
						return ""
					}
					j = len(a)
				}
			}
		default:
			return agentOf(a)
		}
	}
	return ""
}

// agentOf names the agent that a command name, a script path or a package
// spec stands for, or returns "".
func agentOf(s string) string {
	if s == "" {
		return ""
	}
	if a := agentByName(stem(s)); a != "" {
		return a
	}
	return agentByPackage(s)
}

// agentByName names the agent whose command is name (lower case, without
// extension).
func agentByName(name string) string {
	switch name {
	case "claude", "claude-code":
		return "claude"
	case "codex":
		return "codex"
	case "cursor-agent", "cursor":
		return "cursor"
	case "aider":
		return "aider"
	case "gemini":
		return "gemini"
	case "goose":
		return "goose"
	case "opencode":
		return "opencode"
	case "amp":
		return "amp"
	case "copilot", "github-copilot-cli":
		return "copilot"
	}
	return ""
}

// agentByPackage names the agent whose package s is, or s is a path inside:
// "@anthropic-ai/claude-code@1.0.0", "npm:@openai/codex",
// ".../node_modules/@google/gemini-cli/dist/index.js",
// ".../site-packages/aider/__main__.py".
func agentByPackage(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, `\`, "/"))
	s = strings.TrimPrefix(s, "npm:")
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		pkg := seg
		if strings.HasPrefix(seg, "@") && i+1 < len(segs) {
			pkg = seg + "/" + segs[i+1]
		}
		if a := agentByPackageName(stripVersion(pkg)); a != "" {
			return a
		}
		if seg == "aider" && i > 0 && (segs[i-1] == "site-packages" || segs[i-1] == "dist-packages") {
			return "aider"
		}
	}
	return ""
}

// agentByPackageName names the agent an npm or PyPI package installs.
func agentByPackageName(pkg string) string {
	switch pkg {
	case "@anthropic-ai/claude-code":
		return "claude"
	case "@openai/codex":
		return "codex"
	case "@google/gemini-cli":
		return "gemini"
	case "opencode-ai":
		return "opencode"
	case "@sourcegraph/amp":
		return "amp"
	case "aider-chat", "aider-install":
		return "aider"
	case "cursor-agent":
		return "cursor"
	}
	return ""
}

// stripVersion removes the version from a package spec: "@a/b@1" -> "@a/b",
// "aider-chat==0.80" -> "aider-chat".
func stripVersion(pkg string) string {
	if i := strings.LastIndex(pkg, "@"); i > 0 {
		pkg = pkg[:i]
	}
	if i := strings.IndexAny(pkg, "=<>~!["); i > 0 {
		pkg = pkg[:i]
	}
	return pkg
}

// isPython reports whether name is a Python interpreter: python, python3,
// python3.12, pypy3, py (the Windows launcher).
func isPython(name string) bool {
	for _, p := range []string{"python", "pypy"} {
		if v, ok := strings.CutPrefix(name, p); ok {
			return strings.Trim(v, "0123456789.") == ""
		}
	}
	return name == "py"
}

// stem is the lower-case base name of a command or script without a
// Windows or script extension: "/usr/bin/Claude.exe" -> "claude".
func stem(s string) string {
	b := strings.ToLower(baseName(s))
	for _, ext := range []string{".exe", ".cmd", ".bat", ".ps1", ".js", ".mjs", ".cjs", ".ts", ".py"} {
		if v, ok := strings.CutSuffix(b, ext); ok {
			return v
		}
	}
	return b
}

// baseName is the last element of a slash- or backslash-separated path.
func baseName(s string) string {
	t := strings.TrimRight(s, `/\`)
	if t == "" {
		return s // all separators (or empty): its own name
	}
	s = t
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		return s[i+1:]
	}
	return s
}
