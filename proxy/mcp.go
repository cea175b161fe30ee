package proxy

import (
	"bytes"
	"encoding/json"
	"sync"
)

// Bounds of what a WebSocket's JSON-RPC messages of the Model Context
// Protocol are remembered by: names longer than maxMCPName are not
// names (not recognised), and a connection remembers at most
// maxMCPPending requests waiting for their results (the oldest go first).
const (
	maxMCPName    = 256
	maxMCPPending = 256
	maxMCPID      = 128
)

// mcpMessage is what parseMCP recognised of a JSON-RPC 2.0 message: a
// request or notification (Method; Tool for tools/call) or a response
// (Result, which names no method), and its id ("" for a notification),
// as its JSON text.
type mcpMessage struct {
	ID     string
	Method string
	Tool   string
	Result bool
}

// present notes that a member is there without keeping its value.
type present bool

func (p *present) UnmarshalJSON([]byte) error { *p = true; return nil }

// parseMCP recognises a JSON-RPC 2.0 message ("jsonrpc": "2.0", an object
// with a method, or an id and a result or error). A batch (an array) is
// not recognised. It never fails on bad input: ok is false.
func parseMCP(b []byte) (m mcpMessage, ok bool) {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"jsonrpc"`)) {
		return m, false
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  struct {
			Name string `json:"name"`
		} `json:"params"`
		Result present `json:"result"`
		Error  present `json:"error"`
	}
	if json.Unmarshal(b, &msg) != nil || msg.JSONRPC != "2.0" {
		return m, false
	}
	if len(msg.ID) > maxMCPID || len(msg.Method) > maxMCPName {
		return m, false
	}
	if id := string(msg.ID); id != "null" {
		m.ID = id
	}
	switch {
	case msg.Method != "":
		m.Method = msg.Method
		if m.Method == "tools/call" && len(msg.Params.Name) <= maxMCPName {
			m.Tool = msg.Params.Name
		}
	case bool(msg.Result || msg.Error) && m.ID != "":
		m.Result = true
	default:
		return mcpMessage{}, false
	}
	return m, true
}

// mcpCalls matches the results of one connection's JSON-RPC requests to
// them, either way (a server may ask too): by id, in each direction's
// own space.
type mcpCalls struct {
	mu      sync.Mutex
	pending [2][]mcpMessage // by the direction of the request, oldest first
}

// note records m, sent by the client (out) or the server, and returns
// the method and tool the event names: m's own, or for a result those of
// the request it answers (empty when none is known).
func (c *mcpCalls) note(m mcpMessage, out bool) (method, tool string) {
	req, res := 0, 1 // the requests of this message's sender, and of its peer
	if !out {
		req, res = 1, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !m.Result {
		if m.ID != "" {
			p := c.pending[req]
			if len(p) >= maxMCPPending {
				p = p[1:]
			}
			c.pending[req] = append(p, m)
		}
		return m.Method, m.Tool
	}
	p := c.pending[res]
	for i, q := range p {
		if q.ID == m.ID {
			c.pending[res] = append(p[:i:i], p[i+1:]...)
			return q.Method, q.Tool
		}
	}
	return "", ""
}
