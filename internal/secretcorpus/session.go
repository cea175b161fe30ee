package secretcorpus

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// item is one part of a conversation, provider-neutral: the renderers
// group them into each API's messages.
type item struct {
	role string // user or assistant
	kind string // text, image, thinking, call, result
	text *text  // the text, thinking, or image data
	sig  *text  // a thinking block's signature or encrypted reasoning
	call *call  // for call and result
}

// call is a tool call and its result.
type call struct {
	id     string
	name   string
	args   obj   // the arguments, or
	custom *text // the input of a custom tool (Codex's apply_patch)
	out    *text // the result as text
	tree   any   // the result as JSON, when the tool printed JSON
}

type sessionGen struct {
	g      *Secrets
	p      Provider
	ser    Serialization
	name   string
	types  []secretType
	next   int
	system *text
	items  []item
	// quotable are secrets planted so far that the assistant may quote
	// later without their context; the first quotableBefore of them were
	// planted before the current scene.
	quotable       []*plant
	quotableBefore int
	calls          int
	prefixes       map[string]int
	meta           *text // Anthropic's metadata.user_id, Responses' prompt_cache_key
}

func newSession(seed uint64, p Provider, ser Serialization, idx int) Session {
	sg := &sessionGen{g: NewSecrets(seed), p: p, ser: ser, prefixes: map[string]int{}}
	sg.name = fmt.Sprintf("%s/%s/%d", p, ser, idx)
	sg.types = secretTypes()
	sg.g.r.Shuffle(len(sg.types), func(i, j int) { sg.types[i], sg.types[j] = sg.types[j], sg.types[i] })
	switch p {
	case Anthropic:
		v := "user_" + sg.g.Str(64, hexd) + "_account_" + sg.g.UUID() + "_session_" + sg.g.UUID()
		sg.meta = negText("session-id", v)
	case OpenAIResponses:
		sg.meta = negText("uuid", sg.g.UUID())
	}
	sg.system = sg.systemPrompt()
	s := Session{Name: sg.name, Provider: p, Serialization: ser}
	sg.userTask()
	s.Requests = append(s.Requests, sg.render(len(s.Requests)))
	compacted := false
	for i := range 5 + sg.g.IntN(4) {
		if sg.scene() {
			s.Requests = append(s.Requests, sg.render(len(s.Requests))) // after a user message, before the answer
		}
		if !compacted && i >= 3 && sg.g.chance(0.3) {
			sg.compact()
			compacted = true
		}
		s.Requests = append(s.Requests, sg.render(len(s.Requests)))
	}
	return s
}

// compact replaces the history before the last two tool calls by a
// summary, as Claude Code's /compact does. The summary repeats values
// seen earlier, bare: in the body, before the turns kept (which may show
// some of them again, with their names), or with their context gone
// from it altogether (only the session's memory of them is left).
func (sg *sessionGen) compact() {
	cut, calls := 0, 0
	for i := len(sg.items) - 1; i >= 0; i-- {
		if sg.items[i].kind == "call" {
			if calls++; calls == 2 {
				cut = i
				break
			}
		}
	}
	for cut > 0 && sg.items[cut-1].role == "assistant" {
		cut-- // from the start of that assistant turn
	}
	if cut == 0 {
		return
	}
	sum := &text{s: "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\n\n" + sg.paragraph(3) + "\n\nValues found so far:\n"}
	n := 0
	for _, i := range sg.g.r.Perm(len(sg.quotable)) {
		src := sg.quotable[i]
		if src.layout == "k8s-secret-data" || n == 3 {
			continue
		}
		n++
		p := &plant{typ: src.typ, location: "summary", layout: "bare", value: src.value, probes: src.probes}
		sum.add("- `" + src.value + "` (" + sg.g.pick("in use", "from the config", "still valid", "the one CI uses") + ")\n").secret(p)
	}
	sg.items = append([]item{{role: "user", kind: "text", text: sum}}, sg.items[cut:]...)
}

func (sg *sessionGen) nextType() secretType {
	t := sg.types[sg.next%len(sg.types)]
	sg.next++
	return t
}

// plant records a secret about to be written at a location in a layout.
func (sg *sessionGen) plant(t secretType, location, layout, value string) *plant {
	p := &plant{typ: t.name, location: location, layout: layout, value: value, probes: sg.probesFor(t.kind, value)}
	if !t.pem {
		sg.quotable = append(sg.quotable, p)
	}
	return p
}

// probesFor cuts a planted value into the parts that must not be left
// (Secret.Probes).
func (sg *sessionGen) probesFor(kind, v string) []string {
	if strings.Contains(v, "-----BEGIN") {
		var out []string
		for _, l := range strings.Split(v, "\n") {
			if len(l) >= 16 && !strings.HasPrefix(l, "-----") && l != opensshHeader {
				out = append(out, l)
			}
		}
		return out
	}
	pre, ok := sg.prefixes[kind]
	if !ok && kind != "" {
		pre = fixedPrefix(kind)
		sg.prefixes[kind] = pre
	}
	rest := v[min(pre, len(v)):]
	n := len(rest)
	if n <= 12 {
		return []string{v}
	}
	q := max(12, (n+2)/3)
	var out []string
	for i := 0; i < n; i += q {
		end := min(i+q, n)
		out = append(out, rest[end-q:end])
	}
	return out
}

func (sg *sessionGen) callID() string {
	sg.calls++
	g := sg.g
	switch sg.p {
	case Anthropic:
		return "toolu_01" + g.Str(22, alnum)
	case Bedrock:
		return "tooluse_" + g.Str(22, alnum+"_-")
	case Gemini:
		return fmt.Sprintf("call-%d", sg.calls)
	}
	return "call_" + g.Str(24, alnum)
}

// claude says whether the agent is Claude Code (Anthropic, or Anthropic's
// models on Bedrock): its tools are Bash, Read and Write.
func (sg *sessionGen) claude() bool { return sg.p == Anthropic || sg.p == Bedrock }

// shellCall is a call of the agent's shell tool.
func (sg *sessionGen) shellCall(cmd *text, desc string, out *text) *call {
	c := &call{id: sg.callID(), out: out}
	switch sg.p {
	case Anthropic, Bedrock:
		c.name, c.args = "Bash", obj{{"command", cmd}, {"description", desc}}
	case OpenAIChat:
		c.name, c.args = "bash", obj{{"command", cmd}}
	case OpenAIResponses:
		c.name, c.args = "shell", obj{{"command", arr{"bash", "-lc", cmd}}, {"workdir", "/home/dev/src/api"}, {"timeout_ms", 120000}}
	case Gemini:
		c.name, c.args = "run_shell_command", obj{{"command", cmd}, {"description", desc}}
	}
	return c
}

// readCall shows a file: with line numbers (Claude Code's Read, cat -n)
// or without (cat, Gemini's read_file).
func (sg *sessionGen) readCall(path string, content *text, lineNumbers bool) *call {
	switch {
	case sg.claude() && lineNumbers:
		return &call{id: sg.callID(), name: "Read", args: obj{{"file_path", "/home/dev/src/api/" + path}}, out: numbered(content, true)}
	case sg.p == OpenAIChat && sg.g.chance(0.5):
		out := content
		if lineNumbers {
			out = numbered(content, false)
		}
		return &call{id: sg.callID(), name: "read_file", args: obj{{"path", path}}, out: out}
	case sg.p == Gemini && !lineNumbers && sg.g.chance(0.5):
		return &call{id: sg.callID(), name: "read_file", args: obj{{"absolute_path", "/home/dev/src/api/" + path}}, out: content}
	case lineNumbers:
		cmd := "cat -n " + path
		if sg.p == OpenAIResponses {
			cmd = "nl -ba " + path
		}
		return sg.shellCall(&text{s: cmd}, "Show "+path, numbered(content, false))
	}
	return sg.shellCall(&text{s: "cat " + path}, "Show "+path, content)
}

// writeCall writes a file: Write, write_file, or Codex's apply_patch.
func (sg *sessionGen) writeCall(path string, content *text) *call {
	c := &call{id: sg.callID()}
	switch sg.p {
	case Anthropic, Bedrock:
		c.name, c.args = "Write", obj{{"file_path", "/home/dev/src/api/" + path}, {"content", content}}
		c.out = &text{s: "File created successfully at: /home/dev/src/api/" + path}
	case OpenAIChat:
		c.name, c.args = "write_file", obj{{"path", path}, {"content", content}}
		c.out = &text{s: "ok"}
	case OpenAIResponses:
		c.name, c.custom = "apply_patch", patchAdd(path, content)
		c.out = &text{s: "Success. Updated the following files:\nA " + path + "\n"}
	case Gemini:
		c.name, c.args = "write_file", obj{{"file_path", "/home/dev/src/api/" + path}, {"content", content}}
		c.out = &text{s: "Successfully created and wrote to new file: /home/dev/src/api/" + path + "."}
	}
	return c
}

func (sg *sessionGen) add(role, kind string, t *text) {
	sg.items = append(sg.items, item{role: role, kind: kind, text: t})
}

// assistantTurn adds the assistant's reasoning, prose (and any quote) and
// tool call, then the call's result.
func (sg *sessionGen) assistantTurn(prose *text, c *call) {
	g := sg.g
	if sg.p != OpenAIChat && g.chance(0.7) {
		it := item{role: "assistant", kind: "thinking", text: &text{s: sg.paragraph(2 + g.IntN(3))}}
		switch sg.p {
		case OpenAIResponses:
			it.sig = negText("encrypted-reasoning", "gAAAAAB"+g.Str(600+g.IntN(1800), b64u)+"==")
		default:
			it.sig = negText("signature", g.pick("Eq", "Er", "Es", "Et")+g.Str(2, alnum)+"CkYIBxgCKkB"+g.Str(280+4*g.IntN(120), b64c)+g.pick("", "=", "=="))
		}
		sg.items = append(sg.items, it)
	}
	if q := sg.quote(); q != nil {
		if prose == nil {
			prose = &text{}
		} else {
			prose.add("\n\n")
		}
		prose.with(q)
	}
	if prose != nil {
		sg.add("assistant", "text", prose)
	}
	sg.items = append(sg.items, item{role: "assistant", kind: "call", call: c}, item{role: "user", kind: "result", call: c})
}

// quote is, sometimes, assistant prose that repeats a secret planted
// earlier in the session, bare, without the name that told what it was.
func (sg *sessionGen) quote() *text {
	if sg.quotableBefore == 0 || !sg.g.chance(0.3) {
		return nil
	}
	src := sg.quotable[sg.g.IntN(sg.quotableBefore)]
	if src.layout == "k8s-secret-data" {
		return nil // base64 of a secret is not what prose repeats
	}
	v := src.value
	p := &plant{typ: src.typ, location: "quote", layout: "bare", value: v, probes: src.probes}
	forms := []string{
		"I found the value `%s` in the config; it is the one the service uses in production.",
		"The request works with %s, so the problem is elsewhere.",
		"Note: %s looks like a live credential. You may want to rotate it after this session.",
		"I'll keep `%s` as it is and only change the timeout.",
		"Both environments use the same value (%s), which explains the shared rate limit.",
	}
	return (&text{s: fmt.Sprintf(sg.g.pick(forms...), v)}).secret(p)
}

// systemPrompt is the agent's instructions, with project notes that
// sometimes hold a secret.
func (sg *sessionGen) systemPrompt() *text {
	g := sg.g
	t := &text{s: sg.paragraph(12+g.IntN(12)) + "\n\n# Project notes\n\n- Run the tests with `make test` before you commit.\n- The API listens on port 8080; the worker reads from the `jobs` queue.\n"}
	if g.chance(0.5) {
		typ := sg.nextType()
		if typ.pem {
			typ = sg.nextType()
		}
		if !typ.pem {
			a := sg.assign(typ, "system", "")
			switch {
			case typ.url != "" && g.chance(0.4):
				a.p.layout = "url"
				t.add("- Staging access: `").with(sg.command("url", a)).add("`\n")
			case g.chance(0.5):
				a.p.layout = "env"
				t.add("- Staging credentials (do not commit):\n\n```\n").with(sg.fileOnly("env", a)).add("```\n")
			default:
				a.p.layout = "prose"
				a.in(t, "- "+a.name+" for staging: `", "`\n")
			}
		}
	}
	t.add("- Never push to main directly; open a pull request.\n")
	return t
}

func (sg *sessionGen) fileOnly(layout string, a assignment) *text {
	t, _ := sg.file(layout, []assignment{a})
	return t
}

// userTask is the first user message.
func (sg *sessionGen) userTask() {
	g := sg.g
	tasks := []string{
		"The deploy job fails since this morning with a 401 from the payments API. Can you find out why and fix it?",
		"Add a health check endpoint that pings the database and the cache, with tests.",
		"Our staging environment can't reach the storage account anymore. Please investigate.",
		"Rotate the webhook secret handling so the worker reads it from the environment, not from the config file.",
		"Ça ne marche plus depuis la mise à jour: the migration job exits with code 1. Peux-tu regarder ? ✅",
		"Set up the Kubernetes manifests for the new worker (deployment + secret) like the API has.",
	}
	sg.add("user", "text", &text{s: g.pick(tasks...) + "\n\n" + sg.paragraph(1+g.IntN(2))})
}

// scene adds one step of the session: a user message (then it returns
// true: a request is made right after it) or none, then an assistant
// turn with a tool call and its result.
func (sg *sessionGen) scene() bool {
	g := sg.g
	sg.quotableBefore = len(sg.quotable)
	if g.chance(0.3) {
		sg.cleanScene()
		return false
	}
	t := sg.nextType()
	loc := g.pick("tool-output", "tool-output", "file-view", "file-view", "nested-json", "nested-json", "tool-input", "tool-input", "tool-input", "user", "user", "assistant")
	switch loc {
	case "tool-output":
		sg.toolOutput(t)
	case "file-view":
		sg.fileView(t)
	case "nested-json":
		sg.nestedJSON(t)
	case "tool-input":
		sg.toolInput(t)
	case "assistant":
		sg.assistantProse(t)
	case "user":
		sg.userPaste(t)
		return true
	}
	return false
}

func (sg *sessionGen) toolOutput(t secretType) {
	g := sg.g
	if t.kind == "gcpsa" {
		sg.nestedJSON(t)
		return
	}
	if !t.pem && g.chance(0.35) {
		layout := g.pick(commandLayouts(t)...)
		a := sg.assign(t, "tool-output", "shell-history")
		cmd := sg.command(layout, a)
		sg.assistantTurn(nil, sg.shellCall(&text{s: "tail -n 8 ~/." + g.pick("bash_history", "zsh_history")}, "Recent shell commands", sg.history([]*text{cmd})))
		return
	}
	layout := g.pick(fileLayouts(t, false)...)
	as := sg.assignments(t, "tool-output", layout)
	content, path := sg.file(layout, as)
	if layout == "env" && g.chance(0.3) {
		out := (&text{s: "HOME=/home/dev\nLANG=C.UTF-8\nPATH=/usr/local/bin:/usr/bin:/bin\n"}).with(content)
		sg.assistantTurn(nil, sg.shellCall(&text{s: "env | sort"}, "Show the environment", out))
		return
	}
	sg.assistantTurn(nil, sg.readCall(path, content, false))
}

// assignments makes the secrets a layout holds: one, or an AWS key id and
// its secret key together.
func (sg *sessionGen) assignments(t secretType, loc, layout string) []assignment {
	if !t.isAWS() || layout == "kubectl-json" {
		return []assignment{sg.assign(t, loc, layout)}
	}
	var id, key secretType
	for _, x := range secretTypes() {
		switch x.name {
		case "aws-access-key-id":
			id = x
		case "aws-secret-access-key":
			key = x
		}
	}
	return []assignment{sg.assign(id, loc, layout), sg.assign(key, loc, layout)}
}

func (sg *sessionGen) fileView(t secretType) {
	layout := sg.g.pick(fileLayouts(t, true)...)
	as := sg.assignments(t, "file-view", layout)
	content, path := sg.file(layout, as)
	sg.assistantTurn(nil, sg.readCall(path, content, true))
}

func (sg *sessionGen) nestedJSON(t secretType) {
	g := sg.g
	layout := g.pick(jsonLayouts(t)...)
	as := sg.assignments(t, "nested-json", layout)
	switch layout {
	case "aws-cli-json":
		ak := obj{{"UserName", "deploy-bot"}}
		for _, a := range as {
			k := "AccessKeyId"
			if a.t.name == "aws-secret-access-key" {
				k = "SecretAccessKey"
			}
			ak = append(ak, field{k, (&text{s: a.value}).secret(a.p)})
		}
		ak = append(ak, field{"Status", "Active"}, field{"CreateDate", "2026-11-30T10:12:00+00:00"})
		sg.jsonResult("aws iam create-access-key --user-name deploy-bot", obj{{"AccessKey", ak}}, indented("    ", false, false))
		return
	case "az-keys-json":
		second := sg.assign(t, "nested-json", layout)
		var keys arr
		for i, a := range []assignment{as[0], second} {
			keys = append(keys, obj{
				{"creationTime", "2026-03-02T09:15:44.123456+00:00"},
				{"keyName", fmt.Sprintf("key%d", i+1)},
				{"permissions", "FULL"},
				{"value", (&text{s: a.p.value}).secret(a.p)}, // the key itself, not a connection string
			})
		}
		sg.jsonResult("az storage account keys list -g rg-prod -n acmeprodstore", keys, indented("  ", false, false))
		return
	case "kubectl-json":
		a := as[0]
		applied := obj{
			{"apiVersion", "v1"},
			{"kind", "Secret"},
			{"metadata", obj{{"annotations", obj{}}, {"name", "api-secrets"}, {"namespace", "prod"}}},
			{"stringData", obj{{a.name, (&text{s: a.value}).secret(a.p)}}},
			{"type", "Opaque"},
		}
		enc := base64.StdEncoding.EncodeToString([]byte(a.value))
		encP := &plant{typ: a.p.typ, location: "nested-json", layout: "k8s-secret-data", value: enc, probes: sg.probesFor("", enc)}
		uid := sg.g.UUID()
		tree := obj{
			{"apiVersion", "v1"},
			{"data", obj{{a.name, (&text{s: enc}).secret(encP)}}},
			{"kind", "Secret"},
			{"metadata", obj{
				{"annotations", obj{{"kubectl.kubernetes.io/last-applied-configuration", appliedConfig(applied)}}},
				{"creationTimestamp", "2026-10-02T09:14:31Z"},
				{"name", "api-secrets"},
				{"namespace", "prod"},
				{"resourceVersion", fmt.Sprint(40000 + g.IntN(9999))},
				{"uid", negText("uuid", uid)},
			}},
			{"type", "Opaque"},
		}
		sg.jsonResult("kubectl get secret api-secrets -n prod -o json", tree, indented("    ", true, false))
		return
	}
	content, path := sg.file(layout, as)
	sg.assistantTurn(nil, sg.readCall(path, content, false))
}

// appliedConfig is kubectl's last-applied-configuration annotation: the
// object as JSON (Go's encoding, one line, ending in a newline).
func appliedConfig(v any) *text {
	t := jsonText(v, style{itemSep: ",", keySep: ":", html: true})
	t.s += "\n"
	return t
}

// jsonResult adds a shell call whose output is JSON: as text, or, for
// providers that take JSON results, sometimes as JSON.
func (sg *sessionGen) jsonResult(cmd string, tree any, st style) {
	c := sg.shellCall(&text{s: cmd}, "Run "+strings.Fields(cmd)[0], jsonText(tree, st))
	c.out.s += "\n"
	if (sg.p == Bedrock || sg.p == Gemini) && sg.g.chance(0.5) {
		c.tree = tree
	}
	sg.assistantTurn(nil, c)
}

func (sg *sessionGen) toolInput(t secretType) {
	g := sg.g
	if cl := commandLayouts(t); len(cl) > 0 && g.chance(0.55) {
		layout := g.pick(cl...)
		a := sg.assign(t, "tool-input", layout)
		out := &text{s: sg.commandOutput()}
		sg.assistantTurn(nil, sg.shellCall(sg.command(layout, a), "Check the credentials", out))
		return
	}
	layout := g.pick(fileLayouts(t, true)...)
	as := sg.assignments(t, "tool-input", layout)
	content, path := sg.file(layout, as)
	sg.assistantTurn(&text{s: "I'll write the file with the values we found."}, sg.writeCall(path, content))
}

func (sg *sessionGen) commandOutput() string {
	g := sg.g
	return g.pick(
		`{"object":"list","data":[],"has_more":false,"url":"/v1/charges"}`,
		"HTTP/2 200\ncontent-type: application/json\n\n{\"ok\":true}",
		"secret/api-secrets created",
		"Deploying api to production...\nDone in 12.3s",
		" count \n-------\n  4211\n(1 row)\n",
		"PONG",
	)
}

func (sg *sessionGen) assistantProse(t secretType) {
	g := sg.g
	prose := &text{s: sg.paragraph(1) + "\n\n"}
	if cl := commandLayouts(t); len(cl) > 0 && g.chance(0.4) {
		layout := g.pick(cl...)
		a := sg.assign(t, "assistant", layout)
		prose.add("You can check it with:\n\n```bash\n").with(sg.command(layout, a)).add("\n```\n")
	} else {
		layout := g.pick(fileLayouts(t, t.kind == "gcpsa")...)
		as := sg.assignments(t, "assistant", layout)
		content, path := sg.file(layout, as)
		prose.add("Put this in `" + path + "`:\n\n```\n").with(content).add("```\n")
	}
	sg.assistantTurn(prose, sg.shellCall(&text{s: "git status --short"}, "Check the working tree", &text{s: " M src/config.ts\n?? k8s/secret.yaml\n"}))
}

func (sg *sessionGen) userPaste(t secretType) {
	g := sg.g
	msg := &text{}
	switch {
	case !t.pem && !t.named && g.chance(0.4):
		a := sg.assign(t, "user", "prose")
		a.in(msg, g.pick("I keep getting 401s with this key: ", "Use my token ", "here is the key I'm using: "), g.pick(" — can you see what's wrong?", ". Don't commit it.", ""))
	case !t.pem && g.chance(0.3):
		cl := commandLayouts(t)
		layout := g.pick(cl...)
		a := sg.assign(t, "user", layout)
		msg.add("This works from my laptop:\n\n").with(sg.command(layout, a)).add("\n\nbut not from CI. Why?")
	default:
		layout := g.pick(fileLayouts(t, true)...)
		as := sg.assignments(t, "user", layout)
		content, path := sg.file(layout, as)
		msg.add("Here's my `" + path + "`:\n\n```\n").with(content).add("```\n\nIs anything wrong in it?")
	}
	sg.add("user", "text", msg)
	if g.chance(0.2) {
		sg.items = append(sg.items, item{role: "user", kind: "image", text: sg.image()})
	}
	sg.assistantTurn(&text{s: "Let me look at the configuration first."}, sg.shellCall(&text{s: "ls -la"}, "List files", &text{s: "total 48\ndrwxr-xr-x  9 dev dev 4096 Nov 30 10:12 .\n-rw-r--r--  1 dev dev  512 Nov 30 10:10 .env\n-rw-r--r--  1 dev dev 2210 Nov 30 10:11 package.json\n"}))
}

// image is a screenshot's base64 (a hard negative).
func (sg *sessionGen) image() *text {
	g := sg.g
	return negText("image", "iVBORw0KGgoAAAANSUhEUgAA"+g.Str(4*(300+g.IntN(700)), b64c)+"AAAAAElFTkSuQmCC")
}

// cleanScene is a step with no secret: its text holds hard negatives.
func (sg *sessionGen) cleanScene() {
	g := sg.g
	t := &text{}
	var cmd string
	switch g.IntN(8) {
	case 0:
		cmd = "git log -3"
		for range 3 {
			h := g.Str(40, hexd)
			t.add("commit "+h+"\nAuthor: Jane Doe <jane@example.org>\nDate:   Tue Nov 25 14:03:11 2026 +0100\n\n    auth: refresh the access token before it expires\n\n").negative("git-sha", h)
		}
	case 1:
		cmd = "sed -n '120,140p' package-lock.json"
		for _, pkg := range []string{"jsonwebtoken", "jws", "ms"} {
			sri := "sha512-" + g.Str(86, b64c) + "=="
			t.add(`    "node_modules/`+pkg+`": {`+"\n      \"version\": \"9.0.2\",\n      \"resolved\": \"https://registry.npmjs.org/"+pkg+"/-/"+pkg+"-9.0.2.tgz\",\n      \"integrity\": \""+sri+"\"\n    },\n").negative("sri", sri)
		}
	case 2:
		cmd = "docker images --digests | head -3"
		t.add("REPOSITORY          TAG       DIGEST                                                                    IMAGE ID       CREATED\n")
		for _, r := range []string{"ghcr.io/acme/api", "ghcr.io/acme/worker"} {
			d := g.Str(64, hexd)
			t.add(fmt.Sprintf("%-19s latest    sha256:%s   %s   2 days ago\n", r, d, g.Str(12, hexd))).negative("sha256", d)
		}
	case 3:
		cmd = "cat .env.example"
		t.add("# Copy to .env and fill in\nNODE_ENV=development\n")
		for range 3 {
			name, v := sg.placeholder()
			t.add(name+"="+v+"\n").negative("placeholder", v)
		}
	case 4:
		cmd = "sed -n '30,45p' README.md"
		t.add("## Configure AWS\n\nRun `aws configure` and enter your keys, for example:\n\n```\n")
		t.add("AWS Access Key ID [None]: AKIAIOSFODNN7EXAMPLE\n").negative("example-key", "AKIAIOSFODNN7EXAMPLE")
		t.add("AWS Secret Access Key [None]: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n").negative("example-key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
		t.add("Default region name [None]: us-west-2\n```\n")
	case 5:
		cmd = "kubectl get pods -n prod -o json | jq -r '.items[].metadata.uid'"
		for range 3 {
			u := g.UUID()
			t.add(u+"\n").negative("uuid", u)
		}
	case 6:
		cmd = "cat ~/.ssh/id_ed25519.pub"
		k := "AAAAC3NzaC1lZDI1NTE5AAAAI" + g.Str(43, b64c)
		t.add("ssh-ed25519 "+k+" dev@laptop\n").negative("ssh-public-key", k)
	default:
		cmd = "sed -n '1,40p' src/auth/token.ts"
		t.add(cleanCode)
		u := g.UUID()
		t.add("// request ids look like "+u+"\n").negative("uuid", u)
	}
	if g.chance(0.15) {
		sg.add("user", "text", &text{s: "Here is a screenshot of the error."})
		sg.items = append(sg.items, item{role: "user", kind: "image", text: sg.image()})
	}
	sg.assistantTurn(nil, sg.shellCall(&text{s: cmd}, "Look around", t))
}

const cleanCode = `import { createHmac } from "node:crypto";

// refreshToken renews the access token a minute before it expires; the
// secret is read from the environment, never from this file.
export async function refreshToken(store: TokenStore, clientId: string): Promise<string> {
  const current = await store.load(clientId);
  if (current && current.expiresAt - Date.now() > 60_000) {
    return current.accessToken;
  }
  const secret = process.env.CLIENT_SECRET;
  if (!secret) throw new Error("CLIENT_SECRET is not set");
  const signature = createHmac("sha256", secret).update(clientId).digest("hex");
  const res = await fetch(TOKEN_URL, { method: "POST", body: JSON.stringify({ clientId, signature }) });
  const { access_token: accessToken, expires_in: expiresIn } = await res.json();
  await store.save(clientId, { accessToken, expiresAt: Date.now() + expiresIn * 1000 });
  return accessToken;
}
`

// paragraph is n sentences of an agent's prose.
func (sg *sessionGen) paragraph(n int) string {
	g := sg.g
	subj := []string{"The handler", "This function", "The worker", "The config loader", "The deploy script", "The test", "The middleware", "The client", "The token refresher", "The migration"}
	verb := []string{"reads", "validates", "caches", "retries", "logs", "rotates", "checks", "parses", "forwards", "drops"}
	objs := []string{"the API key from the environment", "the session token", "the request body", "the password hash", "the secret name", "the retry budget", "the access token before it expires", "the connection string's host", "each key's expiry", "the webhook signature"}
	tail := []string{"before it answers.", "on every request.", "when the cache is cold.", "and returns an error otherwise.", "so that nothing leaks into the logs.", "— see the comment above.", "after the timeout (30 s).", "once per minute."}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(g.pick(subj...) + " " + g.pick(verb...) + " " + g.pick(objs...) + " " + g.pick(tail...))
	}
	return b.String()
}
