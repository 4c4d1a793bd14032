"""End-to-end tests of `mad-study`: params validation, determinism, interruption and resume, plan, list, cpu profile."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, mad_study

BASELINE = "params/baseline/du_gsm8k.yaml"


def _edit(root: Path, rel: str, change):
    p = root / rel
    d = yaml.safe_load(p.read_text())
    change(d)
    p.write_text(yaml.safe_dump(d))


@pytest.mark.parametrize("change, expect", [
    (lambda d: d["params"].update(n_itmes=5), ["du_gsm8k.yaml", "n_itmes=5", "not a parameter of 09_baseline.ipynb"]),
    (lambda d: d["profiles"]["sim"].update(n_items="many"), ["du_gsm8k.yaml", "n_items='many'", "expected int, got str"]),
    (lambda d: d["params"].update(task="gsm9k"), ["du_gsm8k.yaml", "task='gsm9k'", "unknown task"]),
    (lambda d: d["params"].update(models=["qwen9-7b", "qwen9-7b"]), ["du_gsm8k.yaml", "qwen9-7b", "unknown model"]),
    (lambda d: d.update(parmas={}), ["du_gsm8k.yaml", "parmas", "unknown key"]),
])
def test_bad_params_one_clear_line(project_copy, change, expect):
    _edit(project_copy, BASELINE, change)
    r = mad_study("reproduce", "du_gsm8k", "--profile", "paper" if "qwen9" in str(expect) else "sim")
    if "qwen9" in str(expect):       # paper profile needs a GPU: validate through `plan`, which runs nothing
        r = mad_study("plan", "du_gsm8k", "--profile", "paper")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    for e in expect: assert e in lines[0], lines[0]
    assert not (project_copy.parent / "figures" / "baseline").exists()      # nothing ran


def test_unknown_target_and_profile(project_copy):
    r = mad_study("reproduce", "du_gsm9k", "--profile", "sim")
    assert r.returncode == 2 and "unknown target" in r.stderr and "du_gsm8k" in r.stderr
    r = mad_study("reproduce", "du_gsm8k", "--profile", "fast")
    assert r.returncode == 2 and "unknown profile" in r.stderr


def test_paper_profile_without_gpu_is_refused(scratch):
    r = mad_study("reproduce", "du_gsm8k", "--profile", "paper")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_same_seed_byte_identical_tables(scratch):
    outs = []
    for i in range(2):
        env = {**os.environ, "MAD_STUDY_FIGURES": str(scratch / f"fig{i}"), "MAD_STUDY_RUNS": str(scratch / f"runs{i}")}
        r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", "cache=false", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append({ext: (scratch / f"fig{i}" / "baseline" / f"baseline.{ext}").read_bytes() for ext in ("csv", "md", "png")})
    assert outs[0] == outs[1]
    table = pd.read_csv(scratch / "fig0" / "baseline" / "baseline.csv")
    assert set(table["who"]) == {"a0", "a1", "a2", "majority"} and set(table["round"]) == {0, 1}
    sides = [json.loads((scratch / f"fig{i}" / "baseline" / "baseline.json").read_text()) for i in range(2)]
    side = sides[0]
    assert side["profile"] == "sim" and side["seed"] == 0 and "SYNTHETIC" in side["label"]
    assert sides[0]["params"] == sides[1]["params"]                      # the parameter section does not change
    assert set(side["params"]) >= {"experiment", "profile", "seed", "n_items", "models"}
    assert not set(side["params"]) & {"In", "Out", "get_ipython", "study", "items", "transcript", "plt", "pd"}
    raw = (scratch / "fig0" / "baseline" / "baseline.json").read_text()
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    n = merge_params(experiments()["du_gsm8k"], load_profile("sim"))["n_items"]
    # small: no transcript in it, only the parameters incl. the sim world's agents (~4 kB), the notes (two captions,
    # the verdict and its claims, ~6 kB), the rest (~2 kB) and the item ids, one per line (~31 characters each); no
    # machine path
    assert len(raw) < 16000 + 32 * n and str(scratch) not in raw and str(ROOT) not in raw
    assert len(side["items"]["gsm8k"]) == n                       # the sim profile's n_items (params/baseline)
    index = (scratch / "fig0" / "INDEX.md").read_text()
    assert "| baseline |" in index and "regenerated" in index


def _cache_rows(path: Path) -> int:
    if not path.exists(): return 0
    try:
        with sqlite3.connect(path, timeout=5) as c: return c.execute("SELECT COUNT(*) FROM generations").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_kill_midway_then_resume_recomputes_nothing(scratch):
    slow = "sim_agents={sim-generic: {skill: 0.55, recency: 1.0, latency: 0.05, batch_size: 6}}"
    use = ["-p", "models=[sim-generic, sim-generic, sim-generic]",     # the agents the latency applies to
           "-p", "n_items=40",                                          # (the sim profile's 100: a longer test)
           "-p", "cache=true",                                          # the sim profile runs without the cache
           "--replace-reference"]                                       # overrides, written in the experiment's place
    total = 40 * 3 * 2
    env = {**os.environ, "MAD_STUDY_RUNS": str(scratch / "runs"), "MAD_STUDY_FIGURES": str(scratch / "fig")}
    exe = Path(sys.executable).parent / "mad-study"
    proc = subprocess.Popen([str(exe), "reproduce", "du_gsm8k", "--profile", "sim", "-p", slow, "-p", "temperature=1.0", *use],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    db = scratch / "runs" / "cache" / "generations.sqlite"
    deadline = time.time() + 120
    while time.time() < deadline and _cache_rows(db) < 30: time.sleep(0.2)
    # kill -9 the command and its notebook kernel (jupyter starts kernels in their own session)
    import psutil
    family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    for pid in family:
        try: os.kill(pid, signal.SIGKILL)
        except ProcessLookupError: pass
    proc.wait()
    done = _cache_rows(db)
    time.sleep(1.0)
    assert _cache_rows(db) == done                                 # nothing is still writing
    assert 0 < done < total, done                                  # killed mid-way
    assert not (scratch / "fig" / "baseline" / "baseline.csv").exists()
    # resume: everything finished before the kill comes from the cache
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", slow.replace("0.05", "0.0"), "-p", "temperature=1.0", *use, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    side = json.loads((scratch / "fig" / "baseline" / "baseline.json").read_text())
    assert side["cache"]["hits"] == done and side["cache"]["misses"] == total - done, side["cache"]
    resumed = pd.read_parquet(scratch / "runs" / "sim" / "du_gsm8k" / "debate.parquet")
    # an uninterrupted run, in a fresh cache, gives the same transcript
    env2 = {**os.environ, "MAD_STUDY_RUNS": str(scratch / "runs2"), "MAD_STUDY_FIGURES": str(scratch / "fig2")}
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", slow.replace("0.05", "0.0"), "-p", "temperature=1.0", *use, env=env2)
    assert r.returncode == 0, r.stdout + r.stderr
    fresh = pd.read_parquet(scratch / "runs2" / "sim" / "du_gsm8k" / "debate.parquet")
    pd.testing.assert_frame_equal(resumed, fresh)


def test_failing_experiment_reported_and_others_continue(project_copy):
    # a second experiment whose notebook run fails at run time (a model the sim cannot serve): the first still runs
    bad = project_copy / "params" / "baseline" / "du_broken.yaml"
    bad.write_text(yaml.safe_dump({"artefacts": ["baseline_broken"], "params": {"task": "gsm8k", "n_items": 3, "debate_rounds": 0,
                                                                                  "prompt": "no_such_prompt"}}))
    r = mad_study("reproduce", "baseline", "--profile", "sim")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "du_gsm8k" in r.stdout and "1 experiment(s) failed" in r.stdout and "du_broken" in r.stdout
    assert "unknown prompt set" in r.stdout
    assert (project_copy.parent / "figures" / "baseline" / "baseline.csv").exists()
    # nothing of du_broken ran before: the log does not claim a last good run was kept
    line = next(l for l in r.stdout.splitlines() if l.startswith("du_broken: ") and "FAILED.json" in l)
    assert "there was no earlier run" in line and "kept" not in line, line


def _files(folder: Path) -> dict:
    "Every file under `folder` (hidden folders aside: .previous/, .failed/) with its bytes."
    return {f.relative_to(folder).as_posix(): f.read_bytes() for f in sorted(folder.rglob("*"))
            if f.is_file() and not any(x.startswith(".") for x in f.relative_to(folder).parts)}


def _index_row(figs: Path, artefact: str) -> str:
    return next(l for l in (figs / "INDEX.md").read_text().splitlines() if l.startswith(f"| {artefact} |"))


def test_failed_and_override_runs_never_hide_the_reference(project_copy):
    """Issue 54: a good run; a run with -p seed=1 (its own folder, figures/ untouched); a run that fails midway (a typo
    in the prompt set, caught inside the notebook): the good transcripts, figures, sidecar and index entry stay, the
    failure is recorded beside them and `list` says so, `compare` still reads the good transcripts; then
    --replace-reference writes the override run in the reference's place and its index entry names the override."""
    from mad_study.finished_runs import load_runs
    figs, runs = project_copy.parent / "figures", project_copy.parent / "runs"
    _edit(project_copy, BASELINE, lambda d: d["profiles"]["sim"].update(n_items=3))
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim")
    assert r.returncode == 0, r.stdout + r.stderr
    good_runs, good_figs = _files(runs / "sim" / "du_gsm8k"), _files(figs / "baseline")
    good_row = _index_row(figs, "baseline")
    assert "debate.parquet" in good_runs and "baseline.json" in good_figs and "| regenerated |" in good_row

    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", "seed=1")
    assert r.returncode == 0 and "du_gsm8k@seed=1" in r.stdout, r.stdout + r.stderr
    assert _files(figs / "baseline") == good_figs and _files(runs / "sim" / "du_gsm8k") == good_runs
    side = json.loads((runs / "sim" / "du_gsm8k@seed=1" / "figures" / "baseline" / "baseline.json").read_text())
    assert side["overrides"] == {"seed": 1} and side["transcripts"]["debate"] == "runs/sim/du_gsm8k@seed=1/debate.parquet"

    _edit(project_copy, BASELINE, lambda d: d["params"].update(prompt="no_such_prompt"))
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim")
    assert r.returncode == 1 and "unknown prompt set" in r.stdout, r.stdout + r.stderr
    assert _files(figs / "baseline") == good_figs                               # figures and sidecar untouched
    kept = _files(runs / "sim" / "du_gsm8k")
    assert {k: v for k, v in kept.items() if k != "FAILED.json"} == good_runs   # transcripts untouched
    rec = json.loads(kept["FAILED.json"])
    assert "unknown prompt set" in rec["error"] and rec["profile"] == "sim"
    assert (runs / "sim" / "du_gsm8k" / rec["attempt"] / "09_baseline.ipynb").exists()   # the failed attempt, kept
    row = _index_row(figs, "baseline")
    assert "regenerated; last run FAILED (sim" in row and "runs/sim/du_gsm8k/FAILED.json" in row, row
    assert row.split("|")[-2] == good_row.split("|")[-2]                        # the same files listed
    lst = mad_study("list")
    assert any("baseline" in l and "last run FAILED" in l for l in lst.stdout.splitlines()), lst.stdout
    assert load_runs(["du_gsm8k"], profile="sim")["item_id"].nunique() == 3     # compare finds the good transcripts

    _edit(project_copy, BASELINE, lambda d: d["params"].update(prompt="du_gsm8k"))
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", "seed=1", "--replace-reference")
    assert r.returncode == 0 and "an earlier run's outputs moved to" in r.stdout, r.stdout + r.stderr
    assert json.loads((figs / "baseline" / "baseline.json").read_text())["overrides"] == {"seed": 1}
    row = _index_row(figs, "baseline")
    assert "regenerated with -p seed=1 |" in row and "FAILED" not in row, row
    assert not (runs / "sim" / "du_gsm8k" / "FAILED.json").exists() and not list((runs / "sim" / "du_gsm8k").glob(".staging*"))


def test_backend_that_raises_midway_keeps_the_last_good_run(project_copy):
    "A run whose backend raises after some generations (here: an injected error in the notebook) leaves no trace but FAILED.json."
    import nbformat
    figs, runs = project_copy.parent / "figures", project_copy.parent / "runs"
    _edit(project_copy, BASELINE, lambda d: d["profiles"]["sim"].update(n_items=2))
    assert mad_study("reproduce", "du_gsm8k", "--profile", "sim").returncode == 0
    good_runs, good_figs = _files(runs / "sim" / "du_gsm8k"), _files(figs / "baseline")
    nb_path = project_copy / "nbs/papers/baseline/09_baseline.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    at = max(i for i, c in enumerate(nb.cells) if "save_transcript" in c.source or "debate(" in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell("raise RuntimeError('the server went away')"))
    nbformat.write(nb, nb_path)
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim")
    assert r.returncode == 1 and "the server went away" in r.stdout, r.stdout + r.stderr
    assert _files(figs / "baseline") == good_figs
    assert {k: v for k, v in _files(runs / "sim" / "du_gsm8k").items() if k != "FAILED.json"} == good_runs


def test_plan_counts_what_a_run_makes(scratch):
    "`plan`'s generations equal the transcript rows of a real sim run (Du et al.'s debate, a small slice)."
    r = mad_study("plan", "du_gsm8k", "--profile", "sim", "-p", "n_items=5")
    assert r.returncode == 0, r.stderr
    row = next(l for l in r.stdout.splitlines() if l.startswith("du_gsm8k "))
    planned = int(row.split()[2].replace(",", ""))
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", "-p", "n_items=5", "-p", "cache=false")
    assert r.returncode == 0, r.stdout + r.stderr
    tr = pd.read_parquet(scratch / "runs" / "sim" / "du_gsm8k@n_items=5" / "debate.parquet")
    assert planned == len(tr) == 5 * 3 * 2, (planned, len(tr))


def test_cpu_profile_changes_are_printed(scratch):
    r = mad_study("plan", "du_gsm8k", "--profile", "cpu")
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("du_gsm8k: profile 'cpu' sets"))
    assert "temperature: 1.0 -> 0.7" in line and "n_items: 100 -> 4" in line and "smollm2-135m-instruct" in line, line


def test_plan_and_list(scratch):
    r = mad_study("plan", "du_gsm8k", "--profile", "paper")
    assert r.returncode == 0, r.stderr
    assert "600" in r.stdout and "qwen2.5-7b-instruct" in r.stdout and "GB" in r.stdout   # 100 items x 3 agents x 2 rounds
    r = mad_study("list")
    assert r.returncode == 0 and "baseline" in r.stdout and "umad_fig1" in r.stdout and "rumad_tab2" in r.stdout


def test_cpu_profile_runs_the_embedded_model(scratch):
    "The real LLM path end to end: SmolLM2-135M in 4-bit on the CPU, one item, two agents, short answers."
    r = mad_study("reproduce", "du_gsm8k", "--profile", "cpu", "-p", "n_items=1", "-p", "max_new_tokens=24",
                  "-p", "models=[smollm2-135m-instruct, smollm2-135m-instruct]", "--replace-reference", timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    tr = pd.read_parquet(scratch / "runs" / "cpu" / "du_gsm8k" / "debate.parquet")
    assert len(tr) == 4 and set(tr["model"]) == {"smollm2-135m-instruct"}
    assert tr["completion_tokens"].gt(0).all() and tr["logprob_mean"].notna().all()
    side = json.loads((scratch / "figures" / "baseline" / "baseline.json").read_text())
    assert side["profile"] == "cpu" and "Embedded" in side["label"]


# absolute paths of the machine that made a file: the checkout, a home, /tmp, /root, a Windows drive
_MACHINE_PATH = __import__("re").compile(rb"(?:/home/|/Users/|/root/|/tmp/|/work/|/private/var/|[A-Z]:\\\\Users)")


def test_committed_figures_hold_no_machine_path():
    "No file under figures/ (tables, sidecars, INDEX.md, images) holds an absolute path of the machine that made it."
    here = str(ROOT).encode()
    bad = []
    for f in sorted((ROOT / "figures").rglob("*")):
        if f.is_file():
            b = f.read_bytes()
            if here in b or _MACHINE_PATH.search(b): bad.append(str(f.relative_to(ROOT)))
    assert not bad, bad
