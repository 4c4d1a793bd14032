"""Issue 41, a new study in its first hour: each silent mistake is now an error, a one-line warning, or correct."""
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, mad_study
from mad_study.core import Sampling


def _one_line(r):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("profile", ["sim", "cpu"])
@pytest.mark.parametrize("override, expect", [
    ("models=[qwen2.5-8b-instruct, qwen2.5-8b-instruct]", ["command line (-p)", "qwen2.5-8b-instruct", "unknown model"]),
    ("models=[qwen2.5-7b-instruct]", ["command line (-p)", "models=", "at least two agents, this gives 1"]),
    ("task=gsm9k", ["command line (-p)", "task='gsm9k'", "unknown task"]),
])
def test_unknown_model_one_agent_unknown_task_refused_in_every_profile(scratch, profile, override, expect):
    "`plan` validates like `reproduce` and runs nothing: one line on stderr naming the source and the value, exit 2."
    r = mad_study("plan", "du_gsm8k", "--profile", profile, "-p", override)
    assert r.returncode == 2, r.stdout + r.stderr
    line = _one_line(r)
    for e in expect: assert e in line, line
    assert line.count("unknown task") <= 1 and "du_gsm8k.yaml" not in line       # blamed on -p, once


def test_madc_one_agent_refused(scratch):
    r = mad_study("plan", "madc_fig1", "--profile", "sim", "-p", "n_agents=1")
    assert r.returncode == 2 and "n_agents=1" in _one_line(r) and "command line (-p)" in r.stderr


def test_identical_greedy_agents_warned_in_one_line(scratch):
    r = mad_study("plan", "du_gsm8k", "--profile", "cpu", "-p", "temperature=0.0")
    assert r.returncode == 0, r.stdout + r.stderr
    line = _one_line(r)
    assert line.startswith("mad-study: warning: command line (-p): temperature=0.0: all 3 agents") and "greedy" in line
    r = mad_study("plan", "du_gsm8k", "--profile", "cpu", "-p", "temperature=0.7")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


# ------------------------------------------------------------------ the README's "Your own study", as written
def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _project_env(**extra) -> dict:
    "The environment of someone's own project: none of the kit's output variables (conftest sets them for the suite)."
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("MAD_STUDY_ROOT", "MAD_STUDY_RUNS", "MAD_STUDY_FIGURES")}
    return {**env, **extra}


def _venv() -> Path:
    "The kit's virtual environment: the checkout's .venv, else the one running these tests."
    import sys
    return ROOT / ".venv" if (ROOT / ".venv").exists() else Path(sys.executable).parent.parent


def test_readme_your_own_study_runs_as_written(tmp_path):
    import re
    import subprocess
    sec = _readme_section("Your own study")
    code = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    cmds = re.search(r"```bash\n(.*?)```", sec, re.S).group(1)
    assert 8 <= len(code.strip().splitlines()) + len(cmds.strip().splitlines()) <= 30
    for name in ("Study", "run_params", "save_table"):                     # registering a study, documented
        assert name in sec, name
    (tmp_path / "study.py").write_text(code)
    (tmp_path / ".venv").symlink_to(_venv())                  # the commands use .venv/bin/ paths, as a user's checkout
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", cmds], cwd=tmp_path, env=_project_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "majority_only vs fully_connected" in r.stdout and "reference: fully_connected" in r.stdout
    assert "@software{madstudy" in r.stdout and "version = {" in r.stdout and "du2024debate" in r.stdout
    table = pd.read_csv(tmp_path / "runs" / "compare.csv")                  # outputs in the project folder
    assert sorted(table["method"]) == ["fully_connected", "majority_only"] and (table["n_items"] == 30).all()
    side = json.loads((tmp_path / "figures" / "mine" / "mine_compare.json").read_text())
    assert side["transcripts"] == {"fully_connected": "runs/sim/mine/fully_connected.parquet",
                                   "majority_only": "runs/sim/mine/majority_only.parquet"}
    assert side["models"] and side["overrides"] == {} and "fully_connected" in side["notes"]["caption"]


def test_installed_kit_writes_into_the_project_not_the_package(tmp_path):
    """Issue 54: the kit installed NOT editable (pip install --target) into a scratch project, an own small sim study run
    there: its runs and figures are in the project folder and nothing is written into the installed package."""
    import shutil
    import subprocess
    import sys
    src, site, proj = tmp_path / "src", tmp_path / "site", tmp_path / "proj"
    for f in ("pyproject.toml", "README.md", "LICENSE"):                    # a clean source tree: the build writes there
        if (ROOT / f).exists():
            shutil.copy(ROOT / f, src / f) if src.exists() else (src.mkdir(), shutil.copy(ROOT / f, src / f))
    shutil.copytree(ROOT / "mad_study", src / "mad_study", ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                        "--quiet", "--target", str(site), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    before = sorted(str(p.relative_to(site)) for p in site.rglob("*"))
    proj.mkdir()
    sec = _readme_section("Your own study")
    import re
    (proj / "study.py").write_text(re.search(r"```python\n(.*?)```", sec, re.S).group(1))
    env = _project_env(PYTHONPATH=str(site))
    where = subprocess.run([sys.executable, "-c", "import mad_study; print(mad_study.__file__)"], cwd=proj, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip() == str(site / "mad_study" / "__init__.py"), where.stdout + where.stderr
    r = subprocess.run([sys.executable, "study.py"], cwd=proj, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    compare = "from mad_study.cli import main; raise SystemExit(main(['compare', 'runs/sim/mine', '--csv', 'c.csv']))"
    r = subprocess.run([sys.executable, "-c", compare], cwd=proj, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (proj / "runs" / "sim" / "mine" / "majority_only.parquet").exists() and (proj / "c.csv").exists()
    assert (proj / "figures" / "mine" / "mine_compare.csv").exists()
    assert sorted(str(p.relative_to(site)) for p in site.rglob("*")) == before      # nothing written into the package
    assert not (ROOT / "figures" / "mine").exists() and not (ROOT / "runs" / "sim" / "mine").exists()
    # the papers' experiments are not in a plain install: list / plan / reproduce say where they live
    for cmd in (["list"], ["plan", "all"], ["reproduce", "du_gsm8k", "--profile", "sim"]):
        call = f"from mad_study.cli import main; raise SystemExit(main({cmd!r}))"
        r = subprocess.run([sys.executable, "-c", call], cwd=proj, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and "live in the kit's source checkout" in r.stderr, (cmd, r.stdout + r.stderr)
        assert "pip install -e" in r.stderr and "--root" in r.stderr and str(proj / "params") in r.stderr, r.stderr


def test_own_params_folder_sees_the_kits_profiles_and_papers(tmp_path):
    """Issue 54 review: a project's own params/ holds only its own registry entry and experiment file, and `plan` still
    finds the kit's profiles and papers beside its own experiment (whose notebook is the project's own)."""
    import nbformat
    proj = tmp_path / "proj"
    (proj / "params" / "my_study").mkdir(parents=True)
    (proj / "nbs").mkdir()
    nb = nbformat.v4.new_notebook()
    par = nbformat.v4.new_code_cell('experiment = "x"\nprofile = "sim"\nn_items = 5\n'
                                    'models = ["qwen2.5-7b-instruct", "qwen2.5-7b-instruct"]')
    par.metadata["tags"] = ["parameters"]
    nb.cells = [par]
    nbformat.write(nb, proj / "nbs" / "my_study.ipynb")
    (proj / "params" / "artefacts.yaml").write_text(
        "my_study: {paper: My study, notebook: nbs/my_study.ipynb, artefacts: [{id: x, kind: table, title: mine}]}\n")
    (proj / "params" / "my_study" / "x.yaml").write_text("params: {n_items: 4}\n")
    env = _project_env()
    r = mad_study("plan", "x", "du_gsm8k", "--profile", "sim", cwd=proj, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {l.split()[0] for l in r.stdout.splitlines() if l.split()} >= {"x", "du_gsm8k"}, r.stdout
    r = mad_study("plan", "x", "--profile", "laptop", cwd=proj, env=env)             # the folders searched, named
    err = _one_line(r)
    assert r.returncode == 2 and f"{proj / 'params' / 'profiles'}, {ROOT / 'params' / 'profiles'}" in err, err
    assert "choose from: " in err and "sim" in err.split("choose from: ")[1], err
    assert not (ROOT / "runs" / "sim" / "x").exists()


# ------------------------------------------------------------------ compare for the user's own runs
def _two_runs(runs_root, profile_dirs=("sim", "cpu")):
    from mad_study.core import Item, save_transcript
    from mad_study.debate import FullyConnected, OrderedPeers, make_agents, run_debate
    from mad_study.sim import SimBackend
    items = [Item(f"x/{i}", "my_sums", f"What is {i} + {i}?", str(2 * i), "number") for i in range(12)]
    ag, be = make_agents(["s"] * 3), {"s": SimBackend("s", skill=0.6)}
    for prof in profile_dirs:
        for proto, folder in ((FullyConnected(), "a"), (OrderedPeers("truth_last"), "b")):
            tr = run_debate(items, ag, be, protocol=proto, sampling=Sampling(temperature=1.0), progress=False, experiment="mine")
            save_transcript(tr, runs_root / prof / "mine" / folder / "debate.parquet")


def test_compare_profiles_folder_labels_and_stale_outputs(scratch):
    from mad_study.core import ConfigError, runs_dir
    from mad_study.run_outputs import set_aside
    from mad_study.finished_runs import compare_runs, load_runs
    _two_runs(runs_dir())
    with pytest.raises(ConfigError, match="several profiles .*--profile"):     # cpu and sim are never pooled
        compare_runs(["mine"])
    with pytest.raises(ConfigError, match="no --reference given"):          # never the first condition by default
        compare_runs(["mine"], profile="sim", by_file=True)
    table, caption, res = compare_runs(["mine"], profile="sim", by_file=True, reference="a/debate")
    assert sorted(table["method"]) == ["a/debate", "b/debate"]              # both files are debate.parquet: by folder
    n = len(load_runs(["mine"], profile="cpu"))
    set_aside(runs_dir() / "cpu" / "mine" / "a")                              # an earlier run's outputs, moved aside
    with pytest.raises(ConfigError):                                          # ... are never read again
        load_runs([str(runs_dir() / "cpu" / "mine" / "a")])
    assert len(load_runs(["mine"], profile="cpu")) == n // 2


def test_hand_made_transcript_and_other_tools_export_reach_every_metric(tmp_path):
    import csv
    from mad_study import trajectory as T
    from mad_study.user_data import load_debate_export
    from mad_study.voting import vote_table
    rows = [dict(id=q, iteration=r, speaker=f"agent_{a}", output=f"I think it is {4 if (a or r > 1) else 5}.", label="4")
            for q in ("q1", "q2") for r in (1, 2, 3) for a in range(3)]
    with open(tmp_path / "export.csv", "w", newline="") as f:                 # the csv module, as another tool writes it
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    tr = load_debate_export(tmp_path / "export.csv", task="their_arith", fmt="number")
    assert tr["round"].tolist()[:3] == [0, 0, 0] and tr["item_id"].iloc[0] == "their_arith/q1"
    s = T.trajectory_summary(tr).iloc[0]
    assert s["corrected_rate"] > 0 and s["consensus"] == 1.0
    assert vote_table(tr[tr["round"] == 2])["correct"].all()              # the row's own format, no registry
    hand = tr[["item_id", "agent", "round", "answer", "gold", "fmt"]]           # the documented required columns only
    assert len(T.agent_turns(hand)) == len(T.agent_turns(tr))
    with pytest.raises(Exception, match="missing required column 'agent'"):
        T.item_outcomes(hand.drop(columns="agent"))
    with pytest.raises(Exception, match="task='their_arith'"):
        T.first_correct(tr.drop(columns="fmt"))


def test_compare_names_each_runs_items_and_the_dropped_ones(scratch):
    from mad_study.core import load_transcript, runs_dir, save_transcript
    from mad_study.cli import main
    _two_runs(runs_dir(), profile_dirs=("sim",))
    b = runs_dir() / "sim" / "mine" / "b" / "debate.parquet"
    t = load_transcript(b)
    save_transcript(t[t["item_id"] != "x/3"], b)                 # one condition lacks an item
    import contextlib, io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compare", "mine", "--profile", "sim", "--by-file", "--reference", "a/debate",
                     "--csv", str(scratch / "c.csv")]) == 0
    s = out.getvalue()
    assert "items: a/debate: 12, b/debate: 11" in s and "dropped (not in every condition): 1: x/3" in s, s


def test_compare_flags_earlier_files_and_never_picks_an_own_protocol_as_reference(scratch):
    import os
    import time
    from mad_study.core import runs_dir
    _two_runs(runs_dir(), profile_dirs=("sim",))
    old = runs_dir() / "sim" / "mine" / "b" / "debate.parquet"
    os.utime(old, (time.time() - 3 * 86400,) * 2)                         # an earlier study's file, left in the folder
    r = mad_study("compare", "mine", "--profile", "sim", "--by-file", "--csv", str(scratch / "c.csv"))
    assert r.returncode == 2 and "no --reference given" in r.stderr and "a/debate" in r.stderr, r.stdout + r.stderr
    r = mad_study("compare", "mine", "--profile", "sim", "--by-file", "--reference", "a/debate", "--csv", str(scratch / "c.csv"))
    assert r.returncode == 0, r.stdout + r.stderr
    warn = [l for l in r.stderr.splitlines() if "written well before" in l]
    assert len(warn) == 1 and "runs/sim/mine/b/debate.parquet" in warn[0] and "UTC" in warn[0], r.stderr


def test_own_experiment_as_the_readme_says_is_planned_and_run(project_copy):
    """The README's recipe: a notebook with a `parameters` cell, an artefacts.yaml entry and a params file; reproduce runs
    it. `plan` counts what the run makes: the notebook's own defaults (its models, its two protocols) included."""
    import nbformat
    import os
    import yaml
    nb = nbformat.v4.new_notebook()
    par = nbformat.v4.new_code_cell('experiment = "my_exp"\nprofile = "sim"\nn_items = 5\ndebate_rounds = 1\n'
                                    'models = ["qwen2.5-7b-instruct", "qwen2.5-7b-instruct", "qwen2.5-7b-instruct"]\n'
                                    'protocols = ["fully_connected", "truth_last"]')
    par.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "from mad_study.core import Item\n"
        "from mad_study.debate import FullyConnected, OrderedPeers, make_agents, run_debate\n"
        "from mad_study.report import Study, run_params\n"
        "from mad_study.sim import SimBackend\n"
        "study = Study(run_params('my_study.ipynb', globals()), paper='my_study')\n"
        "assert all(m.startswith('sim-') for m in models), models   # the sim profile mapped the notebook's defaults\n"
        "items = [Item(f'mine/{i}', 'my_sums', f'What is {i} + {i}?', str(2 * i), 'number') for i in range(n_items)]\n"
        "for name in protocols:\n"
        "    proto = FullyConnected() if name == 'fully_connected' else OrderedPeers(name)\n"
        "    tr = run_debate(items, make_agents(models), {m: SimBackend(m) for m in set(models)}, protocol=proto,\n"
        "                    debate_rounds=debate_rounds, progress=False)\n"
        "    study.save_transcript(tr, proto.name)")
    nb.cells = [par, body]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, project_copy / "nbs" / "my_study.ipynb")
    reg = yaml.safe_load((project_copy / "params" / "artefacts.yaml").read_text())
    reg["my_study"] = {"paper": "My study", "notebook": "nbs/my_study.ipynb",
                       "artefacts": [{"id": "my_exp", "kind": "table", "title": "mine"}]}
    (project_copy / "params" / "artefacts.yaml").write_text(yaml.safe_dump(reg))
    (project_copy / "params" / "my_study").mkdir()
    (project_copy / "params" / "my_study" / "my_exp.yaml").write_text("params: {n_items: 4}\n")
    r = mad_study("plan", "my_exp", "--profile", "sim")
    assert r.returncode == 0, r.stdout + r.stderr
    planned = int(next(l for l in r.stdout.splitlines() if l.startswith("my_exp ")).split()[2].replace(",", ""))
    r = mad_study("reproduce", "my_exp", "--profile", "sim")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = os.path.join(os.environ["MAD_STUDY_RUNS"], "sim", "my_exp")
    made = sum(len(pd.read_parquet(os.path.join(run, f))) for f in os.listdir(run) if f.endswith(".parquet"))
    assert planned == made == 4 * 3 * 2 * 2, (planned, made)             # items x agents x rounds x protocols
    r = mad_study("reproduce", "my_exp", "--profile", "sim", "-p", "n_items=3")      # overrides: a folder of its own
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    tr = pd.read_parquet(os.path.join(run + "@n_items=3", "fully_connected.parquet"))
    assert tr["item_id"].nunique() == 3 and set(tr["fmt"]) == {"number"}
    assert pd.read_parquet(os.path.join(run, "fully_connected.parquet"))["item_id"].nunique() == 4   # untouched
    r = mad_study("reproduce", "my_exp", "--profile", "sim", "-p", "n_items=2", "--replace-reference")
    assert r.returncode == 0 and "an earlier run's outputs moved to" in r.stdout, r.stdout + r.stderr
    assert pd.read_parquet(os.path.join(run, "fully_connected.parquet"))["item_id"].nunique() == 2


# ------------------------------------------------------------------ what the agent sees; what a served run records
def test_tags_a_template_cannot_render_are_an_error_and_peer_view_is_what_is_shown():
    from mad_study.core import ConfigError, Generation, Item
    from mad_study.debate import FullyConnected, make_agents, run_debate
    from mad_study.prompts import get_prompt
    from mad_study.protocols import GroupDebate, run_protocol
    items = [Item("t/0", "mine", "What is 2 + 2?", "4", "number")]

    class Sent:
        def __init__(self): self.msgs = []
        def generate(self, reqs):
            self.msgs += [r.messages[-1]["content"] for r in reqs]
            return [Generation(text=f"Full reasoning of {r.meta['agent']}. The answer is 4.") for r in reqs]

    class MajorityTag(FullyConnected):
        def tags(self, ctx, agent, peers): return tuple("[majority] " for _ in peers)
    with pytest.raises(ConfigError, match=r"no \{tag\}"):
        run_debate(items, make_agents(["x"] * 3), {"x": Sent()}, protocol=MajorityTag(), progress=False)

    class AnswersOnly(FullyConnected):
        def peer_view(self, ctx, viewer, peer): return f"{peer} answered {ctx.last(peer)['answer']}."
    b = Sent()
    run_debate(items, make_agents(["x"] * 3), {"x": b}, protocol=AnswersOnly(), progress=False)
    assert all("answered 4." in m and "Full reasoning" not in m for m in b.msgs[3:])
    b = Sent()                                             # GroupDebate through the same hook: groups of one see answers only
    run_protocol(items, make_agents(["x"] * 3), {"x": b}, GroupDebate((1, 1, 1)), prompt=get_prompt("auto", "number"),
                 progress=False)
    assert all("Full reasoning" not in m and "another group" in m for m in b.msgs[3:]), b.msgs[3]


def test_served_run_records_what_the_server_ran():
    from mad_study.cite import provenance_refs
    from mad_study.report import Study
    p = {"experiment": "e", "profile": "cpu", "quant": "nf4", "backend": "openai", "base_url": "http://127.0.0.1:1/v1",
         "served_model": "/srv/m"}
    meta = Study(p, "baseline").provenance()
    assert meta["params"]["quant"] == "unknown" and "dettmers2023qlora" not in provenance_refs(meta)
    meta = Study({**p, "served_quant": "nf4"}, "baseline").provenance()
    assert meta["params"]["quant"] == "nf4" and "dettmers2023qlora" in provenance_refs(meta)
