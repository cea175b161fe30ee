package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/proxy"
)

func TestSummary(t *testing.T) {
	bus := event.NewBus()
	s := newSummary(bus.Subscribe("summary", event.SubscribeOptions{}))
	allow := event.Verdict{Action: event.Allow}
	deny := event.Verdict{Action: event.Deny, Rule: "deny_hosts", DecidedBy: event.DecidedByRule}
	authDeny := event.Verdict{Action: event.Deny, Rule: proxy.RuleProxyAuth, DecidedBy: event.DecidedByRule}
	for _, e := range []*event.Event{
		{Kind: event.KindSessionStart, SessionInfo: &event.Session{ID: "s"}, Verdict: allow},
		{Kind: event.KindConnect, Connect: &event.Connect{Host: "api.test", Port: 443}, Verdict: allow},
		{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "api.test"}, Verdict: allow},
		{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "api.test", Status: 200}, Verdict: allow},
		{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "api.test:443", Status: 200}, Verdict: allow},
		// One denied request to exfil: connect, tls and http events of one action.
		{Kind: event.KindConnect, Connect: &event.Connect{Host: "exfil.test", Port: 443}, Verdict: deny},
		{Kind: event.KindTLS, TLS: &event.TLS{ServerName: "exfil.test"}, Verdict: deny},
		{Kind: event.KindHTTP, HTTP: &event.HTTP{Host: "exfil.test", Status: 403}, Verdict: deny},
		// A denied connection with no request in it.
		{Kind: event.KindConnect, Connect: &event.Connect{Host: "ssh.test", Port: 22}, Verdict: deny},
		// Denied lookups (transparent mode): no connection follows them.
		{Kind: event.KindDNS, Session: "s", DNS: &event.DNS{Name: "exfil.test", Type: "A"}, Verdict: deny},
		{Kind: event.KindDNS, Session: "s", DNS: &event.DNS{Name: "exfil.test", Type: "AAAA"}, Verdict: deny}, // the same lookup
		{Kind: event.KindDNS, Session: "s", DNS: &event.DNS{Name: "dns-only.test", Type: "A"}, Verdict: deny},
		{Kind: event.KindDNS, Session: "s", DNS: &event.DNS{Name: "api.test", Type: "A"}, Verdict: allow},
		// git's libcurl asks the proxy without credentials first, gets a
		// 407, and asks again with them: a challenge, not a refusal.
		{Kind: event.KindConnect, Connect: &event.Connect{Host: "git.test", Port: 443, Via: "connect"}, Verdict: authDeny},
		{Kind: event.KindConnect, Session: "s", Connect: &event.Connect{Host: "git.test", Port: 443, Via: "connect"}, Verdict: allow},
		{Kind: event.KindHTTP, Session: "s", HTTP: &event.HTTP{Host: "git.test", Status: 200}, Verdict: allow},
		// A client that never sends the credentials was refused.
		{Kind: event.KindConnect, Connect: &event.Connect{Host: "noauth.test", Port: 443, Via: "connect"}, Verdict: authDeny},
	} {
		bus.Publish(e)
	}
	bus.Close()
	s.wait()
	var b strings.Builder
	s.print(&b, "s1", "/var/log/a.jsonl", 3)
	want := `chaperone: session s1 ended, exit status 3: 4 requests to 6 hosts, 5 denied
  api.test                         2 requests
  dns-only.test                    0 requests, name lookup denied (rule deny_hosts)
  exfil.test                       1 request, 1 denied, connection denied, name lookup denied (rule deny_hosts)
  git.test                         1 request
  noauth.test                      0 requests, connection denied (rule proxy_auth)
  ssh.test                         0 requests, connection denied (rule deny_hosts)
chaperone: audit log: /var/log/a.jsonl
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}
