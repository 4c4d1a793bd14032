"""Statistics that respect the design, and transcripts of several methods that pool safely (nbs/evaluation/05b_stats, 05d_compare, 05e_multiplicity, 05f_power, nbs/core/00_core).

Synthetic agents throughout: the numbers are illustrations of the kit's arithmetic, not results about LLMs."""
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from conftest import mad_study  # noqa: F401  (puts the checkout first on the path)
from mad_study import metrics as M
from mad_study import compare as C
from mad_study import multiplicity as MU
from mad_study import power as PW
from mad_study import stats as S
from mad_study import umad as U
from mad_study.core import ConfigError, Inference, Item
from mad_study.debate import (FullyConnected, OrderedPeers, make_agents, run_debate, self_consistency_at_budget,
                              tokens_per_thread)
from mad_study.voting import vote_table
from mad_study.madc import item_scores, path_consistency_table, strategy_scores
from mad_study.sim import SimBackend
from mad_study.umad import decomposition_table
from mad_study.core import Sampling

ITEMS = [Item(f"gsm8k/{i}", "gsm8k", f"What is {i} + {i}?", str(2 * i), "number") for i in range(12)]
SIMS = {"sim-a": SimBackend("sim-a", skill=0.45, parse_fail=0.05), "sim-b": SimBackend("sim-b", skill=0.65, parse_fail=0.0)}
AGENTS = make_agents(["sim-a", "sim-a", "sim-b"])


class QuietA0(FullyConnected):
    "A third protocol: a0 never speaks after round 0 (reused rows)."
    name = "quiet_a0"

    def speaks(self, ctx, agent):
        return agent != "a0"


def _run(protocol, experiment="study"):
    return run_debate(ITEMS, AGENTS, SIMS, protocol=protocol, debate_rounds=2, samples=3, sampling=Sampling(temperature=0.8),
                      experiment=experiment, progress=False)


@pytest.fixture(scope="module")
def three():
    return {t["method"].iloc[0]: t for t in (_run(FullyConnected()), _run(OrderedPeers("random")), _run(QuietA0()))}


METRICS = {
    "accuracy_by_round": lambda t: M.accuracy_by_round(t),
    "token_cost": lambda t: M.token_cost(t),
    "flip_table": lambda t: U.flip_table(t, 0, 2),
    "uncertainty_table": lambda t: U.uncertainty_table(t),
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
        rej_naive += S.paired_test(a.ravel(), b.ravel(), "mcnemar_exact")["pvalue"] < 0.05   # 90 'pairs' that are 30 items
        rej_item += S.paired_difference(a.mean(1), b.mean(1), n_resamples=10)["pvalue"] < 0.05
    assert rej_naive / 200 > 0.15 and rej_item / 200 <= 0.085, (rej_naive, rej_item)   # measured: 0.25 vs 0.06


def test_compare_methods_on_pooled_transcripts(three):
    res = S.per_item_results(pd.concat(list(three.values()), ignore_index=True))
    tab, cap = C.compare_methods(res, "fully_connected", inference=Inference(min_items=10))
    assert tab["method"].tolist() == ["fully_connected", "random", "quiet_a0"]
    assert tab["n_items"].eq(12).all() and tab.attrs["correction"] == "holm"
    assert "12 distinct items" in cap and "each its test inverted over items" in cap
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


# ---- issue 40: statistics that cannot mislead -------------------------------------------------------------------------

def _loud(fn, *a, **k):
    "fn's result and the messages of the warnings it raised."
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*a, **k)
    return out, [str(x.message) for x in w]


@pytest.fixture(scope="module")
def mad_debate():
    return run_debate(ITEMS, AGENTS, SIMS, debate_rounds=2, sampling=Sampling(temperature=0.8), experiment="budget", progress=False)


def test_budget_matched_self_consistency_matches_the_spend(mad_debate):
    "K is chosen so that the samples spend within the tolerance of the debate's tokens per item (was: silently capped at 64)."
    sc, msgs = _loud(self_consistency_at_budget, mad_debate, ITEMS, "sim-b", SIMS)
    a = sc.attrs
    assert a["matched"] and not a["clamped"] and abs(a["spend"] - 1) <= a["tolerance"] == 0.05, a
    assert a["sc_tokens"] == pytest.approx(tokens_per_thread(sc)) and a["k"] == sc["agent"].nunique()
    assert f"{100 * a['spend']:.1f}%" in a["note"] and "budget-matched within ±5%" in a["note"] and not msgs


def test_a_binding_cap_warns_and_says_the_spend(mad_debate):
    sc, msgs = _loud(self_consistency_at_budget, mad_debate, ITEMS, "sim-b", SIMS, max_samples=3)
    a = sc.attrs
    assert a["k"] == 3 and a["clamped"] and not a["matched"] and a["spend"] < 0.95
    assert f"spending {100 * a['spend']:.1f}% of the reference's tokens" in a["note"] and "NOT budget-matched" in a["note"]
    assert any("K capped at max_samples = 3" in m for m in msgs)


def _family(n=200, seed=0):
    "One reference and four methods with 0/1 answers on n items; gaps 0, 4, 6 and 20 points."
    g = np.random.default_rng(seed)
    p = g.uniform(0.2, 0.9, n)
    ref = (g.random(n) < p).astype(float)
    rows = [dict(item_id=i, method="ref", correct=ref[i]) for i in range(n)]
    for m, gap in (("same", 0.0), ("small", 0.04), ("mid", 0.06), ("big", 0.2)):
        flip = g.random(n) < 0.15
        v = np.where(flip, (g.random(n) < np.clip(p - gap, 0, 1)).astype(float), ref)
        rows += [dict(item_id=i, method=m, correct=v[i]) for i in range(n)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", range(6))
def test_intervals_come_from_the_verdicts_family(seed):
    "Holm verdicts next to Holm-level intervals: a gap whose interval excludes 0 is distinguishable, unless `agrees` says the two part."
    tab, cap = _loud(C.compare_methods, _family(seed=seed), "ref", tokens=None)[0]
    gaps = tab[tab["method"] != "ref"].dropna(subset=["diff_low"])
    # on the verdict's side of 0: past 0, or closed at 0 by Holm (`diff_cut`, 0 its near bound)
    excl = (gaps["diff_low"] > 0) | (gaps["diff_high"] < 0) | gaps["diff_cut"].eq(True)
    assert (excl == gaps["distinguishable"].astype(bool)).all() and gaps["agrees"].astype(bool).all()   # one procedure
    cut = gaps[gaps["diff_cut"].eq(True)]
    assert ((cut["diff_low"] == 0) | (cut["diff_high"] == 0)).all()                # closed at 0, never open
    assert gaps["diff_level"].between(0.95, 1 - 0.05 / 4).all()
    assert "Holm-compatible simultaneous intervals (" in cap and "disagree" not in cap
    none, cap0 = _loud(C.compare_methods, _family(seed=seed), "ref", tokens=None, inference=Inference(correction="none"))[0]
    assert none["diff_level"].dropna().eq(0.95).all() and "unadjusted like the p-values (no correction)" in cap0


def test_holm_levels_are_dual_to_holm_on_t_intervals():
    g = np.random.default_rng(1)
    for _ in range(100):
        ds = [g.normal(g.choice([0.0, 0.25, 0.5]), 1, 30) for _ in range(6)]
        p = np.array([stats.ttest_1samp(d, 0).pvalue for d in ds])
        lv = MU._adjusted_levels(p, "holm", 0.95)
        excl = [not (ci.low <= 0 <= ci.high) for d, l in zip(ds, lv) for ci in [stats.ttest_1samp(d, 0).confidence_interval(l)]]
        assert excl == list(MU.adjust_pvalues(p) < 0.05)


def test_the_smad_ring_case_no_longer_contradicts_itself():
    "The audit's case: raw McNemar p = 0.009, Holm p = 0.063 among 15: its interval is no longer the unadjusted 95% one that excluded 0."
    p = np.r_[0.009 / 1, np.linspace(0.0001, 0.9, 14)]
    lv = MU._adjusted_levels(p, "holm", 0.95)
    adj = MU.adjust_pvalues(p)
    assert adj[0] > 0.05 and lv[0] > 0.99                              # tested at a step level, not at 95%


def test_degenerate_samples_are_named_not_certain():
    d, msgs = _loud(S.paired_difference, np.ones(3), np.zeros(3))       # was: +100 points [+100, +100]
    assert d["status"] == "zero variance" and -0.5 < d["ci_low"] < 0 < d["ci_high"] == 1.0   # Tango's score interval
    assert d["pvalue"] == pytest.approx(2 * stats.norm.sf(3 ** 0.5)) and d["pvalue"] > 0.05   # 3 items: not distinguishable
    assert any("zero variance (3 items)" in m for m in msgs)
    c, msgs = _loud(S.paired_difference, np.linspace(0, 1, 50), np.linspace(0, 1, 50) - 0.1)   # was: t = 1e16, p = 0
    assert c["status"] == "zero variance" and c["test"] == "permutation" and c["pvalue"] == pytest.approx(2 * 0.5 ** 50) and c["pvalue"] > 0
    assert np.isnan(c["ci_low"]) and msgs
    t, msgs = _loud(S.paired_test, np.linspace(0, 1, 50), np.linspace(0, 1, 50) - 0.1)
    assert t["status"] == "zero variance" and np.isfinite(t["statistic"]) and t["pvalue"] > 0 and msgs
    e, msgs = _loud(S.tost, np.ones(3), np.ones(3), 0.05)               # was: equivalent, p = 0
    assert not e["equivalent"] and e["pvalue"] == pytest.approx(0.125) and e["test"] == "permutation" and msgs
    i, msgs = _loud(S.paired_difference, [0.2, 0.5, 0.9], [0.2, 0.5, 0.9])
    assert i["status"] == "identical" and i["pvalue"] == 1.0 and np.isnan(i["ci_low"]) and msgs


def test_tiny_samples_warn_and_use_an_exact_test():
    d, msgs = _loud(S.paired_difference, [0.5, 0.9, 0.2, 0.7], [0.4, 0.6, 0.3, 0.5])
    assert d["status"] == "few items" and d["test"] == "permutation" and any("few items (4 items)" in m for m in msgs)
    signs = np.array(np.meshgrid(*[[-1, 1]] * 4)).reshape(4, -1).T * np.array([0.1, 0.3, -0.1, 0.2])
    assert d["pvalue"] == pytest.approx(np.mean(np.abs(signs.mean(1)) >= 0.125 - 1e-12))   # exact over the 16 sign vectors
    b, msgs = _loud(S.paired_difference, [1, 0, 1, 1, 0], [0, 0, 1, 0, 0])
    assert b["test"] == "mcnemar" and b["status"] == "few items" and msgs


def test_compare_methods_never_says_distinguishable_and_equivalent():
    g = np.random.default_rng(2)
    base = g.uniform(0.3, 0.7, 300)
    res = pd.DataFrame([dict(item_id=i, method=m, correct=v) for i in range(300)
                        for m, v in (("R", base[i]), ("M", base[i] + 0.02 + g.normal(0, 0.01)))])
    tab, cap = C.compare_methods(res, "R", tokens=None, inference=Inference(margin=0.05))
    m = tab.set_index("method").loc["M"]
    assert m["distinguishable"] and m["tost_equivalent"] and not m["equivalent"] and m["verdict"] == "distinguishable"
    assert f"M vs R: {100 * m['diff']:+.1f} points" in cap and 0.015 < m["diff"] < 0.025 and "so not called equivalent" in cap
    both = tab[(tab["distinguishable"] == True) & (tab["equivalent"] == True)]
    assert both.empty


def test_series_pair_by_item_not_position():
    "A shuffled Series was paired by position (p 0.029 -> 0.065); now it aligns on the item key."
    g = np.random.default_rng(3)
    a = pd.Series((g.random(60) < 0.7).astype(float), index=[f"q{i}" for i in range(60)])
    b = pd.Series((g.random(60) < 0.5).astype(float), index=a.index)
    assert S.paired_difference(a, b.sample(frac=1, random_state=1)) == S.paired_difference(a, b)
    with pytest.raises(ConfigError, match="both as Series"):
        S.paired_difference(a, b.sample(frac=1, random_state=1).to_numpy())
    with pytest.raises(ConfigError, match="on='shared'"):
        S.paired_difference(a, b.iloc[:40])
    d, msgs = _loud(S.paired_difference, a, b.iloc[:40], on="shared")
    assert d["n_items"] == 40 and d["n_dropped"] == 20 and any("20 of 60 items dropped" in m for m in msgs)
    with pytest.raises(ConfigError, match="on='shared'"):
        S.tost(a, b.iloc[:40], 0.1)


def test_compare_methods_on_different_item_sets_raises_unless_shared():
    "Methods run on different items: it quietly kept the 50 shared of 150; now it raises, or says how many it dropped."
    res = _family(n=150)
    res = res[~((res["method"] == "big") & (res["item_id"] >= 50))]
    with pytest.raises(ConfigError, match="on='shared'"):
        C.compare_methods(res, "ref", tokens=None)
    (tab, cap), msgs = _loud(C.compare_methods, res, "ref", tokens=None, inference=Inference(on="shared"))
    assert tab["n_items"].eq(50).all() and tab.attrs["n_dropped"] == 100
    assert "on 50 distinct items answered by every method (100 of 150 items dropped" in cap
    assert any("100 of 150 items dropped" in m for m in msgs)


def test_repeated_runs_are_a_named_dimension():
    "A second run appended became extra samples and switched McNemar to t; now it raises unless a `run` column names it."
    one = _family(n=60).assign(sample=0)
    with pytest.raises(ConfigError, match="run"):
        C.compare_methods(pd.concat([one, one]), "ref", tokens=None)
    tab, cap = _loud(C.compare_methods, pd.concat([one.assign(run=0), one.assign(run=1)]), "ref", tokens=None)[0]
    assert tab.attrs["runs"] == {m: 2 for m in ["big", "mid", "ref", "same", "small"]} and "runs per method averaged per item" in cap
    assert tab.set_index("method").loc["big", "test"] == "mcnemar"     # two identical runs: still one 0/1 value per item


def test_text_outcomes_are_a_clear_error():
    "`correct` stored as strings became NaN, then 'fewer than 2 items' (or, via bool('False'), accuracy 1)."
    res = _family(n=30).assign(correct=lambda d: d["correct"].map({1.0: "True", 0.0: "False"}))
    for call in (lambda: C.compare_methods(res, "ref", tokens=None), lambda: S.item_means(res),
                 lambda: S.accuracy_ci(["False", "False"]), lambda: S.paired_difference(["1", "0"], [0, 1])):
        with pytest.raises(ConfigError, match="text"):
            call()


def test_coverage_strict_and_inclusive():
    "The interval's bounds sit on a lattice: strict coverage (lo < d < hi) is below inclusive (lo <= d <= hi), both reported."
    strict = incl = 0
    for r in range(150):
        a, b = S.simulate_paired(20, 0.1, seed=30_000 + r)
        d = S.paired_difference(a.mean(1), b.mean(1), n_resamples=500, seed=r)
        strict += d["ci_low"] < 0.1 - 1e-9 and 0.1 + 1e-9 < d["ci_high"]
        incl += d["ci_low"] - 1e-9 <= 0.1 <= d["ci_high"] + 1e-9
    assert strict <= incl and 0.87 <= incl / 150 <= 0.99, (strict, incl)


# ---------------------------------------------------------------- issue 53: one inference per comparison
def _draw(design, n, diff, g):
    "An independent model of paired per-item values (not the kit's simulator): binary, near-ceiling or correlated."
    pa, pb = (np.full(n, 0.96 + diff / 2), np.full(n, 0.96 - diff / 2)) if design == "near-ceiling" else (
        (p := g.uniform(0.2, 0.8, n)) + diff / 2, p - diff / 2)
    u = g.random(n)
    v = np.where(g.random(n) < (0.9 if design == "correlated" else 0.0), u, g.random(n))
    return (u < pa).astype(float), (v < pb).astype(float)


@pytest.mark.parametrize("design,n", [("binary", 20), ("near-ceiling", 20), ("near-ceiling", 10), ("correlated", 10),
                                      ("correlated", 30)])
def test_interval_and_verdict_never_disagree_and_cover(design, n):
    "Issue 53: coverage was 0.72 near the ceiling at 10 items and 0.79 for correlated methods; verdicts parted from intervals."
    g, reps, cover, reject = np.random.default_rng(7), 300, 0, 0
    d = 0.02 if design == "near-ceiling" else 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                           # few / identical items warn
        for _ in range(reps):
            r = S.paired_difference(*_draw(design, n, d, g))
            cover += r["ci_low"] <= d <= r["ci_high"]
            assert (not (r["ci_low"] <= 0 <= r["ci_high"])) == (r["pvalue"] < 0.05)
            reject += S.paired_difference(*_draw(design, n, 0.0, g))["pvalue"] < 0.05
    assert cover / reps >= 0.95 - 3 * 0.0126 and reject / reps <= 0.05 + 3 * 0.0126, (cover / reps, reject / reps)


def test_holm_intervals_hold_as_a_family():
    "Ten null methods: some interval excluded 0 in 20.7% of tables at 10 items; ten all apart: step levels missed in 9.5%."
    g = np.random.default_rng(3)
    fwe = miss = 0
    for _ in range(150):
        p = g.uniform(0.2, 0.8, 30)
        ref = (g.random(30) < p).astype(float)
        rows = [dict(item_id=i, method="ref", correct=ref[i]) for i in range(30)]
        for j in range(10):
            v = (g.random(30) < p).astype(float)
            rows += [dict(item_id=i, method=f"m{j}", correct=v[i]) for i in range(30)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = C.compare_methods(pd.DataFrame(rows), "ref", tokens=None)[0].iloc[1:]
        fwe += bool(((t["diff_low"] > 0) | (t["diff_high"] < 0)).any())          # a closed cut [0, +x] holds 0
    assert fwe / 150 <= 0.05 + 3 * 0.018, fwe
    for _ in range(150):                                                          # all ten 0.2 apart: simultaneous
        p = g.uniform(0.2, 0.8, 100)
        ref = (g.random(100) < p).astype(float)
        ms = [(g.random(100) < p + 0.2).astype(float) for _ in range(10)]
        ps = [S.paired_inference(m, ref)["pvalue"] for m in ms]
        lv, cut = MU.family_levels(ps, "holm", 0.95)
        ivs = [S.paired_inference(m, ref, lvl) for m, lvl in zip(ms, lv)]
        miss += any(not (r["ci_low"] <= 0.2 <= r["ci_high"]) for r in ivs)
    assert miss / 150 <= 0.05 + 3 * 0.018, miss


def test_the_table_is_the_same_under_another_seed():
    "Issue 53: which arena gaps disagreed depended on the bootstrap's seed; no part of the gap inference resamples now."
    res = _family(n=150, seed=4)
    a, ca = _loud(C.compare_methods, res, "ref", inference=Inference(seed=0))[0]
    b, cb = _loud(C.compare_methods, res, "ref", inference=Inference(seed=12345))[0]
    cols = ["diff", "diff_low", "diff_high", "diff_level", "pvalue", "p_adjusted", "verdict", "acc_low", "acc_high"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert ca == cb


def test_bad_inputs_are_clear_errors_or_named_warnings():
    "inf gave 'zero variance' and p = 1.9e-6; an appended method (no sample / run / seed) was averaged; NaN pairs left silently."
    with pytest.raises(ConfigError, match="infinite"):
        S.paired_difference([0.5, np.inf, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ConfigError, match="infinite"):
        S.paired_difference(np.r_[0.5, np.inf, 0.2], np.r_[0.1, 0.2, 0.3])
    one = _family(n=40)
    twice = pd.concat([one, one[one["method"] == "big"]])
    with pytest.raises(ConfigError, match=r"method 'big' has items \[0, 1, 2, 3, 4\] ... more than once; no `sample`"):
        C.compare_methods(twice, "ref", tokens=None)
    with pytest.raises(ConfigError, match="seed"):                               # a seed column alone is checked
        C.compare_methods(pd.concat([one.assign(seed=1), one.assign(seed=1)]), "ref", tokens=None)
    d, msgs = _loud(S.paired_difference, [1, 0, None, 1, np.nan] * 4, [0, 0, 1, None, 1] * 4)
    assert d["n_items"] == 8 and any("12 of 20 pairs dropped" in m for m in msgs)
    assert S._signflip_p(np.r_[0.1, 0.2, -0.3] * 3) == 1.0                        # was 0.855-0.997: a floating-point tie


def test_caption_writes_a_missing_interval_in_words():
    "A caption read '[+nan, +nan]'."
    t = pd.DataFrame([dict(method="ref", n_items=1), dict(method="m", n_items=1, diff=0.0, diff_low=np.nan, diff_high=np.nan,
                                                         status="too few items", test="ttest", p_adjusted=np.nan,
                                                         distinguishable=False, verdict="not distinguishable")])
    t.attrs.update(reference="ref", correction="holm", level=0.95)
    cap = C.comparison_caption(t)
    assert "nan" not in cap.replace("p = nan", "") and "(no interval: too few items)" in cap, cap


def test_large_n_in_bounded_memory():
    "100,000 items took 53 s and a 1.6 GB index array; the interval is closed-form now (benchmarks/run.py times it)."
    import tracemalloc
    g = np.random.default_rng(0)
    a, b = (g.random(100_000) < 0.6).astype(float), (g.random(100_000) < 0.55).astype(float)
    tracemalloc.start()
    d = S.paired_difference(a, b)
    S.boot_mean_ci(a - b, 0.95, 200, 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100 * 2**20 and d["ci_low"] < 0.05 < d["ci_high"], peak


def test_holm_cut_is_closed_at_zero():
    "A null gap that Holm tells apart at a later step: its interval is [0, +x] (Holm shows the sign), it holds the true 0, and the caption writes it closed; 1 null + 1 apart by +0.5 at 100 items, the family misses at most alpha (it was 0.072 with '(0, +x]')."
    g = np.random.default_rng(11)
    miss = cuts = 0
    for _ in range(150):
        p = g.uniform(0.1, 0.4, 100)
        cols = {"ref": p, "null": p, "apart": p + 0.5}
        rows = [dict(item_id=i, method=m, correct=float(g.random() < q[i])) for m, q in cols.items() for i in range(100)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t, cap = C.compare_methods(pd.DataFrame(rows), "ref", tokens=None)
        t = t.set_index("method")
        true = {"null": 0.0, "apart": 0.5}
        miss += any(not (t.loc[m, "diff_low"] <= v <= t.loc[m, "diff_high"]) for m, v in true.items())
        if t.loc["null", "diff_cut"] is True:
            cuts += 1
            lo, hi = t.loc["null", "diff_low"], t.loc["null", "diff_high"]
            assert (lo == 0 or hi == 0) and lo <= 0 <= hi and t.loc["null", "agrees"] is True
            assert ("null vs ref: " + ("+" if hi > 0 else "-")) in cap and ("[0, +" in cap or ", 0]" in cap) and "(0, +" not in cap, cap
    assert cuts > 0 and miss / 150 <= 0.05 + 3 * 0.018, (cuts, miss)                # seed 11: 2 closed cuts


# ---------------------------------------------------------------------------------------------------------------
# How many items (issue 50): the power approximations against the kit's own tests, by simulation


def _simulated_power_binary(n, p10, p01, reps, alpha=0.05, family=1, seed=0):
    "Share of `reps` replicates of n items (p10, p01 discordant) that `paired_inference` (McNemar) tells apart."
    g, level = np.random.default_rng(seed), 1 - alpha / family
    told = 0
    for counts in g.multinomial(n, [p10, p01, 1 - p10 - p01], size=reps):
        a, b = np.repeat([1.0, 0.0, 1.0], counts), np.repeat([0.0, 1.0, 1.0], counts)
        r = S.paired_inference(a, b, level, "mcnemar")
        # the verdict and the interval agree: a replicate told apart has its interval off 0
        assert (r["pvalue"] < 1 - level) == (r["ci_low"] > 0 or r["ci_high"] < 0)
        told += r["pvalue"] < 1 - level
    return told / reps


@pytest.mark.parametrize("n, p10, p01, family", [(200, 0.15, 0.05, 1), (800, 0.12, 0.08, 3), (500, 0.06, 0.02, 1)])
def test_power_paired_binary_matches_the_kits_test_by_simulation(n, p10, p01, family):
    """Connor's approximation within 0.03 of the share McNemar's score test rejects (4,000 replicates: sd <= 0.008),
    the exact sum within 0.02."""
    sim = _simulated_power_binary(n, p10, p01, 4000, family=family)
    assert abs(sim - PW.power_paired_binary(n, p10, p01, family=family)) < 0.03, sim
    assert abs(sim - PW.power_paired_binary(n, p10, p01, family=family, exact=True)) < 0.02, sim


def test_n_for_power_reaches_its_power_in_simulation():
    "At n_for_power's n the simulated power is at least 80% (within the binomial sd); at 3/4 of n it is well below."
    n = PW.n_for_power(0.05, 0.15, family=2)
    assert _simulated_power_binary(n, 0.1, 0.05, 4000, family=2, seed=1) > 0.8 - 0.02
    assert _simulated_power_binary(int(0.75 * n), 0.1, 0.05, 4000, family=2, seed=2) < 0.72


def test_few_discordant_items_make_the_approximation_conservative():
    """Where few discordant items are expected and nearly all go one way, the approximation understates the test's
    power (documented in 05b); the exact sum does not."""
    for n, p10, p01, family in ((100, 0.1, 0.0, 3), (50, 0.1, 0.01, 1)):
        sim = _simulated_power_binary(n, p10, p01, 4000, family=family)
        assert sim > PW.power_paired_binary(n, p10, p01, family=family) + 0.02, (n, sim)
        assert abs(sim - PW.power_paired_binary(n, p10, p01, family=family, exact=True)) < 0.02, (n, sim)


@pytest.mark.parametrize("n, effect, sd, family", [(20, 0.5, 1.0, 1), (40, 0.3, 0.8, 3), (12, 1.0, 1.5, 1)])
def test_power_paired_t_matches_the_kits_t_test_by_simulation(n, effect, sd, family):
    "The noncentral-t power within 0.025 of the share the kit's paired t-test rejects (4,000 replicates)."
    g, level = np.random.default_rng(3), 1 - 0.05 / family
    told = 0
    for _ in range(4000):
        d = g.normal(effect, sd, n)
        told += S.paired_inference(d, np.zeros(n), level, "ttest")["pvalue"] < 1 - level
    assert abs(told / 4000 - PW.power_paired_t(n, effect, sd, family=family)) < 0.025


def test_plan_sizes_rows_agree_with_the_functions():
    "Each row of the plan is n_for_power, power_paired_binary and resolvable_effect of that row."
    t = PW.plan_sizes(pd.DataFrame(dict(comparison=["a", "b"], effect_pts=[3, -5], discordance=[0.2, 0.25],
                                       n=[300, 1000], family=[2, 2])))
    for r in t.to_dict("records"):
        e, psi = r["effect_pts"] / 100, r["discordance"]
        assert r["n_needed"] == PW.n_for_power(e, psi, family=2)
        assert r["power_now"] == pytest.approx(PW.power_paired_binary(r["n"], (psi + e) / 2, (psi - e) / 2, family=2))
        assert r["resolves_pts"] == pytest.approx(100 * PW.resolvable_effect(r["n"], psi, family=2))
    with pytest.raises(ConfigError, match="plan_sizes row 'b'.*discordance"):
        PW.plan_sizes([dict(comparison="b", effect_pts=3, discordance=0, n=100)])
