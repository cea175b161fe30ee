package secretcorpus

import "fmt"

// render serializes the conversation so far as the session's client
// sends it, with its labels.
func (sg *sessionGen) render(idx int) Request {
	req := Request{Name: fmt.Sprintf("%s/%d", sg.name, idx), Provider: sg.p, Serialization: sg.ser}
	e := encoder{st: styleOf(sg.ser), onText: func(ptr string, t *text) {
		for _, m := range t.marks {
			if m.sec != nil {
				req.Secrets = append(req.Secrets, Secret{
					Type: m.sec.typ, Location: m.sec.location, Layout: m.sec.layout,
					Value: m.sec.value, Probes: m.sec.probes, Pointer: ptr, Depth: m.depth,
				})
			} else {
				req.Negatives = append(req.Negatives, Negative{Kind: m.neg.kind, Value: m.neg.value, Pointer: ptr, Depth: m.depth})
			}
		}
	}}
	e.value(sg.tree(), "", 0)
	req.Body = []byte(e.b.String())
	return req
}

func (sg *sessionGen) tree() obj {
	switch sg.p {
	case Anthropic:
		return sg.anthropic()
	case Bedrock:
		return sg.bedrock()
	case OpenAIChat:
		return sg.chat()
	case OpenAIResponses:
		return sg.responses()
	}
	return sg.gemini()
}

// groups splits the items into runs of one role, as messages.
func (sg *sessionGen) groups() [][]item {
	var out [][]item
	for _, it := range sg.items {
		if n := len(out); n > 0 && out[n-1][0].role == it.role {
			out[n-1] = append(out[n-1], it)
			continue
		}
		out = append(out, []item{it})
	}
	return out
}

func schema(props ...string) obj {
	p := obj{}
	for _, name := range props {
		p = append(p, field{name, obj{{"type", "string"}, {"description", "The " + name + "."}}})
	}
	req := arr{}
	for _, name := range props[:1] {
		req = append(req, name)
	}
	return obj{{"type", "object"}, {"properties", p}, {"required", req}, {"additionalProperties", false}}
}

// tools are the tool definitions a client of this shape sends.
func (sg *sessionGen) toolDefs() []struct {
	name, desc string
	schema     obj
} {
	type def = struct {
		name, desc string
		schema     obj
	}
	desc := "Executes a command in a shell and returns its output. Never print secrets such as API keys, tokens or passwords; read them from the environment."
	switch sg.p {
	case Anthropic, Bedrock:
		return []def{
			{"Bash", desc, schema("command", "description")},
			{"Read", "Reads a file from the local filesystem. Results are returned using cat -n format, with line numbers starting at 1.", schema("file_path")},
			{"Write", "Writes a file to the local filesystem, overwriting it if it exists.", schema("file_path", "content")},
		}
	case OpenAIChat:
		return []def{
			{"bash", desc, schema("command")},
			{"read_file", "Reads a file and returns its content.", schema("path")},
			{"write_file", "Writes content to a file.", schema("path", "content")},
		}
	case OpenAIResponses:
		return []def{{"shell", "Runs a shell command and returns its output.", obj{
			{"type", "object"},
			{"properties", obj{
				{"command", obj{{"type", "array"}, {"items", obj{{"type", "string"}}}, {"description", "The command to execute"}}},
				{"workdir", obj{{"type", "string"}, {"description", "The working directory to execute the command in"}}},
				{"timeout_ms", obj{{"type", "number"}, {"description", "The timeout for the command in milliseconds"}}},
			}},
			{"required", arr{"command"}},
			{"additionalProperties", false},
		}}}
	}
	return []def{
		{"run_shell_command", desc, schema("command", "description")},
		{"read_file", "Reads and returns the content of a specified file.", schema("absolute_path")},
		{"write_file", "Writes content to a specified file in the local filesystem.", schema("file_path", "content")},
	}
}

func (sg *sessionGen) anthropic() obj {
	var msgs arr
	for _, grp := range sg.groups() {
		var content arr
		for _, it := range grp {
			switch it.kind {
			case "text":
				content = append(content, obj{{"type", "text"}, {"text", it.text}})
			case "image":
				content = append(content, obj{{"type", "image"}, {"source", obj{{"type", "base64"}, {"media_type", "image/png"}, {"data", it.text}}}})
			case "thinking":
				content = append(content, obj{{"type", "thinking"}, {"thinking", it.text.s}, {"signature", it.sig}})
			case "call":
				content = append(content, obj{{"type", "tool_use"}, {"id", it.call.id}, {"name", it.call.name}, {"input", it.call.args}})
			case "result":
				var c any = it.call.out
				if it.call.name == "Read" {
					c = arr{obj{{"type", "text"}, {"text", it.call.out}}}
				}
				content = append(content, obj{{"type", "tool_result"}, {"tool_use_id", it.call.id}, {"content", c}})
			}
		}
		msgs = append(msgs, obj{{"role", grp[0].role}, {"content", content}})
	}
	var tools arr
	for _, d := range sg.toolDefs() {
		tools = append(tools, obj{{"name", d.name}, {"description", d.desc}, {"input_schema", d.schema}})
	}
	return obj{
		{"model", "claude-sonnet-4-5-20250929"},
		{"messages", msgs},
		{"system", arr{
			obj{{"type", "text"}, {"text", "You are Claude Code, Anthropic's official CLI for Claude."}, {"cache_control", obj{{"type", "ephemeral"}}}},
			obj{{"type", "text"}, {"text", sg.system}, {"cache_control", obj{{"type", "ephemeral"}}}},
		}},
		{"tools", tools},
		{"metadata", obj{{"user_id", sg.meta}}},
		{"max_tokens", 32000},
		{"thinking", obj{{"type", "enabled"}, {"budget_tokens", 10000}}},
		{"stream", true},
	}
}

func (sg *sessionGen) bedrock() obj {
	var msgs arr
	for _, grp := range sg.groups() {
		var content arr
		for _, it := range grp {
			switch it.kind {
			case "text":
				content = append(content, obj{{"text", it.text}})
			case "image":
				content = append(content, obj{{"image", obj{{"format", "png"}, {"source", obj{{"bytes", it.text}}}}}})
			case "thinking":
				content = append(content, obj{{"reasoningContent", obj{{"reasoningText", obj{{"text", it.text.s}, {"signature", it.sig}}}}}})
			case "call":
				content = append(content, obj{{"toolUse", obj{{"toolUseId", it.call.id}, {"name", it.call.name}, {"input", it.call.args}}}})
			case "result":
				block := obj{{"text", it.call.out}}
				if it.call.tree != nil {
					block = obj{{"json", it.call.tree}}
				}
				content = append(content, obj{{"toolResult", obj{{"toolUseId", it.call.id}, {"content", arr{block}}, {"status", "success"}}}})
			}
		}
		msgs = append(msgs, obj{{"role", grp[0].role}, {"content", content}})
	}
	var tools arr
	for _, d := range sg.toolDefs() {
		tools = append(tools, obj{{"toolSpec", obj{{"name", d.name}, {"description", d.desc}, {"inputSchema", obj{{"json", d.schema}}}}}})
	}
	return obj{
		{"messages", msgs},
		{"system", arr{obj{{"text", sg.system}}}},
		{"inferenceConfig", obj{{"maxTokens", 8192}}},
		{"toolConfig", obj{{"tools", tools}}},
		{"additionalModelRequestFields", obj{{"thinking", obj{{"type", "enabled"}, {"budget_tokens", 4000}}}}},
	}
}

func (sg *sessionGen) chat() obj {
	msgs := arr{obj{{"role", "system"}, {"content", sg.system}}}
	for _, grp := range sg.groups() {
		if grp[0].role == "user" {
			var parts arr
			for _, it := range grp {
				switch it.kind {
				case "result":
					msgs = append(msgs, obj{{"role", "tool"}, {"tool_call_id", it.call.id}, {"content", it.call.out}})
				case "text":
					parts = append(parts, obj{{"type", "text"}, {"text", it.text}})
				case "image":
					parts = append(parts, obj{{"type", "image_url"}, {"image_url", obj{{"url", dataURI(it.text)}}}})
				}
			}
			switch {
			case len(parts) == 1 && parts[0].(obj)[0].v == "text":
				msgs = append(msgs, obj{{"role", "user"}, {"content", parts[0].(obj)[1].v}})
			case len(parts) > 0:
				msgs = append(msgs, obj{{"role", "user"}, {"content", parts}})
			}
			continue
		}
		var content any
		var calls arr
		for _, it := range grp {
			switch it.kind {
			case "text":
				content = it.text
			case "call":
				calls = append(calls, obj{{"id", it.call.id}, {"type", "function"}, {"function", obj{{"name", it.call.name}, {"arguments", nested{it.call.args}}}}})
			}
		}
		m := obj{{"role", "assistant"}, {"content", content}}
		if len(calls) > 0 {
			m = append(m, field{"tool_calls", calls})
		}
		msgs = append(msgs, m)
	}
	var tools arr
	for _, d := range sg.toolDefs() {
		tools = append(tools, obj{{"type", "function"}, {"function", obj{{"name", d.name}, {"description", d.desc}, {"parameters", d.schema}}}})
	}
	return obj{
		{"model", "gpt-4.1"},
		{"messages", msgs},
		{"tools", tools},
		{"tool_choice", "auto"},
		{"stream", true},
		{"stream_options", obj{{"include_usage", true}}},
	}
}

// dataURI is an image's base64 as a data: URI (the base64 keeps its mark).
func dataURI(t *text) *text {
	return &text{s: "data:image/png;base64," + t.s, marks: t.marks}
}

func (sg *sessionGen) responses() obj {
	var input arr
	for _, it := range sg.items {
		switch {
		case it.kind == "text" && it.role == "user":
			input = append(input, obj{{"type", "message"}, {"role", "user"}, {"content", arr{obj{{"type", "input_text"}, {"text", it.text}}}}})
		case it.kind == "image":
			input = append(input, obj{{"type", "message"}, {"role", "user"}, {"content", arr{obj{{"type", "input_image"}, {"image_url", dataURI(it.text)}}}}})
		case it.kind == "text":
			input = append(input, obj{{"type", "message"}, {"role", "assistant"}, {"content", arr{obj{{"type", "output_text"}, {"text", it.text}}}}})
		case it.kind == "thinking":
			input = append(input, obj{{"type", "reasoning"}, {"summary", arr{obj{{"type", "summary_text"}, {"text", "**Inspecting the configuration**\n\n" + it.text.s}}}}, {"content", nil}, {"encrypted_content", it.sig}})
		case it.kind == "call" && it.call.custom != nil:
			input = append(input, obj{{"type", "custom_tool_call"}, {"status", "completed"}, {"call_id", it.call.id}, {"name", it.call.name}, {"input", it.call.custom}})
		case it.kind == "call":
			input = append(input, obj{{"type", "function_call"}, {"name", it.call.name}, {"arguments", nested{it.call.args}}, {"call_id", it.call.id}})
		case it.kind == "result":
			typ := "function_call_output"
			if it.call.custom != nil {
				typ = "custom_tool_call_output"
			}
			// Codex wraps a tool's output in JSON with its exit code.
			wrapped := nested{obj{{"output", it.call.out}, {"metadata", obj{{"exit_code", 0}, {"duration_seconds", 0.4}}}}}
			input = append(input, obj{{"type", typ}, {"call_id", it.call.id}, {"output", wrapped}})
		}
	}
	var tools arr
	for _, d := range sg.toolDefs() {
		tools = append(tools, obj{{"type", "function"}, {"name", d.name}, {"description", d.desc}, {"strict", false}, {"parameters", d.schema}})
	}
	tools = append(tools, obj{{"type", "custom"}, {"name", "apply_patch"}, {"description", "Use the `apply_patch` tool to edit files."}, {"format", obj{{"type", "grammar"}, {"syntax", "lark"}, {"definition", "start: begin_patch hunk+ end_patch"}}}})
	return obj{
		{"model", "gpt-5-codex"},
		{"instructions", sg.system},
		{"input", input},
		{"tools", tools},
		{"tool_choice", "auto"},
		{"parallel_tool_calls", false},
		{"reasoning", obj{{"effort", "medium"}, {"summary", "auto"}}},
		{"store", false},
		{"stream", true},
		{"include", arr{"reasoning.encrypted_content"}},
		{"prompt_cache_key", sg.meta},
	}
}

func (sg *sessionGen) gemini() obj {
	var contents arr
	for _, grp := range sg.groups() {
		role := "user"
		if grp[0].role == "assistant" {
			role = "model"
		}
		var parts arr
		var sig *text
		for _, it := range grp {
			switch it.kind {
			case "text":
				parts = append(parts, obj{{"text", it.text}})
			case "image":
				parts = append(parts, obj{{"inlineData", obj{{"mimeType", "image/png"}, {"data", it.text}}}})
			case "thinking":
				parts = append(parts, obj{{"text", it.text.s}, {"thought", true}})
				sig = it.sig
			case "call":
				p := obj{{"functionCall", obj{{"name", it.call.name}, {"args", it.call.args}}}}
				if sig != nil {
					p = append(p, field{"thoughtSignature", sig})
					sig = nil
				}
				parts = append(parts, p)
			case "result":
				var resp any = obj{{"output", it.call.out}}
				if it.call.tree != nil {
					resp = obj{{"output", it.call.tree}}
				}
				parts = append(parts, obj{{"functionResponse", obj{{"id", it.call.id}, {"name", it.call.name}, {"response", resp}}}})
			}
		}
		contents = append(contents, obj{{"role", role}, {"parts", parts}})
	}
	var decls arr
	for _, d := range sg.toolDefs() {
		decls = append(decls, obj{{"name", d.name}, {"description", d.desc}, {"parameters", d.schema}})
	}
	return obj{
		{"contents", contents},
		{"systemInstruction", obj{{"role", "user"}, {"parts", arr{obj{{"text", sg.system}}}}}},
		{"tools", arr{obj{{"functionDeclarations", decls}}}},
		{"generationConfig", obj{{"temperature", 0}, {"topP", 1}, {"thinkingConfig", obj{{"includeThoughts", true}, {"thinkingBudget", -1}}}}},
	}
}
