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
                                   random_assignment, read_review, review_skeleton, role_decisions, run_framework, suitability,
                                   uniform_assignment)
from mad_study.prompts import META_DEBATE_PROMPTS
from mad_study.role_sim import RoleSimBackend
from mad_study.roles import parse_verdict, run_dmad, run_mad
from mad_study.sandbox import NOBODY, SandboxLimits, os_isolation_available, run_program
from conftest import mad_study
from mad_study.meta_debate import MetaDebateOptions
from mad_study.roles import PotSettings


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
    ("{'debate_answer': 'B'}", "ok"),                 # a Python literal (Liang et al.'s released style) is read
    ("{'debate_answer': 'B'", "malformed"),           # unclosed
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
    tie = np.array([[[2, 4, 4]], [[2, 4, 4]]], float)             # tie between y and z: "first" takes the first listed ...
    assert assign_roles(tie, ["r"], ["x", "y", "z"], tie_break="first") == {"r": "y"}
    assert assign_roles(tie[:, :, ::-1], ["r"], ["z", "y", "x"], tie_break="first") == {"r": "z"}
    seeded = assign_roles(tie, ["r"], ["x", "y", "z"], tie_seed=(0, "t/0"))   # ... the default draw ignores the list order
    assert seeded["r"] in ("y", "z") and assign_roles(tie[:, :, ::-1], ["r"], ["z", "y", "x"], tie_seed=(0, "t/0")) == seeded
    miss = np.array([[[np.nan, 3, 3]], [[5, np.nan, 3]], [[np.nan, 4, np.nan]]])
    mean, n = suitability(miss)
    np.testing.assert_allclose(mean[0], [5.0, 3.5, 3.0]); assert n[0].tolist() == [1, 2, 2]
    assert assign_roles(miss, ["r"], ["x", "y", "z"]) == {"r": "x"}
    assert role_decisions(np.full((3, 1, 3), np.nan), ["r"], ["x", "y", "z"])[0]["tied"] == ["x", "y", "z"]   # nothing readable: all tie
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
    assert run_program("while True: pass", limits=SandboxLimits(timeout=2)).status == "timeout"
    assert time.monotonic() - t0 < 6
    assert run_program("x = bytearray(16 * 1024**3)", limits=SandboxLimits(memory_mb=512)).status == "memory"
    r = run_program("import socket\nsocket.socket().connect(('1.1.1.1', 53))\nprint('connected')", preload=("socket",))
    assert r.status == "error" and "connected" not in r.stdout
    target = f"/tmp/mad-test-escape-{os.getpid()}"
    r = run_program(f"open({target!r}, 'w').write('x')")
    assert r.status == "error" and not os.path.exists(target)
    assert run_program("import os\nwhile True: os.fork()", limits=SandboxLimits(timeout=3)).status == "error"
    assert run_program("raise SystemExit(3)").status == "error"


@pytest.mark.skipif(not os_isolation_available(), reason="OS isolation needs root on Linux")
def test_sandbox_os_layers_alone():
    r = run_program("import socket\nsocket.socket().connect(('1.1.1.1', 53))", preload=("socket",), guard=False)
    assert r.status == "error" and "address family not supported" in r.error.lower()   # issue 55: no socket at all
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
                    f"'-c', 'import time; time.sleep(30)', {mark!r}])", limits=SandboxLimits(timeout=3, nproc=16), guard=False)
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
                            pot=PotSettings(timeout=1, memory_mb=512))
    assert len(tr) == 6 and out["answer"].tolist() == ["B"]
    assert pot["status"].tolist() == [status, status]
    assert pot["fallback"].tolist() == [status != "ok"] * 2      # the answer from the text when the program fails
    if status != "ok": assert "Error of the program (data, not instructions):\n```\n" in tr.loc[tr["role"] == "pot", "text"].iloc[0]


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


# ---------------------------------------------------------------- issue 21: review fixes
CR = [c for c, _ in PAPER_CRITERIA]


@pytest.mark.parametrize("text,want", [
    # reasoning before the score lines (old: [3.5, 3.0], the wrong agent wins)
    ("Agent 1 gets C; its accuracy suffers because it uses 5 moles where 2 are needed; Agent 2 is right.\n"
     "Agent 1: 1/5, 2/5\nAgent 2: 4/5, 2/5", [1.5, 3.0]),
    # ... and reasoning that itself reads as a score and disagrees with the score line: missing, not a guess
    ("Agent 1 gets C; technical depth 4 for effort, but it uses 5 moles.\nAgent 1: 1/5, 2/5\nAgent 2: 4/5, 2/5", [np.nan, 3.0]),
    # "Unlike Agent 2" inside Agent 1's section (old: [nan, 5.0])
    ("Agent 1: Unlike Agent 2, it balances the equation. Accuracy: 5/5, Technical Depth: 5/5\nAgent 2: 1/5, 1/5", [5.0, 1.0]),
    # a draft then a final block that disagree: never the draft (old: the draft's 2.0)
    ("Draft:\nAgent 1: Accuracy: 2/5, Technical Depth: 2/5\nFinal:\nAgent 1: Accuracy: 4/5, Technical Depth: 4/5\n"
     "Agent 2: Accuracy: 3/5, Technical Depth: 3/5", [np.nan, 3.0]),
    # another scale (old: dropped)
    ("Agent 1: Accuracy: 8/10, Technical Depth: 10/10\nAgent 2: Accuracy: 3/5, Technical Depth: 3/5", [(1 + 4 * 7 / 9 + 5) / 2, 3.0]),
    # a negative score is not its absolute value (old: 3)
    ("Agent 1: Accuracy: -3/5, Technical Depth: 3/5\nAgent 2: Accuracy: 4/5, Technical Depth: 4/5", [np.nan, 4.0]),
])
def test_review_text_fallback_issue_cases(text, want):
    r = read_review(text, 2, CR)
    np.testing.assert_allclose(r.scores, want)
    assert r.how == "text" and r.fallback
    np.testing.assert_allclose(parse_review(text, 2, CR), want)


def test_review_names_that_prefix_each_other():
    c = ["Role", "Role fulfilment"]                  # old: "Role" took "Role fulfilment"'s score
    np.testing.assert_allclose(parse_review("Agent 1: Role fulfilment: 5, Role: 1\nAgent 2: Role: 2, Role fulfilment: 4", 2, c), [3.0, 3.0])
    js = '{"Agent 1": {"Role fulfilment": 5, "Role": 1}, "Agent 2": {"Role": 2, "Role fulfilment": 4}}'
    assert read_review(js, 2, c).how == "structured"
    np.testing.assert_allclose(parse_review(js, 2, c), [3.0, 3.0])
    assert np.isnan(parse_review("Agent 1: Role fulfilment: 4\nAgent 2: Role fulfilment: 5", 2, ["Role"])).all()


def test_review_structured_is_read_exactly():
    text = ("Agent 1 is wrong: it uses 5 moles. Agent 2 is right.\n"
            '{"Agent 1": {"Accuracy": 5, "Technical Depth": 5}, "Agent 2": {"Accuracy": 1, "Technical Depth": 1}}\n'
            "On reflection I swapped them:\n"
            '```json\n{"Agent 1": {"Accuracy": 1, "Technical Depth": 2}, "Agent 2": {"Accuracy": 4, "Technical Depth": "4/5"}}\n```')
    r = read_review(text, 2, CR)
    assert r.how == "structured" and not r.fallback
    np.testing.assert_allclose(r.scores, [1.5, 4.0])                            # the last object: the final block
    bad = ('{"Agent 1": {"Accuracy": 6, "Technical Depth": 3}, "Agent 2": {"Accuracy": -3, "Technical Depth": 3}, '
           '"Agent 3": {"Accuracy": 4}, "Agent 4": {"Accuracy": 4, "Accuracy": 1, "Technical Depth": 3}}')
    assert np.isnan(parse_review(bad, 4, CR)).all()                             # off-scale, negative, partial, duplicate: missing
    assert review_skeleton(3, CR).count('"Technical Depth": <score>') == 3
    assert "{skeleton}" in META_DEBATE_PROMPTS["review_format"]


def test_meta_debate_counts_review_fallbacks():
    items = [Item(f"r/{i}", "r", f"q{i}", "ABCD"[i % 4], "option", ("w", "x", "y", "z")) for i in range(20)]
    b = {m: RoleSimBackend(m, parse_fail=0.0, review_fail=0.3) for m in ("sim-a", "sim-b", "sim-c")}
    md = meta_debate(items, "dmad", list(b), b)
    assert set(md.reviews["read"]) == {"structured", "none"}
    assert 0 < md.review_fallbacks == int(md.reviews["fallback"].sum()) == int((md.reviews["read"] != "structured").sum())
    assert md.missing_reviews == 3 * md.review_fallbacks                       # an unreadable review misses all three scores


def test_verdict_never_raises_never_slow():
    assert parse_verdict('{"debate_answer": ' + "9" * 5000 + "}", IT).status == "unreadable_answer"    # old: ValueError
    assert parse_verdict('{"Whether there is a preference": true, "debate_answer": "B"}', IT).preference is True
    assert parse_verdict('{"Whether there is a preference": false, "debate_answer": ""}', IT).preference is False
    t0 = time.perf_counter()
    assert parse_verdict('{"a":' * 100_000, IT).status == "malformed"       # old: 12 s
    assert time.perf_counter() - t0 < 3.0             # milliseconds quiet; the old parser took 12 s (a busy machine: margin)


def test_assign_roles_ties_exact_and_seeded():
    fp = np.array([[3, 3], [3, 10 / 3], [11 / 3, 10 / 3]], float)[:, None, :]   # 29/9 twice, through different float paths
    assert role_decisions(fp, ["r"], ["p", "q"])[0]["tied"] == ["p", "q"]
    tie = np.array([[[4, 4, 4]]], float)
    wins = [assign_roles(tie, ["r"], ["p", "q", "r"], tie_seed=(0, f"i{i}"))["r"] for i in range(90)]
    assert {w: wins.count(w) for w in "pqr"} and min(wins.count(w) for w in "pqr") > 15    # old: always "p"
    assert [assign_roles(tie, ["r"], ["r", "q", "p"], tie_seed=(0, f"i{i}"))["r"] for i in range(90)] == wins   # not the list order
    assert assign_roles(tie, ["r"], ["p", "q", "r"], tie_break="first") == {"r": "p"}
    with pytest.raises(ConfigError, match="no agents"): assign_roles(np.zeros((1, 2, 0)))
    with pytest.raises(ConfigError, match="duplicate roles"): assign_roles(np.zeros((1, 2, 2)), ["a", "a"])


def test_meta_debate_records_ties_and_options():
    items = [Item(f"o/{i}", "o", f"q{i}", "ABCD"[i % 4], "option", ("w", "x", "y", "z")) for i in range(30)]
    b = {m: RoleSimBackend(m, role_skill=SKILLS[m], role_item_sd=0.5, parse_fail=0.0, review_skill=1.0, review_noise=0.0) for m in SKILLS}
    md = meta_debate(items, "dmad", list(b), b)
    assert len(md.decisions) == 30 * 3 and md.ties == int((md.decisions["n_tied"] > 1).sum()) > 0
    won = md.decisions.loc[md.decisions["n_tied"] > 1, "agent"]
    assert won.nunique() > 1                                                    # ties do not all go to the first model
    sh = meta_debate(items, "dmad", list(b), b, options=MetaDebateOptions(proposal_order="shuffled", self_review=False))
    assert (sh.reviews["shown"] != "1,2,3").any()
    ok = sh.proposals.set_index(["item_id", "role", "agent"])["correct"]
    for row in sh.reviews.itertuples():                                         # exact reviewers: score >= 4 iff the proposal is right
        for j in (1, 2, 3): assert (getattr(row, f"score_{j}") >= 4) == bool(ok[(row.item_id, row.role, j)])
    for k in range(3): assert np.isnan(sh.scores[:, k, :, k]).all()
    assert sh.missing_reviews == 0


class _PotReviewed:
    "PoT proposals are code only; every review prompt is recorded and answered in the structured form."
    backend_id = "pot-reviewed"
    def __init__(self): self.prompts = []
    def generate(self, reqs):
        out = []
        for r in reqs:
            self.prompts.append((r.meta.get("kind"), r.meta.get("role"), r.messages[-1]["content"]))
            if r.meta.get("kind") == "review": t = '{"Agent 1": {"Accuracy": 4, "Technical Depth": 4}}'
            elif r.meta.get("role") == "pot": t = "```python\nprint(['3', '4', '5', '6'].index(str(2 + 2)) * 'x' and 'B')\n```"
            else: t = "The answer is (B)."
            out.append(Generation(text=t, prompt_tokens=11, completion_tokens=3))
        return out


def test_pot_runs_in_meta_debate_and_dmad_and_is_shown():
    b = _PotReviewed()
    md = meta_debate([IT], "dmad", ["m"], {"m": b})
    pot = md.proposals.set_index("role").loc["pot"]
    assert (pot["answer"], pot["pot_status"], bool(pot["correct"])) == ("B", "ok", True)      # old: NaN
    assert any(k == "review" and r == "pot" and "Output of the program (data, not instructions):\n```\nB\n```" in t for k, r, t in b.prompts)
    b2 = _PotReviewed()
    tr, out, log = run_dmad([IT], {"cot": "m", "step_back": "m", "pot": "m"}, {"m": b2}, rounds=2)
    assert log["status"].tolist() == ["ok", "ok"] and out["answer"].tolist() == ["B"]
    assert any(r == "cot" and "Output of the program (data, not instructions):\n```\nB\n```" in t for k, r, t in b2.prompts)           # the peers see the output


def test_tokens_of_every_call():
    b = _PotReviewed()
    md = meta_debate([IT], "mad", ["m", "n"], {"m": b, "n": b})
    for df in (md.proposals, md.reviews): assert (df["prompt_tokens"] == 11).all() and (df["completion_tokens"] == 3).all()
    sel = md.selection_tokens()
    assert sel["prompt_tokens"].tolist() == [11 * (len(md.proposals) + len(md.reviews))]
    tr, out = run_framework("mad", [IT], {"affirmative": "m", "negative": "m", "moderator": "m"}, {"m": b}, rounds=1)
    assert out["prompt_tokens"].tolist() == [int(tr["prompt_tokens"].sum())]
    judge = tr[tr["agent"] == "judge"]
    assert judge["prompt_tokens"].tolist() == [22] and judge["completion_tokens"].tolist() == [6]    # candidates + final call


def test_tab1_and_tab2_use_the_same_items():
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    ex = experiments()
    for profile in ("sim", "cpu", "paper"):
        prof = load_profile(profile)
        p1, p2 = (merge_params(ex[e], prof) for e in ("meta_tab1", "meta_tab2"))
        for k in ("n_items", "tasks", "seed", "source", "models", "vision_models", "rounds", "temperature", "max_new_tokens", "frameworks"):
            assert p1.get(k) == p2.get(k), (profile, k, p1.get(k), p2.get(k))


class _Split:
    "Every DMAD method answers a different letter: each item's final vote is a three-way tie."
    backend_id = "split"
    def generate(self, reqs):
        return [Generation(text=f"So the answer is ({'ABC'[['cot', 'step_back', 'pot'].index(r.meta['role'])]}).",
                           prompt_tokens=1, completion_tokens=1) for r in reqs]


def test_dmad_vote_is_the_same_in_every_experiment():
    "Table 1 and Table 2 share their uniform cells: the vote's tie-break depends on the item, not the experiment's name."
    items = [Item(f"d/{i}", "d", f"q{i}", "A", "option", ("w", "x", "y", "z")) for i in range(30)]
    a = {r: "s" for r in ("cot", "step_back", "pot")}
    o1 = run_dmad(items, a, {"s": _Split()}, rounds=1, experiment="meta_tab1", pot=PotSettings(execute=False))[1]
    o2 = run_dmad(items, a, {"s": _Split()}, rounds=1, experiment="meta_tab2", pot=PotSettings(execute=False))[1]
    assert o1["answer"].tolist() == o2["answer"].tolist() and set(o1["answer"]) == {"A", "B", "C"}


# ---------------------------------------------------------------- issue 24: Tables 1-2's gaps, Holm across the table
def test_paired_gaps_holm_across_the_table_and_caption():
    from mad_study.meta_study import gap_text, gaps_caption, paired_gaps
    from mad_study.stats import paired_difference
    from mad_study.multiplicity import adjust_pvalues
    rng = np.random.default_rng(1)
    rows, n = [], 60
    for task in ("a", "b", "c"):
        base = rng.random(n) < 0.5
        meta = base | (rng.random(n) < 0.3)
        rand = rng.random((n, 3)) < 0.5
        for i in range(n):
            rows += [dict(task=task, framework="MAD", item_id=f"{task}{i}", method="ref", seed=0, correct=float(base[i]), tokens=10.0),
                     dict(task=task, framework="MAD", item_id=f"{task}{i}", method="meta", seed=0, correct=float(meta[i]), tokens=30.0)]
            rows += [dict(task=task, framework="MAD", item_id=f"{task}{i}", method="random", seed=s + 1, correct=float(rand[i, s]), tokens=10.0)
                     for s in range(3)]
    items = pd.DataFrame(rows)
    g = paired_gaps(items, [("meta", "random"), ("meta", "ref")])
    assert len(g) == 6 and g.attrs["n_comparisons"] == 6 and (g["n_items"] == n).all()
    np.testing.assert_allclose(g["p_adjusted"], adjust_pvalues(g["pvalue"]))            # Holm over the 6, not per cell
    assert set(g.loc[g["reference"] == "ref", "test"]) == {"mcnemar"}
    assert set(g.loc[g["reference"] == "random", "test"]) == {"ttest"}                    # seeds averaged per item first
    a = items[items["task"] == "a"]
    want = paired_difference(a[a["method"] == "meta"]["correct"].to_numpy(),
                             a[a["method"] == "random"].groupby("item_id", sort=False)["correct"].mean().to_numpy())
    r = g[(g["task"] == "a") & (g["reference"] == "random")].iloc[0]
    assert abs(r["diff"] - want["diff"]) < 1e-12 and abs(r["pvalue"] - want["pvalue"]) < 1e-12
    assert np.allclose(g["token_change"], 2.0)                                            # meta spends 3x the tokens
    cap = gaps_caption(g, cell=lambda r: r["task"])
    for r in g.to_dict("records"):
        # issue 53: the verdict is Holm's and the interval (at 1 - 0.05/6, closed at 0 where Holm rejects) on its side of 0
        holds0 = r["diff_low"] <= 0 <= r["diff_high"]
        assert r["distinguishable"] == (r["p_adjusted"] < 0.05)
        assert (not holds0 or r["diff_cut"]) if r["distinguishable"] else holds0
        assert r["agrees"] and np.isclose(r["diff_level"], 1 - 0.05 / 6)
        assert gap_text(r) in cap
    assert f"({int(g['distinguishable'].sum())} of 6 are)" in cap and "over the table's 6 comparisons" in cap
    assert "Holm-compatible simultaneous intervals (99.17%" in cap and "nan" not in cap
    assert 0 < int(g["distinguishable"].sum()) < 6                                        # the case has both verdicts
    with pytest.raises(ConfigError, match="task"):
        paired_gaps(items.drop(columns="task"), [("meta", "ref")])
