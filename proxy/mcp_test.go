package proxy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMCP(t *testing.T) {
	long := strings.Repeat("x", maxMCPName+1)
	tests := []struct {
		name string
		in   string
		want mcpMessage
		ok   bool
	}{
		{"tools/call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{}}}`, mcpMessage{ID: "7", Method: "tools/call", Tool: "search"}, true},
		{"string id", ` {"jsonrpc":"2.0","id":"a-1","method":"tools/list"}`, mcpMessage{ID: `"a-1"`, Method: "tools/list"}, true},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, mcpMessage{Method: "notifications/initialized"}, true},
		{"result", `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`, mcpMessage{ID: "7", Result: true}, true},
		{"error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}`, mcpMessage{ID: "7", Result: true}, true},
		{"result without id", `{"jsonrpc":"2.0","id":null,"result":{}}`, mcpMessage{}, false},
		{"not 2.0", `{"jsonrpc":"1.0","id":1,"method":"tools/call"}`, mcpMessage{}, false},
		{"no jsonrpc", `{"id":1,"method":"tools/call"}`, mcpMessage{}, false},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]`, mcpMessage{}, false},
		{"not JSON", `{"jsonrpc":"2.0",`, mcpMessage{}, false},
		{"method too long", `{"jsonrpc":"2.0","id":1,"method":"` + long + `"}`, mcpMessage{}, false},
		{"tool too long", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + long + `"}}`, mcpMessage{ID: "1", Method: "tools/call"}, true},
		{"neither", `{"jsonrpc":"2.0","id":1}`, mcpMessage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMCP([]byte(tt.in))
			if ok != tt.ok {
				t.Errorf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseMCP (-want +got):\n%s", diff)
			}
		})
	}
}

// Results are matched to the requests of the other side by id; a result
// matches once; the pending requests are bounded.
func TestMCPCalls(t *testing.T) {
	var c mcpCalls
	call := func(id, tool string) mcpMessage { return mcpMessage{ID: id, Method: "tools/call", Tool: tool} }
	res := func(id string) mcpMessage { return mcpMessage{ID: id, Result: true} }
	type got struct{ Method, Tool string }
	note := func(m mcpMessage, out bool) got { a, b := c.note(m, out); return got{a, b} }
	steps := []struct {
		m    mcpMessage
		out  bool
		want got
	}{
		{call("1", "search"), true, got{"tools/call", "search"}},
		{call("2", "fetch"), true, got{"tools/call", "fetch"}},
		{res("2"), true, got{}}, // the client's own request: not an answer to itself
		{res("2"), false, got{"tools/call", "fetch"}},
		{res("2"), false, got{}}, // answered already
		{res("1"), false, got{"tools/call", "search"}},
		{call("1", "ask"), false, got{"tools/call", "ask"}}, // the server asks the client
		{res("1"), true, got{"tools/call", "ask"}},
	}
	for i, s := range steps {
		if diff := cmp.Diff(s.want, note(s.m, s.out)); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i, diff)
		}
	}
	for i := range maxMCPPending + 10 {
		c.note(call(strings.Repeat("9", 3)+string(rune('a'+i%26))+strings.Repeat("z", i/26), "t"), true)
	}
	if n := len(c.pending[0]); n != maxMCPPending {
		t.Errorf("%d requests pending, want at most %d", n, maxMCPPending)
	}
}

// FuzzParseMCP: any bytes parse without panicking, and what is recognised
// keeps within the bounds.
func FuzzParseMCP(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search"}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`{"jsonrpc":"2.0","method":"n"}`,
		`{"jsonrpc":"2.0","id":[1,2],"error":1}`,
		`[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := parseMCP(b)
		if !ok {
			if m != (mcpMessage{}) {
				t.Errorf("not recognised, but %+v", m)
			}
			return
		}
		if len(m.ID) > maxMCPID || len(m.Method) > maxMCPName || len(m.Tool) > maxMCPName {
			t.Errorf("past the bounds: %+v", m)
		}
		if m.Result == (m.Method != "") {
			t.Errorf("a result names a method, or a request none: %+v", m)
		}
		if m.Tool != "" && m.Method != "tools/call" {
			t.Errorf("a tool outside tools/call: %+v", m)
		}
	})
}
