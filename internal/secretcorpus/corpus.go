package secretcorpus

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
)

// Provider is the API shape of a request body.
type Provider string

// The shapes generated.
const (
	Anthropic       Provider = "anthropic"        // Messages: system, tool_use/tool_result, thinking with signature
	OpenAIChat      Provider = "openai-chat"      // Chat Completions: tool_calls with JSON arguments, tool messages
	OpenAIResponses Provider = "openai-responses" // Responses as Codex sends it
	Gemini          Provider = "gemini"           // generateContent: contents/parts, functionCall/functionResponse
	Bedrock         Provider = "bedrock"          // Converse: toolUse/toolResult
)

// Providers lists every shape.
func Providers() []Provider {
	return []Provider{Anthropic, OpenAIChat, OpenAIResponses, Gemini, Bedrock}
}

// Host is the API host a request of this shape goes to.
func (p Provider) Host() string {
	switch p {
	case Anthropic:
		return "api.anthropic.com"
	case OpenAIChat, OpenAIResponses:
		return "api.openai.com"
	case Gemini:
		return "generativelanguage.googleapis.com"
	case Bedrock:
		return "bedrock-runtime.us-east-1.amazonaws.com"
	}
	return ""
}

// Path is the request path of a streamed call of this shape.
func (p Provider) Path() string {
	switch p {
	case Anthropic:
		return "/v1/messages"
	case OpenAIChat:
		return "/v1/chat/completions"
	case OpenAIResponses:
		return "/v1/responses"
	case Gemini:
		return "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
	case Bedrock:
		return "/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream"
	}
	return ""
}

// Serialization is how a client writes JSON.
type Serialization string

// The serializations generated.
const (
	JS     Serialization = "js"     // JSON.stringify: compact, non-ASCII as is
	Python Serialization = "python" // json.dumps: ", " and ": ", ensure_ascii (\uXXXX)
	GoJSON Serialization = "go"     // encoding/json: compact, <, >, & as \u003c, \u003e, \u0026
	Pretty Serialization = "pretty" // JSON.stringify(v, null, 2)
)

// Serializations lists every serialization.
func Serializations() []Serialization { return []Serialization{JS, Python, GoJSON, Pretty} }

// Options says what Generate makes.
type Options struct {
	Seed uint64
	// Sessions of each provider and serialization; 1 when 0.
	Sessions int
	// Providers and Serializations to make; all when empty.
	Providers      []Provider
	Serializations []Serialization
}

// Session is one agent's conversation: requests that grow turn by turn,
// each resending the history before it, as agents do.
type Session struct {
	Name          string // provider/serialization/index, safe to print
	Provider      Provider
	Serialization Serialization
	Requests      []Request
}

// Request is one request body and its labels.
type Request struct {
	Name          string // session name/request index, safe to print
	Provider      Provider
	Serialization Serialization
	Body          []byte
	Secrets       []Secret
	Negatives     []Negative
}

// Secret is one occurrence of a planted secret in a body. Value is the
// secret itself: never print it.
type Secret struct {
	Type     string // what kind of secret (SecretTypes)
	Location string // where in the conversation (Locations)
	Layout   string // how the text around it is laid out (Layouts)
	Value    string
	// Probes are the parts of Value that must not be left: for a PEM key
	// its base64 lines, for anything else its pieces of max(12, ⌈n/3⌉)
	// bytes (n: the length of Value less the prefix every secret of its
	// kind shares), the last one ending at Value's end; the whole Value
	// when it is shorter.
	Probes []string
	// Pointer is the JSON pointer (RFC 6901) of the body's string that
	// holds it; Depth the JSON strings inside that one around it (0: in
	// its text; 1: inside a JSON string of a JSON text, as tool
	// arguments are; 3 for a Kubernetes annotation in a wrapped Codex
	// tool output).
	Pointer string
	Depth   int
}

// Negative is one occurrence of a hard negative: a value that looks like a
// secret but is not one, which redaction must leave as it is.
type Negative struct {
	Kind    string // uuid, git-sha, sha256, image, sri, signature, encrypted-reasoning, placeholder, example-key, certificate, ssh-public-key, session-id
	Value   string
	Pointer string
	Depth   int
}

// Generate makes sessions of every provider and serialization asked for.
// The same options give the same bytes; each session's content follows
// from the seed, its shape and its index alone, so a subset replays too.
func Generate(o Options) []Session {
	n := max(o.Sessions, 1)
	provs := o.Providers
	if len(provs) == 0 {
		provs = Providers()
	}
	sers := o.Serializations
	if len(sers) == 0 {
		sers = Serializations()
	}
	var out []Session
	for _, p := range provs {
		for _, s := range sers {
			for i := range n {
				out = append(out, newSession(sessionSeed(o.Seed, p, s, i), p, s, i))
			}
		}
	}
	return out
}

func sessionSeed(seed uint64, p Provider, s Serialization, i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s/%d", seed, p, s, i)
	return h.Sum64()
}

// SeedEnv names the environment variable that replays a seed.
const SeedEnv = "CHAPERONE_CORPUS_SEED"

// Seed returns the seed that SeedEnv holds in getenv (os.Getenv), or a
// new random one when it is unset: tests measure on traffic they have not
// seen, and print the seed so that a failure can be replayed.
func Seed(getenv func(string) string) (uint64, error) {
	s := getenv(SeedEnv)
	if s == "" {
		return rand.Uint64(), nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("secretcorpus: %s=%q: %w", SeedEnv, s, err)
	}
	return n, nil
}
