package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/internal/upstream"
)

// wsEcho is a WebSocket server that echoes text messages and keeps them.
type wsEcho struct {
	mu   sync.Mutex
	msgs []string
}

func (s *wsEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := (&websocket.Upgrader{EnableCompression: true}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		op, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, string(b))
		s.mu.Unlock()
		c.WriteMessage(op, b)
	}
}

// A program in a session talks to a WebSocket server that is not an LLM
// API: its messages pass and are recorded as ws records, an MCP
// tools/call names its tool, and the one that carries a secret is refused
// by the default policy with 1008; the server never reads it and the audit
// log never holds it.
func TestWebSocketEndToEnd(t *testing.T) {
	for _, mode := range []string{"proxy", "transparent"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "transparent" {
				needTransparent(t)
			}
			w := newWorld(t)
			echo := &wsEcho{}
			srv := startUpstream(t, upstream.Options{Name: "chat.example.test", Addr: "127.0.44.3:0", CA: w.ca, HTTP1Only: true, Handler: echo})
			tok := fakeGitHubToken(t)
			call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}`
			args := []string{"run", "--mode", mode, "--mediate-files=false", "--upstream-ca", w.caFile,
				"--resolve", "chat.example.test:" + srv.Addr.Addr().String(), "--log", w.log}
			if mode == "transparent" {
				args = append(args, "--dns-upstream", fakeDNSUpstream(t).String())
			}
			args = append(args, "--", sdkAgent, "ws-say", fmt.Sprintf("wss://chat.example.test:%d/room", srv.Addr.Port()),
				"hello", call, "token "+tok, "never sent")
			r := w.chaperone(nil, args...)
			hide := func(s string) string { return strings.ReplaceAll(s, tok, "<token>") }
			if r.code != 0 {
				t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, hide(r.stdout), hide(r.stderr))
			}
			want := "reply: hello\nreply: " + call + "\nclose: 1008 chaperone: denied by rule no-secrets-over-websocket: the message carries a secret (github-pat in WebSocket message)\n"
			if r.stdout != want {
				t.Errorf("the agent printed (-want +got):\n%s", cmp.Diff(want, hide(r.stdout)))
			}
			echo.mu.Lock()
			got := echo.msgs
			echo.mu.Unlock()
			if diff := cmp.Diff([]string{"hello", call}, got); diff != "" {
				t.Errorf("the server read (-want +got):\n%s", diff)
			}
			logBytes, err := os.ReadFile(w.log)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(logBytes, []byte(tok)) {
				t.Error("the secret is in the audit log")
			}
			type rec struct {
				Verdict              event.Action
				Rule                 string
				Direction, Text, MCP string
				Secrets              []string
			}
			var recs []rec
			for _, x := range w.records() {
				if x.Kind == event.KindWS {
					recs = append(recs, rec{x.Verdict, x.Rule, x.Direction, hide(x.Text), x.MCPTool, x.Secrets})
				}
			}
			if len(recs) == 5 && strings.HasPrefix(recs[4].Text, "token [REDACTED:github-pat:") {
				recs[4].Text = "token [REDACTED]"
			}
			wantRecs := []rec{
				{event.Allow, "", "send", "hello", "", nil},
				{event.Allow, "", "receive", "hello", "", nil},
				{event.Allow, "", "send", call, "search", nil},
				{event.Allow, "", "receive", call, "search", nil}, // the echo: a tools/call of the server's
				{event.Deny, "no-secrets-over-websocket", "send", "token [REDACTED]", "", []string{"github-pat"}},
			}
			if diff := cmp.Diff(wantRecs, recs); diff != "" {
				t.Errorf("ws records (-want +got):\n%s", diff)
			}
		})
	}
}
