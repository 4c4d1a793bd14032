"""UMAD (mad_study.umad): the decomposition on synthetic agents, its identities, the Sec. 4.2 training signals, params."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from mad_study.core import Item
from mad_study.debate import run_debate
from mad_study.umad import flip_table, uncertainty_decomposition
from mad_study.sim import SimBackend
from mad_study.umad import (ALPHA_AU, ETA_PAPER, ETA_RELEASED, au_weight, decomposition_summary, decomposition_table,
                            epistemic_influence_reward, eu_sampling_floor, group_standardize, pair_kind, pair_label,
                            round_of_turn, umad_advantages, umad_agents, umad_protocol, UMAD_PROMPT)
from mad_study.core import Sampling

# the sim profile's stand-ins for Qwen2.5-3B-Instruct (weaker) and Qwen3-4B-Instruct-2507 (stronger), params/profiles/sim.yaml
WEAK = {"skill": 0.45, "recency": 1.0, "stubborn_wrong": 0.25}
STRONG = {"skill": 0.78, "recency": 1.0, "stubborn_correct": 0.75}


def _debate(pairs, n_items=20, k=12, debate_rounds=2, seed=0):
    sims = {"weak": SimBackend("weak", **WEAK), "strong": SimBackend("strong", **STRONG)}
    items = [Item(f"synthetic/{i}", "gsm8k", f"question {i}", str(3 * i + 1), "number") for i in range(n_items)]
    runs = []
    for pair in pairs:
        tr = run_debate(items, umad_agents(pair), sims, protocol=umad_protocol(), prompt=UMAD_PROMPT, samples=k,
                        debate_rounds=debate_rounds, sampling=Sampling(temperature=1.0, seed=seed), history="none", progress=False)
        runs.append(tr.assign(config=pair_label(pair), kind=pair_kind(pair)))
    return pd.concat(runs, ignore_index=True)


def test_sim_heterogeneous_pairs_start_with_more_eu_and_eu_falls():
    "Sec. 3.2 / App. D.5 on synthetic agents: a weak+strong pair disagrees more at turn 1 than either homogeneous pair; EU falls."
    tr = _debate([["weak", "weak"], ["strong", "strong"], ["weak", "strong"]])
    s = decomposition_summary(decomposition_table(tr, by=("config", "kind")), by=("config", "kind"))
    eu = s.pivot(index="config", columns="turn", values="eu")
    first, last = eu.columns.min(), eu.columns.max()
    hetero = eu.loc["weak + strong"]
    assert hetero[first] > max(eu.loc["weak x2", first], eu.loc["strong x2", first]) + 0.01, eu
    assert hetero[last] < 0.8 * hetero[first], eu
    assert eu[last].mean() < eu[first].mean(), eu
    # the homogeneous pairs start near the finite-K floor: their EU is sampling noise, the heterogeneous pair's is not
    floor = s.pivot(index="config", columns="turn", values="eu_floor")
    assert hetero[first] > 1.5 * floor.loc["weak + strong", first]


def test_flip_shares_on_a_debate_sum_to_one():
    tr = _debate([["weak", "strong"]], n_items=6, k=4, debate_rounds=1)
    f = flip_table(tr, 0, 1, by=("config",))
    assert len(f) == 1 and f["n"].iloc[0] == 6 * 4 * 2
    assert abs(f[["C2C", "C2W", "W2C", "W2W"]].sum(axis=1).iloc[0] - 1) < 1e-12
    assert abs(f["flip_ratio"].iloc[0] - f["C2W"].iloc[0] - f["W2C"].iloc[0]) < 1e-12


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 9), min_size=5, max_size=5), min_size=1, max_size=5).filter(lambda c: all(sum(r) for r in c)))
def test_decomposition_identity_on_random_distributions(counts):
    "Prop. 3.2: TU = Sys-EU + Sys-AU for any N, and Sys-EU is the generalised JSD = mean KL(p_i || mixture)."
    samples = [[str(j) for j, c in enumerate(row) for _ in range(c)] for row in counts]
    d = uncertainty_decomposition(samples)
    assert abs(d["tu"] - d["eu"] - d["au"]) < 1e-9
    P = np.array([np.array(row, float) / sum(row) for row in counts])
    mix = P.mean(axis=0)
    jsd = float(np.mean([stats.entropy(p, mix) for p in P]))
    assert abs(d["eu"] - jsd) < 1e-9
    assert abs(d["au"] - np.mean([stats.entropy(p) for p in P])) < 1e-9


def _transcript(answers_by_agent):
    return pd.DataFrame([dict(config="c", item_id="x/0", task="gsm8k", round=0, agent=a, sample=k, answer=ans, correct=ans == "7")
                         for a, answers in answers_by_agent.items() for k, ans in enumerate(answers)])


def test_identical_agents_have_no_eu_and_always_different_agents_ln2():
    same = decomposition_table(_transcript({"a0": ["7", "7", "9", "11"], "a1": ["9", "7", "11", "7"]}))
    assert abs(same["eu"].iloc[0]) < 1e-12 and same["au"].iloc[0] > 0
    diff = decomposition_table(_transcript({"a0": ["7"] * 16, "a1": ["9"] * 16}))
    assert abs(diff["eu"].iloc[0] - math.log(2)) < 1e-12 and abs(diff["au"].iloc[0]) < 1e-12
    # equivalent answers are one answer (App. C.1): 7 and 7.0 do not disagree
    eq = decomposition_table(_transcript({"a0": ["7"] * 4, "a1": ["7.0"] * 4}))
    assert abs(eq["eu"].iloc[0]) < 1e-12 and eq["n_answers"].iloc[0] == 1


def test_eu_floor_matches_the_measure_on_samples_of_one_distribution():
    rng = np.random.default_rng(0)
    p = [0.4, 0.3, 0.2, 0.1]
    eus = [uncertainty_decomposition([list(rng.choice(4, 16, p=p).astype(str)) for _ in range(2)])["eu"] for _ in range(500)]
    assert abs(np.mean(eus) - eu_sampling_floor(p, 16, n_draws=4000)) < 0.006
    assert abs(eu_sampling_floor([0.25] * 4, 400, n_draws=2000) - 3 / 1600) < 2e-4     # first-order (m - 1) / (4K)


def test_training_signal_worked_values():
    "Eq. 4 (alpha = 0.25) and Eq. 5 (eta = 0.25 paper, 0.2 released)."
    assert (ALPHA_AU, ETA_PAPER, ETA_RELEASED) == (0.25, 0.25, 0.2)
    np.testing.assert_allclose(group_standardize([1.0, 2.0, 3.0]), [-1, 0, 1], atol=1e-5)
    np.testing.assert_allclose(au_weight([-1.0, 0.0, 1.0]), [math.exp(0.25), 1.0, math.exp(-0.25)])
    c = np.array([[[1, 1], [0, 1]]])            # G = 1 rollout, A1 goes wrong -> right after A0's answer
    np.testing.assert_allclose(epistemic_influence_reward(c), [[[0.25, 0.0], [0.0, 0.0]]])
    np.testing.assert_allclose(epistemic_influence_reward(c, eta=ETA_RELEASED), [[[0.2, 0.0], [0.0, 0.0]]])
    # UMAD advantages: zero-mean per (agent, turn) group when the weights are 1 (equal NLLs), shape kept
    rng = np.random.default_rng(3)
    C = rng.integers(0, 2, (6, 2, 3))
    A = umad_advantages(C, np.ones((6, 2, 3)))
    assert A.shape == (6, 2, 3)
    np.testing.assert_allclose(A.mean(axis=0), 0, atol=1e-9)
    # a more confident response (lower NLL) in a group gets a larger weight on the same advantage
    A2 = umad_advantages(np.array([[[1]], [[1]], [[0]]]), np.array([[[0.2]], [[0.6]], [[0.4]]]))
    assert A2[0, 0, 0] > A2[1, 0, 0] > 0 > A2[2, 0, 0]


def test_turns_map_to_rounds():
    assert [round_of_turn(T) for T in (1, 2, 5)] == [0, 1, 4]


@pytest.mark.parametrize("profile", ["sim", "cpu", "paper"])
def test_params_files_validate_and_plan(profile):
    from mad_study.registry import load_profile, resolve_targets
    from mad_study.params import merge_params, plan_experiment, validate_params
    prof = load_profile(profile)
    exps = {e.id: e for e in resolve_targets(["umad"]) if e.id not in ("umad_train", "umad_trained")}   # training and its evaluation: tests/papers/umad/test_umad_train.py
    assert set(exps) == {"umad_decomposition", "umad_zeroshot"}
    assert {a for e in exps.values() for a in e.artefacts} == {"umad_fig1", "umad_fig2", "umad_fig5", "umad_tab1_zeroshot"}
    plans = {}
    for eid, e in exps.items():
        p = merge_params(e, prof)
        validate_params(p, e, prof)
        assert p["debate_rounds"] + 1 >= max(p.get("report_turns") or [1])
        plans[eid] = plan_experiment(e, p)["generations"]
        if profile == "paper":
            assert p["history"] == "none" and p["debate_rounds"] == 4
    if profile == "paper":
        assert plans["umad_decomposition"] == 13 * 500 * 16 * 2 * 5                       # App. D.5: 13 pairs, K = 16, T = 5
        assert plans["umad_zeroshot"] == (1319 + 500 + 40 + 30 + 30) * 5 * 2 * 5 * 2        # Table 1: 5 seeds, T = 5, 2 settings
    if profile == "cpu":
        assert plans["umad_decomposition"] <= 16


@pytest.mark.parametrize("history", ["none", "last", "full"])
def test_sent_messages_rebuild_what_the_engine_sent(history):
    "mad_study.umad.sent_messages (used by Alg. 1's variant) gives back every request of a debate, for each history mode."
    from mad_study.umad import sent_messages

    class Recorder:
        def __init__(self, inner): self.inner, self.requests = inner, []
        def generate(self, reqs): self.requests += list(reqs); return self.inner.generate(reqs)

    rec = {"weak": Recorder(SimBackend("weak", **WEAK)), "strong": Recorder(SimBackend("strong", **STRONG))}
    items = [Item(f"synthetic/{i}", "gsm8k", f"question {i}", str(i), "number") for i in range(2)]
    tr = run_debate(items, umad_agents(["weak", "strong"]), rec, protocol=umad_protocol(), prompt=UMAD_PROMPT, samples=2,
                    debate_rounds=2, sampling=Sampling(temperature=1.0), history=history, progress=False)
    reqs = rec["weak"].requests + rec["strong"].requests
    assert len(reqs) == 2 * 2 * 2 * 3
    for r in reqs:
        m = r.meta
        assert sent_messages(tr, m["item"], m["agent"], m["round"], m["sample"], history=history) == r.messages


# ---------------------------------------------------------------- unparsed answers (issue 8, item 5)
def test_never_parsing_agents_are_not_certain_and_agreeing():
    "Two agents that never parse: not TU = EU = AU = 0 (the old shared-outcome reading) but undefined, with the failures reported."
    t = _transcript({"a0": [None] * 8, "a1": [None] * 8})
    d = decomposition_table(t)
    assert d[["tu", "eu", "au"]].isna().all().all()
    assert d[["parse_failure", "parse_failure_a0", "parse_failure_a1"]].iloc[0].tolist() == [1.0, 1.0, 1.0]
    s = decomposition_summary(d)
    assert (s["n_items"].iloc[0], s["n_defined"].iloc[0]) == (1, 0)
    dist = decomposition_table(t, unparsed="distinct")
    assert abs(dist["au"].iloc[0] - math.log(8)) < 1e-12 and abs(dist["eu"].iloc[0] - math.log(2)) < 1e-12
    shared = decomposition_table(t, unparsed="shared")
    assert shared[["tu", "eu", "au"]].iloc[0].tolist() == [0.0, 0.0, 0.0]          # the reading the default avoids


def test_unparsed_options_on_hand_made_answers():
    # A0: 7, 7, fail, fail; A1: 9, 9, 9, fail
    samples = [["7", "7", None, None], ["9", "9", "9", None]]
    drop = uncertainty_decomposition(samples)
    assert abs(drop["eu"] - math.log(2)) < 1e-12 and abs(drop["au"]) < 1e-12
    assert drop["parse_failure"] == [0.5, 0.25] and drop["n_parsed"] == [2, 3]
    shared = uncertainty_decomposition(samples, unparsed="shared")       # outcomes 7, 9, <unparsed>
    assert abs(shared["tu"] - stats.entropy([2 / 8, 3 / 8, 3 / 8])) < 1e-12
    distinct = uncertainty_decomposition(samples, unparsed="distinct")   # 7, 9 and three outcomes of their own
    assert abs(distinct["tu"] - stats.entropy([2, 3, 1, 1, 1])) < 1e-12
    assert abs(distinct["au"] - (stats.entropy([2, 1, 1]) + stats.entropy([3, 1])) / 2) < 1e-12
    # the transcript-level table gives the same numbers for every option
    t = _transcript({"a0": samples[0], "a1": samples[1]})
    for mode, d in (("drop", drop), ("shared", shared), ("distinct", distinct)):
        row = decomposition_table(t, unparsed=mode).iloc[0]
        assert all(abs(row[k] - d[k]) < 1e-12 for k in ("tu", "eu", "au")), mode
        assert (row["parse_failure_a0"], row["parse_failure_a1"]) == (0.5, 0.25)


def test_an_agent_without_samples_is_an_error():
    with pytest.raises(ValueError, match=r"agent\(s\) \[1\] have no samples"):
        uncertainty_decomposition([["1", "2"], []])
    with pytest.raises(ValueError, match="unknown treatment of unparsed answers"):
        uncertainty_decomposition([["1"]], unparsed="skip")


# ---------------------------------------------------------------- paired or independent seeds (issue 8, item 6)
@pytest.mark.parametrize("paired", [True, False])
def test_paired_seeds(paired):
    "paired_seeds: the homogeneous and the heterogeneous pair share A0's initial samples when paired, never otherwise."
    from mad_study.umad import config_seed
    sims = {"weak": SimBackend("weak", **WEAK), "strong": SimBackend("strong", **STRONG)}
    items = [Item(f"synthetic/{i}", "gsm8k", f"question {i}", str(i), "number") for i in range(4)]
    r0 = {}
    for pair in (["weak", "weak"], ["weak", "strong"]):
        tr = run_debate(items, umad_agents(pair), sims, protocol=umad_protocol(), prompt=UMAD_PROMPT, samples=6, debate_rounds=1,
                        sampling=Sampling(temperature=1.0, seed=config_seed(0, pair_label(pair), paired=paired)), history="none", progress=False)
        r0[pair_label(pair)] = tr[(tr["round"] == 0) & (tr["agent"] == "a0")].sort_values(["item_id", "sample"])["text"].tolist()
    same = r0["weak x2"] == r0["weak + strong"]
    assert same is paired


def test_paired_seeds_is_a_parameter_of_both_experiments():
    from mad_study.registry import load_profile, resolve_targets
    from mad_study.params import merge_params, validate_params
    for e in resolve_targets(["umad"]):
        if e.id in ("umad_train", "umad_trained"): continue                 # the training notebook has its own seeds
        p = merge_params(e, load_profile("sim"))
        validate_params(p, e, load_profile("sim"))
        assert p["paired_seeds"] is True
    with pytest.raises(Exception, match="paired_seeds"):
        e = next(e for e in resolve_targets(["umad"]) if e.id == "umad_decomposition")
        validate_params({**merge_params(e, load_profile("sim")), "paired_seeds": "yes"}, e, load_profile("sim"))
