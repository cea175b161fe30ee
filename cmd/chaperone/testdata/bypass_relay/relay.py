# The relay bypass suite's Python tools: raw sockets that speak to a relay
# (an HTTP proxy, a SOCKS server) outside the session in the spellings
# curl does not use. Every attempt prints one line,
#   BYPASS <name> pid=<pid> <outcome>
# which the test matches with the audit log's events.
import codecs, os, socket, ssl, struct, sys, time


def line(name, outcome):
    print("BYPASS %s pid=%d %s" % (name, os.getpid(), " ".join(outcome.split())), flush=True)


def unescape(s):
    return codecs.decode(s, "unicode_escape").encode("latin-1")


def connect(host, port, silent):
    s = socket.create_connection((host, port), timeout=10)
    if silent:
        # Past the proxy's 300 ms sniffing: it takes the client for one
        # that lets the server speak first.
        time.sleep(0.6)
    return s


def recv_some(s, n=4096):
    data = b""
    try:
        while len(data) < n:
            chunk = s.recv(n)
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data:
                break
    except OSError as e:
        return data, e
    return data, None


def raw(name, host, port, payload, silent):
    """Sends payload (Python escapes) and prints the first line back."""
    try:
        s = connect(host, int(port), silent)
        s.sendall(unescape(payload))
        data, err = recv_some(s)
        first = data.split(b"\r\n")[0].decode(errors="replace")
        body = data.split(b"\r\n\r\n", 1)[1].decode(errors="replace") if b"\r\n\r\n" in data else ""
        line(name, "response=%r body=%r err=%s" % (first, body[:160], err))
    except OSError as e:
        line(name, "error=%s:%s" % (e.__class__.__name__, e))


def socks5(name, host, port, target, tport, silent):
    """A SOCKS5 CONNECT to target (an IPv4 address) and its reply code."""
    try:
        s = connect(host, int(port), silent)
        req = b"\x05\x01\x00\x01" + socket.inet_aton(target) + struct.pack(">H", int(tport))
        s.sendall(b"\x05\x01\x00")
        choice = s.recv(2)
        s.sendall(req)
        reply = s.recv(10)
        line(name, "choice=%s reply=%s rep=%d" % (choice.hex(), reply.hex(), reply[1] if len(reply) > 1 else -1))
        if len(reply) > 1 and reply[1] == 0:
            s.sendall(b"GET /leak HTTP/1.1\r\nHost: x\r\n\r\n")
            data, _ = recv_some(s)
            line(name + "-after", "response=%r" % data[:80])
    except OSError as e:
        line(name, "error=%s:%s" % (e.__class__.__name__, e))


def connect_tls(name, host, port, prefix, target, tport, path):
    """An odd CONNECT (prefix, Python escapes, then the target) to an
    allowed target, then TLS trusting SSL_CERT_FILE and one GET."""
    try:
        s = connect(host, int(port), False)
        s.sendall(unescape(prefix) + ("%s:%s HTTP/1.1\r\n\r\n" % (target, tport)).encode())
        data, _ = recv_some(s)
        first = data.split(b"\r\n")[0].decode(errors="replace")
        if b" 200 " not in data.split(b"\r\n")[0]:
            line(name, "connect=%r" % first)
            return
        t = ssl.create_default_context().wrap_socket(s, server_hostname=target)
        t.sendall(("GET %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n" % (path, target, tport)).encode())
        data, _ = recv_some(t, 65536)
        more = t.recv(4096) if b"hello" not in data else b""
        data += more
        line(name, "connect=%r response=%r body=%r" % (first, data.split(b"\r\n")[0].decode(), data.split(b"\r\n\r\n", 1)[-1][:80].decode(errors="replace")))
    except (OSError, ssl.SSLError) as e:
        line(name, "error=%s:%s" % (e.__class__.__name__, e))


def ip_named(name, host, port, qname):
    """On one kept-alive connection to an address: a request naming the
    address, then (once the session's resolver answered qname with it) one
    naming qname, then one naming a host that has nothing to do with it."""
    out = []
    try:
        s = socket.create_connection((host, int(port)), timeout=10)

        def get(path, h):
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, h)).encode())
            data, _ = recv_some(s)
            head, _, rest = data.partition(b"\r\n\r\n")
            n = 0
            for l in head.split(b"\r\n"):
                if l.lower().startswith(b"content-length:"):
                    n = int(l.split(b":")[1])
            while len(rest) < n:
                rest += s.recv(n - len(rest))
            return head.split(b"\r\n")[0].decode()

        out.append("ip=%r" % get("/ip-host-first", "%s:%s" % (host, port)))
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(qname, None, socket.AF_INET)})
        out.append("resolved=%s" % ",".join(addrs))
        out.append("named=%r" % get("/ip-host-named", "%s:%s" % (qname, port)))
        out.append("other=%r" % get("/ip-host-other", "api.e2e.test:%s" % port))
    except OSError as e:
        out.append("error=%s:%s" % (e.__class__.__name__, e))
    line(name, " ".join(out))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "raw":
        raw(args[0], args[1], args[2], args[3], len(args) > 4 and args[4] == "silent")
    elif cmd == "socks5":
        socks5(args[0], args[1], args[2], args[3], args[4], len(args) > 5 and args[5] == "silent")
    elif cmd == "connect-tls":
        connect_tls(*args)
    elif cmd == "ip-named":
        ip_named(*args)
    else:
        sys.exit("unknown command " + cmd)
