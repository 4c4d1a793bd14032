"""SVR-MAD (nbs/papers/svr/12_svr_mad.ipynb, its study 12b_svr_study.ipynb) and its baselines (nbs/engine/04b_protocols.ipynb): the method's rules on hand-built debates,
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
from mad_study.svr_mad import (SVR_SAMPLING, SVRConfig, comm_budget, answer_clusters, fallback_vote, svr_mad,
                               extract_confidence)
from mad_study.svr_printed import savings
from mad_study.svr_study import BaselineSettings, evaluate, fig1_table, method_table

# the world's SVR models (params/profiles/sim.yaml: sim-gpt-oss-120b, sim-deepseek-v3.1 on IMO / HLE), skill between
# the two (tests/papers/svr/test_svr_world.py checks the world carries these mechanisms)
STICKY = dict(skill=0.45, difficulty_sd=1.5, signal_strength=1.5, signal_inversion=0.67, conformity=1.0, recognition=0.0,
              parse_fail=0.01, stubborn_correct=0.8, stubborn_wrong=0.3)
EQUAL = {**STICKY, "stubborn_correct": 0.55, "stubborn_wrong": 0.55}      # same mean stickiness, no gap


def _items(n):
    return [Item(f"svrtest/{i}", "toy", f"Question {i}? (A) a (B) b (C) c (D) d (E) e", "ABCDE"[i % 5], "option") for i in range(n)]


def _evaluate(n, params, S=2, baselines=(), off=()):
    b = SimBackend("sim-svr-test", off=off, **params)
    return evaluate(_items(n), make_agents(["sim-svr-test"] * 6), {"sim-svr-test": b}, config=SVRConfig(S=S, C=S),
                    baseline=BaselineSettings(baselines=baselines), sampling=SVR_SAMPLING.replace(seed=0))


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
    res = svr_mad(y, conf, "option", holds("a0", "a1", "a5"), config=SVRConfig(S=2, C=2))
    assert (res.answer, res.accepted, res.ncomm) == ("A", True, 4) and res.ncomm == len(calls)
    assert [t["receiver"] for t in res.trace] == ["a2", "a2", "a0", "a0"]      # the confident wrong agent is probed first
    calls.clear()
    res = svr_mad(y, conf, "option", holds(), config=SVRConfig(S=2, C=2))        # nobody survives: fallback vote
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


@pytest.mark.parametrize("control", ["stubbornness off", "equal stickiness"])
def test_fig1_svr_ranks_correct_agents_on_hard_items_and_the_effect_vanishes_without_the_stickiness_gap(control):
    "The notebook's control is the world with `stubbornness` off (sim_off); a gap-free stickiness at the same mean too."
    ev = _evaluate(400, STICKY)
    n_hard, rates, chance = _hard_rates(ev)
    assert n_hard >= 100
    best_prior = rates[["min_ll", "ppl", "conf"]].max()
    assert rates["svr"] > best_prior + 0.25, rates        # SVR beats every prior signal on hard items
    assert rates["svr"] > chance + 0.25, (rates, chance)  # ... and a random pick
    ev_c = _evaluate(400, STICKY, off=("stubbornness",)) if control == "stubbornness off" else _evaluate(400, EQUAL)
    n_hard_c, rates_c, chance_c = _hard_rates(ev_c)
    assert n_hard_c >= 100
    assert rates_c["svr"] < chance_c + 0.10, (rates_c, chance_c)   # control: no better than a random pick
    for r, c in ((rates, chance), (rates_c, chance_c)):               # issue 42: priors never below chance
        assert (r[["min_ll", "ppl", "conf"]] > c - 0.06).all(), (r, c)
    assert rates_c["svr"] - rates_c[["min_ll", "ppl", "conf"]].max() < 0.05, rates_c   # control: SVR's edge gone
    assert rates["svr"] - rates_c["svr"] > 0.3
    # and SVR-MAD's gain over Self-Consistency (the same pre-debate answers) goes with it
    print("SVR-MAD - SC (points): sticky", _svr_mad_gain(ev), control, _svr_mad_gain(ev_c))
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


# ---- issue 21: review fixes ---------------------------------------------------------------------------------------
def _keep(y):
    return lambda r, s: y[r]


def test_issue21_a_lone_dissenter_does_not_beat_the_majority():
    """Alg. 1 as written (line 8: top-S of all disagreeing agents, D counts debates): the majority agent meets its one
    challenger again and is accepted; the distinct-challenger reading (the option) lets the dissenter win."""
    y = {f"a{i}": "A" for i in range(5)} | {"a5": "B"}
    conf = {f"a{i}": 0.9 - 0.1 * i for i in range(6)}
    res = svr_mad(y, conf, "option", _keep(y), config=SVRConfig(S=2, C=2))
    assert (res.answer, res.accepted, res.ncomm) == ("A", True, 2)
    assert res.counts["a0"] == {"D": 2, "r": 2, "c": 0}
    old = svr_mad(y, conf, "option", _keep(y), config=SVRConfig(S=2, C=2, challengers="distinct"))
    assert (old.answer, old.accepted, old.ncomm) == ("B", True, 7)
    y42 = {f"a{i}": "A" for i in range(4)} | {"a4": "B", "a5": "B"}
    res = svr_mad(y42, conf, "option", _keep(y42), config=SVRConfig(S=3, C=3))
    assert (res.answer, res.accepted, res.ncomm) == ("A", True, 4)
    assert svr_mad(y42, conf, "option", _keep(y42), config=SVRConfig(S=3, C=3, check="debate")).ncomm == 3
    old = svr_mad(y42, conf, "option", _keep(y42), config=SVRConfig(S=3, C=3, challengers="distinct"))
    assert (old.answer, old.accepted, old.ncomm) == ("B", True, 11)


def test_issue21_majority_wins_5_1_splits_under_synthetic_agents():
    """With the sim-svr-gptoss agents, on 5-1 splits Alg. 1 as written departs from the five less often than the
    distinct-challenger reading and is as accurate as their majority (the distinct reading is not)."""
    from mad_study.svr_mad import run_svr_mad
    b = SimBackend("sim-svr-test", **dict(STICKY, skill=0.5))
    ev = evaluate(_items(300), make_agents(["sim-svr-test"] * 6), {"sim-svr-test": b}, config=SVRConfig(S=2, C=2),
                  baseline=BaselineSettings(baselines=()), sampling=SVR_SAMPLING.replace(seed=0))
    pre = ev["pre"]
    items = sorted(i for i, g in pre.groupby("item_id")
                   if g["answer"].notna().all() and sorted(g["answer"].value_counts().tolist()) == [1, 5])
    assert len(items) >= 30
    g = pre[pre["item_id"].isin(items)].groupby("item_id")
    maj = g["answer"].agg(lambda a: a.value_counts().index[0])
    maj_acc = float(g.apply(lambda x: bool(x.loc[x["answer"] == maj[x.name], "correct"].iloc[0])).mean())
    out = {}
    for ch in ("reuse", "distinct"):
        res, _ = run_svr_mad(pre, ev["items"], {"sim-svr-test": b}, config=SVRConfig(S=2, C=2, challengers=ch),
                             probes=ev["probes"], sampling=ev["sampling"])
        r = res.set_index("item_id").loc[items]
        out[ch] = (int((r["answer"] != maj.loc[items]).sum()), float(r["correct"].mean()), float(r["ncomm"].mean()))
    print("5-1 items", len(items), "majority acc", maj_acc, "(differ, acc, ncomm):", out)
    assert out["reuse"][0] < out["distinct"][0], out
    assert out["reuse"][1] >= maj_acc - 0.03 and out["reuse"][1] > out["distinct"][1], (out, maj_acc)
    assert out["reuse"][2] < out["distinct"][2]


def test_issue21_missing_values_are_unparsed_whatever_their_type():
    y = {"a0": "A", "a1": np.nan, "a2": "B", "a3": pd.NA, "a4": "B"}
    conf = {"a0": 0.9, "a1": 0.99, "a2": 0.5, "a3": 0.98, "a4": 0.4}
    res = svr_mad(y, conf, "option", _keep(y), config=SVRConfig(S=2, C=2))
    assert all({t["receiver"], t["challenger"]}.isdisjoint({"a1", "a3"}) for t in res.trace)
    assert (res.answer, res.k, res.m, res.budget) == ("A", 2, 2, 8)
    res = svr_mad(y, conf, "option", lambda r, s: np.nan, config=SVRConfig(S=2, C=2))
    assert res.trace[0]["outcome"] == "unparsed" and res.trace[0]["post"] is None


def test_issue21_sid_et_never_answers_with_an_unparsed_response():
    from mad_study.protocols import sid_et, sid_scores
    r0 = pd.DataFrame({"item_id": ["u0"] * 3 + ["u1"] * 3, "sample": 0, "round": 0, "agent": ["a0", "a1", "a2"] * 2,
                       "logprob_min": [-0.1, -2.0, -3.0, -1.0, -1.5, -0.5], "answer": [None, "A", "A", "B", "C", np.nan],
                       "correct": [False, True, True, False, True, False], "prompt_tokens": 10, "completion_tokens": 5})
    mad = pd.DataFrame({"item_id": ["u0", "u1"], "sample": 0, "answer": ["A", "C"], "correct": [True, True], "ncomm": 6, "tokens": 90})
    assert sid_scores(r0)["answer"].tolist() == ["A", "B"]
    s = sid_et(r0, mad, 0.5)
    assert s[["skipped", "answer"]].values.tolist() == [[False, "A"], [True, "B"]]
    assert sid_et(r0, mad, 1.0)["answer"].notna().all()


def test_issue21_documented_choices_and_their_options():
    y = {"a0": "A", "a1": "A", "a2": "B", "a3": "B", "a4": "C", "a5": "A"}
    conf = {"a0": 0.9, "a1": 0.5, "a2": 0.95, "a3": 0.6, "a4": 0.3, "a5": 0.4}
    gives_way = lambda r, s: y[s]
    # a budget that is not a multiple of S is not overspent (the literal loop is the option)
    assert svr_mad(y, conf, "option", gives_way, config=SVRConfig(S=2, C=2, budget=3)).ncomm == 3
    assert svr_mad(y, conf, "option", gives_way, config=SVRConfig(S=2, C=2, budget=3, budget_cap=False)).ncomm == 4
    # acceptance after each debate vs after each iteration: with C = 1 < S = 2 they differ
    holds = lambda r, s: y[r]
    assert svr_mad(y, conf, "option", holds, config=SVRConfig(S=2, C=1)).ncomm == 2
    assert svr_mad(y, conf, "option", holds, config=SVRConfig(S=2, C=1, check="debate")).ncomm == 1
    # an unparsed post-debate answer: a change (default) or left out of D, r, c
    none = lambda r, s: None
    assert svr_mad(y, conf, "option", none, config=SVRConfig(S=2, C=2)).counts["a2"] == {"D": 2, "r": 0, "c": 2}
    ignore = SVRConfig(S=2, C=2, unparsed="ignore")
    assert svr_mad(y, conf, "option", none, config=ignore).counts["a2"] == {"D": 0, "r": 0, "c": 0}


def test_issue21_priors_on_another_scale_do_not_outrank_a_receiver_that_gave_way():
    from mad_study.svr_mad import run_svr_mad
    items = {"q/0": Item("q/0", "toy", "Which? (A) (B) (C) (D)", "D", "option")}
    ans = {"a0": "A", "a1": "B", "a2": "C", "a3": "D"}
    pre = pd.DataFrame({"item_id": "q/0", "sample": 0, "agent": list(ans), "answer": list(ans.values()),
                        "min_ll": [-0.5, -2.0, -3.0, -4.0], "ppl": [1.1, 1.5, 1.7, 1.9], "prompt_tokens": 1, "completion_tokens": 1})
    memo = {("q/0", 0, r, s, k): {"post": ans[s], "prompt_tokens": 1, "completion_tokens": 1}
            for r in ans for s in ans if r != s for k in range(9)}
    for prior in ("min_ll", "ppl"):
        res, _ = run_svr_mad(pre, items, None, config=SVRConfig(S=2, C=2, prior=prior), probes=dict(memo))
        assert [t["receiver"] for t in res.loc[0, "trace"]][:4] == ["a0", "a0", "a1", "a1"], prior
        raw = SVRConfig(S=2, C=2, prior=prior, prior_scale="raw")
        res, _ = run_svr_mad(pre, items, None, config=raw, probes=dict(memo))
        assert [t["receiver"] for t in res.loc[0, "trace"]][:4] == ["a0"] * 4, prior


def test_issue21_sid_per_agent_early_exit_is_offered():
    from mad_study.protocols import SIDAgentExit, ScriptedBackend, run_protocol, debate_costs
    it = [Item("toy/0", "toy", "Which? (A) x (B) y", "A", "option")]
    lp = {"a0": -0.1, "a1": -3.0, "a2": -3.0, "a3": -3.0}
    sb = ScriptedBackend(lambda item, agent, rnd, msgs: "A" if agent in ("a0", "a1") else "B",
                         lambda item, agent, rnd, msgs: {"logprob_min": lp[agent]})
    tr = run_protocol(it, make_agents(["s"] * 4), {"s": sb}, SIDAgentExit(-1.0), prompt="du_mmlu", debate_rounds=1)
    assert tr[tr["round"] == 1]["reused"].tolist() == [True, False, False, False]
    assert debate_costs(tr, fmt="option").ncomm[0] == 3 * 3


def test_issue21_svr_mad_signature_names_every_hyper_parameter():
    import dataclasses
    import inspect
    sig = inspect.signature(svr_mad)
    assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    assert "config" in sig.parameters and "tie_seed" in sig.parameters and "tie_seed:" in svr_mad.__doc__
    fields = {f.name for f in dataclasses.fields(SVRConfig)}
    for name in ("S", "C", "tau", "budget", "posterior", "challengers", "check", "unparsed", "budget_cap"):
        assert name in fields and f"{name}:" in SVRConfig.__doc__, name
    assert "D, r, c" in svr_mad.__doc__


@pytest.mark.parametrize("setting,rows,ref,ncomm,tokens", [
    ("GPT-OSS-120B / IMO", [(19.4, 164.1, 41.8), (17.5, 85.5, 38.7), (22.8, 131.4, 42.1), (5.6, 82.1, 42.8)], "S2-MAD", 75, 38),
    ("GPT-OSS-120B / HLE", [(18.4, 111.0, 20.2), (12.8, 39.6, 17.2), (14.0, 67.7, 21.0), (7.3, 39.1, 21.4)], "S2-MAD", 48, 42),
    ("DeepSeek-V3.1 / IMO", [(19.8, 234.6, 40.1), (20.0, 103.0, 33.8), (20.9, 154.7, 36.8), (8.9, 91.7, 41.5)], "GroupDebate", 55, 61),
    ("DeepSeek-V3.1 / HLE", [(19.6, 108.7, 14.9), (16.6, 33.7, 14.1), (18.7, 71.7, 16.7), (5.3, 30.3, 16.7)], "S2-MAD", 72, 58)])
def test_issue21_table1_savings_in_all_four_settings(setting, rows, ref, ncomm, tokens):
    "SVR-MAD Sec. 5.1 from Table 1: NComm -48..75%, tokens -38..61% against the most accurate MAD baseline."
    keys, labels = ["groupdebate", "sid_et", "s2mad", "svr_mad"], ["GroupDebate", "SID-ET", "S2-MAD", "SVR-MAD"]
    tab = pd.DataFrame({"key": keys, "method": labels, "NComm": [r[0] for r in rows], "Tok (x10^3)": [r[1] for r in rows],
                        "Acc (%)": [r[2] for r in rows]})
    sv = savings(tab)
    assert (sv["reference"], round(sv["ncomm_saving_pct"]), round(sv["tokens_saving_pct"])) == (ref, ncomm, tokens), setting
    assert sv["acc_diff_points"] >= -1e-9


def test_issue21_figure_layout_no_clipped_label_no_blank_band():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mad_study.report import SYNTHETIC_LABEL, label_figure
    from mad_study.svr_study import FIG2_YLABEL, finish_figure
    fig, axes = plt.subplots(1, 4, figsize=(12.8, 3.4), squeeze=False)
    names = ["Self Consistency", "GroupDebate", "SID-ET", "S2-MAD", "SVR-MAD"]
    for ax in axes[0]:
        ax.bar(range(5), [8, 9, 6, 12, 13]); ax.set_xticks(range(5), names, rotation=35, ha="right", fontsize=7)
        ax.set_title("sim-svr-gptoss / IMO-AnswerBench\n(16 hard problems)", fontsize=8)
    axes[0][0].set_ylabel(FIG2_YLABEL)
    finish_figure(fig, "SVR-MAD Fig. 2: accuracy on hard problems (1-3 agents correct before debate)")
    label_figure(fig, SYNTHETIC_LABEL)
    fig.canvas.draw(); rd = fig.canvas.get_renderer(); dpi = fig.dpi
    ax0 = axes[0][0]
    yl, box = ax0.yaxis.label.get_window_extent(rd), ax0.get_window_extent(rd)
    assert yl.y0 >= box.y0 - 1 and yl.y1 <= box.y1 + 1                                   # the y-label fits beside its axis
    assert not any(yl.overlaps(t.get_window_extent(rd)) for t in ax0.get_xticklabels())
    title = fig._suptitle.get_window_extent(rd)
    top_axes = max(ax.get_tightbbox(rd).y1 for ax in axes[0])
    assert 0 <= (title.y0 - top_axes) / dpi < 0.25                                        # no blank band under the title
    stamp = [t for t in fig.texts if t.get_text() == SYNTHETIC_LABEL][0].get_window_extent(rd)
    assert not stamp.overlaps(title)
    plt.close(fig)


def test_issue21_fig1_layout_has_no_blank_band_under_its_title():
    "Fig. 1's layout (five panels, shared y, two-line panel titles): the old recipe left 0.48 in under the title."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mad_study.report import SYNTHETIC_LABEL, label_figure
    from mad_study.svr_study import finish_figure
    fig, axes = plt.subplots(1, 5, figsize=(16, 3.4), sharey=True, squeeze=False)
    for ax in axes[0]:
        ax.bar(range(4), [100, 60, 50, 10]); ax.set_xlabel("agents correct before debate")
        ax.set_title("sim-svr-gptoss\nIMO-AnswerBench", fontsize=8)
    axes[0][0].set_ylabel("top-ranked agent correct (%)")
    finish_figure(fig, "SVR-MAD Fig. 1: top-ranked agent correct, by difficulty (min-LL, PPL, confidence, SVR)")
    label_figure(fig, SYNTHETIC_LABEL)
    fig.canvas.draw(); rd = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(rd)
    assert 0 <= (title.y0 - max(ax.get_tightbbox(rd).y1 for ax in axes[0])) / fig.dpi < 0.25
    plt.close(fig)


# ---- issue 24: Table 1's statistics and its per-item results --------------------------------------------------------
def test_issue24_tab1_caption_follows_the_table_and_items_recompute_it():
    from mad_study.svr_study import tab1_items, tab1_comparison, tab1_stats_caption, check_tab1_caption
    ev = _evaluate(60, STICKY, S=2, baselines=("mad", "groupdebate", "s2mad"))
    tab = method_table(ev).set_index("method")
    items = tab1_items(ev)
    # the per-item file recomputes the table's accuracy, tokens and NComm
    per = items.groupby("method").agg(acc=("correct", "mean"), tok=("tokens", "mean"), ncomm=("ncomm", "mean"))
    assert np.allclose(100 * per.loc[tab.index, "acc"], tab["Acc (%)"]) and np.allclose(per.loc[tab.index, "tok"] / 1e3, tab["Tok (x10^3)"])
    assert np.allclose(per.loc[tab.index, "ncomm"], tab["NComm"])
    cmp = tab1_comparison(items.assign(model="m", dataset="d"), n_resamples=500)
    cap = tab1_stats_caption(cmp)
    check_tab1_caption(cmp, cap)
    base = cmp[cmp["method"] != "SVR-MAD"]
    assert len(base) == 4 and f"distinct items per setting: m / d {len(set(items['item_id']))}" in cap
    for r in base.to_dict("records"):
        # issue 53: the interval (at Holm's family level, closed at 0 where Holm rejects) on its verdict's side of 0
        holds0 = r["acc_gap_low"] <= 0 <= r["acc_gap_high"]
        assert (not holds0 or r["acc_cut"]) if r["acc_distinguishable"] else holds0
        assert r["acc_agrees"] and np.isclose(r["acc_level"], 1 - 0.05 / 4)
        word = "distinguishable" if r["acc_distinguishable"] else "not distinguishable"
        assert f"m / d vs {r['method']}: accuracy" in cap and f"], {word} (mcnemar" in cap.split(f"m / d vs {r['method']}: ")[1].split(";")[0]
        assert np.isclose(r["acc_gap"], tab.loc["SVR-MAD", "Acc (%)"] / 100 - tab.loc[r["method"], "Acc (%)"] / 100)
        assert np.isclose(r["token_change"], tab.loc["SVR-MAD", "Tok (x10^3)"] / tab.loc[r["method"], "Tok (x10^3)"] - 1)


def test_issue24_pooled_protocol_transcripts_give_each_methods_costs():
    from mad_study.protocols import GroupDebate, S2MAD, EarlyStop, run_protocol, debate_costs
    from mad_study.debate import FullyConnected
    b = SimBackend("sim-svr-test", **STICKY)
    protos = {"fully_connected": EarlyStop(FullyConnected(), 5), "s2mad": EarlyStop(S2MAD(), 5), "groupdebate_3-3": GroupDebate((3, 3))}
    alone = {n: run_protocol(_items(12), make_agents(["sim-svr-test"] * 6), {"sim-svr-test": b}, p, debate_rounds=2, progress=False)
             for n, p in protos.items()}
    pooled = debate_costs(pd.concat(alone.values(), ignore_index=True), protos, fmt="option")
    for n, tr in alone.items():
        one = debate_costs(tr, protos[n], fmt="option")
        pd.testing.assert_frame_equal(pooled[pooled["method"] == n].reset_index(drop=True), one)
    assert pooled.groupby("method")["ncomm"].max().max() <= 60            # 6 agents x 5 peers x 2 rounds at most


def test_issue24_fig3_points_carry_their_accuracy_interval():
    from mad_study.svr_study import ablation_points
    from mad_study.metrics import wilson_ci
    ev = _evaluate(30, STICKY, S=2)
    pts = ablation_points(ev, "svr", S=2, C=2)
    n = len(ev["kept"])
    assert (pts["n_items"] == n).all() and n > 0
    for r in pts.to_dict("records"):
        assert np.allclose((r["acc_low"], r["acc_high"]), wilson_ci(round(r["accuracy"] * n), n))
        assert r["acc_low"] <= r["accuracy"] <= r["acc_high"]


def test_issue51_fig3_control_shuffles_only_who_survived():
    """svr_fig3's control (issue 51): the same evaluation (round 0, probing, every debate's answer and cost) with SVR's
    posterior reading the problem's survival outcomes shuffled; the priors' points are the effect's item by item, the
    debates both runs make have the same answers, and SVR loses what survival tells about who is right."""
    from mad_study.svr_mad import probe_memo, run_svr_mad, shuffled_survival
    from mad_study.svr_study import ablation_points
    ev = _evaluate(60, STICKY, S=2)
    items = ev["ablation_items"] = {}
    for post in ("svr", "conf"):
        for surv in ("own", "shuffled"):
            ablation_points(ev, post, S=2, C=2, survival=surv)
    # a post-debate prior reads no survival: its points are the effect's, problem by problem
    for (post, tau, c, surv), s in items.items():
        if post == "conf" and surv == "shuffled":
            pd.testing.assert_series_equal(s, items[(post, tau, c, "own")])
    # round 0 and every debate both runs make: identical (the same world, the same draws)
    memo = probe_memo(ev["probes"])
    _, own = run_svr_mad(ev["pre"], ev["items"], ev["backends"], config=SVRConfig(S=2, C=2), probes=memo)
    _, shuf = run_svr_mad(ev["pre"], ev["items"], ev["backends"], config=SVRConfig(S=2, C=2), probes=memo,
                          survival=shuffled_survival(ev["probes"]))
    key = ["item_id", "sample", "receiver", "challenger", "repeat"]
    both = own.merge(shuf, on=key, suffixes=("", "_ctl"))
    assert len(both) > 0 and (both["post"].fillna("-") == both["post_ctl"].fillna("-")).all()
    assert (both["completion_tokens"] == both["completion_tokens_ctl"]).all()
    # the survival record is what SVR reads: shuffled, SVR's best point falls
    acc = {k: s.mean() for k, s in items.items() if k[0] == "svr"}
    best = {surv: max(v for k, v in acc.items() if k[3] == surv) for surv in ("own", "shuffled")}
    assert best["own"] > best["shuffled"], best
    with pytest.raises(Exception, match="survival"):
        ablation_points(ev, "svr", survival="swapped")
