"""The hostile programs of issue 22, run through `run_program` by a parent process that is itself the victim.

`python sandbox_hostile.py CONTEXT.json` runs every case twice (as written, and after the program switched off every
in-process guard it can reach: the audit hook's tables through the runner's frame, any table left in memory, and every
rlimit it may raise) and prints one JSON line: the results, the parent's peak-memory growth during the output floods,
and that the parent is still alive (it printed). tests/test_sandbox.py runs it as root with the kit's interpreter and
as user nobody with the system's Python (and a copy of mad_study/sandbox.py: only the standard library), and checks the
host side: nothing written, no connection on its listener, no process left. With `--debate` (the kit's interpreter
only) each disarmed program is also the program-of-thought turn of a one-round DMAD debate."""
import json
import os
import resource
import sys
import time

try:
    from mad_study.sandbox import run_program
except ImportError:                     # the unprivileged run: a copy of the module next to this file
    from sandbox import run_program

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


def cases(c: dict) -> dict:
    "name -> (program, run_program keywords); `c` holds the paths, port, pid and marker the host side checks."
    sleeper = f'[sys.executable, "-S", "-c", "import time; time.sleep(30)", "{c["marker"]}"]'
    return {
        "loop": ("while True: pass", dict(timeout=1.5)),
        "memory": ("xs = []\nwhile True: xs.append(bytearray(10**7))", dict(memory_mb=256, timeout=10)),
        "fork_bomb": ("import os, sys\nn = 0\nfor i in range(100):\n    try: pid = os.fork()\n"
                      "    except OSError: break\n    if pid == 0: os.execv(sys.executable, " + sleeper + ")\n"
                      "    n += 1\nprint('forked', n)", dict(timeout=5, nproc=16)),
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
    }


def run_all(c: dict, debate: bool = False) -> dict:
    res, growth = {}, None
    for disarm in (False, True):
        for name, (code, kw) in cases(c).items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.monotonic()
            r = run_program((DISARM if disarm else "") + code, **kw)
            wall = time.monotonic() - t0
            if name.endswith("_flood"):
                g = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024     # MiB (ru_maxrss: KiB)
                growth = g if growth is None else max(growth, g)
            res[f"{name}{'+disarm' if disarm else ''}"] = dict(
                status=r.status, stdout=r.stdout[-4000:], stderr=r.stderr[-2000:], error=r.error, wall=round(wall, 3),
                out_len=len(r.stdout), err_len=len(r.stderr),
                timeout=kw.get("timeout", 10.0), mode=getattr(r, "mode", ""), layers=list(r.layers))
    out = dict(results=res, flood_growth_mib=growth, parent_pid=os.getpid(), alive=True, ctx=c)
    if debate: out["debate"] = run_debates(c)
    return out


def run_debates(c: dict) -> dict:
    "Each disarmed program as the PoT turn of a one-round DMAD debate (cot and step-back answer (B) in prose)."
    from mad_study.core import Generation, Item
    from mad_study.roles import run_dmad
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
                                pot_timeout=min(kw.get("timeout", 10.0), 2.0), pot_memory_mb=kw.get("memory_mb", 1024))
        out[name] = dict(turns=len(tr), answer=res["answer"].tolist(), status=pot["status"].tolist(),
                         sandbox=pot["sandbox"].tolist() if "sandbox" in pot else None)
    return out


if __name__ == "__main__":
    ctx = json.load(open(sys.argv[1]))
    ctx.setdefault("prefix_target", os.path.join(os.path.realpath(sys.prefix), f"escape-{ctx['marker']}.txt"))
    ctx["parent_pid"] = os.getpid()
    print("@@" + json.dumps(run_all(ctx, debate="--debate" in sys.argv)), flush=True)
