package rewrite

import (
	"net/url"
	"strings"
)

// Provider is who serves an LLM API call.
type Provider string

// The providers DetectAPI knows.
const (
	Anthropic   Provider = "anthropic"
	OpenAI      Provider = "openai"
	AzureOpenAI Provider = "azure-openai"
	Gemini      Provider = "gemini"
	Bedrock     Provider = "bedrock"
)

// Operations, the wire format of a call. Inspect and NewResponseReader choose
// their parser by Op, not by Provider: api.anthropic.com also serves
// chat.completions, and Vertex serves Anthropic's messages.
const (
	OpMessages              = "messages"
	OpCountTokens           = "messages.count_tokens"
	OpChatCompletions       = "chat.completions"
	OpResponses             = "responses"
	OpGenerateContent       = "generateContent"
	OpStreamGenerateContent = "streamGenerateContent"
	OpConverse              = "converse"
	OpConverseStream        = "converse-stream"
	OpInvoke                = "invoke"                      // Bedrock InvokeModel; Anthropic-shaped for Claude models
	OpInvokeStream          = "invoke-with-response-stream" // response is AWS event-stream binary
)

// API identifies an LLM API call.
type API struct {
	Provider Provider
	Op       string
}

// DetectAPI recognises an LLM API call by host and path. Known hosts
// (api.anthropic.com, api.openai.com, *.openai.azure.com,
// *.cognitiveservices.azure.com, *.services.ai.azure.com,
// generativelanguage.googleapis.com, [region-]aiplatform.googleapis.com,
// bedrock-runtime[-fips].*.amazonaws.com) match on their own; extra (gateway or
// local hosts, "127.0.0.1:8080", "litellm.internal", "*.gw.example") are matched
// by path alone: an entry with a port matches that port only. Hosts compare
// case-insensitively; path may be escaped or not and may carry a query.
func DetectAPI(host, path string, extra []string) (API, bool) {
	host = strings.ToLower(strings.TrimSpace(host))
	name := strings.TrimSuffix(hostname(host), ".")
	shape, op, ok := matchPath(path)
	if !ok {
		return API{}, false
	}
	if p, known := knownHost(name); known {
		if (op == OpMessages || op == OpCountTokens) && p != Bedrock {
			// Anthropic's format wherever it is served (Vertex, Azure AI Foundry).
			p = Anthropic
		}
		return API{Provider: p, Op: op}, true
	}
	for _, e := range extra {
		if matchExtra(strings.ToLower(strings.TrimSpace(e)), host, name) {
			return API{Provider: shape, Op: op}, true
		}
	}
	return API{}, false
}

// hostname strips a port from host ("[::1]:8080" → "::1").
func hostname(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return host
	}
	if strings.Count(host, ":") == 1 {
		return host[:strings.IndexByte(host, ':')]
	}
	return host
}

func hasPort(e string) bool {
	if strings.HasPrefix(e, "[") {
		return strings.Contains(e, "]:")
	}
	return strings.Count(e, ":") == 1
}

func matchExtra(e, host, name string) bool {
	if e == "" {
		return false
	}
	if hasPort(e) {
		return e == host || (strings.HasPrefix(e, "*.") && hasPort(host) &&
			strings.HasSuffix(host, e[1:]))
	}
	e = strings.Trim(e, "[]")
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return e == name
}

func knownHost(h string) (Provider, bool) {
	switch {
	case h == "api.anthropic.com":
		return Anthropic, true
	case h == "api.openai.com":
		return OpenAI, true
	case strings.HasSuffix(h, ".openai.azure.com"),
		strings.HasSuffix(h, ".cognitiveservices.azure.com"),
		strings.HasSuffix(h, ".services.ai.azure.com"):
		return AzureOpenAI, true
	case h == "generativelanguage.googleapis.com",
		h == "aiplatform.googleapis.com",
		strings.HasSuffix(h, "-aiplatform.googleapis.com"):
		return Gemini, true
	case (strings.HasPrefix(h, "bedrock-runtime.") || strings.HasPrefix(h, "bedrock-runtime-fips.")) &&
		(strings.HasSuffix(h, ".amazonaws.com") || strings.HasSuffix(h, ".amazonaws.com.cn")):
		return Bedrock, true
	}
	return "", false
}

// matchPath recognises the path of an LLM call and the provider its shape
// implies.
func matchPath(p string) (Provider, string, bool) {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	if !strings.HasPrefix(p, "/") {
		return "", "", false
	}
	if _, _, op, ok := bedrockPath(p); ok {
		return Bedrock, op, true
	}
	if head, op, ok := modelPath(p); ok {
		if strings.Contains(head, "/publishers/anthropic/") {
			return Anthropic, op, true
		}
		return Gemini, op, true
	}
	switch {
	case strings.HasSuffix(p, "/v1/messages"):
		return Anthropic, OpMessages, true
	case strings.HasSuffix(p, "/v1/messages/count_tokens"):
		return Anthropic, OpCountTokens, true
	case strings.HasSuffix(p, "/chat/completions"):
		if strings.HasPrefix(p, "/openai/") {
			return AzureOpenAI, OpChatCompletions, true
		}
		return OpenAI, OpChatCompletions, true
	case strings.HasSuffix(p, "/responses"):
		if strings.HasPrefix(p, "/openai/") {
			return AzureOpenAI, OpResponses, true
		}
		return OpenAI, OpResponses, true
	}
	return "", "", false
}

// bedrockPath matches /model/{modelId}/{converse,converse-stream,invoke,
// invoke-with-response-stream}; the id may be escaped (":" as %3A, an
// inference profile ARN's "/" as %2F).
func bedrockPath(p string) (prefix, model, op string, ok bool) {
	i := strings.Index(p, "/model/")
	if i < 0 {
		return "", "", "", false
	}
	rest := p[i+len("/model/"):]
	for _, o := range []string{OpConverseStream, OpConverse, OpInvokeStream, OpInvoke} {
		if id, found := strings.CutSuffix(rest, "/"+o); found && id != "" {
			if u, err := url.PathUnescape(id); err == nil {
				id = u
			}
			return p[:i], id, o, true
		}
	}
	return "", "", "", false
}

// modelPath matches …/models/{model}:{method} (Gemini, Vertex publishers).
// It returns the path up to the model segment, to tell Vertex's Anthropic
// publisher apart.
func modelPath(p string) (prefix, op string, ok bool) {
	colon := strings.LastIndexByte(p, ':')
	slash := strings.LastIndexByte(p, '/')
	if colon < 0 || colon < slash {
		return "", "", false
	}
	method := p[colon+1:]
	head := p[:slash+1]
	if !strings.HasSuffix(head, "/models/") && !strings.HasSuffix(head, "/tunedModels/") {
		return "", "", false
	}
	switch method {
	case "generateContent":
		return head, OpGenerateContent, true
	case "streamGenerateContent":
		return head, OpStreamGenerateContent, true
	case "rawPredict", "streamRawPredict":
		if !strings.Contains(head, "/publishers/anthropic/") {
			return "", "", false
		}
		if p[slash+1:colon] == "count-tokens" {
			return head, OpCountTokens, true
		}
		return head, OpMessages, true
	}
	return "", "", false
}

// pathModel returns the model a path names (Gemini, Vertex, Bedrock), or "".
func pathModel(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	if _, m, _, ok := bedrockPath(p); ok {
		return m
	}
	if head, _, ok := modelPath(p); ok {
		m := p[len(head):strings.LastIndexByte(p, ':')]
		if strings.HasSuffix(head, "/tunedModels/") {
			return "tunedModels/" + m
		}
		return m
	}
	return ""
}

// pathStreams reports whether the path alone asks for a streamed response.
func pathStreams(p string) bool {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	return strings.HasSuffix(p, ":streamGenerateContent") || strings.HasSuffix(p, ":streamRawPredict") ||
		strings.HasSuffix(p, "/converse-stream") || strings.HasSuffix(p, "/invoke-with-response-stream")
}
