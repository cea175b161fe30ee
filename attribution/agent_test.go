package attribution

import (
	"strings"
	"testing"
)

func TestDetectAgent(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		exe  string
		want string
	}{
		// Agents by command name.
		{"claude", []string{"claude"}, "", "claude"},
		{"claude with args", []string{"claude", "-p", "fix the tests"}, "/usr/bin/node", "claude"},
		{"claude full path", []string{"/home/u/.local/bin/claude", "--resume"}, "", "claude"},
		{"claude native install", []string{"claude"}, "/home/u/.local/share/claude/versions/1.0.3", "claude"},
		{"codex", []string{"codex", "exec", "ls"}, "", "codex"},
		{"cursor-agent", []string{"cursor-agent", "-p", "hi"}, "", "cursor"},
		{"cursor", []string{"/usr/bin/cursor"}, "", "cursor"},
		{"aider", []string{"aider", "--model", "sonnet"}, "", "aider"},
		{"aider venv bin", []string{"/home/u/.venv/bin/aider"}, "", "aider"},
		{"gemini", []string{"gemini"}, "", "gemini"},
		{"goose", []string{"goose", "session"}, "", "goose"},
		{"opencode", []string{"opencode"}, "", "opencode"},
		{"amp", []string{"amp", "-x", "hi"}, "", "amp"},
		{"windows exe", []string{`C:\Users\u\AppData\Roaming\npm\Claude.CMD`}, "", "claude"},

		// Interpreters.
		{"node claude-code cli.js", []string{"node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"}, "", "claude"},
		{"node codex.js", []string{"node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"}, "", "codex"},
		{"node gemini", []string{"/usr/bin/node", "--no-warnings", "/opt/n/lib/node_modules/@google/gemini-cli/dist/index.js"}, "", "gemini"},
		{"node options with values", []string{"node", "--require", "x.js", "--max-old-space-size=4096", "/x/node_modules/@anthropic-ai/claude-code/cli.js"}, "", "claude"},
		{"node pnpm store", []string{"node", "/h/.pnpm/@anthropic-ai+claude-code@1.0.0/node_modules/@anthropic-ai/claude-code/cli.js"}, "", "claude"},
		{"node script by name", []string{"node", "/home/u/bin/claude"}, "", "claude"},
		{"node opencode", []string{"node", "/x/node_modules/opencode-ai/bin/opencode"}, "", "opencode"},
		{"node amp", []string{"node", "/x/node_modules/@sourcegraph/amp/dist/main.js"}, "", "amp"},
		{"node eval", []string{"node", "-e", "require('claude')"}, "", "node"},
		{"node other script", []string{"node", "server.js"}, "", "node"},
		{"node bare", []string{"node"}, "", "node"},
		{"python3 -m aider", []string{"python3", "-m", "aider", "--yes"}, "", "aider"},
		{"python -maider.main", []string{"python", "-maider.main"}, "", "aider"},
		{"python -Im aider", []string{"/usr/bin/python3.12", "-I", "-u", "-Im", "aider"}, "", "aider"},
		{"python -W then -m", []string{"python3", "-W", "ignore", "-m", "aider"}, "", "aider"},
		{"python script bin aider", []string{"python3", "/home/u/.local/bin/aider"}, "", "aider"},
		{"python site-packages", []string{"python3", "/usr/lib/python3/dist-packages/aider/__main__.py"}, "", "aider"},
		{"python -c", []string{"python3", "-c", "import aider"}, "", "python3"},
		{"python -m pip", []string{"python3", "-m", "pip", "install", "aider-chat"}, "", "python3"},
		{"python other", []string{"python3", "train.py"}, "", "python3"},
		{"pypy", []string{"pypy3", "-m", "aider"}, "", "aider"},
		{"deno npm spec", []string{"deno", "run", "-A", "npm:@google/gemini-cli"}, "", "gemini"},
		{"bun script", []string{"bun", "/x/node_modules/@openai/codex/bin/codex.js"}, "", "codex"},

		// Package runners.
		{"npx claude-code", []string{"npx", "@anthropic-ai/claude-code"}, "", "claude"},
		{"npx -y versioned", []string{"npx", "-y", "@openai/codex@0.1.2", "exec", "x"}, "", "codex"},
		{"npx --package", []string{"npx", "--package=@google/gemini-cli", "gemini"}, "", "gemini"},
		{"npx -p then command", []string{"npx", "-p", "@anthropic-ai/claude-code", "run-it"}, "", "claude"},
		{"npx other", []string{"npx", "prettier", "--write", "."}, "", "npx"},
		{"npx nothing", []string{"npx"}, "", "npx"},
		{"pnpm dlx", []string{"pnpm", "dlx", "@anthropic-ai/claude-code"}, "", "claude"},
		{"pnpm install", []string{"pnpm", "install"}, "", "pnpm"},
		{"npm exec --", []string{"npm", "exec", "--", "opencode-ai@latest"}, "", "opencode"},
		{"yarn dlx", []string{"yarn", "dlx", "@sourcegraph/amp"}, "", "amp"},
		{"bunx", []string{"bunx", "@google/gemini-cli"}, "", "gemini"},
		{"bun x", []string{"bun", "x", "@openai/codex"}, "", "codex"},
		{"uvx --from", []string{"uvx", "--from", "aider-chat", "aider"}, "", "aider"},
		{"uvx --from= only", []string{"uvx", "--python", "3.12", "--from=aider-chat[playwright]", "other"}, "", "aider"},
		{"uv tool run", []string{"uv", "tool", "run", "aider"}, "", "aider"},
		{"uv run python -m", []string{"uv", "run", "--with", "x", "python", "-m", "aider"}, "", "aider"},
		{"uv run -m", []string{"uv", "run", "-m", "aider"}, "", "aider"},
		{"uv sync", []string{"uv", "sync"}, "", "uv"},
		{"pipx run", []string{"pipx", "run", "--spec", "aider-chat==0.80", "aider"}, "", "aider"},

		// Launchers.
		{"env", []string{"/usr/bin/env", "-u", "X", "FOO=1", "claude"}, "", "claude"},
		{"env -S", []string{"env", "-S", "node --no-warnings /x/node_modules/@openai/codex/bin/codex.js", "exec"}, "", "codex"},
		{"env npx", []string{"env", "npx", "-y", "@anthropic-ai/claude-code"}, "", "claude"},
		{"env only", []string{"env", "A=1"}, "", "env"},

		// Not an agent: the base name of argv[0], else of exe.
		{"bash", []string{"/bin/bash", "-c", "claude"}, "/usr/bin/bash", "bash"},
		{"path not agent", []string{"/home/claude/bin/make"}, "", "make"},
		{"project dir named like an agent", []string{"node", "/home/u/claude-code/app.js"}, "", "node"},
		{"exe decides", []string{"node", "-e", "1"}, "/home/u/.local/share/cursor-agent/versions/1/node", "cursor"},
		{"exe base", []string{"x"}, "/usr/local/bin/codex", "codex"},
		{"empty argv uses exe", nil, "/usr/bin/rsync", "rsync"},
		{"empty argv0 uses exe", []string{""}, "/usr/bin/rsync", "rsync"},
		{"empty argv agent exe", []string{}, "/usr/local/bin/gemini", "gemini"},
		{"all empty", nil, "", ""},
		{"root path", []string{"/"}, "", "/"},
		{"trailing slash", []string{"/usr/bin/tool/"}, "", "tool"},
		{"wrappers nest too deep", []string{"env", "env", "env", "env", "env", "env", "env", "env", "env", "claude"}, "", "env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectAgent(tt.argv, tt.exe); got != tt.want {
				t.Errorf("DetectAgent(%q, %q) = %q, want %q", tt.argv, tt.exe, got, tt.want)
			}
		})
	}
}

func FuzzDetectAgent(f *testing.F) {
	// argv is NUL-separated, as in /proc/PID/cmdline.
	f.Add("claude\x00-p\x00hi", "")
	f.Add("node\x00/usr/lib/node_modules/@openai/codex/bin/codex.js", "/usr/bin/node")
	f.Add("python3\x00-Im\x00aider", "")
	f.Add("npx\x00-y\x00--package=@google/gemini-cli@1\x00gemini", "")
	f.Add("env\x00-S\x00uv run -m aider", "")
	f.Add("uvx\x00--from", "")
	f.Add("python\x00-m", "")
	f.Add("", "/usr/bin/rsync")
	f.Add("/", `C:\`)
	f.Add("npx\x00@\x00@/", "@@")
	f.Fuzz(func(t *testing.T, cmdline, exe string) {
		var argv []string
		if cmdline != "" {
			argv = strings.Split(cmdline, "\x00")
		}
		got := DetectAgent(argv, exe)
		switch got {
		case "claude", "codex", "cursor", "aider", "gemini", "goose", "opencode", "amp":
			return
		}
		want := baseName(exe)
		if len(argv) > 0 && argv[0] != "" {
			want = baseName(argv[0])
		}
		if got != want {
			t.Errorf("DetectAgent(%q, %q) = %q: neither an agent nor the fallback %q", argv, exe, got, want)
		}
		if got == "" && ((len(argv) > 0 && argv[0] != "") || exe != "") {
			t.Errorf("DetectAgent(%q, %q) = \"\" with a name to fall back to", argv, exe)
		}
	})
}
