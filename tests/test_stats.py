"""Statistics that respect the design, and transcripts of several methods that pool safely (nbs/05b_stats, nbs/00_core).

Synthetic agents throughout: the numbers are illustrations of the kit's arithmetic, not results about LLMs."""
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import mad_study  # noqa: F401  (puts the checkout first on the path)
from mad_study import metrics as M
from mad_study import stats as S
from mad_study.core import ConfigError, Item
from mad_study.debate import FullyConnected, OrderedPeers, make_agents, run_debate, vote_table
from mad_study.madc import item_scores, path_consistency_table, strategy_scores
from mad_study.sim import SimBackend
from mad_study.umad import decomposition_table

ITEMS = [Item(f"gsm8k/{i}", "gsm8k", f"What is {i} + {i}?", str(2 * i), "number") for i in range(12)]
SIMS = {"sim-a": SimBackend("sim-a", skill=0.45, parse_fail=0.05), "sim-b": SimBackend("sim-b", skill=0.65, parse_fail=0.0)}
AGENTS = make_agents(["sim-a", "sim-a", "sim-b"])


class QuietA0(FullyConnected):
    "A third protocol: a0 never speaks after round 0 (reused rows)."
    name = "quiet_a0"

    def speaks(self, ctx, agent):
        return agent != "a0"


def _run(protocol, experiment="study"):
    return run_debate(ITEMS, AGENTS, SIMS, protocol=protocol, debate_rounds=2, samples=3, temperature=0.8,
                      experiment=experiment, progress=False)


@pytest.fixture(scope="module")
def three():
    return {t["method"].iloc[0]: t for t in (_run(FullyConnected()), _run(OrderedPeers("random")), _run(QuietA0()))}


METRICS = {
    "accuracy_by_round": lambda t: M.accuracy_by_round(t),
    "token_cost": lambda t: M.token_cost(t),
    "flip_table": lambda t: M.flip_table(t, 0, 2),
    "uncertainty_table": lambda t: M.uncertainty_table(t),
    "vote_table": lambda t: vote_table(t),
    "decomposition_table": lambda t: decomposition_table(t),
    "item_scores": lambda t: item_scores(t),
    "path_consistency_table": lambda t: path_consistency_table(t),
    "per_item_results": lambda t: S.per_item_results(t),
}


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_pooled_metrics_equal_each_transcript_alone(three, metric):
    "Three protocols under one experiment name, pooled: every metric gives, per method, the numbers of that method alone."
    assert sorted(three) == ["fully_connected", "quiet_a0", "random"]
    f = METRICS[metric]
    pooled = f(pd.concat(list(three.values()), ignore_index=True))
    for m, t in three.items():
        alone = f(t)
        got = pooled[pooled["method"] == m].reset_index(drop=True)
        assert len(got) == len(alone) > 0, (metric, m)
        pd.testing.assert_frame_equal(got[list(alone.columns)], alone, check_dtype=False, obj=f"{metric} / {m}")


def test_pooled_groups_see_one_method(three):
    "The numbers the issue found wrong on a pooled table: agents per item and items per turn stay per method."
    pooled = pd.concat(list(three.values()), ignore_index=True)
    sc = item_scores(pooled)
    assert set(sc["n_agents"]) == {3}                                           # was 9 (15 with five methods)
    dec = decomposition_table(pooled)
    assert dec.groupby(["method", "turn"]).size().eq(len(ITEMS)).all()         # 12 items per method and turn, not merged


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_two_methods_under_one_name_are_refused(three, metric):
    t = three["fully_connected"]
    with pytest.raises(ConfigError, match="method"):
        METRICS[metric](pd.concat([t, t.assign(text="x")], ignore_index=True))


def test_tie_breaks_do_not_depend_on_the_experiment_name(three):
    "Same answers, other experiment names: the same majority votes everywhere (was: 21 of 120 threads differed)."
    t = three["fully_connected"]
    votes = [vote_table(t.assign(experiment=e))[["item_id", "sample", "round", "answer", "correct"]] for e in ("a", "b", "study-2")]
    pd.testing.assert_frame_equal(votes[0], votes[1])
    pd.testing.assert_frame_equal(votes[0], votes[2])
    maj = [M.accuracy_by_round(t.assign(experiment=e)).query("who == 'majority'")["accuracy"].tolist() for e in ("a", "b")]
    assert maj[0] == maj[1]
    # and accuracy_by_round's majority agrees with MADC's item_scores on the same transcript (was 0.725 vs 0.758)
    last = t[t["round"] == 2]
    acc = M.accuracy_by_round(t).query("who == 'majority' and round == 2")["accuracy"].iloc[0]
    assert acc == pytest.approx(item_scores(last, entropy=False)["accuracy"].mean())


def test_ties_exist_in_this_run(three):
    "The tie test above means something: some majority votes of this run are ties."
    t = three["fully_connected"]
    r1 = t[t["round"] == 1]
    tied = r1.groupby(["item_id", "sample"])["answer"].agg(lambda a: a.value_counts().max() == 1 and a.notna().sum() > 1)
    assert tied.any()


def test_strategy_scores_of_a_pooled_transcript(three):
    pooled = pd.concat(list(three.values()), ignore_index=True)
    sc = strategy_scores(pooled, entropy=False)                                 # was: KeyError 'round'
    assert sorted(sc["strategy"].unique()) == sorted(three)


def test_clustered_interval_wider_than_naive_on_a_transcript(three):
    "3 agents x 3 samples per item are answers of one item: the item-cluster interval is wider than Wilson over answers."
    t = three["fully_connected"]
    r0 = t[t["round"] == 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                         # 12 items: accuracy_ci warns (< 20 items)
        clu = S.accuracy_ci(r0["correct"].tolist(), r0["item_id"].tolist())
    naive = M.wilson_ci(int(r0["correct"].sum()), len(r0))
    assert clu["method"] == "item-cluster bootstrap" and clu["n_items"] == 12 and clu["n_answers"] == 12 * 9
    assert clu["ci_high"] - clu["ci_low"] > 1.2 * (naive[1] - naive[0])


def test_few_items_warn():
    with pytest.warns(UserWarning, match="12 items"):
        S.accuracy_ci([1, 0] * 6, [f"q{i}" for i in range(12)])


@pytest.mark.parametrize("n_items", [30, 60])
def test_paired_interval_covers_and_tests_hold_level(n_items):
    "Correlated agents (S.simulate_paired): coverage of d = 0.1 near 95%, rejection at d = 0 near 5%, 300 replicates."
    cover = rej_t = rej_m = 0
    reps = 300
    for r in range(reps):
        a, b = S.simulate_paired(n_items, 0.1, seed=r)
        d = S.paired_difference(a.mean(1), b.mean(1), n_resamples=1000, seed=r)
        cover += d["ci_low"] <= 0.1 <= d["ci_high"]
        a0, b0 = S.simulate_paired(n_items, 0.0, seed=50_000 + r)
        rej_t += S.paired_difference(a0.mean(1), b0.mean(1), n_resamples=10)["pvalue"] < 0.05
        rej_m += S.paired_difference(a0[:, 0], b0[:, 0], n_resamples=10)["pvalue"] < 0.05
    assert 0.90 <= cover / reps <= 0.985, cover / reps
    assert rej_t / reps <= 0.085 and rej_m / reps <= 0.085, (rej_t / reps, rej_m / reps)


def test_naive_answer_level_test_does_not_hold_level():
    "The control: a test over answers (agents as if independent) rejects far too often at d = 0; the item-level one does not."
    rej_naive = rej_item = 0
    for r in range(200):
        a, b = S.simulate_paired(30, 0.0, rho=0.9, seed=r)                      # agents of an item agree 90% of the time
        rej_naive += S.paired_test(a.ravel(), b.ravel(), "mcnemar")["pvalue"] < 0.05   # 90 'pairs' that are 30 items
        rej_item += S.paired_difference(a.mean(1), b.mean(1), n_resamples=10)["pvalue"] < 0.05
    assert rej_naive / 200 > 0.15 and rej_item / 200 <= 0.085, (rej_naive, rej_item)   # measured: 0.25 vs 0.06


def test_compare_methods_on_pooled_transcripts(three):
    res = S.per_item_results(pd.concat(list(three.values()), ignore_index=True))
    tab, cap = S.compare_methods(res, "fully_connected", min_items=10)
    assert tab["method"].tolist() == ["fully_connected", "random", "quiet_a0"]
    assert tab["n_items"].eq(12).all() and tab.attrs["correction"] == "holm"
    assert "12 distinct items" in cap and "bootstrap over items" in cap
    quiet = tab.set_index("method").loc["quiet_a0"]
    assert quiet["token_change"] < 0                                            # a0 silent: fewer tokens
    for r in tab.iloc[1:].itertuples():
        assert r.diff_low <= r.diff <= r.diff_high
        assert (("not distinguishable" in cap.split(f"{r.method} vs")[1].split(";")[0]) == (not r.distinguishable))


def test_readme_new_study_example_is_a_real_debate():
    "The README's new-study example runs, and its agents disagree (before: three copies of one agent at temperature 0)."
    from conftest import ROOT
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Using the kit in a new study", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    env: dict = {}
    exec(compile(block, "README.md", "exec"), env)
    disagree = env["r0"].groupby(["method", "item_id", "sample"])["answer"].nunique().gt(1).mean()
    assert disagree > 0.5, disagree
    assert sorted(env["pooled"]["method"].unique()) == ["fully_connected", "truth_last"]
    assert "30 distinct items" in env["caption"]
