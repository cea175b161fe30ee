package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// sseSplitter cuts a text/event-stream into events, each ending with its
// blank line. Lines end with "\n" or "\r\n".
type sseSplitter struct {
	ev        []byte // the start of the event being received
	scan      int    // ev[:scan] has been searched for line ends
	lineStart int    // where the current line starts in ev
	skipping  bool   // the current event outgrew maxParseBytes and is handed over in fragments
	lineLen   int    // while skipping: bytes of the current line other than '\r'
}

// feed hands fn every event that b completes (whole), or, for an event too
// large to hold, its bytes as they come (not whole). fn must not keep ev.
func (s *sseSplitter) feed(b []byte, fn func(ev []byte, whole bool)) {
	for len(b) > 0 {
		if s.skipping {
			i := 0
			for ; i < len(b); i++ {
				if c := b[i]; c == '\n' {
					if s.lineLen == 0 {
						i++
						s.skipping = false
						break
					}
					s.lineLen = 0
				} else if c != '\r' {
					s.lineLen++
				}
			}
			fn(b[:i], false)
			b = b[i:]
			continue
		}
		s.ev = append(s.ev, b...)
		b = nil
		start := 0
		for {
			nl := bytes.IndexByte(s.ev[s.scan:], '\n')
			if nl < 0 {
				s.scan = len(s.ev)
				break
			}
			nl += s.scan
			s.scan = nl + 1
			if line := s.ev[s.lineStart:nl]; len(line) == 0 || len(line) == 1 && line[0] == '\r' {
				fn(s.ev[start:nl+1], true)
				start = nl + 1
			}
			s.lineStart = nl + 1
		}
		if len(s.ev)-start > maxParseBytes {
			s.lineLen = len(s.ev) - s.lineStart - bytes.Count(s.ev[s.lineStart:], []byte("\r"))
			fn(s.ev[start:], false)
			s.skipping = true
			s.ev, s.scan, s.lineStart = s.ev[:0], 0, 0
			continue
		}
		if start > 0 {
			n := copy(s.ev, s.ev[start:])
			s.ev = s.ev[:n]
			s.scan -= start
			s.lineStart -= start
		}
	}
}

// rest returns the bytes of an event the stream ended in the middle of.
func (s *sseSplitter) rest() []byte {
	if s.skipping {
		return nil
	}
	return s.ev
}

// sseFields returns an event's name and its data lines joined by "\n".
func sseFields(ev []byte) (name, data []byte) {
	n := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = value
		case "data":
			if n++; n == 1 {
				data = value
			} else {
				data = append(append(bytes.Clone(data), '\n'), value...)
			}
		}
	}
	return name, data
}

// parseEvent reads one SSE event for ResponseInfo. Text deltas, the bulk of a
// stream, carry nothing it needs and are skipped by name.
func (r *ResponseReader) parseEvent(name, data []byte) {
	if len(data) == 0 || string(name) == "content_block_delta" || string(name) == "ping" ||
		bytes.HasSuffix(name, []byte(".delta")) || string(data) == "[DONE]" {
		return
	}
	r.parseChunk(data)
}

func (r *ResponseReader) sseParseOnly(ev []byte, whole bool) {
	if whole {
		r.parseEvent(sseFields(ev))
	}
}

// sseRewrite appends to r.out what an event becomes.
func (r *ResponseReader) sseRewrite(ev []byte, whole bool) {
	if !whole { // too large to hold: restored byte-wise, not parsed
		if r.held != nil {
			r.out = r.emitHeld(r.out)
		}
		r.out = r.bytesR.feed(r.out, ev, false)
		return
	}
	r.out = r.bytesR.feed(r.out, nil, true) // the end of an oversized event, if any
	name, data := sseFields(ev)
	r.parseEvent(name, data)
	r.out = r.rewriteEvent(r.out, ev, name, data)
}

// heldDelta is a text delta event whose text ends with what could begin a
// placeholder.
type heldDelta struct {
	raw    []byte
	doc    map[string]any
	slot   slot
	prefix []byte // the slot's text up to tail, restored
	tail   []byte // the possible beginning of a placeholder
}

// slot is a text field of a delta event.
type slot struct {
	key     string // which block the text belongs to
	jsonEsc bool   // the text is a JSON fragment (tool arguments): restore JSON-escaped
	parent  map[string]any
	field   string
	text    string
}

// mayStartPlaceholder reports whether a JSON event could hold text that is or
// begins a placeholder: a '[' followed by 'R' or ending a string.
func mayStartPlaceholder(data []byte) bool {
	return bytes.Contains(data, []byte("[R")) || bytes.Contains(data, []byte(`["`))
}

// isKeepAlive reports whether an event carries nothing but liveness (a ping,
// a comment): it may pass a held delta without ending its block.
func isKeepAlive(name, data []byte) bool {
	return len(data) == 0 || string(name) == "ping" ||
		len(data) < 32 && (bytes.Contains(data, []byte(`"type":"ping"`)) || bytes.Contains(data, []byte(`"type": "ping"`)))
}

func (r *ResponseReader) rewriteEvent(dst, raw, name, data []byte) []byte {
	if r.held == nil && !mayStartPlaceholder(data) || isKeepAlive(name, data) {
		return appendRestored(dst, raw, r.restore, true)
	}
	doc, slots := r.deltaSlots(data)
	if len(slots) == 0 {
		if r.held != nil {
			dst = r.emitHeld(dst)
		}
		return appendRestored(dst, raw, r.restore, true)
	}
	var prefix, tail []byte
	if h := r.held; h != nil {
		if len(slots) == 1 && slots[0].key == h.slot.key {
			prefix, tail = h.prefix, h.tail
			r.held = nil
		} else {
			dst = r.emitHeld(dst)
		}
	}
	changed := false
	for i := range slots {
		sl := &slots[i]
		in := append(tail, sl.text...)
		cut := len(in)
		if len(slots) == 1 {
			cut = holdFrom(in)
		}
		text := appendRestored(prefix, in[:cut], r.restore, sl.jsonEsc)
		if cut < len(in) {
			r.held = &heldDelta{raw: bytes.Clone(raw), doc: doc, slot: *sl, prefix: text, tail: bytes.Clone(in[cut:])}
			return dst
		}
		if string(text) != sl.text {
			sl.parent[sl.field] = string(text)
			changed = true
		}
	}
	if !changed {
		return appendRestored(dst, raw, r.restore, true)
	}
	return r.appendEvent(dst, raw, doc)
}

// emitHeld appends the held delta event, with its held text, and notes
// where it ends (heldEnd) for a reader of messages.
func (r *ResponseReader) emitHeld(dst []byte) []byte {
	dst = r.appendHeld(dst)
	r.heldEnd = len(dst)
	return dst
}

func (r *ResponseReader) appendHeld(dst []byte) []byte {
	h := r.held
	r.held = nil
	text := append(h.prefix, h.tail...)
	if string(text) == h.slot.text {
		return appendRestored(dst, h.raw, r.restore, true)
	}
	h.slot.parent[h.slot.field] = string(text)
	return r.appendEvent(dst, h.raw, h.doc)
}

// appendEvent appends raw with its data lines replaced by doc, serialised on
// one line that ends as the first data line did; for a reader of messages
// (bare), doc alone.
func (r *ResponseReader) appendEvent(dst, raw []byte, doc map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(doc) != nil {
		return append(dst, raw...)
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if r.bare {
		return append(dst, data...)
	}
	wrote := false
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i+1], raw[i+1:]
		} else {
			raw = nil
		}
		if !bytes.HasPrefix(line, []byte("data:")) {
			dst = append(dst, line...)
			continue
		}
		if !wrote {
			dst = append(append(dst, "data: "...), data...)
			if bytes.HasSuffix(line, []byte("\r\n")) {
				dst = append(dst, '\r')
			}
			dst = append(dst, '\n')
			wrote = true
		}
	}
	return dst
}

// deltaSlots decodes an event and finds its text delta fields.
func (r *ResponseReader) deltaSlots(data []byte) (map[string]any, []slot) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil || doc == nil {
		return nil, nil
	}
	var slots []slot
	add := func(key string, parent map[string]any, field string, jsonEsc bool) {
		if s, ok := parent[field].(string); ok {
			slots = append(slots, slot{key: key, jsonEsc: jsonEsc, parent: parent, field: field, text: s})
		}
	}
	switch r.api.Op {
	case OpMessages, OpCountTokens, OpInvoke:
		if doc["type"] != "content_block_delta" {
			break
		}
		d, _ := doc["delta"].(map[string]any)
		key := "b" + num(doc["index"], 0)
		switch d["type"] {
		case "text_delta":
			add(key, d, "text", false)
		case "thinking_delta":
			add(key, d, "thinking", false)
		case "input_json_delta":
			add(key, d, "partial_json", true)
		}
	case OpChatCompletions:
		choices, _ := doc["choices"].([]any)
		for ci, c := range choices {
			cm, _ := c.(map[string]any)
			d, _ := cm["delta"].(map[string]any)
			if d == nil {
				continue
			}
			idx := num(cm["index"], ci)
			add("c"+idx, d, "content", false)
			calls, _ := d["tool_calls"].([]any)
			for ti, tc := range calls {
				tm, _ := tc.(map[string]any)
				if fn, _ := tm["function"].(map[string]any); fn != nil {
					add("t"+idx+"."+num(tm["index"], ti), fn, "arguments", true)
				}
				if cu, _ := tm["custom"].(map[string]any); cu != nil {
					add("t"+idx+"."+num(tm["index"], ti), cu, "input", false) // freeform text
				}
			}
		}
	case OpResponses, OpRealtime:
		typ, _ := doc["type"].(string)
		key := fmt.Sprint(typ, "/", doc["item_id"], "/", doc["output_index"], "/", doc["content_index"], "/", doc["summary_index"])
		switch typ {
		case "response.output_text.delta", "response.refusal.delta",
			"response.reasoning_text.delta", "response.reasoning_summary_text.delta",
			// the Realtime API's (its beta names too): text, and what the
			// model said aloud
			"response.text.delta", "response.output_audio_transcript.delta", "response.audio_transcript.delta":
			add(key, doc, "delta", false)
		case "response.function_call_arguments.delta":
			add(key, doc, "delta", true)
		case "response.custom_tool_call_input.delta":
			add(key, doc, "delta", false) // a freeform tool's input is text, not JSON
		}
	case OpBidiGenerateContent: // Gemini Live's serverContent
		sc, _ := doc["serverContent"].(map[string]any)
		turn, _ := sc["modelTurn"].(map[string]any)
		parts, _ := turn["parts"].([]any)
		for pi, p := range parts {
			if pm, _ := p.(map[string]any); pm != nil {
				add(fmt.Sprintf("g%d", pi), pm, "text", false)
			}
		}
		if ot, _ := sc["outputTranscription"].(map[string]any); ot != nil {
			add("ot", ot, "text", false)
		}
	case OpGenerateContent, OpStreamGenerateContent:
		cands, _ := doc["candidates"].([]any)
		for ci, c := range cands {
			cm, _ := c.(map[string]any)
			content, _ := cm["content"].(map[string]any)
			parts, _ := content["parts"].([]any)
			for pi, p := range parts {
				pm, _ := p.(map[string]any)
				if pm != nil {
					add(fmt.Sprintf("g%s.%d", num(cm["index"], ci), pi), pm, "text", false)
				}
			}
		}
	}
	return doc, slots
}

// num prints a decoded JSON number, or def when v is not one.
func num(v any, def int) string {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	return fmt.Sprint(def)
}
