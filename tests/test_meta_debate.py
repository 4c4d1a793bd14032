"""Tests of Meta-Debate (mad_study.meta_debate) and the role frameworks it runs on (mad_study.roles, mad_study.sandbox):
verdict parsing (good, malformed, hostile: never evaluated), review parsing (unreadable -> missing, counted),
assign_roles on hand-made score arrays (ties, one agent in several roles, missing reviews), the program-of-thought
sandbox (loop, memory bomb, network, writes outside its folder, fork bomb, a correct program) and a debate that goes
on after a hostile program, the experiment files and planners, and the synthetic-agent claim: with skills that differ
by role and question, Meta-Debate beats every uniform assignment and the mean of random ones; with identical
role-blind agents the advantage disappears."""
import os
from pathlib import Path
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mad_study.core import ConfigError, Generation, Item
from mad_study.meta_debate import (PAPER_CRITERIA, assign_roles, framework_roles, meta_debate, parse_review,
                                   random_assignment, run_framework, suitability, uniform_assignment)
from mad_study.roles import RoleSimBackend, parse_verdict, run_dmad, run_mad
from mad_study.sandbox import NOBODY, os_isolation_available, run_program
from conftest import mad_study


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(tmp_path / "figures"))


IT = Item("t/0", "t", "What is 2+2?", "B", "option", ("3", "4", "5", "6"))


# ---------------------------------------------------------------- verdicts
def test_verdict_good():
    v = parse_verdict('{"Whether there is a preference": "Yes", "Supported Side": "Negative", "Reason": "r", "debate_answer": "(B)"}', IT)
    assert (v.status, v.answer, v.preference, v.side) == ("ok", "B", True, "Negative")
    assert parse_verdict('The verdict:\n```json\n{"Reason": "x", "debate_answer": "4"}\n```', IT).answer == "B"


@pytest.mark.parametrize("text,status", [
    ('{"Whether there is a preference": "No", "debate_answer": ""}', "no_answer"),
    ('{"debate_answer": "neither"}', "unreadable_answer"),
    ("I support the negative side.", "malformed"),
    ('{"debate_answer": "B"', "malformed"),
    ("{'debate_answer': 'B'}", "malformed"),          # a Python literal is not JSON
    ("", "malformed"), (None, "malformed"), ("[1, 2, 3]", "malformed"),
])
def test_verdict_malformed(text, status):
    assert parse_verdict(text, IT).status == status


def test_verdict_hostile_is_never_evaluated(tmp_path):
    target = tmp_path / "pwned"
    for text in [f'__import__("pathlib").Path("{target}").write_text("x")',
                 f'{{"debate_answer": __import__("pathlib").Path("{target}").write_text("x")}}',
                 f'{{"debate_answer": "B", "x": {{"y": ' * 200]:          # deep nesting: no recursion crash
        v = parse_verdict(text, IT)
        assert v.status == "malformed"
    assert not target.exists()


def test_malformed_moderator_goes_to_judge():
    b = {"a": RoleSimBackend("a", parse_fail=0.0), "bad": RoleSimBackend("bad", verdict_fail=1.0)}
    items = [Item(f"s/{i}", "s", f"q{i}", "ABCD"[i % 4], "option", ("w", "x", "y", "z")) for i in range(8)]
    tr, out = run_mad(items, {"affirmative": "a", "negative": "a", "moderator": "bad"}, b, max_rounds=2)
    assert (out["malformed"] == 3).all() and (out["decided_by"] == "judge_text").all() and out["answer"].notna().all()
    assert set(tr.loc[tr["agent"] == "judge", "round"]) == {3}


# ---------------------------------------------------------------- reviews and assignment
def test_parse_review_missing_is_nan_not_zero():
    s = parse_review("Agent 1: Accuracy: 5/5, Technical Depth: 4/5\nAgent 2: no idea", 3, [c for c, _ in PAPER_CRITERIA])
    assert s[0] == 4.5 and np.isnan(s[1]) and np.isnan(s[2])
    assert np.isnan(parse_review("All three are fine.", 3)).all()


def test_assign_roles_hand_made():
    # evaluator x role x agent
    S = np.array([[[5, 3, 1], [2, 4, 4], [1, 1, 2]],
                  [[4, 3, 2], [3, 5, 3], [1, 2, 2]]], float)
    assert assign_roles(S, ["aff", "neg", "mod"], ["x", "y", "z"]) == {"aff": "x", "neg": "y", "mod": "z"}
    one = np.array([[[5, 2], [4, 3], [5, 1]]], float)             # one agent wins every role
    assert assign_roles(one, ["r1", "r2", "r3"], ["x", "y"]) == {"r1": "x", "r2": "x", "r3": "x"}
    tie = np.array([[[2, 4, 4]], [[2, 4, 4]]], float)             # tie between y and z: the first listed
    assert assign_roles(tie, ["r"], ["x", "y", "z"]) == {"r": "y"}
    assert assign_roles(tie[:, :, ::-1], ["r"], ["z", "y", "x"]) == {"r": "z"}
    miss = np.array([[[np.nan, 3, 3]], [[5, np.nan, 3]], [[np.nan, 4, np.nan]]])
    mean, n = suitability(miss)
    np.testing.assert_allclose(mean[0], [5.0, 3.5, 3.0]); assert n[0].tolist() == [1, 2, 2]
    assert assign_roles(miss, ["r"], ["x", "y", "z"]) == {"r": "x"}
    assert assign_roles(np.full((3, 1, 3), np.nan), ["r"], ["x", "y", "z"]) == {"r": "x"}
    with pytest.raises(ConfigError, match="shape"): assign_roles(np.zeros((3, 3)))


def test_frameworks_and_baselines():
    assert framework_roles("mad") == ("affirmative", "negative", "moderator")
    assert framework_roles("dmad") == ("cot", "step_back", "pot")
    with pytest.raises(ConfigError, match="framework"): framework_roles("chateval")
    assert uniform_assignment("mad", "m") == {"affirmative": "m", "negative": "m", "moderator": "m"}
    draws = {tuple(random_assignment("dmad", ["a", "b", "c"], s).values()) for s in range(20)}
    assert len(draws) > 8


# ---------------------------------------------------------------- sandbox
def test_sandbox_correct_program():
    r = run_program("import math\nprint(math.factorial(5))")
    assert (r.status, r.stdout.strip()) == ("ok", "120")


def test_sandbox_faults():
    t0 = time.monotonic()
    assert run_program("while True: pass", timeout=2).status == "timeout"
    assert time.monotonic() - t0 < 6
    assert run_program("x = bytearray(16 * 1024**3)", memory_mb=512).status == "memory"
    r = run_program("import socket\nsocket.socket().connect(('1.1.1.1', 53))\nprint('connected')", preload=("socket",))
    assert r.status == "error" and "connected" not in r.stdout
    target = f"/tmp/mad-test-escape-{os.getpid()}"
    r = run_program(f"open({target!r}, 'w').write('x')")
    assert r.status == "error" and not os.path.exists(target)
    assert run_program("import os\nwhile True: os.fork()", timeout=3).status == "error"
    assert run_program("raise SystemExit(3)").status == "error"


@pytest.mark.skipif(not os_isolation_available(), reason="OS isolation needs root on Linux")
def test_sandbox_os_layers_alone():
    r = run_program("import socket\nsocket.socket().connect(('1.1.1.1', 53))", preload=("socket",), guard=False)
    assert r.status == "error" and "unreachable" in r.error.lower()
    target = f"/tmp/mad-test-escape2-{os.getpid()}"
    r = run_program(f"open({target!r}, 'w').write('x')", guard=False)
    if "tmpfs:/tmp" in r.layers:
        assert not os.path.exists(target)                  # it wrote into a private tmpfs, gone at exit
    elif os.path.exists(target):                           # this Python lives under /tmp, which stays visible
        os.remove(target)
    mine = str(Path(__file__).parent / f"escape-{os.getpid()}.txt")         # a root-owned folder: nobody may not write
    r = run_program(f"open({mine!r}, 'w').write('x')", guard=False)
    assert r.status == "error" and ("PermissionError" in r.error or "FileNotFoundError" in r.error) and not os.path.exists(mine)
    mark = f"mad-fork-bomb-{os.getpid()}"          # the bomb's processes carry it (uid nobody is shared by every sandbox)
    r = run_program("import os, sys\nwhile True:\n    if os.fork() == 0: os.execv(sys.executable, [sys.executable, '-S', "
                    f"'-c', 'import time; time.sleep(30)', {mark!r}])", timeout=3, guard=False, nproc=16)
    assert r.status in ("timeout", "error")
    for _ in range(30):
        left = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout.split()
        if not left: break
        time.sleep(0.1)
    assert left == []


class _Scripted:
    "A backend whose PoT agent writes a hostile program (an infinite loop) and states an answer in prose."
    backend_id = "scripted"
    def __init__(self, program): self.program = program
    def generate(self, reqs):
        out = []
        for r in reqs:
            if r.meta["role"] == "pot": t = f"```python\n{self.program}\n```\nSo the answer is (B)."
            else: t = "Step by step, the answer is (B)."
            out.append(Generation(text=t, prompt_tokens=10, completion_tokens=10))
        return out


@pytest.mark.parametrize("program,status", [("while True: pass", "timeout"), ("x = bytearray(16 * 1024**3)", "memory"),
                                            ("print(['A', 'B'][1])", "ok")])
def test_dmad_goes_on_after_a_hostile_program(program, status):
    tr, out, pot = run_dmad([IT], {"cot": "s", "step_back": "s", "pot": "s"}, {"s": _Scripted(program)}, rounds=2,
                            pot_timeout=1, pot_memory_mb=512)
    assert len(tr) == 6 and out["answer"].tolist() == ["B"]
    assert pot["status"].tolist() == [status, status]
    assert pot["fallback"].tolist() == [status != "ok"] * 2      # the answer from the text when the program fails
    if status != "ok": assert "Program error" in tr.loc[tr["role"] == "pot", "text"].iloc[0]


# ---------------------------------------------------------------- experiment files
def test_plan_paper_profile():
    r = mad_study("plan", "meta_debate", "--profile", "paper")
    assert r.returncode == 0, r.stderr
    for e in ("meta_tab1", "meta_tab2", "meta_examples"): assert e in r.stdout
    assert "qwen2.5-32b-instruct" in r.stdout and "mistral-small-24b-instruct-2501" in r.stdout


# ---------------------------------------------------------------- the synthetic-agent claim and its control
SKILLS = {"sim-a": {"affirmative": 0.75, "negative": 0.35, "moderator": 0.5, "cot": 0.75, "step_back": 0.4, "pot": 0.4},
          "sim-b": {"affirmative": 0.45, "negative": 0.75, "moderator": 0.5, "cot": 0.4, "step_back": 0.75, "pot": 0.45},
          "sim-c": {"affirmative": 0.45, "negative": 0.4, "moderator": 0.85, "cot": 0.4, "step_back": 0.45, "pot": 0.75}}


def _study(framework, n, blind):
    items = [Item(f"x/{i}", "x", f"question {i}", "ABCD"[i % 4], "option", ("w", "x", "y", "z")) for i in range(n)]
    models = list(SKILLS)
    b = {m: RoleSimBackend(m, role_skill={} if blind else SKILLS[m], role_item_sd=0.0 if blind else 1.0,
                           role_consistency=0.0 if blind else 0.8, skill=0.57) for m in models}
    res = {f"uniform {m}": run_framework(framework, items, uniform_assignment(framework, m), b)[1]["correct"].to_numpy()
           for m in models}
    for s in range(3): res[f"random {s}"] = run_framework(framework, items, random_assignment(framework, models, s), b)[1]["correct"].to_numpy()
    md = meta_debate(items, framework, models, b)
    res["meta"] = run_framework(framework, items, md.assignment, b)[1]["correct"].to_numpy()
    return res


def _mcnemar_p(a, b):
    "Exact one-sided McNemar test that `a` (bool per item) is right more often than `b`."
    n01, n10 = int((a & ~b).sum()), int((~a & b).sum())
    return stats.binomtest(n01, n01 + n10, 0.5, alternative="greater").pvalue if n01 + n10 else 1.0


@pytest.mark.parametrize("framework,n", [("mad", 300), ("dmad", 150)])
def test_meta_debate_beats_uniform_and_random_only_when_skills_differ(framework, n):
    res = _study(framework, n, blind=False)
    meta = res["meta"]
    uniform = {k: v for k, v in res.items() if k.startswith("uniform")}
    rand = np.mean([v.mean() for k, v in res.items() if k.startswith("random")])
    for k, v in uniform.items():
        assert meta.mean() > v.mean(), (k, meta.mean(), v.mean())
    best = max(uniform.values(), key=lambda v: v.mean())
    assert _mcnemar_p(meta, best) < 0.05
    assert meta.mean() > rand + 0.05
    gain = meta.mean() - max(v.mean() for v in uniform.values())
    # control: identical role-blind agents, nothing stable to select on -> no advantage beyond noise
    ctl = _study(framework, n, blind=True)
    others = [v.mean() for k, v in ctl.items() if k != "meta"]
    assert ctl["meta"].mean() - np.mean(others) < 0.03
    assert ctl["meta"].mean() - max(others) < gain / 2
    assert _mcnemar_p(ctl["meta"], max((v for k, v in ctl.items() if k != "meta"), key=lambda v: v.mean())) > 0.05
