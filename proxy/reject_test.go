package proxy

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
	"github.com/chaperone-dev/chaperone/policy"
)

// Loopback addresses of these tests: the proxy on .1, the origin on .2.
const (
	rejectProxyAddr  = "127.0.35.1:0"
	rejectOriginAddr = "127.0.35.2:0"
	rejectHost       = "pinned.test"
)

// passRejectingYAML is a policy that passes clients that refuse the CA
// through for rejectHost.
var passRejectingYAML = []byte(`rules:
  - name: pass-pinned
    on: tls
    when: tls.client_rejects_ca && host == "pinned.test"
    action: allow
    reason: pinned.test's clients pin its certificate
default: allow
`)

// rejectClient is a real client that trusts the origin's CA and not
// Chaperone's: get fetches https://target/ through the proxy.
type rejectClient struct {
	name string
	// alert is the tls event's alert; fails is how many of its
	// connections fail before the host counts as refusing the CA.
	alert string
	fails int
	get   func(t *testing.T, e *env, target, caFile string) (string, error)
}

func rejectClients() []rejectClient {
	curl := func(tlsArgs ...string) func(t *testing.T, e *env, target, caFile string) (string, error) {
		return func(t *testing.T, e *env, target, caFile string) (string, error) {
			args := append([]string{"-q", "-sS", "--max-time", "10", "--proxy", "http://" + proxyUser + ":" + testToken + "@" + e.addr,
				"--cacert", caFile}, tlsArgs...)
			return runClient(t, "curl", append(args, "https://"+target+"/")...)
		}
	}
	python := func(maxVersion string) func(t *testing.T, e *env, target, caFile string) (string, error) {
		return func(t *testing.T, e *env, target, caFile string) (string, error) {
			return runClient(t, "python3", "-c", pythonGet, e.addr, target, caFile, proxyUser+":"+testToken, maxVersion)
		}
	}
	node := func(maxVersion string) func(t *testing.T, e *env, target, caFile string) (string, error) {
		return func(t *testing.T, e *env, target, caFile string) (string, error) {
			return runClient(t, "node", "-e", nodeGet, e.addr, target, caFile, proxyUser+":"+testToken, maxVersion)
		}
	}
	goClient := func(maxVersion uint16) func(t *testing.T, e *env, target, caFile string) (string, error) {
		return func(t *testing.T, e *env, target, _ string) (string, error) {
			c, _, resp := e.connect(target, basicAuth(proxyUser, testToken))
			if resp != nil {
				return "", fmt.Errorf("CONNECT answered %d", resp.StatusCode)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			host, _, _ := net.SplitHostPort(target)
			tc := stdtls.Client(c, &stdtls.Config{RootCAs: e.upCA.Pool, ServerName: host, MaxVersion: maxVersion, NextProtos: []string{"http/1.1"}})
			if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n"); err != nil {
				return "", err
			}
			b, err := io.ReadAll(tc)
			if err != nil {
				return "", err
			}
			_, body, _ := bytes.Cut(b, []byte("\r\n\r\n"))
			return string(body), nil
		}
	}
	return []rejectClient{
		{"curl TLS 1.2", "unknown_ca", 1, curl("--tls-max", "1.2")},
		{"curl TLS 1.3", "unknown_ca", 1, curl("--tlsv1.3")},
		{"python3 TLS 1.2", "unknown_ca", 1, python("1.2")},
		{"python3 TLS 1.3", "unknown_ca", 1, python("1.3")},
		{"go TLS 1.2", "bad_certificate", 1, goClient(stdtls.VersionTLS12)},
		{"go TLS 1.3", "bad_certificate", 1, goClient(stdtls.VersionTLS13)},
		{"node TLS 1.2", "silent_close", 2, node("TLSv1.2")},
		{"node TLS 1.3", "silent_close", 2, node("TLSv1.3")},
	}
}

// pythonGet fetches https://TARGET/ through the proxy PROXY with urllib's
// http.client, trusting CAFILE only, TLS at most MAXVERSION.
const pythonGet = `
import base64, http.client, ssl, sys
proxy, target, cafile, auth, maxv = sys.argv[1:]
ctx = ssl.create_default_context(cafile=cafile)
if maxv == "1.2":
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
else:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
ph, pp = proxy.rsplit(":", 1)
host, port = target.rsplit(":", 1)
c = http.client.HTTPSConnection(ph, int(pp), context=ctx, timeout=10)
c.set_tunnel(host, int(port), headers={"Proxy-Authorization": "Basic " + base64.b64encode(auth.encode()).decode()})
c.request("GET", "/")
sys.stdout.write(c.getresponse().read().decode())
`

// nodeGet is pythonGet in Node: a CONNECT, then TLS over the socket.
const nodeGet = `
const net = require('net'), tls = require('tls'), fs = require('fs');
const [proxy, target, caFile, auth, maxVersion] = process.argv.slice(1);
const i = proxy.lastIndexOf(':'), j = target.lastIndexOf(':');
const host = target.slice(0, j);
const s = net.connect(+proxy.slice(i + 1), proxy.slice(0, i), () => {
  s.write('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\nProxy-Authorization: Basic ' +
    Buffer.from(auth).toString('base64') + '\r\n\r\n');
});
s.setTimeout(10000, () => { console.error('timeout'); process.exit(3); });
let head = '';
function onData(d) {
  head += d;
  if (!head.includes('\r\n\r\n')) return;
  s.removeListener('data', onData);
  if (!head.startsWith('HTTP/1.1 200')) { console.error(head); process.exit(2); }
  const c = tls.connect({ socket: s, servername: host, ca: fs.readFileSync(caFile), maxVersion, ALPNProtocols: ['http/1.1'] }, () => {
    c.write('GET / HTTP/1.1\r\nHost: ' + target + '\r\nConnection: close\r\n\r\n');
  });
  let out = '';
  c.on('data', d => out += d);
  c.on('end', () => {
    if (!out.startsWith('HTTP/1.1 200')) { console.error('no response'); process.exit(1); }
    process.stdout.write(out.slice(out.indexOf('\r\n\r\n') + 4));
    process.exit(0);
  });
  c.on('error', e => { console.error(e.message); process.exit(1); });
}
s.on('data', onData);
`

// runClient runs a client program with no proxy or CA settings of the
// environment's and returns its output, or an error with its stderr.
func runClient(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if v := os.Getenv("PYENV_ROOT"); v != "" {
		cmd.Env = append(cmd.Env, "PYENV_ROOT="+v)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

func rejectEngine(t *testing.T, yaml []byte) event.Decider {
	t.Helper()
	pol, err := policy.Parse("test", yaml)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(pol, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// rejectedTLS is what the tests compare of a tls event.
type rejectedTLS struct {
	SNI                             string
	Intercepted, Rejected, RejectCA bool
	Alert                           string
	Verdict                         event.Action
	Rule                            string
}

func rejectedOf(e *event.Event) rejectedTLS {
	return rejectedTLS{e.TLS.ServerName, e.TLS.Intercepted, e.TLS.ClientRejected, e.TLS.ClientRejectsCA, e.TLS.Alert, e.Verdict.Action, e.Verdict.Rule}
}

// TestClientRejectsCA: real clients that do not trust Chaperone's CA make
// a tls event that says so, with the alert they sent; their next
// connection to the host is refused under the default policy and passed
// through to the origin, whose certificate they trust, under a rule that
// allows it.
func TestClientRejectsCA(t *testing.T) {
	for _, c := range rejectClients() {
		for _, pc := range []struct {
			name string
			yaml []byte
			pass bool
		}{
			{"default policy", policy.DefaultPolicyYAML(), false},
			{"allow rule", passRejectingYAML, true},
		} {
			t.Run(c.name+"/"+pc.name, func(t *testing.T) {
				e := newEnv(t, envOptions{decider: rejectEngine(t, pc.yaml), addr: rejectProxyAddr})
				up := e.upstream(upstream.Options{Name: rejectHost, Addr: rejectOriginAddr, CA: e.upCA})
				caFile, err := e.upCA.WriteFile(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				target := hostPort(up)

				verdict, rule := event.Deny, "no-uninspected-tls"
				if pc.pass {
					verdict, rule = event.Allow, "pass-pinned"
				}
				for i := range c.fails {
					if body, err := c.get(t, e, target, caFile); err == nil {
						t.Fatalf("connection %d succeeded (%q); want the certificate refused", i+1, body)
					}
				}
				rej := e.rec.wait(t, "client_rejected tls", func(ev *event.Event) bool {
					return ev.Kind == event.KindTLS && ev.TLS.ClientRejected
				})
				want := rejectedTLS{SNI: rejectHost, Intercepted: true, Rejected: true, RejectCA: true, Alert: c.alert, Verdict: verdict, Rule: rule}
				if diff := cmp.Diff(want, rejectedOf(rej)); diff != "" {
					t.Errorf("rejection event (-want +got):\n%s", diff)
				}

				body, err := c.get(t, e, target, caFile)
				later := e.rec.wait(t, "later tls", func(ev *event.Event) bool {
					return ev.Kind == event.KindTLS && ev.TLS.ClientRejectsCA && !ev.TLS.ClientRejected
				})
				want = rejectedTLS{SNI: rejectHost, RejectCA: true, Verdict: verdict, Rule: rule}
				if diff := cmp.Diff(want, rejectedOf(later)); diff != "" {
					t.Errorf("later connection's event (-want +got):\n%s", diff)
				}
				switch {
				case pc.pass && err != nil:
					t.Errorf("later connection failed, want it passed through to the origin: %v", err)
				case pc.pass && !strings.HasPrefix(body, "hello from "+rejectHost):
					t.Errorf("later connection's body %q, want the origin's", body)
				case !pc.pass && err == nil:
					t.Errorf("later connection succeeded (%q), want it refused", body)
				}
				if n := len(rejections(e)); n != 1 {
					t.Errorf("%d client_rejected events, want 1:%s", n, describe(e.rec.all()))
				}
			})
		}
	}
}

func rejections(e *env) []*event.Event {
	var out []*event.Event
	for _, ev := range e.rec.kinds(event.KindTLS) {
		if ev.TLS.ClientRejected {
			out = append(out, ev)
		}
	}
	return out
}

// TestClientTrustsCA: clients that trust Chaperone's CA make no
// client_rejected event and stay intercepted.
func TestClientTrustsCA(t *testing.T) {
	e := newEnv(t, envOptions{decider: rejectEngine(t, policy.DefaultPolicyYAML()), addr: rejectProxyAddr})
	up := e.upstream(upstream.Options{Name: rejectHost, Addr: rejectOriginAddr, CA: e.upCA})
	caFile := filepath.Join(t.TempDir(), "chaperone.pem")
	if err := os.WriteFile(caFile, e.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, tr := e.client(false)
	tr.DisableKeepAlives = true
	for i := range 3 {
		resp, err := c.Get("https://" + hostPort(up) + "/")
		if err != nil {
			t.Fatalf("go client, request %d: %v", i, err)
		}
		resp.Body.Close()
		if _, err := runClient(t, "curl", "-q", "-sS", "--max-time", "10", "--proxy", "http://"+proxyUser+":"+testToken+"@"+e.addr,
			"--cacert", caFile, "https://"+hostPort(up)+"/"); err != nil {
			t.Fatalf("curl, request %d: %v", i, err)
		}
	}
	tlsEvents := e.rec.kinds(event.KindTLS)
	if len(tlsEvents) != 6 {
		t.Fatalf("%d tls events, want 6:%s", len(tlsEvents), describe(e.rec.all()))
	}
	for _, ev := range tlsEvents {
		if ev.TLS.ClientRejected || ev.TLS.ClientRejectsCA || !ev.TLS.Intercepted {
			t.Errorf("tls event %+v, want intercepted and no rejection", *ev.TLS)
		}
	}
}

// TestClientTrustsCARequestWithFinished: a client that trusts the CA and
// sends its first request with its TLS 1.3 Finished (which Go's server
// reads with the handshake), then closes, has spoken: closing so, again and
// again, is not a refusal.
func TestClientTrustsCARequestWithFinished(t *testing.T) {
	e := newEnv(t, envOptions{decider: rejectEngine(t, policy.DefaultPolicyYAML()), addr: rejectProxyAddr})
	up := e.upstream(upstream.Options{Name: rejectHost, Addr: rejectOriginAddr, CA: e.upCA})
	for i := range 3 {
		c, _, resp := e.connect(hostPort(up), basicAuth(proxyUser, testToken))
		if resp != nil {
			t.Fatalf("CONNECT answered %d", resp.StatusCode)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		cw := &coalescing{Conn: c}
		tc := stdtls.Client(cw, &stdtls.Config{RootCAs: e.caPool, ServerName: rejectHost, MinVersion: stdtls.VersionTLS13, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("connection %d: handshake: %v", i, err)
		}
		// Kept alive: the client closes, the proxy reads the end.
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+hostPort(up)+"\r\n\r\n")
		if err := cw.flush(); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		if !bytes.HasPrefix(b, []byte("hello from "+rejectHost)) {
			t.Fatalf("connection %d: %q", i, b)
		}
		tc.Close()
		waitNoTunnels(t, e) // the proxy read the end
	}
	for _, ev := range e.rec.kinds(event.KindTLS) {
		if ev.TLS.ClientRejected || ev.TLS.ClientRejectsCA || !ev.TLS.Intercepted {
			t.Errorf("tls event %+v, want intercepted and no rejection", *ev.TLS)
		}
	}
}

// coalescing holds a client's writes after its first (the ClientHello)
// until flush, so that what it writes after the handshake reaches the
// proxy with its Finished.
type coalescing struct {
	net.Conn
	n   int
	buf []byte
}

func (c *coalescing) Write(b []byte) (int, error) {
	if c.n++; c.n == 1 {
		return c.Conn.Write(b)
	}
	c.buf = append(c.buf, b...)
	return len(b), nil
}

func (c *coalescing) flush() error {
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// waitNoTunnels waits until the proxy's tunnels have all ended.
func waitNoTunnels(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.p.mu.Lock()
		n := len(e.p.tunnels)
		e.p.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientRejectsCAAllowedByDefault: under a policy with no rule for it
// that allows by default, a client that refuses the CA is passed through,
// and its event says why.
func TestClientRejectsCAAllowedByDefault(t *testing.T) {
	e := newEnv(t, envOptions{decider: rejectEngine(t, []byte("default: allow\n")), addr: rejectProxyAddr})
	up := e.upstream(upstream.Options{Name: rejectHost, Addr: rejectOriginAddr, CA: e.upCA})
	var get func(t *testing.T, e *env, target, caFile string) (string, error)
	for _, c := range rejectClients() {
		if c.name == "go TLS 1.2" {
			get = c.get
		}
	}
	if _, err := get(t, e, hostPort(up), ""); err == nil {
		t.Fatal("first connection succeeded; want the certificate refused")
	}
	// The proxy reads the client's alert after the client has given up:
	// the next connection is a later one once the rejection is recorded.
	e.rec.wait(t, "client_rejected tls", func(ev *event.Event) bool {
		return ev.Kind == event.KindTLS && ev.TLS.ClientRejected
	})
	body, err := get(t, e, hostPort(up), "")
	if err != nil || !strings.HasPrefix(body, "hello from "+rejectHost) {
		t.Fatalf("later connection: %q, %v; want it passed through to the origin", body, err)
	}
	later := e.rec.wait(t, "later tls", func(ev *event.Event) bool {
		return ev.Kind == event.KindTLS && ev.TLS.ClientRejectsCA && !ev.TLS.ClientRejected
	})
	if later.TLS.Intercepted || !later.Verdict.Allowed() || later.Verdict.Reason != rejectPassReason {
		t.Errorf("later event %+v %+v, want allowed, not intercepted, reason %q", later.Verdict, *later.TLS, rejectPassReason)
	}
}
