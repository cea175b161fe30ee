package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/chaperone-dev/chaperone/event"
	"github.com/chaperone-dev/chaperone/rewrite"
	"github.com/chaperone-dev/chaperone/rewrite/inject"
	"github.com/chaperone-dev/chaperone/rewrite/secrets"
)

// Rewrites is what the proxy changes in one session's requests and
// responses. Every field is optional.
type Rewrites struct {
	// Redactor replaces secrets with placeholders in LLM prompts whose llm
	// event a rewrite rule with redact_secrets decided, and in other
	// request bodies whose http event such a rule decided.
	Redactor *secrets.Redactor
	// Scanner finds the secrets of request bodies for http.secrets.
	Scanner *secrets.Scanner
	// Restore puts the real values back where an LLM's answer quotes a
	// placeholder the Redactor made.
	Restore bool
	// LLMHosts are gateways and local servers recognised as LLM APIs by
	// path alone (the providers' own hosts are known).
	LLMHosts []string
	// Credentials swaps brokered placeholders for real values on the hosts
	// they are bound to, and refuses them anywhere else.
	Credentials *inject.Broker
	// Identity headers (IdentityPresets, from Identity and the acting
	// process's lineage) are set on LLM API calls and on the hosts for
	// which IdentityHost is true.
	Identity        inject.Identity
	IdentityPresets []string
	IdentityHost    func(host string) bool
	// RewriteParams returns the rewrite: parameters of a policy rule.
	RewriteParams func(rule string) map[string]any
	// Task is told the agent's current task, as each LLM request shows it.
	Task func(task string)

	clean cleanValues // header and query values found clean
}

// Limits of the request bodies read before they are sent: a body beyond
// them is passed on unscanned (and an LLM prompt that should be redacted is
// refused).
const (
	maxScanBody = 8 << 20
	maxLLMBody  = 64 << 20
)

// Rules the rewrite stage applies by itself.
const (
	ruleCredentialLeak = "credential_placeholder"
	ruleRedactFailed   = "redact_secrets"
)

// llmCall is the llm event of a request recognised as an LLM API call,
// published once its response has ended.
type llmCall struct {
	api      rewrite.API
	ev       event.Event
	llm      event.LLM
	reader   *rewrite.ResponseReader
	restored int
	// checked says the body's secrets are accounted for: replaced by the
	// redactor, or, where it could not replace them, in the exchange's
	// found.
	checked bool
	// prompt is the request's last user turn, whole, for the event's
	// Prompt; learned says the session's redactor has searched the whole
	// body (and so knows the values it found elsewhere in it).
	prompt  string
	learned bool
}

// logPrompt sets l's Prompt to text, the last user turn of body, as the
// log may hold it: the redactor's placeholders for its secrets, whether or
// not the request is redacted, at most event.MaxPrompt bytes
// (rewrite.LogPrompt). Unless learned, the redactor searches body first:
// a value it finds elsewhere in the body (a key in a tool's output that
// the user's text quotes bare) is then known in the prompt too, as in the
// body it redacts. Without a redactor there is no prompt.
func (rw *Rewrites) logPrompt(l *event.LLM, text string, body []byte, learned bool) {
	if rw.Redactor == nil || text == "" {
		return
	}
	if !learned {
		rewrite.FindBodySecrets(body, rw.Redactor)
	}
	l.Prompt, l.PromptTruncated = rewrite.LogPrompt(text, rw.Redactor, event.MaxPrompt)
}

// tellTask tells the session the agent's task (clipped, the last user
// turn whole) for the judge, itself an LLM, so never with a secret: the
// whole turn is searched before it is cut, as for the logged prompt, so
// that a secret cut in two at the bound is not missed.
func (rw *Rewrites) tellTask(clipped, whole string) {
	if clipped == "" || rw.Task == nil {
		return
	}
	if rw.Redactor != nil {
		clipped, _ = rewrite.LogPrompt(whole, rw.Redactor, rewrite.MaxTaskBytes)
	}
	rw.Task(clipped)
}

// rewriteParam reports whether the rule of v asks for the rewrite param.
func (rw *Rewrites) wants(v event.Verdict, param string) bool {
	if v.Action != event.Rewrite || rw.RewriteParams == nil {
		return false
	}
	on, _ := rw.RewriteParams(v.Rule)[param].(bool)
	return on
}

// prepare does the work on a session's request that comes before its http
// event is decided: it looks for secrets in its header and query,
// recognises LLM API calls and decides their llm event, reads the body,
// redacts it when the llm verdict says so and finds the secrets left in it
// (or, for a body too large to hold, sets it to be checked as it streams).
// False means the request was refused.
func (p *Proxy) prepare(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	rw := x.rw
	e := x.ev
	api, isLLM := rewrite.DetectAPI(r.Host, r.URL.Path, rw.LLMHosts)
	x.scanHead(r, api, isLLM)
	x.http.Secrets = x.secretIDs()
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return true
	}
	limit := int64(maxScanBody)
	if isLLM {
		limit = maxLLMBody
	}
	raw, whole, err := readUpTo(r.Body, limit)
	x.body.rc = io.NopCloser(io.MultiReader(bytes.NewReader(raw), r.Body))
	x.sendLen = r.ContentLength // what the client declared, or -1: a body too large to hold is sent as it came
	if err != nil {
		p.refuse(w, e, http.StatusBadRequest, proxyVerdict(ruleRedactFailed, "the request body could not be read"))
		return false
	}
	if !whole {
		if isLLM {
			p.refuse(w, e, http.StatusRequestEntityTooLarge, proxyVerdict(ruleRedactFailed, "the LLM request is too large to check for secrets"))
			return false
		}
		return p.streamBody(w, r, x, raw, r.Body)
	}
	x.sendLen = int64(len(raw))
	x.body.rc = io.NopCloser(bytes.NewReader(raw))
	plain, enc, err := rewrite.Decode(contentEncoding(r.Header), raw, rewrite.MaxDecodedBytes)
	if err != nil {
		if !isLLM && errors.Is(err, rewrite.ErrTooLarge) {
			// Too large to hold decoded, not to check as it goes.
			return p.streamBody(w, r, x, raw, http.NoBody)
		}
		p.refuseUndecodable(w, x, err)
		return false
	}
	x.plain, x.enc = plain, enc
	if isLLM {
		if !p.decideLLM(w, r, x, api) {
			return false
		}
	}
	switch {
	case x.llm == nil:
		x.scanBody(x.plain, r.Host)
	case !x.llm.checked:
		x.scanPrompt("not redacted")
	}
	x.http.Secrets = x.secretIDs()
	return true
}

// scanPrompt looks for the secrets of an LLM call's body that was not
// redacted, as the redactor would see them: in its strings, decoded, JSON
// inside them included (not in its JSON as sent, where the escapes of a
// string, and keys next to values that are no secret, such as
// "prompt_cache_key", would be taken for secrets that are not there).
// how says why the body was not redacted.
func (x *exchange) scanPrompt(how string) {
	var r rewrite.Redactor
	switch rw := x.rw; {
	case rw.Redactor != nil:
		r = rw.Redactor
	case rw.Scanner != nil:
		r = rewrite.RedactorFunc(func(s string, found func(start, end int, rule, placeholder string)) {
			for _, f := range rw.Scanner.ScanString(s) {
				found(f.Start, f.End, f.RuleID, "")
			}
		})
	default:
		return
	}
	if x.llm != nil && x.rw.Redactor != nil {
		x.llm.learned = true
	}
	for _, s := range rewrite.FindBodySecrets(x.plain, r) {
		where := "the LLM request body"
		if s.Pointer != "" {
			where += " at " + s.Pointer
		}
		x.found = append(x.found, secretAt{s.RuleID, where + ", " + how})
	}
}

// streamBody sets the body (raw, read already, then rest) to be checked
// as it is sent upstream.
func (p *Proxy) streamBody(w http.ResponseWriter, r *http.Request, x *exchange, raw []byte, rest io.Reader) bool {
	rw := x.rw
	if rw.Scanner == nil && rw.known() == nil && rw.Credentials == nil {
		return true // nothing to look for
	}
	bs, err := p.newBodyScan(r, x, raw, rest)
	if err != nil {
		p.refuseUndecodable(w, x, err)
		return false
	}
	x.stream = bs
	x.body.rc = bs
	return true
}

// decideLLM publishes nothing yet: it decides the llm event of an LLM API
// call, tells the session its task, and redacts the prompt when the
// verdict says so.
func (p *Proxy) decideLLM(w http.ResponseWriter, r *http.Request, x *exchange, api rewrite.API) bool {
	req, err := rewrite.Inspect(api, r.URL.Path, x.plain)
	if err != nil {
		return true // not an LLM call after all (not JSON): an http request like any other
	}
	c := &llmCall{api: api}
	c.llm = event.LLM{Provider: string(api.Provider), Model: req.Model, Path: x.eventPath(r), Operation: api.Op, Stream: req.Stream}
	c.ev = event.Event{Time: x.ev.Time, Kind: event.KindLLM, Session: x.ev.Session, Process: x.ev.Process, LLM: &c.llm}
	x.llm = c
	x.rw.tellTask(req.Task, req.Prompt)
	c.prompt = req.Prompt // the event has it once published: the policy never sees it
	c.ev.Verdict = p.decide(r.Context(), &c.ev)
	if !c.ev.Verdict.Allowed() {
		p.refuse(w, x.ev, http.StatusForbidden, c.ev.Verdict)
		p.finishLLM(x, http.StatusForbidden)
		return false
	}
	if x.rw.wants(c.ev.Verdict, "redact_secrets") {
		return p.redact(w, r, x, api.Provider == rewrite.Bedrock)
	}
	return true
}

// redact replaces the secrets of the body by placeholders. With
// checkSigned, a request whose signature covers the body (SigV4) and that
// holds anything to redact is refused, unless the deciding rule says
// on_signed: allow, which sends it unchanged.
func (p *Proxy) redact(w http.ResponseWriter, r *http.Request, x *exchange, checkSigned bool) bool {
	red := x.rw.Redactor
	if red == nil || x.plain == nil {
		return true
	}
	out, ids := rewrite.RedactBody(x.plain, red)
	if x.llm != nil {
		x.llm.checked, x.llm.learned = true, true
	}
	if len(ids) == 0 {
		return true
	}
	counts := map[string]int{}
	for _, id := range ids {
		counts[id]++
	}
	if checkSigned && strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") {
		if x.llm != nil && x.rw.RewriteParams != nil && x.rw.RewriteParams(x.llm.ev.Verdict.Rule)["on_signed"] == "allow" {
			// The rule lets signed requests go unchanged: their secrets
			// stay, and count as such.
			x.scanPrompt("signed, not redacted")
			return true
		}
		p.refuse(w, x.ev, http.StatusForbidden, proxyVerdict(ruleRedactFailed,
			"the request is signed (SigV4) and carries secrets that cannot be removed without breaking the signature"))
		if x.llm != nil {
			x.llm.ev.Verdict = x.ev.Verdict
			p.finishLLM(x, http.StatusForbidden)
		}
		return false
	}
	encoded, err := x.enc.Encode(out)
	if err != nil {
		p.refuse(w, x.ev, http.StatusBadRequest, proxyVerdict(ruleRedactFailed, "the redacted body cannot be encoded: "+err.Error()))
		return false
	}
	x.plain = out
	x.body.rc = io.NopCloser(bytes.NewReader(encoded))
	x.sendLen = int64(len(encoded))
	x.changes().Redacted = counts
	return true
}

// applyRewrites makes the changes that follow an allowed http verdict:
// redaction a rewrite rule asked for, brokered credentials, identity
// headers. False means the request was refused.
func (p *Proxy) applyRewrites(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	rw := x.rw
	if x.llm == nil && rw.wants(x.ev.Verdict, "redact_secrets") && !p.redact(w, r, x, false) {
		return false
	}
	host := r.Host
	if b := rw.Credentials; b != nil {
		// Apply changes header values in place, and the event's header map
		// shares them: give the request values of its own. (Identity
		// headers and Accept-Encoding below only replace map entries.)
		r.Header = r.Header.Clone()
		x.sharedHeader = false
		injected, leaked := b.Apply(host, r.Header, &x.url)
		for _, name := range b.FindPlaceholders(x.plain) {
			if !b.Matches(name, host) {
				leaked = append(leaked, name)
			}
		}
		if len(leaked) > 0 {
			slices.Sort(leaked)
			p.refuse(w, x.ev, http.StatusForbidden, proxyVerdict(ruleCredentialLeak,
				"the request carries the placeholder of credential "+strings.Join(slices.Compact(leaked), ", ")+" to a host it is not bound to"))
			if x.llm != nil {
				x.llm.ev.Verdict = x.ev.Verdict
				p.finishLLM(x, http.StatusForbidden)
			}
			return false
		}
		if len(injected) > 0 {
			x.changes().Credentials = injected
		}
	}
	if len(rw.IdentityPresets) > 0 && (x.llm != nil || x.socket != nil || rw.IdentityHost != nil && rw.IdentityHost(host)) {
		id := rw.Identity
		if x.ev.Process != nil {
			id.Lineage = x.ev.Process.LineageNames
		}
		rand.Read(id.SpanID[:])
		x.ownHeader(r)
		if names, err := inject.ApplyIdentity(r.Header, rw.IdentityPresets, id); err == nil && len(names) > 0 {
			x.changes().Headers = names
		}
	}
	if x.llm != nil {
		// The answer is parsed (and placeholders restored): it must come
		// uncompressed.
		x.ownHeader(r)
		r.Header.Set("Accept-Encoding", "identity")
	}
	if x.ch != nil {
		x.http.Rewrite = x.ch
		if x.ev.Verdict.Action == event.Allow {
			x.ev.Verdict.Action = event.Rewrite
		}
	}
	return true
}

// changes returns the exchange's record of changes, made on first use.
func (x *exchange) changes() *event.Changes {
	if x.ch == nil {
		x.ch = &event.Changes{}
	}
	return x.ch
}

// wrapLLMResponse passes the response of an LLM call through the parser
// (and the restorer of placeholders).
func (x *exchange) wrapLLMResponse(res *http.Response) {
	c := x.llm
	var restore func(string) (string, bool)
	if x.rw.Restore && x.rw.Redactor != nil {
		red := x.rw.Redactor
		restore = func(ph string) (string, bool) {
			v, ok := red.Lookup(ph)
			if ok {
				c.restored++
			}
			return v, ok
		}
		// Restoring changes the length.
		res.ContentLength = -1
		res.Header.Del("Content-Length")
	}
	c.reader = rewrite.NewResponseReader(c.api, res.Header.Get("Content-Type"), res.Body, restore)
	res.Body = c.reader
}

// finishLLM publishes the llm event of x with what its response said.
func (p *Proxy) finishLLM(x *exchange, status int) {
	c := x.llm
	if c == nil {
		return
	}
	c.llm.Status = status
	if d := p.now().Sub(c.ev.Time); d > 0 {
		c.llm.Latency = d
	}
	x.rw.logPrompt(&c.llm, c.prompt, x.plain, c.learned)
	if c.reader != nil {
		info := c.reader.Info()
		c.llm.ResponseModel = info.Model
		c.llm.InputTokens, c.llm.OutputTokens = info.InputTokens, info.OutputTokens
		c.llm.CacheReadTokens, c.llm.CacheCreationTokens = info.CacheReadTokens, info.CacheCreationTokens
		c.llm.FinishReasons = info.FinishReasons
		for _, tc := range info.ToolCalls {
			c.llm.ToolCalls = append(c.llm.ToolCalls, event.ToolCall{ID: tc.ID, Name: tc.Name, Time: tc.Seen})
		}
		c.llm.Restored = c.restored
	}
	x.llm = nil
	p.publish(&c.ev)
}

// readUpTo reads r to its end if that is at most limit bytes: whole says
// whether it did. Otherwise it returns the limit+1 bytes read, which come
// before the rest of r.
func readUpTo(r io.Reader, limit int64) (b []byte, whole bool, err error) {
	b, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil && !errors.Is(err, io.EOF) {
		return b, false, err
	}
	return b, int64(len(b)) <= limit, nil
}
