#!/bin/bash
# The relay bypass suite's agent: inside one transparent session it asks
# relays outside the session (an HTTP proxy, a SOCKS server) for a denied
# canary, in every spelling it knows, then for allowed targets; and it
# checks that a request to an address agrees with it, and that HTTPS to an
# address verifies. One BYPASS line per attempt (see relay.py). $1 is a
# file of the targets (shell assignments) the test writes:
#   HTTPRELAY SOCKS (relays, ip:port), CANARY CPORT CNAME (the denied
#   canary), TARGET TPORT (allowed HTTPS), PLAIN PPORT (allowed HTTP),
#   IPHOST IPPORT IPNAME (plain HTTP by address, and a name the session's
#   resolver answers with it), IPTLS IPTLSPORT (HTTPS by address), PY, WORK.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$1"

py() { "$PY" "$here/relay.py" "$@"; }

# attempt NAME CMD...: runs CMD in a process whose pid is known (the
# subshell prints its pid, then execs CMD in its place).
attempt() {
	local name=$1 pidfile="$WORK/$1.pid" out rc
	shift
	out=$( (echo "$BASHPID" >"$pidfile"; exec "$@") 2>&1 )
	rc=$?
	echo "BYPASS $name pid=$(cat "$pidfile") rc=$rc $(printf '%s' "$out" | tr '\r\n' '  ' | cut -c1-300)"
}

echo "BYPASS whoami pid=$$ uid=$(id -u)"

C="$CANARY:$CPORT"
curl=(curl -sS --max-time 10)

# The canary through the HTTP proxy: absolute form, CONNECT.
attempt curl-absolute "${curl[@]}" -x "http://$HTTPRELAY" "http://$C/curl-absolute"
attempt curl-connect "${curl[@]}" -p -x "http://$HTTPRELAY" "http://$C/curl-connect"
attempt curl-connect-name "${curl[@]}" -p -x "http://$HTTPRELAY" "http://$CNAME:$CPORT/curl-connect-name"
# Through the SOCKS server: SOCKS5 by address and by name, SOCKS4, SOCKS4a.
attempt curl-socks5 "${curl[@]}" --socks5 "$SOCKS" "http://$C/curl-socks5"
attempt curl-socks5h "${curl[@]}" --socks5-hostname "$SOCKS" "http://$CNAME:$CPORT/curl-socks5h"
attempt curl-socks4 "${curl[@]}" --socks4 "$SOCKS" "http://$C/curl-socks4"
attempt curl-socks4a "${curl[@]}" --socks4a "$SOCKS" "http://$CNAME:$CPORT/curl-socks4a"

# Raw sockets, in the spellings a permissive proxy takes.
H=${HTTPRELAY%:*} HP=${HTTPRELAY#*:}
S=${SOCKS%:*} SP=${SOCKS#*:}
py raw py-connect-two-spaces "$H" "$HP" "CONNECT  $C HTTP/1.1\r\n\r\n"
py raw py-connect-leading-crlf "$H" "$HP" "\r\n\r\nCONNECT $C HTTP/1.1\r\n\r\n"
py raw py-connect-lowercase "$H" "$HP" "connect $C HTTP/1.1\r\n\r\n"
py raw py-connect-tab "$H" "$HP" "CONNECT\t$C\tHTTP/1.1\r\n\r\n"
py raw py-connect-silent "$H" "$HP" "CONNECT $C HTTP/1.1\r\n\r\n" silent
py raw py-absolute-two-spaces "$H" "$HP" "GET  http://$C/py-absolute-two-spaces HTTP/1.1\r\nHost: $C\r\n\r\n"
py raw py-absolute-leading-crlf "$H" "$HP" "\r\nGET http://$C/py-absolute-leading-crlf HTTP/1.1\r\nHost: $C\r\n\r\n"
py raw py-absolute-lowercase "$H" "$HP" "get http://$C/py-absolute-lowercase HTTP/1.1\r\nHost: $C\r\n\r\n"
py raw py-absolute-tab "$H" "$HP" "GET\thttp://$C/py-absolute-tab\tHTTP/1.1\r\nHost: $C\r\n\r\n"
py raw py-absolute-silent "$H" "$HP" "GET http://$C/py-absolute-silent HTTP/1.1\r\nHost: $C\r\n\r\n" silent
py socks5 py-socks5 "$S" "$SP" "$CANARY" "$CPORT"
py socks5 py-socks5-silent "$S" "$SP" "$CANARY" "$CPORT" silent

# Allowed targets through each relay: decided for the target, TLS
# intercepted (curl trusts Chaperone's CA through CURL_CA_BUNDLE).
attempt ok-connect "${curl[@]}" -x "http://$HTTPRELAY" "https://$TARGET:$TPORT/ok-connect"
attempt ok-absolute "${curl[@]}" -x "http://$HTTPRELAY" "http://$PLAIN:$PPORT/ok-absolute"
attempt ok-socks5h "${curl[@]}" --socks5-hostname "$SOCKS" "https://$TARGET:$TPORT/ok-socks5h"
attempt ok-socks4a "${curl[@]}" --socks4a "$SOCKS" "https://$TARGET:$TPORT/ok-socks4a"
py connect-tls ok-connect-odd "$H" "$HP" "\r\nconnect\t" "$TARGET" "$TPORT" /ok-connect-odd

# A request to an address names it: not another host.
attempt ip-host-ok "${curl[@]}" "http://$IPHOST:$IPPORT/ip-host-ok"
attempt ip-host-fronted "${curl[@]}" -H "Host: api.e2e.test" "http://$IPHOST:$IPPORT/ip-host-fronted"
py ip-named ip-host-named "$IPHOST" "$IPPORT" "$IPNAME"

# HTTPS to an address, no name, no SNI: the certificate is the address's.
attempt ip-cert "${curl[@]}" --cacert "$SSL_CERT_FILE" "https://$IPTLS:$IPTLSPORT/ip-cert"

echo "BYPASS done pid=$$"
