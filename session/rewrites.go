package session

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/policy"
	"github.com/chaperone-dev/chaperone/proxy"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// taskBoard remembers each session's current task: what the agent was
// last asked to do, as its most recent LLM request shows it.
type taskBoard struct {
	mu    sync.Mutex
	tasks map[string]string
}

func (b *taskBoard) set(session, task string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tasks == nil {
		b.tasks = map[string]string{}
	}
	b.tasks[session] = task
}

func (b *taskBoard) get(session string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tasks[session]
}

// sessionRewrites builds what the proxy changes in one session's requests:
// secret detection and redaction (with the policy's allowlists), brokered
// credentials, identity headers. agentEnv is what the agent's environment
// gets instead of the credentials (NAME=placeholder), and hideEnv the
// variables it must not inherit (those holding real values).
func sessionRewrites(cfg config.Config, pol *policy.Policy, current func() *policy.Policy, session, agent string,
	tasks *taskBoard, getenv func(string) string) (rw *proxy.Rewrites, agentEnv, hideEnv []string, knownCreds []inject.Credential, err error) {
	scanner, err := secrets.NewScanner(secrets.Options{AllowRules: pol.Secrets.AllowRules, AllowLiterals: pol.Secrets.AllowLiterals})
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("session: secrets: %w", err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	rw = &proxy.Rewrites{
		Redactor: secrets.NewRedactor(scanner, key),
		Scanner:  scanner,
		Restore:  cfg.RestoreSecrets,
		LLMHosts: cfg.LLMHosts,
		RewriteParams: func(rule string) map[string]any {
			for _, r := range current().Rules {
				if r.Name == rule {
					return r.Rewrite
				}
			}
			return nil
		},
		Task: func(task string) { tasks.set(session, task) },
	}
	if presets := cfg.IdentityPresets(); len(presets) > 0 {
		rw.IdentityPresets = presets
		rw.Identity = inject.Identity{Session: session, Agent: agent}
		rand.Read(rw.Identity.TraceID[:])
		if len(cfg.IdentityHosts) > 0 {
			hosts, err := inject.NewHostMatcher(cfg.IdentityHosts)
			if err != nil {
				return nil, nil, nil, nil, fmt.Errorf("session: identity_hosts: %w", err)
			}
			rw.IdentityHost = hosts.Match
		}
	}
	if len(cfg.Credentials) == 0 {
		return rw, nil, nil, nil, nil
	}
	creds := make([]inject.Credential, 0, len(cfg.Credentials))
	for _, c := range cfg.Credentials {
		v, err := credentialValue(c, getenv)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		creds = append(creds, inject.Credential{Name: c.Name, Value: v, Hosts: c.Hosts, Header: c.Header, Format: c.Format, User: c.User})
		if c.Env != "" {
			hideEnv = append(hideEnv, c.Env)
		}
	}
	b, err := inject.NewBroker(creds, rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("session: credentials: %w", err)
	}
	rw.Credentials = b
	// Their real values are secrets the session knows from the start: found
	// (or their encodings) anywhere but on their hosts, they are refused.
	for _, c := range creds {
		rw.Redactor.Known().AddCredential(c.Name, c.Value)
	}
	knownCreds = creds
	for _, c := range cfg.Credentials {
		names := c.AgentEnv
		if len(names) == 0 && c.Env != "" {
			names = []string{c.Env}
		}
		for _, n := range names {
			agentEnv = append(agentEnv, n+"="+b.Placeholder(c.Name))
		}
	}
	return rw, agentEnv, hideEnv, knownCreds, nil
}

// credentialValue reads a brokered credential's real value: from
// Chaperone's environment or from a file of the user's.
func credentialValue(c config.Credential, getenv func(string) string) (string, error) {
	if c.Env != "" {
		v := getenv(c.Env)
		if v == "" {
			return "", fmt.Errorf("session: credential %s: the environment variable %s is not set", c.Name, c.Env)
		}
		return v, nil
	}
	b, err := os.ReadFile(c.File)
	if err != nil {
		return "", fmt.Errorf("session: credential %s: %w", c.Name, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("session: credential %s: %s is empty", c.Name, c.File)
	}
	return v, nil
}

// agentRewrites are the rewrites of an agent a daemon found: the
// daemon's, with a redaction key, known values, identity and trace of the
// agent's session's own.
func (s *Session) agentRewrites(id, agent, user string) *proxy.Rewrites {
	base := s.rw
	key := make([]byte, 32)
	rand.Read(key)
	rw := &proxy.Rewrites{
		Redactor:        secrets.NewRedactor(base.Scanner, key),
		Scanner:         base.Scanner,
		Restore:         base.Restore,
		LLMHosts:        base.LLMHosts,
		Credentials:     base.Credentials,
		IdentityPresets: base.IdentityPresets,
		IdentityHost:    base.IdentityHost,
		RewriteParams:   base.RewriteParams,
		Task:            func(task string) { s.tasks.set(id, task) },
	}
	if len(rw.IdentityPresets) > 0 {
		rw.Identity = inject.Identity{Session: id, Agent: agent, User: user}
		rand.Read(rw.Identity.TraceID[:])
	}
	for _, c := range s.creds {
		rw.Redactor.Known().AddCredential(c.Name, c.Value)
	}
	return rw
}
