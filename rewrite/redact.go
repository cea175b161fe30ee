package rewrite

// Redactor replaces the secrets of a text by placeholders and returns the
// rule id of each replacement; *secrets.Redactor is one.
type Redactor interface {
	Redact(s string) (out string, ids []string)
}

// RedactBody replaces the secrets of a request body: every JSON string value
// of a JSON body, or the whole text of any other. ids lists the rule id of
// each replacement (duplicates kept); when nothing is replaced, out is body
// itself and ids is nil.
func RedactBody(body []byte, r Redactor) (out []byte, ids []string) {
	fn := func(s string) (string, bool) {
		o, found := r.Redact(s)
		ids = append(ids, found...)
		return o, len(found) > 0
	}
	out, changed, err := RewriteStrings(body, fn)
	if err != nil { // not JSON: redact it as text
		var s string
		s, changed = fn(string(body))
		out = []byte(s)
	}
	if !changed {
		return body, nil
	}
	return out, ids
}
