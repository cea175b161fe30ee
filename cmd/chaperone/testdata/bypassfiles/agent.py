"""The agent of TestBypassFiles: inside one session it tries every way it
knows to read a file the policy denies, and to change the policy file and
the audit log, one line per attempt:

    BYPASS <name> pid=<pid of the process that tried> <outcome>

The outcome is "ok", "errno=<NAME>" (the system call failed), or, for a
program run, "rc=<exit status>". argv[1] is a JSON file of the paths the
test set up; the working directory is the session's working tree, which
holds the policy file.
"""

import ctypes
import errno
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import time

cfg = json.load(open(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD = -100


def say(name, outcome, pid=None):
    print("BYPASS %s pid=%d %s" % (name, pid or os.getpid(), outcome), flush=True)


def attempt(name, fn):
    try:
        fn()
        say(name, "ok")
    except OSError as e:
        say(name, "errno=" + errno.errorcode.get(e.errno, str(e.errno)))


def check(rc):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc


def read(path):
    with open(path, "rb") as f:
        f.read()


def openat2_read(path):
    # struct open_how {u64 flags; u64 mode; u64 resolve}: O_RDONLY.
    how = struct.pack("QQQ", os.O_RDONLY, 0, 0)
    buf = ctypes.create_string_buffer(how, len(how))
    fd = check(libc.syscall(437, AT_FDCWD, path.encode(), buf, len(how)))
    os.read(fd, 100)
    os.close(fd)


def io_uring_read(path):
    """Opens path for reading with an io_uring IORING_OP_OPENAT request:
    io_uring_setup, the rings mapped, one SQE, io_uring_enter."""
    params = ctypes.create_string_buffer(120)
    ring = check(libc.syscall(425, 4, params))
    try:
        p = params.raw
        sq_entries, cq_entries = struct.unpack_from("II", p, 0)
        sq_head, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("7I", p, 40)
        cq_head, cq_tail, cq_mask, _, _, cqes = struct.unpack_from("6I", p, 80)
        sq = mmap.mmap(ring, sq_array + sq_entries * 4, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        cq = mmap.mmap(ring, cqes + cq_entries * 16, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0x8000000)
        sqes = mmap.mmap(ring, sq_entries * 64, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0x10000000)
        name = ctypes.create_string_buffer(path.encode())
        sqe = bytearray(64)
        # opcode IORING_OP_OPENAT (18), fd AT_FDCWD, addr the path, len the
        # mode, open_flags O_RDONLY, user_data 7.
        struct.pack_into("BBHiQQII", sqe, 0, 18, 0, 0, AT_FDCWD, 0, ctypes.addressof(name), 0, os.O_RDONLY)
        struct.pack_into("Q", sqe, 32, 7)
        sqes[0:64] = bytes(sqe)
        tail = struct.unpack_from("I", sq, sq_tail)[0]
        struct.pack_into("I", sq, sq_array + (tail & struct.unpack_from("I", sq, sq_mask)[0]) * 4, 0)
        struct.pack_into("I", sq, sq_tail, tail + 1)
        check(libc.syscall(426, ring, 1, 1, 1, None, 0))  # io_uring_enter, IORING_ENTER_GETEVENTS
        head = struct.unpack_from("I", cq, cq_head)[0]
        mask = struct.unpack_from("I", cq, cq_mask)[0]
        _, res, _ = struct.unpack_from("QiI", cq, cqes + (head & mask) * 16)
        if res < 0:
            raise OSError(-res, os.strerror(-res))
        os.read(res, 100)
        os.close(res)
    finally:
        os.close(ring)


def run(name, argv):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    say(name, "rc=%d" % p.wait(), pid=p.pid)


policy = "policy.yaml"
work = os.getcwd()

if cfg.get("files"):
    other_env, creds, made = cfg["other_env"], cfg["creds"], cfg["made_dir"]
    # Reads of another tree's .env with an access the registers do not show.
    attempt("openat2-env", lambda: openat2_read(other_env))
    attempt("iouring-env", lambda: io_uring_read(other_env))

    # The copy-by-link trick, by ln and mv and by the system calls, on
    # another tree's .env, a credential file, and a .env made now.
    run("ln-env", ["ln", other_env, "env-linked"])
    run("mv-env", ["mv", other_env, "env-moved"])
    attempt("link-creds", lambda: os.link(creds, "creds-linked"))
    attempt("rename-creds", lambda: os.rename(creds, "creds-moved"))
    os.makedirs(made, exist_ok=True)
    with open(os.path.join(made, ".env"), "w") as f:
        f.write("MADE_SECRET=made-during-the-session\n")
    attempt("link-made", lambda: os.link(os.path.join(made, ".env"), "made-linked"))
    attempt("rename-made", lambda: os.rename(os.path.join(made, ".env"), "made-moved"))
    # A symbolic link gives nothing by itself: the open through it is of
    # the file it leads to.
    os.symlink(other_env, "env-symlink")
    attempt("symlink-env", lambda: read("env-symlink"))
    for leftover in ["env-linked", "env-moved", "creds-linked", "creds-moved", "made-linked", "made-moved"]:
        if os.path.exists(leftover):
            with open(leftover) as f:
                say("leftover-" + leftover, "read=" + f.read().replace("\n", " ")[:60])

    # The audit log, as uid 0.
    attempt("log-read", lambda: read(cfg["log"]))

    def append():
        with open(cfg["log"], "a") as f:
            f.write(cfg["forged"] + "\n")
    attempt("log-append", append)

# The policy file in the working tree: its directory moved, removed,
# linked, truncated, rewritten, replaced; the last attempts leave a policy
# that allows everything, should they succeed.
RELAXED = "rules: []\ndefault: allow\n"


def move_dir():
    os.rename(work, work + "-moved")
    os.rename(work + "-moved", work)  # should it succeed: back, for what follows


def write_policy():
    with open(policy, "w") as f:
        f.write(RELAXED)


def otrunc_policy():
    os.close(os.open(policy, os.O_WRONLY | os.O_TRUNC))


def replace_policy():
    with open("relaxed.yaml", "w") as f:
        f.write(RELAXED)
    os.rename("relaxed.yaml", policy)


attempt("policy-renamedir", move_dir)
attempt("policy-unlink", lambda: os.unlink(policy))
attempt("policy-link", lambda: os.link(policy, "policy-linked.yaml"))
attempt("policy-otrunc", otrunc_policy)
attempt("policy-truncate", lambda: os.truncate(policy, 0))
if cfg.get("hardlink"):
    # A hard link to the policy made before the session: truncated and
    # written through it.
    def write_hard():
        with open(cfg["hardlink"], "w") as f:
            f.write(RELAXED)
    attempt("policy-hardlink-truncate", lambda: os.truncate(cfg["hardlink"], 0))
    attempt("policy-hardlink-write", write_hard)
attempt("policy-write", write_policy)
attempt("policy-renameover", replace_policy)

# The denied address stays denied after the policy's reload interval (2 s):
# tried until 2.5 s have passed since the last attempt on the policy.
host, port = cfg["sink"].rsplit(":", 1)
deadline = time.monotonic() + 2.5
tries = reached = 0
while tries == 0 or time.monotonic() < deadline:
    tries += 1
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"GET /after-rewrite HTTP/1.1\r\nHost: sink\r\n\r\n")
            if s.recv(100).startswith(b"HTTP/1.1 200"):
                reached += 1
    except OSError:
        pass
    time.sleep(0.1)
say("still-denied", "tries=%d reached=%d" % (tries, reached))

if cfg.get("repo"):
    # git and its children (a pager, git itself again) while the machine is
    # busy: their loader and locale reads are reads.
    # Busy CPUs, and opens answered all the time (each answer wakes every
    # open waiting for one): a woken thread shows no registers until it
    # sleeps again.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    storm = subprocess.Popen([sys.executable, "-c", """
import threading
def loop():
    while True:
        open("/etc/hostname").close()
for _ in range(16):
    threading.Thread(target=loop, daemon=True).start()
threading.Event().wait()
"""])
    hogs.append(storm)
    rcs = []
    for round in range(2):
        procs = []
        for i in range(48):
            env = dict(os.environ, GIT_PAGER="cat", LANG="C.UTF-8")
            args = ["git", "-C", cfg["repo"], "-p", "log", "-p"] if i % 2 else ["git", "-C", cfg["repo"], "status"]
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        rcs += [p.wait() for p in procs]
    for h in hogs:
        h.kill()
        h.wait()
    say("git", "failed=%d" % sum(1 for rc in rcs if rc != 0))

say("done", "")
