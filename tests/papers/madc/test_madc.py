"""Tests of the MADC study (mad_study.madc): the allocation strategies, the paper's worked examples, reversal points
(hand-made curves and the paper's printed Tables 6-11), the experiment files and planners, and the positional-bias
claims on synthetic agents (Truth Last > Fixed, Random; MADC >= Fixed and < Truth Last with a recency weight;
no difference beyond noise without one)."""
import functools
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mad_study.core import ConfigError, Item
from mad_study.debate import OrderedPeers, RoundContext, make_agents, run_debate
from mad_study.madc import (CASES, REVERSAL_ORDERS, STRATEGIES, MADCPeers, first_pool_sizes,
                            item_scores, madc_order, random_variants, reversal_curve,
                            reversal_sequence, reversal_table, run_reversal, run_strategies, shared_round0, solution_pools,
                            strategy_label, strategy_protocol, strategy_scores, strategy_tests, path_consistency,
                            reversal_point, viewpoint_entropy, viewpoint_log_likelihood)
from mad_study.madc_printed import paper_reversal_curves, reversal_count_table
from mad_study.stats import paired_test
from mad_study.multiplicity import cochran_q
from mad_study.sim import SimBackend
from mad_study.core import Sampling


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(tmp_path / "figures"))


# ---------------------------------------------------------------- the paper's worked examples (App. A.1, A.2, Eq. 2)
def test_entropy_worked_example():
    # App. A.2: (A)x8, (B)x1, (C)x1 -> -(-0.2575 - 0.3322 - 0.3322) = 0.9219 bits; unanimous -> 0
    assert viewpoint_entropy(["A"] * 8 + ["B", "C"]) == pytest.approx(0.9219, abs=5e-5)
    assert viewpoint_entropy(["A"] * 10) == 0.0
    assert viewpoint_entropy(["A"] * 5 + ["B"] * 5) == pytest.approx(1.0)


def test_log_likelihood_worked_example():
    # App. A.1: 9 of 10 correct -> log2(0.9) = -0.152; 10 of 10 -> 0; no agent correct -> -inf or the floor
    assert viewpoint_log_likelihood(["A"] * 9 + ["B"], "A", "option") == pytest.approx(-0.152, abs=5e-4)
    assert viewpoint_log_likelihood(["A"] * 10, "A", "option") == 0.0
    assert viewpoint_log_likelihood(["B"] * 10, "A", "option") == -math.inf
    assert viewpoint_log_likelihood(["B"] * 10, "A", "option", floor=math.log2(1 / 20)) == math.log2(1 / 20)


def test_item_scores_use_the_worked_examples():
    rows = [dict(experiment="e", item_id="t/0", task="t", gold="A", round=1, agent=f"a{i}", sample=0, answer=a, correct=a == "A",
                 text=f"({a})") for i, a in enumerate(["A"] * 8 + ["B", "C"])]
    rows += [dict(experiment="e", item_id="t/1", task="t", gold="A", round=1, agent=f"a{i}", sample=0, answer="B", correct=False,
                  text="(B)") for i in range(10)]
    s = item_scores(pd.DataFrame(rows), fmt="option").set_index("item_id")
    assert s.loc["t/0", "entropy"] == pytest.approx(0.9219, abs=5e-5)
    assert s.loc["t/0", "log_likelihood"] == pytest.approx(math.log2(0.8))
    assert s.loc["t/0", "accuracy"] == 1.0 and s.loc["t/1", "accuracy"] == 0.0
    assert s.loc["t/1", "log_likelihood"] == math.log2(1 / 20)          # documented floor: half an agent
    assert s.loc["t/1", "log_likelihood_released"] == 0.0               # the released code's pitfall, kept apart


def test_path_consistency_eq2():
    assert path_consistency(["A", "A", "B", None, "A"]) == [2.0, 2.0, 0.0, 0.0, 2.0]
    assert path_consistency(["1", "1.0", "2"], fmt="number") == [1.0, 1.0, 0.0]


# ---------------------------------------------------------------- the MADC ordering (Alg. 1) and its tie-break
def test_madc_order_alg1_and_ties():
    assert madc_order(["A", "A", "A", "B", "C", "D"]) == [3, 4, 5, 0, 1, 2]         # Fig. 11's example: (A) block last
    assert madc_order(["A", "A", "B", None, "A"]) == [3, 2, 0, 1, 4]                 # unparsed first, most consistent last
    assert madc_order(["A", "B", "A", "B"]) == [0, 2, 1, 3]                          # equal groups stay blocks; later-held one last
    assert madc_order(["B", "A", "B", "A"]) == [0, 2, 1, 3]
    assert madc_order({"x": "C", "y": "D", "z": "D"}) == ["x", "y", "z"]
    assert madc_order(["1", "1.0", "2"], fmt="number") == [2, 0, 1]
    # ascending consistency, most consistent last, whatever the answers
    rng = np.random.default_rng(0)
    for _ in range(200):
        ans = [None if rng.random() < 0.1 else "ABCD"[int(rng.integers(4))] for _ in range(int(rng.integers(1, 11)))]
        c = path_consistency(ans)
        o = madc_order(ans)
        assert sorted(o) == list(range(len(ans)))
        assert [c[i] for i in o] == sorted(c)
        groups = [ans[i] for i in o if ans[i] is not None]
        assert len([k for k, _ in itertools.groupby(groups)]) == len(set(groups))         # one block per answer


def test_madc_is_truth_last_when_the_plurality_is_right():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(3, 11))
        ans = ["ABCDE"[int(rng.integers(5))] for _ in range(n)]
        top = pd.Series(ans).value_counts()
        if len(top) > 1 and top.iloc[0] == top.iloc[1]: continue
        gold = top.index[0]
        k = top.iloc[0]
        o = madc_order(ans)
        assert {ans[i] for i in o[-k:]} == {gold}                                   # the correct block speaks last
        it = Item("t/0", "t", "q", gold, "option")
        hist = {f"a{i}": [dict(answer=a, correct=a == gold)] for i, a in enumerate(ans)}
        ctx = RoundContext(it, 0, 1, make_agents(["m"] * n), hist, np.random.default_rng(0))
        tl = OrderedPeers("truth_last").order(ctx)
        assert set(strategy_protocol("madc").order(ctx)[-k:]) == set(tl[-k:])


def test_strategy_protocols():
    assert set(STRATEGIES) == {"fixed", "random", "truth_first", "truth_last", "madc"}
    assert strategy_protocol("truth_first").oracle and strategy_protocol("truth_last").oracle
    assert not any(strategy_protocol(s).oracle for s in ("fixed", "random", "madc", "madc_peers"))
    assert isinstance(strategy_protocol("madc"), MADCPeers) and strategy_protocol("madc").name == "madc"
    with pytest.raises(ConfigError, match="unknown allocation strategy"): strategy_protocol("truth_middle")
    with pytest.raises(ConfigError, match="unknown MADC scope"): MADCPeers(scope="global")


def _toy_items(n, options="ABCDEFG", prefix="t"):
    opts = " ".join(f"({c}) option {c}" for c in options)
    return [Item(f"{prefix}/{i}", prefix, f"Question {i}? Options: {opts}", options[i % len(options)], "option") for i in range(n)]


def test_madc_in_the_engine_recomputed_every_round():
    items = _toy_items(6)
    b = {"sim": SimBackend("sim", skill=0.5, recency=1.0, response_words=5, parse_fail=0.1)}
    tr = run_debate(items, make_agents(["sim"] * 6), b, protocol=strategy_protocol("madc"), debate_rounds=2, samples=2,
                    sampling=Sampling(temperature=1.0), prompt="du_mmlu", progress=False)
    for (iid, k, r), g in tr[tr["round"] > 0].groupby(["item_id", "sample", "round"]):
        prev = tr[(tr["item_id"] == iid) & (tr["sample"] == k) & (tr["round"] == r - 1)].set_index("agent")["answer"]
        order = madc_order({a: (None if pd.isna(v) else v) for a, v in prev.items()}, fmt="option")
        for row in g.itertuples():
            assert row.position == order.index(row.agent)                        # speaking position = MADC order
            assert row.visible_peers.split(",") == [a for a in order if a != row.agent]


def test_strategies_share_round0():
    items = _toy_items(5)
    b = {"sim": SimBackend("sim", recency=1.0, response_words=5)}
    trs = run_strategies(items, "sim", b, list(STRATEGIES), n_agents=5, repeats=3, prompt="du_mmlu")
    assert shared_round0(trs)
    r1 = {s: t[t["round"] == 1].sort_values(["item_id", "sample", "agent"])["visible_peers"].tolist() for s, t in trs.items()}
    assert r1["fixed"] != r1["truth_last"] and r1["fixed"] != r1["madc"]    # ... while the debates differ in order


# ---------------------------------------------------------------- reversal points (RQ3)
def test_reversal_point_hand_made():
    assert reversal_point([1, 2, 3, 4], [0.9, 0.7, 0.4, 0.2]) == 3
    assert reversal_point([1, 2, 3, 4], [0.1, 0.3, 0.5, 0.8]) == 4                # 0.5 is not past 0.5
    assert reversal_point([1, 2, 3], [0.9, 0.8, 0.9]) is None
    assert reversal_point(range(1, 9), [1, 1, 1, 1, 0.9, 0.6, 0.45, 0.1], level=0.5) == 7
    assert reversal_point(range(1, 9), [1, 1, 1, 1, 0.9, 0.6, 0.45, 0.1], level=0.7) == 6
    assert reversal_point(range(1, 7), [0.2, 0.6, 0.1, 0.0, 0.3, 0.7], after=4) == 6


def _paper(table, order):
    g = paper_reversal_curves().query("table == @table and order == @order")
    return g["count"].tolist(), g["accuracy"].tolist()


def test_paper_tables_parsed():
    pc = paper_reversal_curves()
    assert len(pc) == 6 * 3 * 80 and set(pc["order"]) == set(REVERSAL_ORDERS)
    assert set(pc["item_id"]) == set(CASES.values())
    c, a = _paper(6, "correct_first")                                              # spot checks against the printed rows
    assert (a[0], a[39], a[48], a[79]) == (0.94, 1.00, 0.48, 0.00)
    c, a = _paper(11, "alternating")
    assert (a[0], a[40], a[79]) == (0.50, 0.34, 0.24)


@pytest.mark.parametrize("table,order,first,after40", [
    (6, "correct_first", 49, 49), (6, "incorrect_first", 48, 48), (6, "alternating", 2, None),
    (7, "correct_first", 52, 52), (7, "incorrect_first", 2, 46), (7, "alternating", 14, None),
    (8, "correct_first", 47, 47), (8, "incorrect_first", 46, 46), (8, "alternating", 2, None),
    (9, "correct_first", 50, 50), (9, "incorrect_first", 45, 45), (9, "alternating", 3, None),
    (10, "correct_first", 41, 41), (10, "incorrect_first", 53, 53), (10, "alternating", 2, None),
    (11, "correct_first", 5, 43), (11, "incorrect_first", 59, 59), (11, "alternating", 5, None)])
def test_reversal_points_of_the_printed_tables(table, order, first, after40):
    # e.g. Table 6 (CASE-54, Qwen2.5-7B) correct first: 0.82 at count 48, 0.48 at 49 -> first drop below 0.5 at 49
    c, a = _paper(table, order)
    assert reversal_point(c, a) == first
    if after40 is not None: assert reversal_point(c, a, after=40) == after40


def test_reversal_table_of_the_paper():
    t = reversal_table(paper_reversal_curves(), pool_size=40, by=("table", "order")).set_index(["table", "order"])
    assert t.loc[(6, "correct_first"), "opposing_needed"] == 9
    assert t.loc[(7, "incorrect_first"), "opposing_needed"] == 6
    assert pd.isna(t.loc[(6, "alternating"), "after_pool"])
    # "reverse a conclusion is considerably easier than upholding one": fewer than 40 opposing agents, every time
    assert (t["opposing_needed"].dropna() < 40).all()


def test_reversal_sequences():
    assert reversal_sequence("correct_first", 2, 2) == ["C0", "C1", "W0", "W1"]
    assert reversal_sequence("incorrect_first", 1, 2) == ["W0", "W1", "C0"]
    assert reversal_sequence("alternating", 2, 3) == ["C0", "W0", "C1", "W1", "W2"]      # no off-by-one: W0 is used
    with pytest.raises(ConfigError): reversal_sequence("random", 1, 1)


def test_solution_pools():
    ans = ["B", "A", "C", "C", "A", "C", None, "D", "A", "C"]
    df = pd.DataFrame(dict(item_id="t/0", sample=range(10), answer=ans, correct=[a == "A" for a in ans],
                           text=[f"s{i} ({a})" for i, a in enumerate(ans)]))
    p = solution_pools(df, pool_size=2, seed=0)
    assert p["own_text"] == "s0 (B)" and p["own_answer"] == "B" and p["wrong_answer"] == "C"
    assert (p["available_correct"], p["available_incorrect"]) == (3, 4)
    assert len(p["correct"]) == 2 and all("(A)" in t for t in p["correct"])
    assert len(p["incorrect"]) == 2 and all("(C)" in t for t in p["incorrect"])
    assert solution_pools(df, 2, seed=0, repeat=0) == p
    assert solution_pools(df, 10, seed=0)["correct"] != [] and len(solution_pools(df, 10, seed=0)["incorrect"]) == 4


def test_run_reversal_on_synthetic_agents():
    from mad_study.loading import items_from_ids
    item = items_from_ids([CASES["CASE-54"]])[0]
    sim = SimBackend("sim", skill=0.5, conformity=0.9, recency=2.0, stubborn_correct=0.2, stubborn_wrong=0.2, response_words=5)
    cot = run_debate([item], make_agents(["sim"]), {"sim": sim}, debate_rounds=0, samples=120, sampling=Sampling(temperature=1.0),
                     prompt="madc_case_cot", progress=False)
    pools = [solution_pools(cot, 4, seed=0, repeat=r) for r in range(2)]
    tr = run_reversal(item, pools, sim, "sim", reps_per_count=20, sampling=Sampling(max_new_tokens=4096, temperature=1.0, seed=0))
    assert len(tr) == 2 * 3 * 8 * 20
    assert set(tr["agent"]) == set(REVERSAL_ORDERS) and tr["position"].between(1, 8).all()
    assert (tr["visible_peers"].str.count(",") + 1 == tr["position"]).all()
    cur = reversal_curve(tr).set_index(["order", "count"])["accuracy"]
    # the last-shown solutions decide: all-correct prefixes beat all-incorrect ones, and the ends swap
    assert cur.loc["correct_first"].loc[1:4].mean() > cur.loc["incorrect_first"].loc[1:4].mean() + 0.3
    assert cur.loc["correct_first"].loc[8] < cur.loc["correct_first"].loc[4]
    assert cur.loc["incorrect_first"].loc[8] > cur.loc["incorrect_first"].loc[4]
    t = reversal_table(reversal_curve(tr), pool_size=4)
    assert pd.notna(t.set_index("order").loc["correct_first", "after_pool"])


def test_reversal_counts_with_unequal_pools_by_hand():
    "6 correct + 3 incorrect: each order counts from the end of its own first pool (never from min(6, 3) = 3)."
    counts = list(range(1, 10))
    cur = pd.DataFrame({"model": "m", "item_id": "q", "order": ["correct_first"] * 9 + ["incorrect_first"] * 9, "count": counts * 2,
                        # correct first: C0..C5 then W0, W1, W2 -> falls below 0.5 at count 8 (the 2nd incorrect solution)
                        # incorrect first: W0..W2 then C0..C5 -> rises above 0.5 at count 6 (the 3rd correct solution)
                        "accuracy": [1, 1, 1, 1, 0.9, 0.9, 0.6, 0.3, 0.1] + [0, 0, 0.1, 0.2, 0.4, 0.7, 0.8, 0.9, 1]})
    assert reversal_sequence("correct_first", 6, 3)[:8][-2:] == ["W0", "W1"]
    assert reversal_sequence("incorrect_first", 6, 3)[:6][-3:] == ["C0", "C1", "C2"]
    t = reversal_table(cur, pool_size=first_pool_sizes(6, 3)).set_index("order")
    assert (t.loc["correct_first", "after_pool"], t.loc["correct_first", "opposing_needed"]) == (8, 2)
    assert (t.loc["incorrect_first", "after_pool"], t.loc["incorrect_first", "opposing_needed"]) == (6, 3)
    assert t["pool_boundary"].tolist() == [6, 3]
    # the old single boundary min(6, 3) = 3 claimed 5 opposing solutions for correct first, where only 3 exist
    assert reversal_table(cur, pool_size=3).set_index("order").loc["correct_first", "opposing_needed"] == 5


def test_run_reversal_with_unequal_pools():
    from mad_study.loading import items_from_ids
    item = items_from_ids([CASES["CASE-54"]])[0]
    sim = SimBackend("sim", skill=0.7, conformity=0.9, recency=2.0, stubborn_correct=0.2, stubborn_wrong=0.2, response_words=5)
    cot = run_debate([item], make_agents(["sim"]), {"sim": sim}, debate_rounds=0, samples=40, sampling=Sampling(temperature=1.0),
                     prompt="madc_case_cot", progress=False)
    pool = solution_pools(cot, 30, seed=0)
    nc, nw = len(pool["correct"]), len(pool["incorrect"])
    assert nc != nw and min(nc, nw) > 0, (nc, nw)                      # the sim gives more correct than incorrect solutions
    tr = run_reversal(item, [pool], sim, "sim", reps_per_count=6, sampling=Sampling(max_new_tokens=4096, temperature=1.0, seed=0))
    assert tr.groupby("agent")["position"].max().to_dict() == {o: nc + nw for o in REVERSAL_ORDERS}
    t = reversal_table(reversal_curve(tr), pool_size=first_pool_sizes(nc, nw)).set_index("order")
    assert t.loc["correct_first", "pool_boundary"] == nc and t.loc["incorrect_first", "pool_boundary"] == nw
    assert pd.notna(t.loc["correct_first", "opposing_needed"])                   # (seed 0: 20 + 12, reversed after 5 incorrect)
    for o, opposing in (("correct_first", nw), ("incorrect_first", nc)):
        if pd.notna(t.loc[o, "opposing_needed"]):
            assert 1 <= t.loc[o, "opposing_needed"] <= opposing                   # never more than were shown
            assert t.loc[o, "opposing_needed"] == t.loc[o, "after_pool"] - t.loc[o, "pool_boundary"]
    ct = reversal_count_table(reversal_curve(tr))                                # Tables 6-11 layout
    assert list(ct.columns[:4]) == ["Count", "Correct First", "Incorrect First", "Alternating"] and ct.shape[1] == 8


def test_count_table_gives_back_the_printed_table():
    pc = paper_reversal_curves()
    t = reversal_count_table(pc[pc["table"] == 8])                                # Table 8: CASE-94, Qwen2.5-7B
    c, a = _paper(8, "correct_first")
    assert t.iloc[:, 1].tolist() + t.iloc[:, 5].tolist() == a
    assert t.iloc[:, 0].tolist() == list(range(1, 41)) and t.iloc[:, 4].tolist() == list(range(41, 81))


# ---------------------------------------------------------------- Random: per viewer (the released code) or one shared order
def test_random_is_per_viewer_with_ten_agents():
    items = _toy_items(8)
    b = {"sim": SimBackend("sim", recency=1.0, response_words=5)}
    trs = run_strategies(items, "sim", b, ["random", "random_shared"], n_agents=10, debate_rounds=2, prompt="du_mmlu")
    assert shared_round0(trs)
    for s, t in trs.items():
        d = t[t["round"] > 0].assign(last=lambda x: x["visible_peers"].str.split(",").str[-1])
        assert (d["visible_peers"].str.split(",").map(len) == 9).all()
        top = d.groupby(["item_id", "round"])["last"].agg(lambda x: x.value_counts().iloc[0])
        if s == "random":      # the last-shown peer differs across viewers, in every round of every item
            assert (d.groupby(["item_id", "round"])["last"].nunique() >= 4).all() and (top <= 5).all(), top
        else:                  # one permutation: 9 of the 10 viewers see the same peer last
            assert (top == 9).all()
    again = run_strategies(items, "sim", b, ["random"], n_agents=10, debate_rounds=2, prompt="du_mmlu")["random"]
    pd.testing.assert_frame_equal(again, trs["random"])                          # deterministic for a seed
    r1 = trs["random"][trs["random"]["round"] == 1].set_index(["item_id", "agent"])["visible_peers"]
    r2 = trs["random"][trs["random"]["round"] == 2].set_index(["item_id", "agent"])["visible_peers"]
    assert (r1 != r2).mean() > 0.8                                               # drawn afresh every round
    assert strategy_label("random") == "Random (per viewer)" and "per viewer" in random_variants(["random"])
    assert "one permutation" in random_variants(["random_shared"])


def test_single_interval_accounts_for_the_agents_of_one_item():
    "MADC Fig. 1's Single pools 10 agents x items; the item-clustered interval is wider than Wilson over all answers."
    from mad_study.metrics import clustered_accuracy_ci, wilson_ci
    items = _toy_items(30)
    b = {"sim": SimBackend("sim", **{**_profile_agent(), "response_words": 5})}
    tr = run_strategies(items, "sim", b, ["fixed"], n_agents=10, debate_rounds=0, prompt="du_mmlu")["fixed"]
    lo, hi, how = clustered_accuracy_ci(tr["correct"].tolist(), tr["item_id"].tolist())
    wl, wh = wilson_ci(int(tr["correct"].sum()), len(tr))
    assert how == "item-cluster bootstrap" and hi - lo > 1.5 * (wh - wl), (lo, hi, wl, wh)


# ---------------------------------------------------------------- statistics helpers
def test_cochran_q():
    x = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0], [1, 0, 1], [1, 1, 0]])
    q = cochran_q(x)
    assert q["statistic"] == pytest.approx(3.5) and q["df"] == 2
    assert q["pvalue"] == pytest.approx(stats.chi2.sf(3.5, 2))
    b = int(((x[:, 0] == 1) & (x[:, 1] == 0)).sum()); c = int(((x[:, 0] == 0) & (x[:, 1] == 1)).sum())
    assert cochran_q(x[:, :2])["statistic"] == pytest.approx((b - c) ** 2 / (b + c))      # k = 2 is McNemar


# ---------------------------------------------------------------- positional bias on synthetic agents (Table 1, Figs. 3-5)
# The sim profile's Qwen2.5-7B stand-in (its behaviour read from params/profiles/sim.yaml), 10 agents, one debate
# round, short 7-option items on which the stand-in is unsure (it solves them alone with probability 0.25-0.75: there
# the order can matter; response_words is shortened for speed, it does not enter the agents' decisions).
# Units: item x repeat (300); strategies are paired within a unit (they share round 0). `share` = fraction of agents
# correct after the debate (what Fig. 4's log-likelihood measures): the order effect on it is a few points and is
# tested for significance. `accuracy` = the majority vote (Table 1): at this size the order effect on it (~2 points)
# is within noise, so the test asserts only that no strategy claimed to be at least as good is significantly worse.
# Thresholds are set so that each assertion fails with probability of about 1% or less over seeds.
PAIRS = [("truth_last", "fixed"), ("truth_last", "random"), ("madc", "fixed"), ("truth_last", "madc"), ("fixed", "random"),
         ("madc", "random")]


def _profile_agent():
    from mad_study.reproduce import load_profile
    return dict(load_profile("sim")["sim_agents"]["sim-qwen2.5-7b"])


@functools.lru_cache(maxsize=None)
def _bias_run(recency, n_items, repeats, seed):
    agent = {**_profile_agent(), "recency": recency, "response_words": 5}
    b = {"sim": SimBackend("sim", **agent)}
    strategies = ["fixed", "random", "truth_last", "madc"]
    judge = SimBackend("sim", **{**agent, "recency": 1.0})
    items = [it for it in _toy_items(40 * n_items, prefix=f"bias{seed}") if 0.25 <= judge.p_solve(it) <= 0.75][:n_items]
    assert len(items) == n_items
    trs = run_strategies(items, "sim", b, strategies, n_agents=10, repeats=repeats, prompt="du_mmlu", sampling=Sampling(max_new_tokens=4096, temperature=1.0, seed=seed))
    sc = strategy_scores(trs, fmt="option", entropy=False)
    sc["unit"] = sc["item_id"] + "#" + sc["sample"].astype(str)
    tests = strategy_tests(sc, metrics=("accuracy", "share"), unit="unit", pairs=PAIRS).set_index(["metric", "a", "b"])
    q = cochran_q(sc.pivot_table(index="unit", columns="strategy", values="accuracy")[strategies].to_numpy())
    return sc, tests, q


def _wide(sc, metric):
    return sc.pivot_table(index="unit", columns="strategy", values=metric)


def _not_worse(sc, a, b, metric="accuracy"):
    "One-sided paired t-test of 'a is worse than b': its p-value (large = no evidence that a is worse)."
    w = _wide(sc, metric)
    return stats.ttest_rel(w[a], w[b], alternative="less").pvalue


def test_positional_bias_truth_last_wins_madc_in_between():
    assert _profile_agent()["recency"] > 0                                         # the sim profile models positional bias
    sc, t, q = _bias_run(_profile_agent()["recency"], 150, 2, seed=11)
    share = lambda a, b: t.loc[("share", a, b)]
    # Truth Last beats Fixed and Random: more agents correct after the debate, significantly
    for other in ("fixed", "random"):
        assert share("truth_last", other)["diff"] > 0 and share("truth_last", other)["pvalue"] < 0.01
    # MADC scores at least Fixed: ahead, and non-inferior (99% lower bound of the paired difference above -0.01)
    w = _wide(sc, "share"); diff = (w["madc"] - w["fixed"]).to_numpy()
    assert diff.mean() > 0 and diff.mean() - stats.norm.ppf(0.99) * diff.std(ddof=1) / math.sqrt(len(diff)) > -0.01
    # ... and below Truth Last
    assert share("truth_last", "madc")["diff"] > 0
    # majority vote (Table 1): no strategy is significantly worse than one it should match or beat
    for a, b in (("truth_last", "fixed"), ("truth_last", "random"), ("madc", "fixed"), ("truth_last", "madc")):
        assert _not_worse(sc, a, b) > 0.01, (a, b)


def test_no_difference_without_positional_bias():
    sc, t, q = _bias_run(0.0, 150, 2, seed=11)
    # recency 0: the order of the shown solutions cannot matter (H0 holds by construction); paired tests find nothing:
    assert q["pvalue"] > 0.01                                                      # Cochran's Q over the four strategies
    for (metric, a, b), r in t.iterrows():
        assert r["pvalue"] > 0.01 / len(PAIRS), (metric, a, b, r["pvalue"])       # Bonferroni over the pairs, per metric
    # on the same units and seeds, Truth Last's gain over Fixed is larger with the recency weight than without (paired)
    sc1, _, _ = _bias_run(_profile_agent()["recency"], 150, 2, seed=11)
    gain = lambda s: (_wide(s, "share")["truth_last"] - _wide(s, "share")["fixed"])
    assert paired_test(gain(sc1), gain(sc))["pvalue"] < 0.01 and gain(sc1).mean() > gain(sc).mean()


# ---------------------------------------------------------------- experiment files, profiles and planners
def _merged(profile):
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params, validate_params
    prof = load_profile(profile)
    out = {}
    for eid, e in experiments().items():
        if e.paper != "madc": continue
        p = merge_params(e, prof); validate_params(p, e, prof); out[eid] = (e, p)
    return out


def test_experiment_files_cover_every_artefact():
    from mad_study.report import load_registry
    exps = _merged("sim")
    arts = {a for e, _ in exps.values() for a in e.artefacts}
    assert arts == {a["id"] for a in load_registry()["madc"]["artefacts"]}
    assert set(exps) == arts                                                       # one experiment per artefact id


def test_paper_profile_is_the_paper():
    exps = _merged("paper")
    t1 = exps["madc_tab1"][1]
    assert t1["models"] == ["qwen2.5-3b-instruct", "qwen2.5-7b-instruct", "deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b"]
    assert t1["tasks"] == ["bbh_logical_deduction_7", "bbh_geometric_shapes", "math500"]
    assert (t1["n_agents"], t1["debate_rounds"], t1["max_new_tokens"], t1["prompt"]) == (10, 1, 4096, "madc")
    assert "random" in exps["madc_fig1"][1]["strategies"] and "random_shared" not in exps["madc_fig1"][1]["strategies"]
    f35 = exps["madc_fig3_5"][1]
    assert f35["repeats"] == 20 and f35["strategies"] == ["fixed", "random", "truth_first", "truth_last"] and f35["control_off"] == []
    f9 = exps["madc_fig9"][1]
    assert (f9["pool_size"], f9["cot_samples"], f9["reps_per_count"], f9["reversal_repeats"]) == (40, 400, 10, 5)
    assert f9["case_ids"] == list(CASES.values())
    from mad_study.prompts import get_prompt
    assert get_prompt("madc").system == "You are a helpful assistant."


def test_plan_counts():
    from mad_study.params import plan_experiment
    exps = _merged("paper")
    plan = {eid: plan_experiment(e, p)["generations"] for eid, (e, p) in exps.items()}
    # Table 1: 4 models x (250 + 250 + 500) items x 10 agents x (round 0 shared + 3 strategies x 1 round)
    assert plan["madc_tab1"] == 4 * 1000 * 10 * (1 + 3)
    assert plan["madc_fig3_5"] == 2 * 500 * 20 * 10 * (1 + 4)
    assert plan["madc_fig1"] == 500 * 10 * (1 + 4)
    assert plan["madc_fig7"] == 500 * 10 * (1 + 3 * 5)
    assert plan["madc_tab2_5"] == 2 * 500 * (10 + 2 * sum(range(3, 11)))
    # the 3B's case samples + the case scan (7B, 250 items x 400, as the paper): the scan's samples of the picks are the
    # 7B's case samples (11c reuses them), counted once
    assert plan["madc_fig8"] == 3 * 400 + 400 * 250
    assert plan["madc_fig9"] == 2 * 3 * (400 + 5 * 3 * 80 * 10) - 3 * 400 + 400 * 250  # the same reuse
    sims = _merged("sim")
    assert all(p["profile"] == "sim" and all(m.startswith("sim") for m in p["models"]) for _, p in sims.values())
    assert all(sims[e][1]["control_off"] == ["recency"] for e in ("madc_fig3_5", "madc_fig7", "madc_tab1", "madc_tab2_5", "madc_fig9"))
    # Tables 2-5: both stand-ins on both tasks, so all four printed tables are drawn and judged
    t25 = sims["madc_tab2_5"][1]
    assert set(t25["models"]) == {"sim-qwen2.5-7b", "sim-r1-7b"}
    assert set(t25["tasks"]) == {"bbh_geometric_shapes", "bbh_logical_deduction_7"}
    cpu = _merged("cpu")
    t1 = cpu["madc_tab1"][1]
    assert t1["n_items"] <= 2 and t1["n_agents"] <= 3 and t1["max_new_tokens"] <= 128
    assert set(t1["models"]) == {"smollm2-135m-instruct"}


def test_fig3_5_sim_draws_the_panel_of_truth_firsts_entropy_claim():
    "Figs. 3-5 under sim draw 7B Logical Deduction and 3B Geometric Shapes (the panel the paper states Truth First's entropy on); the paper profile every model on every task; the plan counts the panels drawn."
    from mad_study.madc_study import panel_pairs
    from mad_study.params import plan_experiment
    e, p = _merged("sim")["madc_fig3_5"]
    assert panel_pairs(p["models"], p["tasks"], p["fig35_panels"]) == [
        ("sim-qwen2.5-7b", "bbh_logical_deduction_7"), ("sim-qwen2.5-3b", "bbh_geometric_shapes")]
    # the planner counts the items a real run would load (the fixture's, capped at n_items; the sim tops up with
    # synthetic ones)
    from mad_study.madc_study import _n_items
    n = sum(_n_items(p, t) for t in p["tasks"])
    assert plan_experiment(e, p)["generations"] == n * p["repeats"] * 10 * (1 + 4)
    _, pp = _merged("paper")["madc_fig3_5"]
    assert len(panel_pairs(pp["models"], pp["tasks"], pp["fig35_panels"])) == 4


def test_notebook_defaults_are_fig1_under_the_sim_profile():
    "The notebook's parameters cell = params/madc/madc_fig1.yaml + the sim profile (so it redraws the committed Fig. 1)."
    from mad_study.registry import experiments, load_profile
    from mad_study.report import notebook_parameters
    from mad_study.params import merge_params
    exp = experiments()["madc_fig1"]
    nb, merged = notebook_parameters(exp.notebook), merge_params(exp, load_profile("sim"))
    sim = merged.pop("sim_agents")
    assert {k: nb.get(k) for k in merged} == merged
    assert {m: nb["sim_agents"][m] for m in nb["models"]} == {m: sim[m] for m in merged["models"]}


# ---------------------------------------------------------------- one world, paired controls (issue 50)
def test_experiments_run_in_the_world():
    "No MADC experiment file sets sim agents of its own: every sim run is the world of params/profiles/sim.yaml."
    import yaml
    from mad_study.core import kit_path
    for f in sorted(kit_path("params/madc").glob("*.yaml")):
        d = yaml.safe_load(f.read_text())
        assert "sim_agents" not in d["params"], f
        assert all("sim_agents" not in (v or {}) for v in d["profiles"].values()), f
    sims = _merged("sim")
    from mad_study.reproduce import load_profile
    world = load_profile("sim")["sim_agents"]
    assert all(p["sim_agents"] == world for _, p in sims.values())


def _world_run(off, items, strategies=("fixed", "truth_last"), seed=5):
    from mad_study.backends import make_backend
    from mad_study.reproduce import load_profile
    m = "sim-qwen2.5-7b"
    b = {m: make_backend(m, sim_agents=load_profile("sim")["sim_agents"], sim_off=off)}
    return run_strategies(items, m, b, list(strategies), n_agents=10, repeats=2,
                          sampling=Sampling(max_new_tokens=4096, temperature=1.0, seed=seed))


def test_control_round0_identical_item_by_item():
    "The control (the same world with recency off, as the notebook runs it) has the effect run's round 0, item by item."
    from mad_study.sim import sim_items
    items = sim_items("bbh_logical_deduction_7", 60)
    on, off = _world_run((), items), _world_run(("recency",), items)
    key = ["item_id", "sample", "agent"]
    r0 = lambda t: t[t["round"] == 0].sort_values(key)[key + ["text", "answer", "correct"]].reset_index(drop=True)
    for s in on:
        pd.testing.assert_frame_equal(r0(on[s]), r0(off[s]))
        assert shared_round0({"effect": on[s], "control": off[s]})
    # downstream of recency the runs differ (the world's recency is > 0): some debate turn answers otherwise
    from mad_study.reproduce import load_profile
    assert load_profile("sim")["sim_agents"]["sim-qwen2.5-7b"]["recency"] > 0
    r1 = lambda t: t[t["round"] == 1].sort_values(key)["answer"].tolist()
    assert r1(on["truth_last"]) != r1(off["truth_last"])
