package daemon

import (
	"slices"
	"testing"

	"github.com/chaperone-dev/chaperone/config"
)

func TestMatch(t *testing.T) {
	custom := []config.AgentMatcher{
		{Name: "acme", Commands: []string{"acme-agent"}},
		{Name: "scripted", Scripts: []string{"@acme/agent/cli.js"}},
	}
	tests := []struct {
		name    string
		builtin bool
		exec    Exec
		want    string // "" for no agent
	}{
		{"claude by name", true, Exec{Exe: "/usr/local/bin/claude", Argv: []string{"claude"}}, "claude"},
		{"claude code through node", true, Exec{Exe: "/usr/bin/node", Argv: []string{"node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"}}, "claude"},
		{"codex", true, Exec{Exe: "/usr/bin/codex", Argv: []string{"codex", "exec"}}, "codex"},
		{"aider through python", true, Exec{Exe: "/usr/bin/python3.11", Argv: []string{"python3", "-m", "aider"}}, "aider"},
		{"copilot", true, Exec{Exe: "/usr/bin/copilot", Argv: []string{"copilot"}}, "copilot"},
		{"node server is no agent", true, Exec{Exe: "/usr/bin/node", Argv: []string{"node", "server.js"}}, ""},
		{"built-ins off", false, Exec{Exe: "/usr/local/bin/claude", Argv: []string{"claude"}}, ""},
		{"the environment names it", false, Exec{Exe: "/bin/bash", Argv: []string{"bash"}, Env: []string{"HOME=/root", "CHAPERONE_AGENT=mine"}}, "mine"},
		{"an empty name is none", false, Exec{Exe: "/bin/bash", Argv: []string{"bash"}, Env: []string{"CHAPERONE_AGENT="}}, ""},
		{"config command", false, Exec{Exe: "/opt/acme/bin/acme-agent", Argv: []string{"acme-agent", "--fast"}}, "acme"},
		{"config script", false, Exec{Exe: "/usr/bin/node", Argv: []string{"node", "/usr/lib/node_modules/@acme/agent/cli.js"}}, "scripted"},
		{"config before built-ins", true, Exec{Exe: "/opt/acme/bin/acme-agent", Argv: []string{"acme-agent"}}, "acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMatchers(config.Config{BuiltinAgents: tt.builtin, Agents: custom})
			got, ok := m.Match(tt.exec)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Match = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	m := NewMatchers(config.Config{Agents: []config.AgentMatcher{
		{Name: "long", Commands: []string{"a-very-long-agent-name"}},
		{Name: "scripted", Scripts: []string{"cli.js"}},
	}})
	got := m.Candidates()
	for _, want := range []string{"a-very-long-age", "node", "python3"} {
		if !slices.Contains(got, want) {
			t.Errorf("candidates %q lack %q", got, want)
		}
	}
	for _, c := range got {
		if len(c) > 15 {
			t.Errorf("candidate %q is longer than the kernel's command name", c)
		}
	}
	if slices.Contains(got, "claude") {
		t.Errorf("built-ins off, yet claude is a candidate: %q", got)
	}
	if got := NewMatchers(config.Config{BuiltinAgents: true}).Candidates(); !slices.Contains(got, "claude") || !slices.Contains(got, "codex") {
		t.Errorf("built-in candidates %q lack claude or codex", got)
	}
}
