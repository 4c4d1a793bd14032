"""Meta-Debate in the sim's one world (issue 50): its role-playing sim (`RoleSimBackend`, 04e_role_sim) is a family of its
own (a skill per role, per modality, a per-(model, role, question) term), built on the world's agent: what it shares
with the world (skill on the task, the debate mechanisms, the random numbers of a turn) is the world's, and a mechanism
switched off (`off=`) leaves round 0 unchanged, as in the plain sim."""

from mad_study.core import Sampling
from mad_study.debate import make_agents, run_debate
from mad_study.registry import experiments, load_profile
from mad_study.params import merge_params
from mad_study.role_sim import RoleSimBackend
from mad_study.sim import SimAgent, sim_items


def _world_models():
    prof = load_profile("sim")
    p = merge_params(experiments()["meta_tab1"], prof)
    return prof, p


def test_meta_debate_runs_in_the_world():
    "No `sim_agents:` of Meta-Debate's own: the role sims start from the world's agents (params/profiles/sim.yaml)."
    prof, p = _world_models()
    for eid in ("meta_tab1", "meta_tab2", "meta_examples"):
        assert "sim_agents" not in (experiments()[eid].spec.get("profiles") or {}).get("sim", {})
    for m in p["models"]:
        assert p["sim_agents"][m] == prof["sim_agents"][m]
        b = RoleSimBackend(m, role_skill={"cot": 0.7}, **prof["sim_agents"][m])
        assert b.agent == SimAgent.from_params(prof["sim_agents"][m])


def test_role_sim_control_round0_identical():
    "A debate mechanism off (`off=`, conformity) in the role sim: round 0 is the effect run's, item by item; later rounds differ."
    prof, p = _world_models()
    m = p["models"][0]
    spec = {**prof["sim_agents"][m], "conformity": 0.9}
    items = sim_items("gpqa", 40, seed=0, source="fixture")
    runs = []
    for off in ((), ("conformity",)):
        b = {m: RoleSimBackend(m, off=off, **spec)}
        tr = run_debate(items, make_agents([m] * 3), b, debate_rounds=2, sampling=Sampling(temperature=1.0, seed=0),
                        progress=False)
        runs.append(tr.set_index(["item_id", "agent", "round"]).sort_index())
    eff, ctl = runs
    r0 = eff.index.get_level_values("round") == 0
    assert (eff.loc[r0, "answer"] == ctl.loc[r0, "answer"]).all()
    assert (eff.loc[~r0, "answer"] != ctl.loc[~r0, "answer"]).any()
