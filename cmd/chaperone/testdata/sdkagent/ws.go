package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// askResponsesWS speaks the Responses API over WebSocket as Codex does
// (wss://…/responses, OpenAI-Beta: responses_websockets=…, permessage-
// deflate offered, response.create with the request's fields beside its
// type), through the proxy its environment names. It prints the
// extension agreed, the streamed answer, what became of a message of an
// unknown type and of a binary one, a second turn, and the close that
// answers a request for the model gpt-denied.
func askResponsesWS(url, prompt string) error {
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, EnableCompression: true, HandshakeTimeout: 30 * time.Second}
	c, res, err := d.Dial(url, http.Header{
		"Authorization": {"Bearer test-key"},
		"OpenAI-Beta":   {"responses_websockets=2026-02-06"},
		"originator":    {"codex_exec"},
	})
	if err != nil {
		return fmt.Errorf("dial: %w (%v)", err, res)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	fmt.Printf("extensions: %s\n", res.Header.Get("Sec-WebSocket-Extensions"))
	create := func(model, said string) error {
		return c.WriteJSON(map[string]any{
			"type": "response.create", "model": model, "instructions": "You are Codex.", "stream": true, "store": false,
			"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": said}}}},
			"tools": []any{map[string]any{"type": "custom", "name": "shell"}},
		})
	}
	turn := func(said string) error {
		if err := create("gpt-5-codex", said); err != nil {
			return err
		}
		var text strings.Builder
		deltas := 0
		for {
			var ev struct {
				Type     string `json:"type"`
				Delta    string `json:"delta"`
				Response struct {
					Usage struct {
						InputTokens  int `json:"input_tokens"`
						OutputTokens int `json:"output_tokens"`
					} `json:"usage"`
				} `json:"response"`
			}
			if err := c.ReadJSON(&ev); err != nil {
				return err
			}
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
				deltas++
			case "response.completed":
				fmt.Printf("text: %s\ndeltas: %d\nusage: in=%d out=%d\n", text.String(), deltas, ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens)
				return nil
			}
		}
	}
	if err := turn(prompt); err != nil {
		return err
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.teleport"}`)); err != nil {
		return err
	}
	var echo struct {
		Type string `json:"type"`
	}
	if err := c.ReadJSON(&echo); err != nil {
		return err
	}
	fmt.Printf("unknown: %s\n", echo.Type)
	if err := c.WriteMessage(websocket.BinaryMessage, []byte{0, 1, 2}); err != nil {
		return err
	}
	typ, b, err := c.ReadMessage()
	if err != nil {
		return err
	}
	fmt.Printf("binary: %v %v\n", typ == websocket.BinaryMessage, b)
	if err := c.WriteJSON(map[string]any{"type": "response.processed", "response_id": "resp_1"}); err != nil {
		return err
	}
	if err := turn("and again"); err != nil {
		return err
	}
	if err := create("gpt-denied", "hello"); err != nil {
		return err
	}
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		return fmt.Errorf("after a refused request: %v, want a close", err)
	}
	fmt.Printf("close: %d %s\n", ce.Code, ce.Text)
	return nil
}

// sayWS sends each message as a text message to a WebSocket server,
// through the proxy its environment names, and prints its reply, or the
// close that ends the connection instead (and stops there).
func sayWS(url string, msgs []string) error {
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, EnableCompression: true, HandshakeTimeout: 30 * time.Second}
	c, res, err := d.Dial(url, nil)
	if err != nil {
		return fmt.Errorf("dial: %w (%v)", err, res)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	for _, m := range msgs {
		if err := c.WriteMessage(websocket.TextMessage, []byte(m)); err != nil {
			return err
		}
		_, b, err := c.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			fmt.Printf("close: %d %s\n", ce.Code, ce.Text)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Printf("reply: %s\n", b)
	}
	return nil
}
