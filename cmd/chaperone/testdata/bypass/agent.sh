#!/bin/bash
# The bypass suite's agent: inside one transparent session it tries every
# way it knows to reach the denied hosts, one BYPASS line per attempt (see
# bypass.py). $1 is a file of the targets (shell assignments) the test
# writes: DENY4 PORT4 (denied IPv4 host), PORT6 (denied ::1), API APIPORT
# (an allowed host), OUTSIDE (a resolver that is not the session's), DOHURL
# (a DNS-over-HTTPS server), WORK (a scratch directory).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$1"

py() { python3 "$here/bypass.py" "$@"; }

# attempt NAME CMD...: runs CMD in a process whose pid is known (the
# subshell prints its pid, then execs CMD in its place).
attempt() {
	local name=$1 pidfile="$WORK/$1.pid" out rc
	shift
	out=$( (echo "$BASHPID" >"$pidfile"; exec "$@") 2>&1 )
	rc=$?
	echo "BYPASS $name pid=$(cat "$pidfile") rc=$rc $(printf '%s' "$out" | tr '\r\n' '  ' | cut -c1-300)"
}

waitfile() {
	for _ in $(seq 1 400); do [ -e "$1" ] && return 0; sleep 0.05; done
	return 1
}

devtcp='exec 3<>"/dev/tcp/$1/$2" || exit 7
printf "GET /$3 HTTP/1.1\r\nHost: $1\r\nConnection: close\r\n\r\n" >&3
timeout 10 head -c 300 <&3'

echo "BYPASS proxy-vars pid=$$ count=$(env | grep -ci '_proxy=')"
echo "BYPASS capabilities pid=$$ $(grep -E '^CapEff:' /proc/self/status | tr -d '\t ')"

# curl as it comes (no proxy variables exist in transparent mode), told to
# use no proxy, and told to use the denied host itself as its proxy.
attempt curl-plain curl -sS --max-time 10 "http://$DENY4:$PORT4/curl-plain"
attempt curl-noproxy curl -sS --max-time 10 --noproxy '*' "http://$DENY4:$PORT4/curl-noproxy"
attempt curl-proxyvar env "http_proxy=http://$DENY4:$PORT4" curl -sS --max-time 10 "http://$API:$APIPORT/curl-proxyvar"
# A hard-coded IP over TLS: no name, no DNS, no SNI.
attempt hardcoded-ip curl -sSk --max-time 10 "https://$DENY4:$PORT4/hardcoded-ip"

# Raw sockets and bash's /dev/tcp, IPv4, IPv6 and IPv4-mapped IPv6.
py tcp python-raw4 4 "$DENY4" "$PORT4" /python-raw4
attempt bash-devtcp bash -c "$devtcp" bash "$DENY4" "$PORT4" bash-devtcp
py tcp python-ipv6 6 ::1 "$PORT6" /python-ipv6
py tcp python-v4mapped 6 "::ffff:$DENY4" "$PORT4" /python-v4mapped
attempt bash-devtcp6 bash -c "$devtcp" bash ::1 "$PORT6" bash-devtcp6

# TCP Fast Open (the request rides the SYN, no connect()) and MPTCP.
py tfo python-tfo "$DENY4" "$PORT4" /python-tfo
py mptcp python-mptcp "$DENY4" "$PORT4" /python-mptcp

# A child with an empty environment (no PATH, no trust variables).
PY=$(python3 -c 'import sys; print(sys.executable)')
env -i "$PY" "$here/bypass.py" tcp env-i-python 4 "$DENY4" "$PORT4" /env-i-python
attempt env-i-bash env -i /bin/bash -c "$devtcp" bash "$DENY4" "$PORT4" env-i-bash

# A daemon: double fork and setsid, connecting once its parents are gone.
# The session still lives: the agent waits for the daemon's line.
py daemon daemon "$WORK/daemon.line" "$DENY4" "$PORT4"
if waitfile "$WORK/daemon.line"; then cat "$WORK/daemon.line"; else echo "BYPASS daemon pid=0 no-line"; fi

# A relay of the agent's own: curl's CONNECT to it (refused at the first
# hop, decided on its target), then a client speaking the relay's own
# protocol, which the proxy cannot read: the relay's own connection is
# the one decided then.
py connect-proxy connect-helper "$WORK/helper.port" >"$WORK/helper.out" 2>&1 &
helper=$!
if waitfile "$WORK/helper.port"; then
	read -r hpid hport <"$WORK/helper.port"
	attempt connect-helper-client curl -sS --max-time 10 -p -x "http://127.0.0.1:$hport" "http://$DENY4:$PORT4/connect-helper"
	py helper-client connect-helper-raw 127.0.0.1 "$hport" "$DENY4" "$PORT4"
fi
wait "$helper"
cat "$WORK/helper.out"

# UDP: plain datagrams, DNS to the denied host's port 53, QUIC.
py udp udp-plain4 4 "$DENY4" "$PORT4" raw
py udp udp-plain6 6 ::1 "$PORT6" raw
py udp udp-v4mapped 6 "::ffff:$DENY4" "$PORT4" raw
py udp udp-dns 4 "$DENY4" 53 dns
py udp udp-quic 4 "$DENY4" 443 raw
# Other datagram protocols: UDP-Lite, and UDP built on a raw IP socket.
py udplite udplite "$DENY4" "$PORT4"
py raw raw-ip "$DENY4" "$PORT4"

# DNS straight to a resolver that is not the session's.
py dns dns-outside-udp udp "$OUTSIDE" 53 outside.e2e.test
py dns dns-outside-tcp tcp "$OUTSIDE" 53 outside.e2e.test
py dns dns-outside-denied udp "$OUTSIDE" 53 exfil.e2e.test
py dns dns-outside-5353 udp "$OUTSIDE" 5353 outside.e2e.test

# DNS over HTTPS, then a connection to the address it gave.
py doh doh "$DOHURL" exfil-doh.e2e.test "$PORT4"

# Straight to the proxy's own listener, without a redirect record.
py proxy-direct proxy-direct "$API" "$APIPORT" "$DENY4:$PORT4"

# Leave the session's cgroup, whose hooks redirect: move into the cgroup v2
# root (cgroup.procs is root's, and so may be the agent's uid), then connect.
escape='mnt=$(awk '"'"'{for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") print $5; break }}'"'"' /proc/self/mountinfo | head -n 1)
echo "$BASHPID" >"$mnt/cgroup.procs" 2>/dev/null && echo "left=$(grep "^0::" /proc/self/cgroup)"
'"$devtcp"
attempt cgroup-escape bash -c "$escape" bash "$DENY4" "$PORT4" cgroup-escape

echo "BYPASS done pid=$$"
