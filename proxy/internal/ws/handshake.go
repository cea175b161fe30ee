package ws

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// keyGUID is appended to a Sec-WebSocket-Key to make its accept value
// (RFC 6455 section 4.2.2).
const keyGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// AcceptKey returns the Sec-WebSocket-Accept value for key.
func AcceptKey(key string) string {
	h := sha1.Sum([]byte(key + keyGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// hasToken reports whether one of the comma-separated lists in values
// holds tok, in any case.
func hasToken(values []string, tok string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}

// CheckRequest checks a client's opening handshake (RFC 6455 section
// 4.2.1): a GET over HTTP/1.1 or later, asking to upgrade to websocket,
// version 13, with a key of 16 bytes in base64. It returns the key and
// the extensions offered (none when their field is malformed: they are
// then declined).
func CheckRequest(r *http.Request) (key string, offers []Extension, err error) {
	switch {
	case r.Method != http.MethodGet:
		return "", nil, fmt.Errorf("ws: a WebSocket handshake by %s, not GET", r.Method)
	case !r.ProtoAtLeast(1, 1):
		return "", nil, fmt.Errorf("ws: a WebSocket handshake over %s", r.Proto)
	case !hasToken(r.Header["Upgrade"], "websocket") || !hasToken(r.Header["Connection"], "upgrade"):
		return "", nil, errors.New("ws: the request does not ask to upgrade to websocket")
	case r.Header.Get("Sec-Websocket-Version") != "13":
		return "", nil, fmt.Errorf("ws: Sec-WebSocket-Version %q, not 13", r.Header.Get("Sec-Websocket-Version"))
	}
	keys := r.Header["Sec-Websocket-Key"]
	if len(keys) != 1 {
		return "", nil, errors.New("ws: not one Sec-WebSocket-Key")
	}
	key = strings.TrimSpace(keys[0])
	if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) != 16 {
		return "", nil, errors.New("ws: Sec-WebSocket-Key is not 16 bytes in base64")
	}
	offers, _ = ParseExtensions(r.Header["Sec-Websocket-Extensions"])
	return key, offers, nil
}

// CheckResponse checks a server's 101 answer to a handshake with key
// (RFC 6455 section 4.1): an upgrade to websocket with the right accept
// value, and at most the extension the relay offered (when offered). It
// returns what permessage-deflate agreed on the server's side.
func CheckResponse(res *http.Response, key string, offered bool) (*Deflate, error) {
	switch {
	case res.StatusCode != http.StatusSwitchingProtocols:
		return nil, fmt.Errorf("ws: the server answered %d, not 101", res.StatusCode)
	case !hasToken(res.Header["Upgrade"], "websocket") || !hasToken(res.Header["Connection"], "upgrade"):
		return nil, errors.New("ws: the server's 101 does not switch to websocket")
	case res.Header.Get("Sec-Websocket-Accept") != AcceptKey(key):
		return nil, errors.New("ws: the server's Sec-WebSocket-Accept does not match the key")
	}
	exts, err := ParseExtensions(res.Header["Sec-Websocket-Extensions"])
	if err != nil {
		return nil, err
	}
	if len(exts) > 0 && !offered {
		return nil, errors.New("ws: the server accepted an extension that was not offered")
	}
	return AcceptDeflateResponse(exts)
}

// AsUpgrade makes the header of an extended CONNECT for
// websocket (RFC 8441) that of an HTTP/1.1 upgrade, which CheckRequest
// accepts and a proxy sends upstream: Upgrade and Connection, and a key of its
// own (the stream has none). A client's own Upgrade and Connection are
// refused before this (connection-specific in HTTP/2), and its own key
// here.
func AsUpgrade(h http.Header) error {
	var key [16]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fmt.Errorf("websocket key: %w", err)
	}
	if _, ok := h["Sec-Websocket-Key"]; ok {
		return errors.New("extended CONNECT with a Sec-WebSocket-Key")
	}
	h["Upgrade"] = []string{"websocket"}
	h["Connection"] = []string{"Upgrade"}
	h["Sec-Websocket-Key"] = []string{base64.StdEncoding.EncodeToString(key[:])}
	return nil
}
