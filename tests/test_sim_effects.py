"""Issue 42: the sim profile's items (mad_study.sim.sim_items) and the synthetic behaviours behind each paper's effect,
shown with the behaviour on and gone with it off (small n, fast), and every sim comparison at 100 items or more."""
import numpy as np
import pandas as pd
import pytest

from mad_study.core import Item
from mad_study.debate import run_debate
from mad_study.sim import SIM_ITEM_MAKERS, SimBackend, sim_items, synthetic_sim_items
from mad_study.umad import (decomposition_summary, decomposition_table, token_entropy_by_turn, umad_agents,
                            umad_protocol, UMAD_PROMPT)
from mad_study.core import Sampling

WEAK = {"skill": 0.45, "recency": 1.0, "stubborn_wrong": 0.25}       # the sim profile's Qwen2.5-3B stand-in


def _umad(noise=0.0, context_entropy=0.0, n_items=40, k=8, rounds=3):
    b = {"w": SimBackend("w", **WEAK, debate_noise=noise, context_entropy=context_entropy)}
    items = [Item(f"synthetic/{i}", "gsm8k", f"question {i}", str(3 * i + 1), "number") for i in range(n_items)]
    return run_debate(items, umad_agents(["w", "w"]), b, protocol=umad_protocol(), prompt=UMAD_PROMPT, samples=k,
                      debate_rounds=rounds, sampling=Sampling(temperature=1.0, seed=0), history="none", progress=False)


def _first_last(tr, col):
    s = decomposition_summary(decomposition_table(tr.assign(config="c")), by=("config",)).sort_values("turn")
    return s[col].iloc[0], s[col].iloc[-1]


def test_sim_items_top_up_to_n_marked_and_deterministic():
    for task in SIM_ITEM_MAKERS:
        its = sim_items(task, 120)
        assert len(its) == 120 and len({i.id for i in its}) == 120
        syn = [i for i in its if i.synthetic]
        assert syn and all("/sim-synthetic-" in i.id and i.meta["synthetic"] == "sim profile" for i in syn)
        assert [i.question for i in syn] == [i.question for i in synthetic_sim_items(task, len(syn))]
    assert len(sim_items("realworldqa", 100)) == 100                # synthetic look-alike fixtures: more of the same
    its = sim_items("bbh_logical_deduction_7", 100)
    acc = np.mean([SimBackend("s", skill=0.6, parse_fail=0).p_solve(i) for i in its])
    assert 0.45 < acc < 0.75                                          # the hidden difficulty works on synthetic ids too


def test_umad_aleatoric_cost_makes_fail_and_its_control_succeeds():
    "UMAD Fig. 2: with debate_noise the weak pair's accuracy falls and Sys-AU rises (fail); with it off, the opposite."
    on, off = _umad(noise=0.35), _umad(noise=0.0)
    (a0, a1), (u0, u1) = _first_last(on.assign(correct=on["correct"]), "accuracy"), _first_last(on, "au")
    (b0, b1), (v0, v1) = _first_last(off, "accuracy"), _first_last(off, "au")
    assert a1 < a0 - 0.02 and u1 > u0 + 0.05, (a0, a1, u0, u1)
    assert b1 > b0 + 0.02 and v1 < v0, (b0, b1, v0, v1)


def test_umad_token_entropy_rises_only_with_context_entropy():
    "UMAD Fig. 1: token entropy rises over the turns with context_entropy; the control's falls as the agents agree."
    rise = token_entropy_by_turn(_umad(context_entropy=2.5, n_items=20, k=4))
    flat = token_entropy_by_turn(_umad(context_entropy=0.0, n_items=20, k=4))
    assert rise["entropy_mean"].iloc[-1] > 1.2 * rise["entropy_mean"].iloc[0]
    assert flat["entropy_mean"].iloc[-1] < flat["entropy_mean"].iloc[0]
    assert np.allclose(rise["accuracy"], flat["accuracy"])          # a signal only: the answers are the same


@pytest.mark.parametrize("paper", ["madc", "umad", "baseline", "meta_debate"])
def test_sim_comparisons_have_100_items(paper):
    "Every sim comparison of these papers runs on at least 100 items per compared cell (the case studies excepted)."
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    prof = load_profile("sim")
    cases = {"madc_fig8", "madc_fig9", "umad_train", "umad_trained"}
    for eid, e in experiments().items():
        if e.paper != paper or eid in cases: continue
        p = merge_params(e, prof)
        n = p.get("n_items")
        assert n is not None and n >= 100, (eid, n)
        for task in p.get("tasks") or [p.get("task")]:
            if task in ("amc23", "aime24", "aime25"): continue        # the paper's own n is 40 / 30 / 30
            assert len(sim_items(task, n)) >= 100, (eid, task)
