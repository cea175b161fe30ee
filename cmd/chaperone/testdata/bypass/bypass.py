# The bypass suite's Python tools: each subcommand is one way an agent could
# try to reach a host the policy denies. Every attempt prints one line,
#   BYPASS <name> pid=<pid of the process that made the attempt> <outcome>
# which the test matches with the audit log's events.
import os, socket, ssl, struct, sys, threading, time, urllib.request


def line(name, pid, outcome):
    print("BYPASS %s pid=%d %s" % (name, pid, " ".join(outcome.split())), flush=True)


IPPROTO_MPTCP = 262
IPPROTO_UDPLITE = 136
MSG_FASTOPEN = 0x20000000


def tcp_attempt(family, addr, port, path, proto=0, fastopen=False):
    """Connects, sends an HTTP request and returns what came back. With
    fastopen, there is no connect(): the request rides the SYN (TCP Fast
    Open, sendto with MSG_FASTOPEN)."""
    fam = socket.AF_INET6 if family == "6" else socket.AF_INET
    try:
        s = socket.socket(fam, socket.SOCK_STREAM, proto)
    except OSError as e:
        return "unsupported=%s" % e
    s.settimeout(10)
    req = ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, addr)).encode()
    try:
        if fastopen:
            s.setblocking(True)  # a socket with a timeout gets EINPROGRESS and sends nothing
            s.sendto(req, MSG_FASTOPEN, (addr, port))
            s.settimeout(10)
        else:
            s.connect((addr, port))
            s.sendall(req)
        data = b""
        while len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        first = data.split(b"\r\n")[0].decode(errors="replace")
        body = data.split(b"\r\n\r\n", 1)[1].decode(errors="replace") if b"\r\n\r\n" in data else ""
        return "connected response=%r body=%r" % (first, body[:120])
    except OSError as e:
        return "error=%s" % (e.__class__.__name__ + ":" + str(e))
    finally:
        s.close()


def dns_query(name, qid=0x1234):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", 1, 1)  # A, IN


def skip_name(msg, i):
    while True:
        n = msg[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n


def dns_answer(msg):
    """Returns (rcode, [A addresses]) of a DNS reply."""
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", msg[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(msg, i) + 4
    addrs = []
    for _ in range(an):
        i = skip_name(msg, i)
        typ, _, _, rdlen = struct.unpack(">HHIH", msg[i:i + 10])
        i += 10
        if typ == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(msg[i:i + 4]))
        i += rdlen
    return flags & 0xF, addrs


def cmd_tcp(name, family, addr, port, path):
    line(name, os.getpid(), tcp_attempt(family, addr, int(port), path))


def cmd_tfo(name, addr, port, path):
    line(name, os.getpid(), tcp_attempt("4", addr, int(port), path, fastopen=True))


def cmd_mptcp(name, addr, port, path):
    line(name, os.getpid(), tcp_attempt("4", addr, int(port), path, proto=IPPROTO_MPTCP))


def cmd_udplite(name, addr, port):
    """One UDP-Lite datagram: another protocol number than UDP's."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, IPPROTO_UDPLITE)
        s.sendto(("udp-bypass " + name).encode(), (addr, int(port)))
        outcome = "sent"
    except OSError as e:
        outcome = "error=%s" % (e.__class__.__name__ + ":" + str(e))
    line(name, os.getpid(), outcome)


def cmd_raw(name, addr, port):
    """A UDP datagram built by hand on a raw IP socket (needs CAP_NET_RAW)."""
    payload = ("udp-bypass " + name).encode()
    hdr = struct.pack(">HHHH", 40000, int(port), 8 + len(payload), 0)  # checksum 0: none, for IPv4
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        s.sendto(hdr + payload, (addr, 0))
        outcome = "sent"
    except OSError as e:
        outcome = "error=%s" % (e.__class__.__name__ + ":" + str(e))
    line(name, os.getpid(), outcome)


def cmd_udp(name, family, addr, port, kind):
    """Sends one datagram: a DNS query when kind is dns, else raw bytes."""
    fam = socket.AF_INET6 if family == "6" else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(3)
    payload = dns_query("exfil.e2e.test") if kind == "dns" else ("udp-bypass " + name).encode()
    try:
        s.sendto(payload, (addr, int(port)))
        try:
            data, peer = s.recvfrom(4096)
            if kind == "dns":
                rcode, addrs = dns_answer(data)
                outcome = "sent reply_from=%s rcode=%d answers=%s" % (peer[0], rcode, ",".join(addrs) or "none")
            else:
                outcome = "sent reply=%r" % data[:40]
        except socket.timeout:
            outcome = "sent no-reply"
    except OSError as e:
        outcome = "error=%s" % (e.__class__.__name__ + ":" + str(e))
    line(name, os.getpid(), outcome)


def cmd_dns(name, proto, server, port, qname):
    """Asks server directly for qname's A record, over udp or tcp."""
    q = dns_query(qname)
    try:
        if proto == "tcp":
            s = socket.create_connection((server, int(port)), timeout=5)
            s.sendall(struct.pack(">H", len(q)) + q)
            n = struct.unpack(">H", s.recv(2))[0]
            data = b""
            while len(data) < n:
                data += s.recv(n - len(data))
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(5)
            s.sendto(q, (server, int(port)))
            data, _ = s.recvfrom(4096)
        rcode, addrs = dns_answer(data)
        outcome = "rcode=%d answers=%s" % (rcode, ",".join(addrs) or "none")
    except OSError as e:
        outcome = "error=%s" % (e.__class__.__name__ + ":" + str(e))
    line(name, os.getpid(), outcome)


def cmd_doh(name, url, qname, port):
    """Resolves qname over DNS over HTTPS (RFC 8484, POST), then connects to
    the answer: the name never went through the session's resolver."""
    req = urllib.request.Request(url, data=dns_query(qname, 0), method="POST",
                                 headers={"Content-Type": "application/dns-message", "Accept": "application/dns-message"})
    try:
        body = urllib.request.urlopen(req, timeout=10).read()
        rcode, addrs = dns_answer(body)
    except Exception as e:
        line(name, os.getpid(), "doh-error=%s" % (e.__class__.__name__ + ":" + str(e)))
        return
    if not addrs:
        line(name, os.getpid(), "doh rcode=%d no-answer" % rcode)
        return
    line(name, os.getpid(), "doh-answer=%s %s" % (addrs[0], tcp_attempt("4", addrs[0], int(port), "/" + name)))


def cmd_daemon(name, flag, addr, port):
    """Double fork and setsid: the grandchild belongs to no one the agent
    started, connects once its parents are gone and writes its line to
    flag, which the agent waits for."""
    launcher, oldsid = os.getpid(), os.getsid(0)
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    # The parent (the session's leader) exits at once; wait until this
    # process is reparented, so that it really belongs to no one.
    deadline = time.monotonic() + 10
    while os.getppid() == os.getsid(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    outcome = "launcher=%d oldsid=%d ppid=%d sid=%d %s" % (launcher, oldsid, os.getppid(), os.getsid(0), tcp_attempt("4", addr, int(port), "/" + name))
    with open(flag + ".tmp", "w") as f:
        f.write("BYPASS %s pid=%d %s\n" % (name, os.getpid(), " ".join(outcome.split())))
    os.rename(flag + ".tmp", flag)
    os._exit(0)


def cmd_connect_proxy(name, portfile):
    """A relay of the agent's own on loopback. For each client it reads a
    target, an HTTP CONNECT line or a line of a protocol of its own
    (0x01 "host:port\\n", which no proxy recognises), dials it and relays
    bytes. It writes its pid and port to portfile, then one line per
    client: NAME for its own protocol (it stops after that one),
    NAME-http for a CONNECT, which Chaperone should refuse before it
    arrives."""
    ln = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ln.bind(("127.0.0.1", 0))
    ln.listen(8)
    with open(portfile + ".tmp", "w") as f:
        f.write("%d %d\n" % (os.getpid(), ln.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    ln.settimeout(20)
    while True:
        try:
            c, _ = ln.accept()
        except socket.timeout:
            line(name, os.getpid(), "helper-no-client")
            return
        c.settimeout(10)
        head = b""
        while b"\n" not in head:
            chunk = c.recv(4096)
            if not chunk:
                break
            head += chunk
        if head[:1] == b"\x01":
            who, target = name, head[1:].split(b"\n")[0].decode(errors="replace").strip()
        else:
            who = name + "-http"
            while b"\r\n\r\n" not in head:
                chunk = c.recv(4096)
                if not chunk:
                    break
                head += chunk
            parts = head.split(b"\r\n")[0].decode(errors="replace").split()
            if len(parts) < 2 or parts[0] != "CONNECT":
                line(who, os.getpid(), "helper-got=%r" % parts)
                c.close()
                continue
            target = parts[1]
        host, port = target.rsplit(":", 1)
        try:
            up = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except OSError as e:
            line(who, os.getpid(), "helper-dial=%s error=%s" % (target, e))
            c.close()
            if who == name:
                return
            continue
        line(who, os.getpid(), "helper-dial=%s connected" % target)
        if who != name:
            c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            finally:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=pump, args=(up, c))
        t.start()
        pump(c, up)
        t.join()
        if who == name:
            return


def cmd_helper_client(name, addr, port, target_host, target_port):
    """Asks the agent's own relay, in its own protocol, for a target and
    sends a request through it."""
    try:
        s = socket.create_connection((addr, int(port)), timeout=10)
        s.sendall(b"\x01%s:%s\n" % (target_host.encode(), target_port.encode()))
        s.sendall(("GET /connect-helper HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % target_host).encode())
        data = b""
        while len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        line(name, os.getpid(), "response=%r" % data[:120])
    except OSError as e:
        line(name, os.getpid(), "error=%s" % e)


def cmd_proxy_direct(name, via_addr, via_port, target):
    """Finds the proxy's own listener (the real peer of a redirected socket,
    as /proc/net/tcp shows it: getpeername is disguised) and speaks to it
    directly, asking it to CONNECT to target without the session's record."""
    s = socket.create_connection((via_addr, int(via_port)), timeout=5)
    # The row is found by the socket's inode: its local address is not
    # enough, as the kernel gives one ephemeral port to connections to
    # different peers (and a closed one lingers in TIME_WAIT).
    inode = os.readlink("/proc/self/fd/%d" % s.fileno())[len("socket:["):-1]
    proxy = None
    with open("/proc/net/tcp") as f:
        for row in f.readlines()[1:]:
            cols = row.split()
            if cols[9] == inode:
                ip_hex, port_hex = cols[2].split(":")
                proxy = (socket.inet_ntoa(bytes.fromhex(ip_hex)[::-1]), int(port_hex, 16))
    s.close()
    if proxy is None:
        line(name, os.getpid(), "proxy-not-found")
        return
    d = socket.create_connection(proxy, timeout=10)
    try:
        d.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        data = d.recv(4096)
        outcome = "proxy=%s:%d response=%r" % (proxy[0], proxy[1], data.split(b"\r\n")[0].decode(errors="replace"))
    except OSError as e:
        outcome = "proxy=%s:%d error=%s" % (proxy[0], proxy[1], e)
    line(name, os.getpid(), outcome)


if __name__ == "__main__":
    cmds = {"tcp": cmd_tcp, "tfo": cmd_tfo, "mptcp": cmd_mptcp, "udplite": cmd_udplite, "raw": cmd_raw, "udp": cmd_udp, "dns": cmd_dns, "doh": cmd_doh, "daemon": cmd_daemon,
            "connect-proxy": cmd_connect_proxy, "helper-client": cmd_helper_client,
            "proxy-direct": cmd_proxy_direct}
    cmds[sys.argv[1]](*sys.argv[2:])
