"""The set-up as users meet it: environment.yml names what pyproject.toml names, and `make lab` serves the notebooks.

Nothing here changes the real files (drift is shown on in-memory copies) or writes into figures/ or runs/; the lab
test starts `make lab` on 127.0.0.1 with its own token and scratch Jupyter folders and always stops it.
"""
import copy
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]

# conda-forge names whose PyPI name differs (pytorch-gpu: conda-forge's CUDA build of torch)
CONDA_TO_PYPI = {"pytorch-gpu": "torch", "pytorch": "torch", "matplotlib-base": "matplotlib"}
# entries of environment.yml that are the environment itself, not packages of pyproject.toml
ENV_ONLY = {"python", "pip"}
# what environment.yml must hold: the runtime dependencies and these extras of pyproject.toml
EXTRAS = ("dev", "serving")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lower_bound(specs) -> str | None:
    "The `>=` bound among (operator, version) pairs, as a string (None when there is none)."
    bounds = [v for op, v in specs if op == ">="]
    return str(Version(bounds[0])) if bounds else None


def pyproject_requirements(pyproject: dict) -> dict[str, tuple[str | None, frozenset, str]]:
    "{normalised name: (lower bound, extras, where)} of the runtime dependencies and EXTRAS."
    proj = pyproject["project"]
    groups = [("dependencies", proj.get("dependencies", []))]
    groups += [(f"[{e}] extra", proj.get("optional-dependencies", {}).get(e, [])) for e in EXTRAS]
    out = {}
    for where, reqs in groups:
        for r in map(Requirement, reqs):
            out[_norm(r.name)] = (_lower_bound((s.operator, s.version) for s in r.specifier), frozenset(r.extras), where)
    return out


_CONDA_SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$")


def env_requirements(env: dict) -> dict[str, tuple[str | None, frozenset, str]]:
    "{normalised PyPI name: (lower bound, extras, conda spec as written)} of environment.yml (conda and pip entries)."
    return dict(_env_entries(env))


def _env_entries(env: dict) -> list[tuple[str, tuple[str | None, frozenset, str]]]:
    "(name, (lower bound, extras, spec)) for every entry of environment.yml, in order, repeats kept."
    out = []
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict):   # the pip: section, PEP 508 requirements (option lines such as --index-url skipped)
            for line in dep.get("pip", []):
                if line.strip().startswith("-"): continue
                r = Requirement(line)
                out.append((_norm(r.name), (_lower_bound((s.operator, s.version) for s in r.specifier), frozenset(r.extras), line)))
            continue
        name, rest = _CONDA_SPEC.match(str(dep)).groups()
        if _norm(name) in ENV_ONLY: continue
        # `name>=1.2`, `name >=1.2`, `name>=1.2,<2`, `name >=1.2 build*`: only a `>=` is a lower bound (`name=1.2` pins)
        out.append((_conda_name(dep), (_lower_bound(re.findall(r"(>=)\s*([0-9][0-9A-Za-z.]*)", rest)), frozenset(), str(dep))))
    return out


def _conda_name(dep) -> str:
    "The normalised PyPI name of a conda entry."
    name = _CONDA_SPEC.match(str(dep)).group(1)
    return _norm(CONDA_TO_PYPI.get(name, name))


def dependency_drift(pyproject: dict, env: dict) -> list[str]:
    "One line per difference between pyproject.toml and environment.yml (empty: they agree)."
    want, have = pyproject_requirements(pyproject), env_requirements(env)
    problems = [f"{n}: in pyproject.toml ({want[n][2]}) but not in environment.yml" for n in sorted(want.keys() - have.keys())]
    problems += [f"{n}: in environment.yml ({have[n][2]}) but not in pyproject.toml (dependencies or {', '.join(EXTRAS)} extras)"
                 for n in sorted(have.keys() - want.keys())]
    names = [n for n, _ in _env_entries(env)]
    problems += [f"{n}: named {names.count(n)} times in environment.yml (conda and pip would both install it)"
                 for n in sorted(set(names)) if names.count(n) > 1]
    for n in sorted(want.keys() & have.keys()):
        (wb, wx, where), (hb, hx, spec) = want[n], have[n]
        if wb != hb: problems.append(f"{n}: lower bound {wb} in pyproject.toml ({where}), {hb} in environment.yml ({spec})")
        if wx != hx: problems.append(f"{n}: extras {sorted(wx)} in pyproject.toml, {sorted(hx)} in environment.yml ({spec})")
    return problems


def _load():
    return tomllib.loads((ROOT / "pyproject.toml").read_text()), yaml.safe_load((ROOT / "environment.yml").read_text())


def test_environment_yml_names_the_dependencies_of_pyproject():
    pyproject, env = _load()
    assert dependency_drift(pyproject, env) == [], "\n".join(dependency_drift(pyproject, env))
    names = pyproject_requirements(pyproject)
    assert {"torch", "jupyterlab", "ipywidgets"} <= names.keys()


def test_environment_yml_is_conda_forge_cuda():
    "PyTorch with CUDA from conda-forge; never the `pytorch` channel or `pytorch-cuda` (no releases after 2.5)."
    _, env = _load()
    assert env["channels"] == ["conda-forge"]
    conda = [str(d) for d in env["dependencies"] if not isinstance(d, dict)]
    assert any(d.startswith("pytorch-gpu") for d in conda)
    assert not any(d.startswith(("pytorch-cuda", "cpuonly", "pytorch::")) for d in conda)
    pip = [line for d in env["dependencies"] if isinstance(d, dict) for line in d.get("pip", [])]
    assert not any(_norm(Requirement(l).name) == "torch" for l in pip if not l.startswith("-")), "torch twice (conda and pip)"


def _remove_from_pyproject(pyproject: dict, name: str) -> dict:
    out = copy.deepcopy(pyproject)
    proj = out["project"]
    proj["dependencies"] = [r for r in proj["dependencies"] if _norm(Requirement(r).name) != name]
    for e in EXTRAS:
        proj["optional-dependencies"][e] = [r for r in proj["optional-dependencies"][e] if _norm(Requirement(r).name) != name]
    return out


def _remove_from_env(env: dict, name: str) -> dict:
    out = copy.deepcopy(env)
    keep = []
    for d in out["dependencies"]:
        if isinstance(d, dict):
            d["pip"] = [l for l in d["pip"] if l.startswith("-") or _norm(Requirement(l).name) != name]
        elif _conda_name(d) == name:
            continue
        keep.append(d)
    out["dependencies"] = keep
    return out


def test_drift_is_caught_when_a_dependency_leaves_one_file_only():
    "Every dependency, removed from either file alone (in-memory copies), gives a drift line naming it."
    pyproject, env = _load()
    names = pyproject_requirements(pyproject)
    assert len(names) > 20
    for name in names:
        for which, (p, e) in {"pyproject.toml": (_remove_from_pyproject(pyproject, name), env),
                              "environment.yml": (pyproject, _remove_from_env(env, name))}.items():
            drift = dependency_drift(p, e)
            assert len(drift) == 1 and drift[0].startswith(f"{name}:"), (which, name, drift)
    # a changed lower bound, a changed extra and a package named twice (conda and pip) are drift too
    twice = copy.deepcopy(env)
    next(d for d in twice["dependencies"] if isinstance(d, dict))["pip"].append("numpy>=1.26")
    assert dependency_drift(pyproject, twice) == ["numpy: named 2 times in environment.yml (conda and pip would both install it)"]
    bumped = copy.deepcopy(pyproject)
    bumped["project"]["dependencies"] = [r.replace("scipy>=1.11", "scipy>=1.12") for r in bumped["project"]["dependencies"]]
    assert dependency_drift(bumped, env) == ["scipy: lower bound 1.12 in pyproject.toml (dependencies), 1.11 in environment.yml (scipy>=1.11)"]
    extra = copy.deepcopy(pyproject)
    extra["project"]["optional-dependencies"]["serving"] = [r.replace("httpx>=", "httpx[http2]>=")
                                                            for r in extra["project"]["optional-dependencies"]["serving"]]
    assert [l.split(":")[0] for l in dependency_drift(extra, env)] == ["httpx"]
    # and the real files were not touched
    assert _load() == (pyproject, env)


def test_conda_specs_are_read_as_conda_writes_them():
    env = {"dependencies": ["python=3.11", "pip", "pytorch-gpu >=2.4", "numpy>=1.26,<3", "pyyaml=6.0.2=py311h*",
                            "matplotlib-base", {"pip": ["--extra-index-url https://download.pytorch.org/whl/cu126",
                                                        "transformers[serving]>=4.56"]}]}
    got = env_requirements(env)
    assert got["torch"][0] == "2.4" and got["numpy"][0] == "1.26" and got["matplotlib"][0] is None
    assert got["pyyaml"][0] is None and got["transformers"][:2] == ("4.56", frozenset({"serving"}))
    assert "python" not in got and "pip" not in got


# ---------------------------------------------------------------------------------------------------------- make lab
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str, timeout: float = 5.0):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    "SIGTERM to the server's process group (make, jupyter), SIGKILL after 20 s; waits until the group is gone."
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        end = time.monotonic() + grace
        while _group_alive(proc.pid) and time.monotonic() < end: time.sleep(0.2)
        if not _group_alive(proc.pid): return


@pytest.mark.timeout(240)
def test_make_lab_serves_the_notebooks(tmp_path):
    if not shutil.which("make"): pytest.skip("make is not installed")
    venv, bin_dir = Path(sys.prefix), Path(sys.executable).parent
    assert (bin_dir / "jupyter-lab").exists(), "JupyterLab is not installed in this environment (a dependency: pip install -e .)"
    port, token = _free_port(), secrets.token_hex(16)
    # scratch Jupyter config/data/runtime folders: no user settings leak in, nothing is written to ~/.jupyter
    env = {**os.environ, **{f"JUPYTER_{k}_DIR": str(tmp_path / k.lower()) for k in ("CONFIG", "DATA", "RUNTIME")}}
    # exactly `make lab`, on this interpreter's environment, never re-installing it (-o: the stamp counts as made)
    cmd = ["make", "-s", "-C", str(ROOT), f"VENV={venv}", "-o", f"{venv}/.installed", "lab", "LAB_IP=127.0.0.1",
           f"LAB_PORT={port}", f"LAB_ARGS=--no-browser --ServerApp.port_retries=0 --IdentityProvider.token={token}"]
    log = tmp_path / "lab.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=ROOT, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 150, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = json.loads(_get(f"{base}/api/status", token, timeout=2)[1])
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.25)
        assert status is not None, f"the server did not answer (exit code {proc.poll()}):\n{log.read_text()[-3000:]}"
        # the contents API lists a paper's notebooks under nbs/papers/<paper>/ (the server's root is the repository)
        listing = json.loads(_get(f"{base}/api/contents/nbs/papers/umad?content=1", token)[1])
        paths = {c["path"] for c in listing["content"]}
        assert "nbs/papers/umad/10_umad.ipynb" in paths, sorted(paths)
        # the kit's kernel: `python3`, this environment's python
        specs = json.loads(_get(f"{base}/api/kernelspecs", token)[1])
        assert specs["default"] == "python3"
        argv = specs["kernelspecs"]["python3"]["spec"]["argv"]
        assert Path(argv[0]).parent == bin_dir, argv
        # JupyterLab itself answers, and its file browser starts in nbs/
        code, page = _get(f"{base}/lab", token, timeout=15)
        assert code == 200 and b"jupyter-config-data" in page
        cfg = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S).group(1))
        assert cfg.get("preferredPath", "").strip("/") == "nbs", cfg.get("preferredPath")
        # a wrong token is refused
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(f"{base}/api/contents/nbs", "not-the-token")
        assert e.value.code == 403
    finally:
        _stop(proc)
    assert not _group_alive(proc.pid), "the lab server is still running"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
