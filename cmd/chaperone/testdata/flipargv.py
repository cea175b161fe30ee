# Races execve against a thread that flips its argument between "safe"
# and "evil", at least MIN times and until one attempt was killed (at most
# MAX times), and reports how each attempt ended: killed, denied (EPERM),
# ran; "EVIL RAN" if /bin/echo ever printed evil. Usage: flipargv.py MIN MAX
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.execve.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]
counts = {"killed": 0, "denied": 0, "ran": 0, "other": 0}
least, most = int(sys.argv[1]), int(sys.argv[2])
for i in range(most):
    if i >= least and counts["killed"]:
        break
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        arg = ctypes.create_string_buffer(b"safe")
        argv = (ctypes.c_char_p * 3)(b"/bin/echo", ctypes.cast(arg, ctypes.c_char_p), None)
        def flip():
            while True:
                ctypes.memmove(arg, b"evil", 4)
                ctypes.memmove(arg, b"safe", 4)
        threading.Thread(target=flip, daemon=True).start()
        time.sleep(0.002)
        libc.execve(b"/bin/echo", argv, None)
        os._exit(100 + ctypes.get_errno())
    os.close(w)
    out = os.read(r, 100)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if out.strip() == b"evil":
        print("EVIL RAN", flush=True)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9:
        counts["killed"] += 1
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 101:
        counts["denied"] += 1
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        counts["ran"] += 1
    else:
        counts["other"] += 1
print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
