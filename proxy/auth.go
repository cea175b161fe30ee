package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"
)

// proxyUser is the only user name the explicit proxy accepts; the password
// is the session's token.
const proxyUser = "chaperone"

// parseProxyAuthorization parses a Proxy-Authorization value of the Basic
// scheme into its user and password. ok is false for any other scheme or
// for a value that is not base64 of "user:password".
func parseProxyAuthorization(v string) (user, password string, ok bool) {
	const scheme = "basic"
	v = strings.TrimSpace(v)
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || (v[len(scheme)] != ' ' && v[len(scheme)] != '\t') {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimLeft(v[len(scheme):], " \t"))
	if err != nil {
		return "", "", false
	}
	user, password, ok = strings.Cut(string(b), ":")
	if !ok {
		return "", "", false
	}
	return user, password, true
}

// sessionTable is an immutable snapshot of the sessions; the Proxy swaps
// whole tables so that the data path reads without a lock.
type sessionTable struct {
	byDigest map[[sha256.Size]byte]sessionEntry // keyed by sha256(token)
	digestOf map[string][sha256.Size]byte       // session id -> its token's digest
}

type sessionEntry struct {
	id    string
	token []byte
}

func (st *sessionTable) with(id, token string) *sessionTable {
	n := st.without(id)
	d := sha256.Sum256([]byte(token))
	n.byDigest[d] = sessionEntry{id: id, token: []byte(token)}
	n.digestOf[id] = d
	return n
}

func (st *sessionTable) without(id string) *sessionTable {
	n := &sessionTable{
		byDigest: make(map[[sha256.Size]byte]sessionEntry, len(st.byDigest)+1),
		digestOf: make(map[string][sha256.Size]byte, len(st.digestOf)+1),
	}
	for k, v := range st.byDigest {
		if v.id != id {
			n.byDigest[k] = v
		}
	}
	for k, v := range st.digestOf {
		if k != id {
			n.digestOf[k] = v
		}
	}
	return n
}

// lookup returns the session whose token is token. The map is keyed by the
// token's digest, so its timing says nothing about the token; the final
// comparison is constant-time.
func (st *sessionTable) lookup(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	e, ok := st.byDigest[sha256.Sum256([]byte(token))]
	if !ok || subtle.ConstantTimeCompare(e.token, []byte(token)) != 1 {
		return "", false
	}
	return e.id, true
}

func (st *sessionTable) has(id string) bool {
	_, ok := st.digestOf[id]
	return ok
}
