"""UMAD in the sim's one world (issue 50): the experiments set no agents of their own, and each control (Fig. 2's
`debate_noise` off, Fig. 1's `context_entropy` off) is the same world with one mechanism off: its round-0 answers are
the effect run's, item by item. Values of the world are read from params/profiles/sim.yaml, never assumed."""
import dataclasses

import pandas as pd
import pytest

from mad_study.core import Sampling
from mad_study.debate import run_debate
from mad_study.registry import experiments, load_profile
from mad_study.params import merge_params, validate_params
from mad_study.sim import SimAgent, SimBackend, sim_items
from mad_study.umad import UMAD_PROMPT, umad_agents, umad_protocol

EXPS = ("umad_decomposition", "umad_zeroshot")


def _params(eid):
    prof = load_profile("sim")
    e = experiments()[eid]
    p = merge_params(e, prof)
    validate_params(p, e, prof)
    return p, prof


@pytest.mark.parametrize("eid", EXPS)
def test_umad_runs_in_the_world(eid):
    "No `sim_agents:` of UMAD's own: every sim model it runs has the world's parameters (params/profiles/sim.yaml)."
    p, prof = _params(eid)
    assert "sim_agents" not in (e := experiments()[eid]).spec.get("params", {})
    assert "sim_agents" not in (e.spec.get("profiles") or {}).get("sim", {})
    world = prof["sim_agents"]
    models = {m for k in ("pairs", "zeroshot_models", "aleatoric_control_models") for pr in p.get(k) or [] for m in pr}
    assert models and all(m in world and p["sim_agents"][m] == world[m] for m in models)


def test_fig5_has_both_homogeneous_baselines_of_the_heterogeneous_pair():
    "App. D.4: a heterogeneous pair is read against its two homogeneous baselines, so the sim profile runs all three."
    p, _ = _params("umad_decomposition")
    het = [pr for pr in p["pairs"] if pr[0] != pr[1]]
    assert het and all([m, m] in p["pairs"] for pr in het for m in pr)


def _debate(agents, items, off=(), rounds=2, k=3):
    "UMAD's protocol (App. F.2, history none) with the world's agents `agents` (name -> SimAgent), mechanisms `off`."
    b = {m: SimBackend(m, agent=a, off=off) for m, a in agents.items()}
    pair = list(agents) if len(agents) == 2 else [*agents] * 2
    return run_debate(items, umad_agents(pair), b, protocol=umad_protocol(), prompt=UMAD_PROMPT, samples=k,
                      debate_rounds=rounds, sampling=Sampling(temperature=1.0, seed=0), history="none",
                      progress=False)


def _key(tr):
    return tr.set_index(["item_id", "sample", "agent", "round"]).sort_index()


@pytest.mark.parametrize("mech, key", [("debate_noise", "aleatoric_control_models"), ("context_entropy", "pairs")])
def test_control_round0_identical_item_by_item(mech, key):
    """Fig. 2's control (`debate_noise` off) and Fig. 1's (`context_entropy` off): the same world, the same random numbers,
    so round 0 is the effect run's, item by item. The mechanism set to a positive value where the world has none, so
    that the control is seen to differ downstream (the world's own value is the fit's: 16_calibration)."""
    p, prof = _params("umad_decomposition")
    m = p[key][0][0]
    a = SimAgent.from_params(prof["sim_agents"][m])
    a = dataclasses.replace(a, **{mech: getattr(a, mech) or (0.3 if mech == "debate_noise" else 2.5)})
    items = sim_items("math500", 30, seed=0, source="fixture")
    eff, ctl = (_key(_debate({m: a}, items, off)) for off in ((), (mech,)))
    r0 = pd.IndexSlice[:, :, :, 0]
    pd.testing.assert_series_equal(eff.loc[r0, "answer"], ctl.loc[r0, "answer"])
    pd.testing.assert_series_equal(eff.loc[r0, "correct"], ctl.loc[r0, "correct"])
    later = eff.index.get_level_values("round") > 0
    if mech == "debate_noise":  # the aleatoric cost acts on debate turns only
        assert (eff.loc[later, "answer"] != ctl.loc[later, "answer"]).any()
    else:  # entropy only: every answer identical, debate turns' entropy higher
        pd.testing.assert_series_equal(eff["answer"], ctl["answer"])
        assert (eff.loc[later, "token_entropy"] > ctl.loc[later, "token_entropy"]).all()


def test_heterogeneous_pair_control_round0_identical():
    "The heterogeneous pair of the world (two different models) with `debate_noise` off: round 0 unchanged too."
    p, prof = _params("umad_decomposition")
    het = next(pr for pr in p["pairs"] if pr[0] != pr[1])
    agents = {m: dataclasses.replace(SimAgent.from_params(prof["sim_agents"][m]), debate_noise=0.2) for m in het}
    items = sim_items("math500", 20, seed=0, source="fixture")
    eff, ctl = (_key(_debate(agents, items, off)) for off in ((), ("debate_noise",)))
    r0 = pd.IndexSlice[:, :, :, 0]
    pd.testing.assert_series_equal(eff.loc[r0, "answer"], ctl.loc[r0, "answer"])


def test_zeroshot_gain_control_is_the_same_world_with_conformity_off():
    """Table 1's control (10d): each zero-shot setting again with conformity off. Round 0 is the effect run's answer by
    answer; later turns differ, and the weaker heterogeneous agent (A0), lifted by conformity, gains less without it."""
    p, prof = _params("umad_zeroshot")
    het = next(pr for pr in p["zeroshot_models"] if pr[0] != pr[1])
    agents = {m: SimAgent.from_params(prof["sim_agents"][m]) for m in het}
    assert agents[het[0]].conformity > 0                    # the mechanism the control switches off is on
    items = sim_items("math500", 40, seed=0, source="fixture")
    eff, ctl = (_key(_debate(agents, items, off, rounds=3, k=3)) for off in ((), ("conformity",)))
    r0 = pd.IndexSlice[:, :, :, 0]
    pd.testing.assert_series_equal(eff.loc[r0, "answer"], ctl.loc[r0, "answer"])
    later = eff.index.get_level_values("round") > 0
    assert (eff.loc[later, "answer"] != ctl.loc[later, "answer"]).any()
    gain = lambda t: (t.xs("a0", level="agent")["correct"].astype(float).groupby(level="round").mean().pipe(
        lambda s: s.iloc[-1] - s.iloc[0]))
    assert gain(eff) > gain(ctl)
