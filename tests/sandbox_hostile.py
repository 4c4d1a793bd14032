"""The hostile programs of issues 22 and 36, run through `run_program` by a parent process that is itself the victim.

`python sandbox_hostile.py CONTEXT.json` runs every case twice (as written, and after the program switched off every
in-process guard it can reach: the audit hook's tables through the runner's frame, any table left in memory, and every
rlimit it may raise) and prints one JSON line: the results, the parent's peak-memory growth during the output floods,
and that the parent is still alive (it printed). tests/test_sandbox.py runs it as root with the kit's interpreter and
as user nobody with the system's Python (and a copy of mad_study/sandbox.py: only the standard library), and checks the
host side: nothing written, no connection on its listener, no process left. With `--debate` (the kit's interpreter
only) each disarmed program is also the program-of-thought turn of a one-round DMAD debate. During the runs the
parent holds a secret in its session keyring (issue 36); it reports its keyring before and after, two sandboxes run at
once each forking to its limit, and a program whose text cannot be encoded."""
import ctypes
import json
import os
import platform
import resource
import sys
import threading
import time
try:
    from mad_study.sandbox import SandboxLimits, run_program
except ImportError:                     # the unprivileged run: a copy of the module next to this file
    from sandbox import SandboxLimits, run_program

LIMIT_KEYS = ("timeout", "memory_mb", "cpu_seconds", "nproc", "fsize_mb", "max_output", "disk_mb", "max_files")


def run_case(code: str, kw: dict):
    "`run_program` with a case's keywords: its limits as `SandboxLimits`, the rest as they are."
    limits = SandboxLimits(**{k: v for k, v in kw.items() if k in LIMIT_KEYS})
    return run_program(code, limits, **{k: v for k, v in kw.items() if k not in LIMIT_KEYS})

# switch off every in-process guard the program can reach, then run the hostile part
DISARM = r'''
import gc, resource, sys
def _disarm():
    f = sys._getframe()
    while f is not None:                               # the runner's globals hold the audit hook's tables
        g = f.f_globals
        for k in ("_DENY", "_PATHS"):
            if hasattr(g.get(k), "clear"): g[k].clear()
        if "_inside" in g: g["_inside"] = lambda p: True
        f = f.f_back
    for o in gc.get_objects():                         # and any other table of audit events
        if isinstance(o, (set, dict)) and "os.system" in o: o.clear()
    for n in dir(resource):                            # raise every limit it can
        if n.startswith("RLIMIT_"):
            try: resource.setrlimit(getattr(resource, n), (resource.RLIM_INFINITY,) * 2)
            except (ValueError, OSError): pass
_disarm()
'''


# syscall numbers of the calls the filter denies, for the two architectures the kit is tested on
NR = {"x86_64": dict(add_key=248, request_key=249, keyctl=250, unshare=272, setns=308, mount=165, umount2=166,
                     pivot_root=155, io_uring_setup=425, userfaultfd=323, perf_event_open=298, bpf=321, ptrace=101,
                     process_vm_readv=310, memfd_create=319, clone3=435, shmget=29, socket=41, msgget=68),
      "aarch64": dict(add_key=217, request_key=218, keyctl=219, unshare=97, setns=268, mount=40, umount2=39,
                      pivot_root=41, io_uring_setup=425, userfaultfd=282, perf_event_open=241, bpf=280, ptrace=117,
                      process_vm_readv=270, memfd_create=279, clone3=435, shmget=194, socket=198, msgget=186)}

SYS = r'''
import ctypes, errno, platform
libc = ctypes.CDLL(None, use_errno=True)
NR = %r[platform.machine()]
def sc(name, *args):
    a = [ctypes.c_char_p(x) if isinstance(x, bytes) else x if isinstance(x, (ctypes._SimpleCData, ctypes.Array)) else ctypes.c_long(x) for x in args]
    r = libc.syscall(ctypes.c_long(NR[name]), *a)
    return r if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
''' % (NR,)


def keyring(op: str, *args):
    "The parent's side: keyctl/add_key through libc (no keyutils needed); returns the call's result or raises."
    libc = ctypes.CDLL(None, use_errno=True)
    nr = NR[platform.machine()]
    a = [ctypes.c_char_p(x) if isinstance(x, bytes) else x if isinstance(x, ctypes.Array) else ctypes.c_long(x) for x in args]
    r = libc.syscall(ctypes.c_long(nr[op]), *a)
    if r < 0: raise OSError(ctypes.get_errno(), f"{op}{args[:1]}")
    return r


def session_keys() -> list[int]:
    "The serials in this process's session keyring (KEYCTL_READ on KEY_SPEC_SESSION_KEYRING)."
    buf = ctypes.create_string_buffer(4096)
    n = keyring("keyctl", 11, -3, buf, 4096)
    return list(memoryview(buf.raw[:n]).cast("i"))


def fork_bomb(marker: str) -> str:
    "Fork until refused, each child a sleeper carrying `marker`; prints how many forks succeeded."
    sleeper = f'[sys.executable, "-S", "-c", "import time; time.sleep(30)", "{marker}"]'
    return ("import os, sys\nn = 0\nfor i in range(100):\n    try: pid = os.fork()\n"
            "    except OSError: break\n    if pid == 0: os.execv(sys.executable, " + sleeper + ")\n"
            "    n += 1\nprint('forked', n)")


def cases(c: dict) -> dict:
    "name -> (program, run_program keywords); `c` holds the paths, port, pid and marker the host side checks."
    sleeper = f'[sys.executable, "-S", "-c", "import time; time.sleep(30)", "{c["marker"]}"]'
    return {
        "loop": ("while True: pass", dict(timeout=1.5)),
        "memory": ("xs = []\nwhile True: xs.append(bytearray(10**7))", dict(memory_mb=256, timeout=10)),
        "fork_bomb": (fork_bomb(c["marker"]), dict(timeout=5, nproc=16)),
        "output_flood": ("while True: print('x' * 4096)", dict(timeout=2)),
        "stderr_flood": ("import sys\nwhile True: sys.stderr.write('y' * 4096)", dict(timeout=2)),
        "setsid_grandchild": ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
                              "    os.execv(sys.executable, " + sleeper + ")\ntime.sleep(30)", dict(timeout=1.5)),
        "setsid_daemon": ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0: os.execv(sys.executable, "
                          + sleeper + ")\n    os._exit(0)\nprint('parent done')", dict(timeout=5)),
        "listener": (f"import socket\ns = socket.create_connection(('127.0.0.1', {c['port']}), timeout=2)\n"
                     "s.sendall(b'escaped')\nprint('connected')", dict(timeout=5)),
        "write_host_tmp": (f"open({c['host_tmp']!r}, 'w').write('x')\nprint('wrote')", {}),
        "write_outside": (f"open({c['outside'] + '/escape.txt'!r}, 'w').write('x')\nprint('wrote')", {}),
        "write_interpreter": (f"open({c['prefix_target']!r}, 'w').write('x')\nprint('wrote')", {}),
        "read_checkout": (f"print(open({c['checkout_file']!r}).read())", {}),
        "read_ssh": (f"import os\nfor p in ({c['ssh_file']!r}, os.path.expanduser('~/.ssh/id_ed25519'), '/root/.ssh/id_rsa'):\n"
                     "    try: print(open(p).read())\n    except OSError as e: print(e)\nopen(" + repr(c['ssh_file']) + ").read()", {}),
        "read_passwd": ("print(open('/etc/passwd').read())", {}),
        "read_parent_environ": ("import os\nprint(dict(os.environ))\n"
                                f"for pid in {{os.getppid(), 1, {c['parent_pid']}}}:\n"
                                "    try: print(pid, open(f'/proc/{pid}/environ', 'rb').read())\n"
                                "    except OSError as e: print(pid, e)", {}),
        "signal_parent": ("import os, signal\n"
                          f"for pid in (os.getppid(), {c['parent_pid']}, 1):\n"
                          "    for sig in (signal.SIGTERM, signal.SIGKILL):\n"
                          "        try: os.kill(pid, sig)\n        except OSError as e: print('kill', pid, e)\n"
                          "        try: signal.pidfd_send_signal(os.pidfd_open(pid), sig)\n"
                          "        except OSError as e: print('pidfd', pid, e)\nprint('sent')", {}),
        "subprocess": ("import os, subprocess\n"
                       f"print('system', os.system('id; touch {c['host_tmp']}.sh'))\n"
                       "print(subprocess.run(['id'], capture_output=True, text=True).stdout)", {}),
        "ctypes": ("import ctypes\nlibc = ctypes.CDLL(None)\n"
                   f"print('kill', libc.kill({c['parent_pid']}, 9), 'setuid', libc.setuid(0))", {}),
        # issue 36: what the kernel shares that namespaces do not separate
        "keyring_read_parent": (SYS + f"desc = {c['key_desc']!r}.encode()\nbuf = ctypes.create_string_buffer(4096)\n"
                                "for ring in (-3, -4, -5, -1, -2):\n    k = sc('keyctl', 10, ring, b'user', desc, 0)\n"
                                "    print('search', ring, k)\n    if isinstance(k, int): print('read', sc('keyctl', 11, k, buf, 4096), buf.raw[:200])\n"
                                "print('request', sc('request_key', b'user', desc, 0, -3))\n"
                                "print('join', sc('keyctl', 1, " + repr(c['key_ring'].encode()) + "))\n"
                                "print('ring', sc('keyctl', 0, -3, 0), sc('keyctl', 11, -3, buf, 4096))\n"
                                "try: print(open('/proc/keys').read())\nexcept OSError as e: print(e)", {}),
        "keyring_add": (SYS + "for ring in (-3, -4, -5):\n"
                        "    print(ring, sc('add_key', b'user', b'planted-by-sandbox', b'x', 1, ring))\n"
                        "for i in range(250): r = sc('add_key', b'user', b'quota-%d' % i, b'x' * 100, 100, -4)\n"
                        "print('last', r)", {}),
        "keyring_store": (SYS + f"print(sc('add_key', b'user', b'carry', {c['carry'].encode()!r}, {len(c['carry'])}, -4))", {}),
        "keyring_load": (SYS + "buf = ctypes.create_string_buffer(256)\nk = sc('keyctl', 10, -4, b'user', b'carry', 0)\n"
                         "print('found', k, sc('keyctl', 11, k, buf, 256) if isinstance(k, int) else '', buf.value)", {}),
        "nested_userns": (SYS + "import os\n"
                          "for flags in (0x10000000, 0x10020000, 0x20000, 0x40000000, 0x20000000):\n"
                          "    print('unshare', hex(flags), sc('unshare', flags))\n"
                          "args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)\n"
                          "print('clone3', sc('clone3', args, 88))\n"
                          "fd = os.open('/proc/self/ns/user', os.O_RDONLY)\nprint('setns', sc('setns', fd, 0))\n"
                          "print('mount', sc('mount', b'none', b'/tmp', b'tmpfs', 0, b'size=300m'))\n"
                          "print('pivot_root', sc('pivot_root', b'/tmp', b'/tmp'))\n"
                          "try: os.unshare(os.CLONE_NEWUSER); print('os.unshare ok')\nexcept (AttributeError, OSError) as e: print('os.unshare', e)", {}),
        "kernel_surface": (SYS + "buf = ctypes.create_string_buffer(256)\n"
                           "print('io_uring_setup', sc('io_uring_setup', 8, buf))\nprint('userfaultfd', sc('userfaultfd', 0))\n"
                           "print('perf_event_open', sc('perf_event_open', buf, 0, -1, -1, 0))\nprint('bpf', sc('bpf', 0, buf, 64))\n"
                           "print('ptrace', sc('ptrace', 0, 0, 0, 0))\nprint('process_vm_readv', sc('process_vm_readv', 1, buf, 1, buf, 1, 0))\n"
                           "print('memfd_create', sc('memfd_create', b'x', 0))\nprint('shmget', sc('shmget', 0, 1 << 20, 0o1600))\n"
                           "print('msgget', sc('msgget', 0, 0o1600))", {}),
        "memfd_memory": ("import os, mmap\nheld = 0\nfds = []\nfor i in range(20):\n    try:\n        fd = os.memfd_create('m%d' % i)\n"
                         "        os.ftruncate(fd, 15 << 20)\n        with mmap.mmap(fd, 15 << 20) as m:\n"
                         "            for j in range(0, 15 << 20, 4096): m[j] = 1\n        fds.append(fd); held += 15\n"
                         "    except OSError as e: print(e); break\nprint('held', held)", dict(memory_mb=64, timeout=10)),
        "shm_memory": (SYS + "import mmap\nheld = 0\nlibc.shmat.restype = ctypes.c_void_p\nfor i in range(20):\n    sid = sc('shmget', 0, 15 << 20, 0o1600)\n"
                       "    if not isinstance(sid, int): print('shmget', sid); break\n    p = libc.shmat(sid, None, 0)\n"
                       "    ctypes.memset(p, 1, 15 << 20)\n    libc.shmdt(ctypes.c_void_p(p))\n    held += 15\n"
                       "print('held', held)", dict(memory_mb=64, timeout=10)),
        "dev_shm_fill": ("import os\nn = 0\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n"
                         "        for i in range(300): f.write(b'x' * (1 << 20)); f.flush(); n += 1\nexcept OSError as e: print(e)\n"
                         "print('written', n)\nprint('modes', oct(os.stat('/tmp').st_mode), oct(os.stat('/dev/shm').st_mode))",
                         dict(memory_mb=64, timeout=10)),
        # a child that reported and was then OOM-killed holds nothing: count the reporters still alive at 2 s
        "fork_memory": ("import os, time\nr, w = os.pipe()\nkids = []\nfor i in range(6):\n    pid = os.fork()\n    if pid == 0:\n"
                        "        try:\n            b = bytearray(40 << 20)\n            for j in range(0, len(b), 4096): b[j] = 1\n"
                        "            os.write(w, bytes([i]))\n            time.sleep(3)\n        finally: os._exit(0)\n    kids.append(pid)\n"
                        "time.sleep(2)\nos.set_blocking(r, False)\ntry: told = set(os.read(r, 100))\nexcept BlockingIOError: told = set()\n"
                        "n = sum(1 for i in told if os.waitpid(kids[i], os.WNOHANG) == (0, 0))\n"
                        "print('children holding 40 MiB:', n)", dict(memory_mb=64, timeout=8)),
        "many_files": ("import os, time\nn = 0\nt = time.monotonic()\ntry:\n    while n < 120000 and time.monotonic() - t < 4:\n"
                       "        open('f%d' % n, 'w').close(); n += 1\nexcept OSError as e: print(e)\nprint('files', n)",
                       dict(disk_mb=1, timeout=8)),
        "socket_families": (SYS + "import socket\nfor fam, typ in ((40, 1), (16, 3), (17, 3), (4, 2), (9, 2), (38, 5), (44, 2)):\n"
                            "    try: s = socket.socket(fam, typ); print(fam, 'opened'); s.close()\n"
                            "    except OSError as e: print(fam, errno.errorcode.get(e.errno))\n"
                            "print('hidden', sc('socket', (1 << 32) | 40, 1, 0), sc('socket', (1 << 32) | 16, 3, 0), sc('socket', -1, 1, 0))\n"
                            "for name in ('AF_UNIX', 'AF_INET', 'AF_INET6'):\n"
                            "    try: socket.socket(getattr(socket, name)).close(); print(name, 'opened')\n"
                            "    except OSError as e: print(name, errno.errorcode.get(e.errno))\n"
                            "try: socket.socketpair(); print('socketpair opened')\n"
                            "except OSError as e: print('socketpair', errno.errorcode.get(e.errno))", {}),
        # issue 55, as a user without a cgroup: kernel memory outside RLIMIT_AS, and bwrap's /dev
        "unix_socket_memory": ("import os, socket, time\nkids = []\nfor k in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
                               "        n, why, socks = 0, '', []\n        try:\n            while True:\n"
                               "                a, b = socket.socketpair(); socks += [a, b]\n"
                               "                a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30); a.setblocking(False)\n"
                               "                try:\n                    while True: n += a.send(b'x' * 65536)\n"
                               "                except BlockingIOError: pass\n        except OSError as e: why = str(e)\n"
                               "        print('queued', n >> 20, 'MiB', why, flush=True); time.sleep(2); os._exit(0)\n"
                               "    kids.append(pid)\nfor p in kids: os.waitpid(p, 0)", dict(memory_mb=64, timeout=10)),
        "dev_fill": ("import os\nn = 0\ntry:\n    for i in range(300):\n        with open('/dev/fill%d' % i, 'wb') as f: f.write(b'x' * (1 << 20))\n"
                     "        n += 1\nexcept OSError as e: print(e)\nprint('written', n)\nprint('mode', oct(os.stat('/dev').st_mode))",
                     dict(memory_mb=64, disk_mb=8, timeout=10)),
        "escape_output": ("import sys\nprint('a\\x1b[2J\\x1b]0;pwned\\x07b\\x00c\\u202ed\\re\\x9b31mf')\n"
                          "sys.stderr.write('\\x1b[31mred\\x1b[0m\\n')", {}),
        "forge_setup": ("import sys\nsys.stderr.write(\"bwrap: Can't mount tmpfs on /newroot: Operation not permitted\\n\")\nsys.exit(1)", {}),
        "forge_memory": ("import sys\nsys.stderr.write('Traceback (most recent call last):\\nMemoryError\\n')\nsys.exit(1)", {}),
        "forge_timeout": ("import os\nos._exit(128 + 24)", {}),
        "forge_started": ("import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'1'); print('wrote', fd)\n    except OSError: pass\n"
                          "print(sorted(os.listdir('/proc/self/fd')))\nraise SystemExit(3)", {}),
        "compat_syscall": ("import ctypes, mmap, os, platform\nif platform.machine() != 'x86_64': print('skip'); raise SystemExit\n"
                           "code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])   # mov eax, 20 (getpid, i386); int 0x80; ret\n"
                           "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\nm.write(code)\n"
                           "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
                           "print('i386 getpid', f(), os.getpid())", {}),
        "threads": ("import threading, time\nev = threading.Event()\nts = [threading.Thread(target=ev.wait) for _ in range(24)]\n"
                    "n = 0\nfor t in ts:\n    try: t.start(); n += 1\n    except RuntimeError as e: print(e); break\n"
                    "ev.set()\nprint('threads', n)", dict(memory_mb=1024)),
    }


def run_all(c: dict, debate: bool = False) -> dict:
    res, growth = {}, None
    for disarm in (False, True):
        for name, (code, kw) in cases(c).items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.monotonic()
            r = run_case((DISARM if disarm else "") + code, kw)
            wall = time.monotonic() - t0
            if name.endswith("_flood"):
                g = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024     # MiB (ru_maxrss: KiB)
                growth = g if growth is None else max(growth, g)
            res[f"{name}{'+disarm' if disarm else ''}"] = dict(
                status=r.status, stdout=r.stdout[-4000:], stderr=r.stderr[-2000:], error=r.error, wall=round(wall, 3),
                out_len=len(r.stdout), err_len=len(r.stderr), stdout_raw=getattr(r, "stdout_raw", "")[-4000:],
                stderr_raw=getattr(r, "stderr_raw", "")[-2000:],
                timeout=kw.get("timeout", 10.0), mode=getattr(r, "mode", ""), layers=list(r.layers))
    out = dict(results=res, flood_growth_mib=growth, parent_pid=os.getpid(), alive=True, ctx=c,
               concurrent=run_concurrent(c), unencodable=run_unencodable())
    if debate: out["debate"] = run_debates(c)
    return out


def run_concurrent(c: dict, n: int = 2) -> list:
    "`n` sandboxes at once, each forking to its limit (nproc=16): the forks each managed, and each status."
    code = fork_bomb(c["marker"])
    out = [None] * n
    def one(i):
        r = run_program(DISARM + code, limits=SandboxLimits(timeout=8, nproc=16))
        words = r.stdout.split()
        out[i] = dict(status=r.status, forked=int(words[words.index("forked") + 1]) if "forked" in words else None,
                      stderr=r.stderr[-500:])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    return out


def run_unencodable() -> dict:
    "A program whose text is not UTF-8-encodable (a lone surrogate): a status, not an exception."
    try: r = run_program("print('\\udcff')".encode().decode("unicode_escape"))
    except Exception as e: return dict(raised=f"{type(e).__name__}: {e}")
    return dict(status=r.status, error=r.error, returncode=r.returncode)


def run_debates(c: dict) -> dict:
    "Each disarmed program as the PoT turn of a one-round DMAD debate (cot and step-back answer (B) in prose)."
    from mad_study.core import Generation, Item
    from mad_study.roles import PotSettings, run_dmad
    item = Item("t/0", "t", "What is 2+2?", "B", "option", ("3", "4", "5", "6"))

    class Scripted:
        backend_id = "scripted"
        def __init__(self, program): self.program = program
        def generate(self, reqs):
            return [Generation(text=(f"```python\n{self.program}\n```\nSo the answer is (B)." if r.meta["role"] == "pot"
                                     else "Step by step, the answer is (B)."), prompt_tokens=10, completion_tokens=10)
                    for r in reqs]
    out = {}
    for name, (code, kw) in cases(c).items():
        tr, res, pot = run_dmad([item], {"cot": "s", "step_back": "s", "pot": "s"}, {"s": Scripted(DISARM + code)}, rounds=1,
                                pot=PotSettings(timeout=min(kw.get("timeout", 10.0), 2.0), memory_mb=kw.get("memory_mb", 1024)))
        out[name] = dict(turns=len(tr), answer=res["answer"].tolist(), status=pot["status"].tolist(),
                         sandbox=pot["sandbox"].tolist() if "sandbox" in pot else None)
    return out


def plant_secret(ctx: dict) -> dict:
    "The parent joins a session keyring of its own and keeps a secret in it, as a login or a service would."
    keyring("keyctl", 1, ctx["key_ring"].encode())                           # KEYCTL_JOIN_SESSION_KEYRING
    s = ctx["key_secret"].encode()
    serial = keyring("add_key", b"user", ctx["key_desc"].encode(), s, len(s), -3)
    return dict(serial=serial, before=session_keys())


def check_secret(planted: dict) -> dict:
    "After the runs: the parent's session keyring as it was, the secret still in it."
    buf = ctypes.create_string_buffer(256)
    n = keyring("keyctl", 11, planted["serial"], buf, 256)
    return dict(before=planted["before"], after=session_keys(), secret_back=buf.raw[:n].decode())


if __name__ == "__main__":
    ctx = json.load(open(sys.argv[1]))
    ctx.setdefault("prefix_target", os.path.join(os.path.realpath(sys.prefix), f"escape-{ctx['marker']}.txt"))
    ctx["parent_pid"] = os.getpid()
    try: planted = plant_secret(ctx)
    except OSError as e: planted = None; ctx["keyring_off"] = str(e)     # keyrings off here (a container's filter)
    out = run_all(ctx, debate="--debate" in sys.argv)
    out["keyring"] = check_secret(planted) if planted else None
    print("@@" + json.dumps(out), flush=True)
