"""The program-of-thought sandbox (mad_study.sandbox) against hostile programs (issues 22 and 36).

Every hostile program of tests/sandbox_hostile.py runs through `run_program` twice, as written and after switching off
every in-process guard it can reach, in the default mode (this user: root in CI) and as user nobody (via setpriv, with
the system's Python), each from a parent process that is itself the target. Each ends with a recorded status, the
parent lives, and nothing outside the sandbox changed: no file written on the host, no connection on the test's own
listener on 127.0.0.1, no secret of the parent read, no process left after the run. Then the same programs as the
program-of-thought turn of a DMAD debate: the debate goes on and its PoT log says which sandbox ran. Without OS
isolation the kit refuses to run model-written code unless the caller opts in (isolation='none'), and records it.
Issue 36 adds what the kernel shares that namespaces do not separate: the parent's session keyring (holding a secret
during the runs), keys carried between runs, nested user namespaces, memory outside RLIMIT_AS (memfds, SysV shm, many
children), files in /tmp, socket families and their buffers, bwrap's /dev, the kernel's riskier calls, terminal escapes in transcripts, statuses a
program tries to choose, threads, text that cannot be encoded, and two sandboxes at once each forking to its limit."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import mad_study.sandbox as sb
from mad_study.core import ConfigError
from mad_study.sandbox import SANDBOX_STATUSES, SandboxUnavailable, os_isolation_available, run_program, sandbox_check
from mad_study.sandbox import SandboxLimits

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
FLOOD_CAP_MIB = 64                      # the parent's peak-memory growth allowed during an endless writer's run
NEEDS_SANDBOX = pytest.mark.skipif(not os_isolation_available(), reason=f"no OS sandbox here: {sandbox_check()[1]}")
CASES = ["loop", "memory", "fork_bomb", "output_flood", "stderr_flood", "setsid_grandchild", "setsid_daemon", "listener", "write_host_tmp", "write_outside",
         "write_interpreter", "read_checkout", "read_ssh", "read_passwd", "read_parent_environ", "signal_parent",
         "subprocess", "ctypes",
         # issue 36
         "keyring_read_parent", "keyring_add", "keyring_store", "keyring_load", "nested_userns", "kernel_surface",
         "memfd_memory", "shm_memory", "dev_shm_fill", "fork_memory", "many_files", "socket_families", "escape_output",
         "forge_setup", "forge_memory", "forge_timeout", "forge_started", "compat_syscall", "threads",
         # issue 55
         "unix_socket_memory", "dev_fill"]


def _context(tmp: Path, listener: socket.socket) -> dict:
    "Paths, secrets and the listener's port for one run; everything the program aims at is readable/writable by nobody."
    tag = uuid.uuid4().hex[:12]
    home, outside = tmp / "home", tmp / "outside"
    (home / ".ssh").mkdir(parents=True); outside.mkdir()
    ssh = home / ".ssh" / "id_ed25519"
    ssh.write_text(f"-----BEGIN OPENSSH PRIVATE KEY----- ssh-secret-{tag}\n")
    for p in (tmp, home, home / ".ssh"): p.chmod(0o755)
    ssh.chmod(0o644); outside.chmod(0o777)
    return dict(marker=f"mad-sandbox-marker-{tag}", host_tmp=f"/tmp/mad-sandbox-escape-{tag}", outside=str(outside),
                checkout_file=str(ROOT / "pyproject.toml"), ssh_file=str(ssh), secret=f"env-secret-{tag}",
                ssh_secret=f"ssh-secret-{tag}", port=listener.getsockname()[1], parent_pid=0,
                key_desc=f"mad-sandbox-key-{tag}", key_ring=f"mad-sandbox-ring-{tag}", key_secret=f"keyring-secret-{tag}",
                carry=f"carried-{tag}")


def _run_driver(argv: list[str], ctx: dict, env: dict, cwd: str, timeout: float = 240) -> dict:
    path = Path(cwd) / "ctx.json"
    path.write_text(json.dumps(ctx)); path.chmod(0o644)
    r = subprocess.run(argv + [str(path)] + (["--debate"] if "--debate" in env.get("_FLAGS", "") else []),
                       capture_output=True, text=True, timeout=timeout, env={k: v for k, v in env.items() if k != "_FLAGS"}, cwd=cwd)
    lines = [l for l in r.stdout.splitlines() if l.startswith("@@")]
    assert r.returncode == 0 and lines, f"the parent died or failed (rc {r.returncode}): {r.stderr[-2000:]}"
    out = json.loads(lines[-1][2:])
    out["ctx"] = {**ctx, **out.get("ctx", {})}
    return out


def _leftovers(marker: str, wait: float = 3.0) -> list[str]:
    "Host processes still carrying `marker` in their command line, after up to `wait` s for the killed ones to go."
    end = time.monotonic() + wait
    while True:
        left = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and marker.encode() in (d / "cmdline").read_bytes(): left.append(d.name)
            except OSError: pass
        if not left or time.monotonic() > end: return left
        time.sleep(0.1)


@pytest.fixture(scope="module")
def listener():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16); s.setblocking(False)
    yield s
    s.close()


def _host_side(out: dict) -> dict:
    "What the host saw after a driver's run: files written, processes left, and cleans them up."
    ctx = out["ctx"]
    paths = [ctx["host_tmp"], ctx["host_tmp"] + ".sh", os.path.join(ctx["outside"], "escape.txt"), ctx["prefix_target"]]
    written = [p for p in paths if os.path.exists(p)]
    for p in written: os.remove(p)
    return dict(written=written, left=_leftovers(ctx["marker"]))


@pytest.fixture(scope="module")
def scratch_dir():
    "A folder under /tmp that user nobody can enter (pytest's own tmp folders are private to this user)."
    d = Path(tempfile.mkdtemp(prefix="mad-sandbox-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def default_run(listener, scratch_dir):
    "The driver as this user with the kit's interpreter (root in CI), with a secret in the parent's environment."
    if not os_isolation_available(): pytest.skip(f"no OS sandbox here: {sandbox_check()[1]}")
    tmp = scratch_dir / "default"; tmp.mkdir()
    ctx = _context(tmp, listener)
    env = dict(os.environ, PYTHONPATH=str(ROOT), MAD_SANDBOX_SECRET=ctx["secret"], _FLAGS="--debate")
    out = _run_driver([sys.executable, str(HERE / "sandbox_hostile.py")], ctx, env, str(tmp))
    out["host"] = _host_side(out)
    return out


def _nobody_python() -> tuple[list[str], str]:
    "The command prefix that runs as user nobody, and a Python nobody can start; or a reason to skip."
    if not hasattr(os, "geteuid") or os.geteuid() != 0: return [], "switching to user nobody needs root"
    setpriv = shutil.which("setpriv")
    if not setpriv: return [], "setpriv (util-linux) is not installed"
    pre = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    for py in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3") or ""):
        if py and subprocess.run(pre + [py, "-c", "import sys; assert sys.version_info >= (3, 9)"], capture_output=True,
                                 cwd="/").returncode == 0:
            return pre + [py], ""
    return [], "no Python 3.9+ that user nobody can run"


def _binding_files() -> list[Path]:
    "The libseccomp binding the kit uses (pyseccomp: one file, standard library only), copied next to the module."
    try: import pyseccomp
    except Exception: return []
    return [Path(pyseccomp.__file__)]


@pytest.fixture(scope="module")
def nobody_run(listener, scratch_dir):
    "The driver as user nobody (setpriv), the system's Python, and a copy of the module (standard library only)."
    pre, why = _nobody_python()
    if not pre: pytest.skip(why)
    tmp = scratch_dir / "nobody"; tmp.mkdir(); tmp.chmod(0o755)
    for src in (ROOT / "mad_study" / "sandbox.py", HERE / "sandbox_hostile.py", *_binding_files()):
        shutil.copy(src, tmp / src.name); (tmp / src.name).chmod(0o644)
    chk = subprocess.run(pre + ["-c", "import sandbox; print(sandbox.sandbox_check())"], capture_output=True, text=True, cwd=tmp)
    if "True" not in chk.stdout: pytest.skip(f"no OS sandbox for user nobody: {(chk.stdout + chk.stderr).strip()[-300:]}")
    ctx = _context(tmp / "ctx", listener)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "ctx" / "home"), "MAD_SANDBOX_SECRET": ctx["secret"]}
    out = _run_driver(pre + [str(tmp / "sandbox_hostile.py")], ctx, env, str(tmp))
    out["host"] = _host_side(out)
    return out


@pytest.fixture(params=["default", "nobody"])
def run(request):
    "The results of one driver run: as this user (root in CI), then as user nobody."
    return request.getfixturevalue(f"{request.param}_run")


def _forked(stdout: str) -> int | None:
    words = stdout.split()
    return int(words[words.index("forked") + 1]) if "forked" in words else None


@pytest.mark.parametrize("disarm", [False, True], ids=["guarded", "disarmed"])
@pytest.mark.parametrize("case", CASES)
def test_hostile_program(run, case, disarm):
    "Each hostile program ends with a recorded status in the OS sandbox; what it aimed at on the host is untouched."
    r, ctx = run["results"][case + ("+disarm" if disarm else "")], run["ctx"]
    assert r["status"] in SANDBOX_STATUSES and r["mode"] == "bwrap", r
    if disarm: assert "sandbox: " not in r["stderr"], r["stderr"][-300:]      # the audit hook was switched off
    seen = r["stdout"] + r["stderr"]
    assert ctx["secret"] not in seen and ctx["ssh_secret"] not in seen and "root:x:0:0" not in seen and "uid=0" not in seen
    assert r["wall"] < r["timeout"] + 3, r                                     # the run returned by its timeout
    expect = {"loop": "timeout", "memory": "memory", "output_flood": "output", "stderr_flood": "output", "listener": "error", "write_outside": "error",
              "write_interpreter": "error", "read_checkout": "error", "read_ssh": "error", "read_passwd": "error",
              "subprocess": "error"}
    if case == "write_interpreter" and os.path.realpath(ctx["prefix_target"]).startswith("/tmp/"):
        # a checkout under /tmp (CI's fresh clones may be): the sandbox's own tmpfs /tmp shadows the interpreter's
        # folder, so the write lands in the sandbox's tmpfs, never on the host (test_host_untouched checks the host)
        expect = {**expect, "write_interpreter": r["status"] if r["status"] in ("ok", "error") else "error"}
    if case in expect: assert r["status"] == expect[case], r
    if case == "fork_bomb": assert _forked(r["stdout"]) == 0 if not disarm else (_forked(r["stdout"]) or 0) < 16, r
    if case == "setsid_grandchild": assert r["status"] == ("timeout" if disarm else "error"), r
    if case == "setsid_daemon": assert r["status"] == ("ok" if disarm else "error") and r["wall"] < 3, r   # no wait on it
    if case.endswith("_flood"): assert r["out_len"] <= 20_000 and r["err_len"] <= 20_000 and r["wall"] < 1.5, r   # cut, not timed out
    if case == "dev_fill":                                                     # the hook refuses first, else /dev is read-only
        assert ("Read-only file system" if disarm else "sandbox: writing") in r["stdout"], r
    if case == "read_checkout": assert Path(ctx["checkout_file"]).read_text()[:60] not in seen
    assert ctx["key_secret"] not in seen and ctx["carry"] not in seen or case == "keyring_store"
    if case.startswith(("keyring", "nested_userns", "kernel_surface", "shm_memory", "socket_families", "fork_memory",
                        "compat_syscall", "unix_socket_memory")) and not disarm:
        assert r["status"] == "error" and "sandbox: " in r["stderr"], r            # the audit hook refused ctypes / fork
    elif case in ISSUE36: ISSUE36[case](r, r["stdout"], r["layers"])


def _lines(out: str, first: str) -> list[list[str]]:
    return [l.split() for l in out.splitlines() if l.split()[:1] == [first]]


def _held(out: str) -> int:
    return int(out.split("held")[-1].split()[0])


def _fork_memory(r, out, layers):
    n = int(out.split("children holding 40 MiB:")[-1].split()[0]) if "children holding" in out else 0
    if "cgroup-memory" in layers:                      # the whole sandbox: 64 + 64 (disk) + 16 MiB, not 6 x 40 MiB
        assert n * 40 < 64 + 64 + 16 and r["status"] in ("memory", "ok"), r
    else:                                              # issue 55: the kit's memory watch, 64 + 16 MiB in all
        assert "memory-watch" in layers and r["status"] == "memory" and r["wall"] < 2, r


def _many_files(r, out, layers):
    files = int(out.split("files")[-1].split()[0])
    if "tmp-file-limit" in layers: assert files <= 4096 and "No space left" in out, r   # tmpfs nr_inodes
    else: assert r["status"] in ("ok", "error"), r     # documented residual where the kit cannot mount it: bytes, not files


ISSUE36 = {   # the disarmed programs (guard off): what the OS layers alone must show
    "keyring_read_parent": lambda r, out, lay: (
        r["status"] == "ok" and all(l[2] == "EPERM" for l in _lines(out, "search")) and len(_lines(out, "search")) == 5
        and "request EPERM" in out and "join EPERM" in out and "ring EPERM EPERM" in out) or pytest.fail(str(r)),
    "keyring_add": lambda r, out, lay: (
        [l[1] for l in _lines(out, "-3") + _lines(out, "-4") + _lines(out, "-5")] == ["EPERM"] * 3
        and "last EPERM" in out) or pytest.fail(str(r)),
    "keyring_store": lambda r, out, lay: out.strip() == "EPERM" or pytest.fail(str(r)),
    "keyring_load": lambda r, out, lay: out.startswith("found EPERM") or pytest.fail(str(r)),
    "nested_userns": lambda r, out, lay: (
        all(l[2] == "EPERM" for l in _lines(out, "unshare")) and len(_lines(out, "unshare")) == 5 and "clone3 ENOSYS" in out
        and "setns EPERM" in out and "mount EPERM" in out and "pivot_root EPERM" in out and "os.unshare ok" not in out
        and "no-nested-userns" in lay) or pytest.fail(str(r)),
    "kernel_surface": lambda r, out, lay: (
        [l[1] for l in map(str.split, out.strip().splitlines())] == ["EPERM"] * 10) or pytest.fail(str(r)),
    "memfd_memory": lambda r, out, lay: (_held(out) == 0 and "Operation not permitted" in out) or pytest.fail(str(r)),
    "shm_memory": lambda r, out, lay: (_held(out) == 0 and "shmget EPERM" in out) or pytest.fail(str(r)),
    "dev_shm_fill": lambda r, out, lay: (
        int(out.split("written")[1].split()[0]) <= 1 and "modes 0o41777 0o41777" in out) or pytest.fail(str(r)),
    "fork_memory": _fork_memory,
    "many_files": _many_files,
    "socket_families": lambda r, out, lay: (
        [l[1] for l in map(str.split, out.splitlines()[:7])] == ["EAFNOSUPPORT"] * 7
        and "hidden EAFNOSUPPORT EAFNOSUPPORT EAFNOSUPPORT" in out and "opened" not in out          # issue 55: no family
        and all(f"{n} EAFNOSUPPORT" in out for n in ("AF_UNIX", "AF_INET", "AF_INET6", "socketpair"))) or pytest.fail(str(r)),
    "unix_socket_memory": lambda r, out, lay: (
        [l[1] for l in _lines(out, "queued")] == ["0"] * 4 and out.count("Address family not supported") == 4
        ) or pytest.fail(str(r)),
    "dev_fill": lambda r, out, lay: (
        r["status"] == "ok" and "written 0" in out and "ro-dev" in lay
        ) or pytest.fail(str(r)),
    "escape_output": lambda r, out, lay: (
        r["status"] == "ok" and out == "abcdef\n" and "\\x1b[2J" in r["stdout_raw"] and "\\x00" in r["stdout_raw"]
        and "\\u202e" in r["stdout_raw"] and "\x1b" not in r["stderr"] and "red" in r["stderr"]) or pytest.fail(str(r)),
    "forge_setup": lambda r, out, lay: r["status"] == "error" or pytest.fail(str(r)),
    "forge_memory": lambda r, out, lay: r["status"] == "error" or pytest.fail(str(r)),
    "forge_timeout": lambda r, out, lay: r["status"] == "error" or pytest.fail(str(r)),
    "forge_started": lambda r, out, lay: (r["status"] == "error" and "wrote" not in out) or pytest.fail(str(r)),
    "compat_syscall": lambda r, out, lay: (out.strip() == "skip" or (r["status"] == "error" and "i386" not in out)
                                           ) or pytest.fail(str(r)),          # the 32-bit ABI: killed (SIGSYS)
    "threads": lambda r, out, lay: "threads 24" in out or pytest.fail(str(r)),
}


def test_host_untouched(run, listener):
    "After all the runs: the parent lived, no file written outside, no process left, no connection on the listener."
    assert run["alive"] and run["parent_pid"] > 0
    assert run["host"]["written"] == [] and run["host"]["left"] == []
    try: conn, _ = listener.accept(); conn.close(); pytest.fail("a sandboxed program reached the 127.0.0.1 listener")
    except BlockingIOError: pass
    assert run["flood_growth_mib"] is not None and run["flood_growth_mib"] < FLOOD_CAP_MIB, run["flood_growth_mib"]


def test_parent_keyring_untouched(run):
    "The parent kept a secret in its session keyring during every run: still there, nothing added, nothing read."
    k = run["keyring"]
    if k is None: pytest.skip(f"keyrings are off on this machine: {run['ctx'].get('keyring_off')}")
    assert k["secret_back"] == run["ctx"]["key_secret"] and k["after"] == k["before"] and len(k["before"]) == 1, k


def test_two_sandboxes_at_once(run):
    "Two sandboxes at once, each forking to its limit (nproc=16): neither's forks fail because of the other."
    a, b = run["concurrent"]
    assert a["forked"] is not None and b["forked"] is not None, (a, b)
    assert min(a["forked"], b["forked"]) >= 12 and max(a["forked"], b["forked"]) < 16, (a, b)


def test_unencodable_program_gets_a_status(run):
    "Program text with a lone surrogate: status 'error' and no exception, in both modes."
    u = run["unencodable"]
    assert "raised" not in u and u["status"] == "error" and u["returncode"] is None and "UTF-8" in u["error"], u


def test_debate_goes_on(default_run):
    "Each disarmed hostile program as DMAD's program-of-thought turn: the debate ends, with the sandbox in its PoT log."
    for case in CASES:
        d = default_run["debate"][case]
        assert d["turns"] == 3 and d["answer"] == ["B"], (case, d)
        assert d["status"][0] in SANDBOX_STATUSES + ("no_answer",) and d["sandbox"][0].startswith("bwrap:"), (case, d)


@NEEDS_SANDBOX
def test_correct_program_returns_its_result():
    r = run_program("import math, fractions\nprint(math.comb(10, 3), fractions.Fraction(6, 4))")
    assert (r.status, r.stdout.strip(), r.mode) == ("ok", "120 3/2", "bwrap") and "pidns" in r.layers and "netns" in r.layers
    r = run_program("import numpy, sympy\nprint(int(numpy.arange(5).sum()), sympy.Rational(6, 4))")   # guard on: imports work
    assert (r.status, r.stdout.strip()) == ("ok", "10 3/2"), r.stderr[-500:]


def test_refuses_without_os_isolation(monkeypatch):
    "No bwrap: the kit refuses model-written code unless the caller opts in, and the result says which mode ran."
    monkeypatch.setattr(sb, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable, match="isolation='none'"): run_program("print(1)")
    with pytest.raises(SandboxUnavailable): run_program("print(1)", isolation="bwrap")
    assert issubclass(SandboxUnavailable, ConfigError)
    r = run_program("print(6 * 7)", isolation="none")
    assert (r.status, r.stdout.strip(), r.mode) == ("ok", "42", "none") and "pidns" not in r.layers
    assert r.sandbox.startswith("none:") and run_program("print(1)", isolation="none").mode == "none"
    with pytest.raises(ConfigError, match="isolation"): run_program("print(1)", isolation="weak")
    with pytest.raises(ConfigError, match="timeout"): run_program("print(1)", limits=SandboxLimits(timeout=0), isolation="none")


def test_refuses_without_the_syscall_filter(monkeypatch):
    "No libseccomp: the kit refuses unless the caller opts out of the filter by name, and the result says so."
    monkeypatch.setattr(sb, "seccomp_program", lambda: (None, "no libseccomp binding (test)"))
    ok, why = sandbox_check()
    assert not ok and "no syscall filter" in why
    with pytest.raises(SandboxUnavailable, match="syscall_filter=False"): run_program("print(1)")
    if not sandbox_check(syscall_filter=False)[0]: pytest.skip("no bubblewrap here")
    r = run_program("print(6 * 7)", syscall_filter=False)
    assert (r.status, r.stdout.strip(), r.mode) == ("ok", "42", "bwrap") and "seccomp" not in r.layers, r


@NEEDS_SANDBOX
def test_privileged_fallback_holds(monkeypatch):
    "As root where bwrap cannot run as nobody: no user namespace, but the filter, the keyring and (with a cgroup) a process count of its own."
    if not sb._privileged(): pytest.skip("the fallback is for root")
    monkeypatch.setattr(sb, "_variant", lambda *a: "root")
    prog = ("import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\nnr = 250 if os.uname().machine == 'x86_64' else 219\n"
            "print(libc.syscall(nr, 0, -3, 0), errno.errorcode[ctypes.get_errno()])\n"
            "print(libc.unshare(0x10000000), errno.errorcode[ctypes.get_errno()])\nprint(os.getuid())")
    r = run_program(sandbox_hostile_disarm() + prog, guard=False)
    assert r.status == "ok" and r.stdout.split() == ["-1", "EPERM", "-1", "EPERM", "65534"], r
    assert "host-uid-nobody" in r.layers and "seccomp" in r.layers and "own-keyring" in r.layers, r.layers
    if "cgroup-pids" in r.layers:                      # two at once, each forking to its limit: pids.max is each one's own
        import sandbox_hostile as h
        out = h.run_concurrent({"marker": "fallback-" + uuid.uuid4().hex[:8]})
        assert all(o["forked"] is not None and o["forked"] >= 12 for o in out), out


def sandbox_hostile_disarm() -> str:
    sys.path.insert(0, str(HERE))
    import sandbox_hostile
    return sandbox_hostile.DISARM


def test_plain_bwrap_variant_as_nobody(scratch_dir):
    "The fallback for a user who may not make a user namespace of the kit's own: plain bwrap, still filtered."
    pre, why = _nobody_python()
    if not pre: pytest.skip(why)
    tmp = scratch_dir / "plain"; tmp.mkdir(); tmp.chmod(0o755)
    for src in (ROOT / "mad_study" / "sandbox.py", *_binding_files()):
        shutil.copy(src, tmp / src.name); (tmp / src.name).chmod(0o644)
    code = ("import sandbox as sb\nok, why = sb.sandbox_check()\nif not ok: print('SKIP', why); raise SystemExit\n"
            "sb._variant = lambda *a: 'userns'\n"
            "r = sb.run_program('import ctypes, errno, os\\nl = ctypes.CDLL(None, use_errno=True)\\n"
            "print(l.unshare(0x10000000), errno.errorcode[ctypes.get_errno()], os.getuid())', guard=False)\n"
            "print(r.status, r.stdout.strip(), 'tmp-file-limit' in r.layers, 'seccomp' in r.layers)")
    out = subprocess.run(pre + ["-c", code], capture_output=True, text=True, cwd=tmp, timeout=120)
    if out.stdout.startswith("SKIP"): pytest.skip(out.stdout)
    assert out.stdout.split() == ["ok", "-1", "EPERM", "65534", "False", "True"], (out.stdout, out.stderr[-500:])


@NEEDS_SANDBOX
def test_launcher_comes_back():
    "The launcher (root, or with a cgroup) is started again when it died."
    r = run_program("print(1)")
    l = sb._LAUNCHER.get(os.getpid())
    if l is None: pytest.skip("this machine starts bwrap without the launcher")
    l["proc"].kill(); l["proc"].wait()
    r = run_program("print(2)")
    assert (r.status, r.stdout.strip()) == ("ok", "2") and sb._LAUNCHER[os.getpid()]["proc"].poll() is None, r


def test_binds_under_tmp_land_on_the_sandbox_tmpfs(tmp_path):
    "A checkout (and its venv) under /tmp: the tmpfs /tmp is mounted first, the interpreter's binds on top (a fresh clone under /tmp failed)."
    from mad_study.sandbox import bwrap_argv
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="clone-"))
    try:
        (root / ".venv" / "bin").mkdir(parents=True); (root / ".venv" / "lib").mkdir()
        exe = root / ".venv" / "bin" / "python"; exe.write_text("")
        argv, _ = bwrap_argv("bwrap", str(exe), (str(exe), str(root / ".venv" / "lib")), 3)
    finally: shutil.rmtree(root)
    tmpfs = max(i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == "/tmp")
    under = [i for i, a in enumerate(argv) if a in ("--ro-bind", "--dir") and argv[i + 1].startswith(str(root))]
    assert under and tmpfs < min(under)
    assert not any(a == "--dir" and argv[i + 1] == "/tmp" for i, a in enumerate(argv))      # /tmp keeps its tmpfs mode
