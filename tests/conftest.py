"""Shared fixtures: every test runs against a scratch runs/ and figures/ folder, never the repository's."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# a test that does not ask for `scratch` still never writes into the project's runs/ or figures/ (e.g. the subset files
# `load_items` saves): each pytest process gets its own scratch folders, removed when it exits
import atexit, tempfile
_SCRATCH = Path(tempfile.mkdtemp(prefix="mad-study-pytest-"))
atexit.register(shutil.rmtree, _SCRATCH, True)
os.environ.setdefault("MAD_STUDY_RUNS", str(_SCRATCH / "runs"))
os.environ.setdefault("MAD_STUDY_FIGURES", str(_SCRATCH / "figures"))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    "A scratch runs/ and figures/ folder (env vars the kit reads), removed after the test."
    runs, figs = tmp_path / "runs", tmp_path / "figures"
    monkeypatch.setenv("MAD_STUDY_RUNS", str(runs))
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(figs))
    return tmp_path


@pytest.fixture
def project_copy(tmp_path, monkeypatch):
    "A copy of the project's params/ and nbs/ under a scratch root (MAD_STUDY_ROOT), to test edited params files."
    root = tmp_path / "proj"
    root.mkdir()
    for d in ("params", "nbs"):
        shutil.copytree(ROOT / d, root / d)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    monkeypatch.setenv("MAD_STUDY_ROOT", str(root))
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(tmp_path / "figures"))
    return root


def mad_study(*args, env=None, timeout=600, **kw):
    "Run the `mad-study` command (this interpreter's) and return the CompletedProcess."
    exe = Path(sys.executable).parent / "mad-study"
    return subprocess.run([str(exe), *args], capture_output=True, text=True,
                          timeout=timeout, env=env or os.environ.copy(), cwd=kw.pop("cwd", ROOT), **kw)


def pytest_report_header(config):
    "The CPU and bitsandbytes' 4-bit CPU paths on it: the kit's default (dequantize) and whether the bf16 kernel exists here."
    from mad_study.backends import cpu_description, cpu_has_bf16_kernel
    other = ("the bf16-kernel tests run too" if cpu_has_bf16_kernel()
             else "bitsandbytes' bf16 kernel is not available here: its tests check the shape rule through plain torch")
    return [f"CPU: {cpu_description()}; 4-bit CPU path of the kit: dequantize (float32); {other}"]
