package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chaperone-dev/chaperone/event"
)

// ErrBadAnswer is wrapped by the judge's errors when the model answered but
// not with {"verdict":"allow"|"deny"|"ask","reason":"..."}.
var ErrBadAnswer = errors.New("policy: judge: bad answer")

// The judge providers a policy may name.
const (
	judgeOpenAI    = "openai"    // OpenAI-compatible chat completions: OpenAI, Ollama, vLLM, LiteLLM
	judgeAnthropic = "anthropic" // Anthropic messages
)

const (
	judgeAnthropicVer   = "2023-06-01"
	judgeMaxTokens      = 256
	judgeMaxReason      = 300     // runes of the verdict's reason
	judgeMaxResponse    = 1 << 20 // bytes of a 2xx response body
	judgeMaxErrorBody   = 200     // bytes of a non-2xx body quoted in an error
	judgeMaxAnswerQuote = 80      // bytes of a bad answer quoted in an error
)

// judgeClient asks an LLM over HTTP. It is immutable after NewJudge and safe
// for concurrent use.
type judgeClient struct {
	provider string
	model    string
	endpoint string // the full URL of the API call
	timeout  time.Duration
	client   *http.Client
	// setAuth and redact hold the API key in closures so that the key never
	// prints with the struct.
	setAuth func(http.Header)
	redact  func(string) string
}

// NewJudge returns the judge for cfg. getenv reads cfg.APIKeyEnv (nil:
// os.Getenv); the key is never logged, never put in errors. When
// cfg.APIKeyEnv names a variable, it must be set. client is the HTTP client
// to use (nil: a new one that ignores the proxy variables of the
// environment, since the judge's own requests never go through a session's
// proxy). Redirects are never followed, so the key goes nowhere but cfg.URL.
//
// The judge answers within cfg.Timeout (default 10s) or returns an error.
// Provider "openai" posts to {URL}/chat/completions (OpenAI, Ollama, vLLM,
// LiteLLM), "anthropic" to {URL}/v1/messages.
func NewJudge(cfg JudgeConfig, client *http.Client, getenv func(string) string) (Judge, error) {
	var path string
	switch cfg.Provider {
	case judgeOpenAI:
		path = "chat/completions"
	case judgeAnthropic:
		path = "v1/messages"
	default:
		return nil, fmt.Errorf("policy: judge: unknown provider %q (want %s or %s)", cfg.Provider, judgeOpenAI, judgeAnthropic)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("policy: judge: model is empty")
	}
	// The URL is not quoted in errors: it may hold a password.
	base, err := url.Parse(cfg.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("policy: judge: url is not an absolute http or https URL")
	}
	timeout := cfg.Timeout
	if timeout < 0 {
		return nil, fmt.Errorf("policy: judge: negative timeout %v", timeout)
	}
	if timeout == 0 {
		timeout = DefaultJudgeTimeout
	}

	var key string
	if cfg.APIKeyEnv != "" {
		if getenv == nil {
			getenv = os.Getenv
		}
		key = strings.TrimSpace(getenv(cfg.APIKeyEnv))
		if key == "" {
			return nil, fmt.Errorf("policy: judge: environment variable %s (the api key) is empty or unset", cfg.APIKeyEnv)
		}
	}

	j := &judgeClient{
		provider: cfg.Provider,
		model:    cfg.Model,
		endpoint: base.JoinPath(path).String(),
		timeout:  timeout,
		client:   judgeNoRedirects(client),
		setAuth:  func(http.Header) {},
		redact:   func(s string) string { return s },
	}
	if key != "" {
		j.redact = func(s string) string { return strings.ReplaceAll(s, key, "[redacted]") }
		if cfg.Provider == judgeAnthropic {
			j.setAuth = func(h http.Header) { h.Set("X-Api-Key", key) }
		} else {
			j.setAuth = func(h http.Header) { h.Set("Authorization", "Bearer "+key) }
		}
	}
	return j, nil
}

// judgeNoRedirects returns a copy of c (nil: a new client with no proxy)
// that does not follow redirects: a redirect would resend the key, and
// net/http strips only some credential headers on the way.
func judgeNoRedirects(c *http.Client) *http.Client {
	if c == nil {
		var t *http.Transport
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			t = dt.Clone()
		} else {
			t = &http.Transport{ForceAttemptHTTP2: true}
		}
		t.Proxy = nil
		c = &http.Client{Transport: t}
	}
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// Judge asks the model about req.Event. On any failure it returns the zero
// verdict (deny) and an error; the caller applies the policy's on_error.
func (j *judgeClient) Judge(ctx context.Context, req JudgeRequest) (event.Verdict, error) {
	if req.Event == nil {
		return event.Verdict{}, errors.New("policy: judge: no event")
	}
	user, err := judgeUserPrompt(req)
	if err != nil {
		return event.Verdict{}, fmt.Errorf("policy: judge: render prompt: %w", err)
	}
	body, err := j.requestBody(user)
	if err != nil {
		return event.Verdict{}, fmt.Errorf("policy: judge: encode request: %w", err)
	}

	callCtx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	content, err := j.post(callCtx, body)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil { // our timeout, not the caller's
			return event.Verdict{}, fmt.Errorf("policy: judge: no answer within %v: %w", j.timeout, err)
		}
		return event.Verdict{}, fmt.Errorf("policy: judge: %w", err)
	}
	action, reason, err := parseJudgeAnswer(content)
	if err != nil {
		return event.Verdict{}, fmt.Errorf("%w (answer %q)", err, judgeCut(j.redact(content), judgeMaxAnswerQuote))
	}
	return event.Verdict{
		Action:    action,
		Rule:      "judge:" + j.model,
		Reason:    reason,
		DecidedBy: event.DecidedByJudge,
	}, nil
}

// post sends body and returns the model's text.
func (j *judgeClient) post(ctx context.Context, body []byte) (string, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, j.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("User-Agent", "chaperone-judge")
	if j.provider == judgeAnthropic {
		hreq.Header.Set("Anthropic-Version", judgeAnthropicVer)
	}
	j.setAuth(hreq.Header)

	resp, err := j.client.Do(hreq)
	if err != nil {
		return "", err // *url.Error: method, URL without password, cause; never headers
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Read a little more than is quoted, so that a key the server
		// echoes is redacted whole before the cut.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("%s answered %s: %q", j.provider, resp.Status, judgeCut(j.redact(string(b)), judgeMaxErrorBody))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, judgeMaxResponse+1))
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	if len(data) > judgeMaxResponse {
		return "", fmt.Errorf("answer larger than %d bytes", judgeMaxResponse)
	}
	if j.provider == judgeAnthropic {
		return judgeAnthropicText(data)
	}
	return judgeOpenAIText(data)
}

type judgeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type judgeOpenAIRequest struct {
	Model          string         `json:"model"`
	Messages       []judgeMessage `json:"messages"`
	Temperature    float64        `json:"temperature"` // sent even when 0
	ResponseFormat struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

type judgeAnthropicRequest struct {
	Model     string         `json:"model"`
	MaxTokens int            `json:"max_tokens"`
	System    string         `json:"system"`
	Messages  []judgeMessage `json:"messages"`
}

func (j *judgeClient) requestBody(user string) ([]byte, error) {
	if j.provider == judgeAnthropic {
		return json.Marshal(judgeAnthropicRequest{
			Model:     j.model,
			MaxTokens: judgeMaxTokens,
			System:    judgeSystemPrompt,
			Messages:  []judgeMessage{{Role: "user", Content: user}},
		})
	}
	r := judgeOpenAIRequest{
		Model:    j.model,
		Messages: []judgeMessage{{Role: "system", Content: judgeSystemPrompt}, {Role: "user", Content: user}},
	}
	r.ResponseFormat.Type = "json_object"
	return json.Marshal(r)
}

// judgeOpenAIText returns choices[0].message.content of a chat completion.
func judgeOpenAIText(data []byte) (string, error) {
	var r struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
				Refusal *string `json:"refusal"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("%w: response is not a chat completion: %v", ErrBadAnswer, err)
	}
	if len(r.Choices) == 0 {
		return "", fmt.Errorf("%w: response has no choices", ErrBadAnswer)
	}
	m := r.Choices[0].Message
	if m.Content == nil {
		if m.Refusal != nil {
			return "", fmt.Errorf("%w: the model refused: %q", ErrBadAnswer, judgeCut(*m.Refusal, judgeMaxAnswerQuote))
		}
		return "", fmt.Errorf("%w: message has no content", ErrBadAnswer)
	}
	return *m.Content, nil
}

// judgeAnthropicText returns the text of the first text block of a message.
func judgeAnthropicText(data []byte) (string, error) {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("%w: response is not a message: %v", ErrBadAnswer, err)
	}
	for _, b := range r.Content {
		if b.Type == "text" {
			return b.Text, nil
		}
	}
	return "", fmt.Errorf("%w: message has no text block", ErrBadAnswer)
}

// parseJudgeAnswer parses the model's text: exactly one JSON object, alone
// or in a ```json fence, with "verdict" one of allow, deny, ask and a
// non-empty "reason". The reason comes back as one printable line of at
// most judgeMaxReason runes.
func parseJudgeAnswer(answer string) (event.Action, string, error) {
	s := strings.TrimSpace(answer)
	if rest, ok := strings.CutPrefix(s, "```json"); ok {
		inner, closed := strings.CutSuffix(rest, "```")
		if !closed || inner == "" || !unicode.IsSpace(rune(inner[0])) {
			return event.Deny, "", fmt.Errorf("%w: malformed ```json fence", ErrBadAnswer)
		}
		s = strings.TrimSpace(inner)
	}
	if !strings.HasPrefix(s, "{") {
		return event.Deny, "", fmt.Errorf("%w: not a JSON object", ErrBadAnswer)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var obj map[string]json.RawMessage // exact key names, unlike struct decoding
	if err := dec.Decode(&obj); err != nil {
		return event.Deny, "", fmt.Errorf("%w: not a JSON object: %v", ErrBadAnswer, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return event.Deny, "", fmt.Errorf("%w: text after the JSON object", ErrBadAnswer)
	}

	var verdict, reason string
	if raw, ok := obj["verdict"]; !ok {
		return event.Deny, "", fmt.Errorf("%w: no verdict", ErrBadAnswer)
	} else if err := json.Unmarshal(raw, &verdict); err != nil {
		return event.Deny, "", fmt.Errorf("%w: verdict is not a string", ErrBadAnswer)
	}
	var action event.Action
	switch verdict {
	case "allow":
		action = event.Allow
	case "deny":
		action = event.Deny
	case "ask":
		action = event.Ask
	default:
		return event.Deny, "", fmt.Errorf("%w: verdict %q is not allow, deny or ask", ErrBadAnswer, judgeCut(verdict, 20))
	}
	if raw, ok := obj["reason"]; !ok {
		return event.Deny, "", fmt.Errorf("%w: no reason", ErrBadAnswer)
	} else if err := json.Unmarshal(raw, &reason); err != nil {
		return event.Deny, "", fmt.Errorf("%w: reason is not a string", ErrBadAnswer)
	}
	reason = judgeOneLine(reason)
	if reason == "" {
		return event.Deny, "", fmt.Errorf("%w: empty reason", ErrBadAnswer)
	}
	if utf8.RuneCountInString(reason) > judgeMaxReason {
		reason = strings.TrimSpace(string([]rune(reason)[:judgeMaxReason]))
	}
	return action, reason, nil
}

// judgeOneLine turns s into one line of printable text: control characters
// (terminal escapes, newlines) become spaces, runs of spaces one.
func judgeOneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// judgeCut returns at most n bytes of s, cut on a rune boundary.
func judgeCut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
