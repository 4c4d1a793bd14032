"""SVR-MAD (nbs/12_svr_mad.ipynb) and its baselines (nbs/04b_protocols.ipynb): the method's rules on hand-built debates,
and the paper's effects under synthetic agents, each with enough items not to be noise, and with its control."""
import math

import numpy as np
import pandas as pd
import pytest

from mad_study.core import Item
from mad_study.debate import make_agents
from mad_study.metrics import survival_rate
from mad_study.protocols import tune_skip_rate
from mad_study.sim import SimBackend
from mad_study.svr_mad import (comm_budget, answer_clusters, evaluate, fallback_vote, fig1_table, method_table, savings,
                               svr_mad, extract_confidence)

# the notebook's sim stand-in (params/svr/svr_main.yaml), skill between its two models
STICKY = dict(skill=0.45, difficulty_sd=1.5, signal_strength=1.5, signal_inversion=1.0, conformity=1.0, recognition=0.0,
              parse_fail=0.01, stubborn_correct=0.8, stubborn_wrong=0.3)
EQUAL = {**STICKY, "stubborn_correct": 0.55, "stubborn_wrong": 0.55}      # the control: same mean stickiness


def _items(n):
    return [Item(f"svrtest/{i}", "toy", f"Question {i}? (A) a (B) b (C) c (D) d (E) e", "ABCDE"[i % 5], "option") for i in range(n)]


def _evaluate(n, params, S=2, baselines=()):
    b = SimBackend("sim-svr-test", **params)
    return evaluate(_items(n), make_agents(["sim-svr-test"] * 6), {"sim-svr-test": b}, S=S, C=S, baselines=baselines, seed=0)


# ---- the rules ---------------------------------------------------------------------------------------------------
def test_svr_formula_and_budget():
    assert survival_rate(3, 1, 4) == 0.5 and survival_rate(0, 2, 2) == -1.0 and math.isnan(survival_rate(0, 0, 0))
    assert comm_budget(2, *answer_clusters(list("AAAABC"), "option")) == 2 * (3 + 4)
    assert comm_budget(3, *answer_clusters(["1/2", "0.5", None, "2"], "boxed")) == 3 * (2 + 2)
    assert extract_confidence("(B)\nConfidence: 72%") == 0.72 and extract_confidence("no idea") is None


def test_acceptance_fallback_and_ncomm_on_a_hand_built_debate():
    y = {"a0": "A", "a1": "A", "a2": "B", "a3": "B", "a4": "C", "a5": "A"}
    conf = {"a0": 0.9, "a1": 0.5, "a2": 0.95, "a3": 0.6, "a4": 0.3, "a5": 0.4}
    calls = []
    def holds(*who):
        def debate(r, s):
            calls.append((r, s)); return y[r] if r in who else y[s]
        return debate
    res = svr_mad(y, conf, "option", holds("a0", "a1", "a5"), S=2, C=2)
    assert (res.answer, res.accepted, res.ncomm) == ("A", True, 4) and res.ncomm == len(calls)
    assert [t["receiver"] for t in res.trace] == ["a2", "a2", "a0", "a0"]      # the confident wrong agent is probed first
    calls.clear()
    res = svr_mad(y, conf, "option", holds(), S=2, C=2)                          # nobody survives: fallback vote
    assert not res.accepted and res.ncomm == len(calls) <= res.budget
    post = {a: [t["post"] for t in res.trace if t["receiver"] == a] for a in y}
    assert res.answer == fallback_vote(y, post, "option")
    # the two tie rules: agent level (pre-debate answer), overall (pre-debate majority)
    assert fallback_vote({"a0": "A", "a1": "B", "a2": "A"}, {"a0": ["B", "A"]}, "option") == "A"
    assert fallback_vote({"a0": "A", "a1": "B", "a2": "A", "a3": "C"}, {"a0": ["B"], "a3": ["A"]}, "option") == "A"


def test_sid_et_skip_rate_tuning():
    sweep = {90: (60, 0.30), 80: (80, 0.40), 70: (110, 0.45), 60: (130, 0.48), 50: (150, 0.49), 40: (170, 0.49),
             30: (190, 0.49), 20: (210, 0.49), 10: (230, 0.49)}
    ev = lambda r: sweep[round(100 * r)]
    assert tune_skip_rate(ev, 100, 0.50)[0] == 0.7         # first rate whose tokens exceed SVR-MAD's (Alg. 2 line 8)
    assert tune_skip_rate(ev, 100, 0.40)[0] == 0.8         # first rate that matches its accuracy (line 6)
    assert tune_skip_rate(ev, 10_000, 0.99)[0] == 0.1      # neither: 10% (line 13)


# ---- the effects under synthetic agents ----------------------------------------------------------------------------
def _svr_mad_gain(ev):
    "SVR-MAD's accuracy minus Self-Consistency's (points), same items."
    return 100 * (ev["costs"]["svr_mad"]["correct"].mean() - ev["costs"]["sc"]["correct"].mean())


def _hard_rates(ev):
    f = fig1_table(ev)
    f = f[f["n_correct"].between(1, 2)]
    pre = ev["pre"][ev["pre"]["item_id"].isin(set(f["item_id"]))]
    chance = pre.groupby("item_id").apply(lambda g: g["correct"].sum() / g["answer"].notna().sum()).mean()
    return len(f), f[["min_ll", "ppl", "conf", "svr"]].mean(), chance


def test_fig1_svr_ranks_correct_agents_on_hard_items_and_the_effect_vanishes_with_equal_stickiness():
    ev = _evaluate(400, STICKY)
    n_hard, rates, chance = _hard_rates(ev)
    assert n_hard >= 100
    best_prior = rates[["min_ll", "ppl", "conf"]].max()
    assert rates["svr"] > best_prior + 0.25, rates        # SVR beats every prior signal on hard items
    assert rates["svr"] > chance + 0.25, (rates, chance)  # ... and a random pick
    ev_c = _evaluate(400, EQUAL)
    n_hard_c, rates_c, chance_c = _hard_rates(ev_c)
    assert n_hard_c >= 100
    assert rates_c["svr"] < chance_c + 0.10, (rates_c, chance_c)   # control: no better than a random pick
    assert rates["svr"] - rates_c["svr"] > 0.3
    # and SVR-MAD's gain over Self-Consistency (the same pre-debate answers) goes with it
    print("SVR-MAD - SC (points): sticky", _svr_mad_gain(ev), "equal", _svr_mad_gain(ev_c))
    assert _svr_mad_gain(ev) > 8 and _svr_mad_gain(ev_c) < 2


def test_tab1_svr_mad_is_cheaper_than_groupdebate_and_s2mad_at_equal_or_better_accuracy():
    ev = _evaluate(300, STICKY, S=3, baselines=("mad", "groupdebate", "s2mad"))
    tab = method_table(ev).set_index("key")
    assert tab.loc["svr_mad", "n"] >= 250
    for b in ("groupdebate", "s2mad"):
        assert tab.loc["svr_mad", "NComm"] < tab.loc[b, "NComm"]
        assert tab.loc["svr_mad", "Tok (x10^3)"] < tab.loc[b, "Tok (x10^3)"]
    # "equal": within 2 points (6 of 300 items) of the more accurate of the two
    assert tab.loc["svr_mad", "Acc (%)"] >= max(tab.loc["groupdebate", "Acc (%)"], tab.loc["s2mad", "Acc (%)"]) - 2.0, tab
    sv = savings(method_table(ev))
    assert sv["tokens_saving_pct"] > 0 and sv["ncomm_saving_pct"] > 0
