"""The sim as one world with common random numbers (issue 50): every mechanism on vs off in the same debate,
renaming a model, and the engines' request seeds (never the model's name)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from mad_study.core import ConfigError, Item, Sampling, derive_seed
from mad_study.debate import Agent, FullyConnected, make_agents, run_debate
from mad_study.sim import MECHANISMS, SimBackend, sim_items, uniforms

# every mechanism switched on, so that switching one off changes something downstream of it
WORLD = dict(skill=0.6, task_skill={"gsm8k": 0.65}, difficulty_sd=1.0, stubborn_correct=0.6, stubborn_wrong=0.3,
             conformity=0.6, recency=2.0, recognition=0.3, persuasion=0.5, tier_trust=1.5, context_decay=0.3, debate_noise=0.2,
             context_entropy=1.0, signal_strength=1.0, signal_inversion=0.5, parse_fail=0.05)
MODELS = {"sim-x": dict(WORLD, skill=0.5), "sim-y": dict(WORLD), "sim-z": dict(WORLD, skill=0.7)}
ITEMS = sim_items("gsm8k", 48)
SIGNALS = ["logprob_sum", "logprob_min", "logprob_mean", "perplexity", "token_entropy", "confidence"]
# mechanisms that act already in round 0 (each test says what may differ there)
# (context_harm: a round-0 prompt has tokens too, so a turn may be derailed there; P = 1 - exp(-c n / 1000))
ROUND0 = {m for m, v in MECHANISMS.items() if v["round0"]}


class Tagged(FullyConnected):
    "Du et al.'s fully connected debate with RUMAD's tags on the shown peers (so that tier_trust acts)."

    def tags(self, ctx, agent, peers):
        return tuple("[Critical] " if i == 0 else "[Background] " for i, _ in enumerate(peers))


def debate(off=(), temperature=1.0, names=None, models=MODELS):
    names = names or {m: m for m in models}
    backends = {names[m]: SimBackend(names[m], off=off, **p) for m, p in models.items()}
    agents = [Agent(f"a{i}", names[m]) for i, m in enumerate(models)]
    tr = run_debate(ITEMS, agents, backends, protocol=Tagged(), debate_rounds=2, prompt="rumad_math",
                    sampling=Sampling(temperature=temperature, seed=3), progress=False)
    return tr.sort_values(["item_id", "agent", "round"]).reset_index(drop=True)


def _values(s):
    "A column as a list, missing values as None (so that a missing answer equals only a missing answer)."
    return [None if pd.isna(v) else v for v in s]


def _same(a, b, cols):
    return all(_values(a[c]) == _values(b[c]) for c in cols)


def _differ(a, b, col="answer"):
    return np.array([x != y for x, y in zip(_values(a[col]), _values(b[col]))])


@pytest.fixture(scope="module", params=[1.0, 0.0], ids=["sampling", "greedy"])
def world(request):
    return request.param, debate(temperature=request.param)


@pytest.mark.parametrize("mech", sorted(MECHANISMS))
def test_every_mechanism_off_changes_only_what_lies_downstream(world, mech):
    temperature, on = world
    off = debate(off=(mech,), temperature=temperature)
    r0 = on["round"] == 0
    if mech == "signals":
        # every answer and text identical in every round: only the signal columns differ
        assert _same(on, off, ["answer", "text", "correct", "prompt_tokens", "completion_tokens"])
        assert not _same(on, off, ["confidence"])
    elif mech == "context_entropy":
        # answers identical; only debate turns' token entropy differs
        assert _same(on, off, ["answer", "text", "confidence"])
        assert _same(on[r0], off[r0], ["token_entropy"]) and not _same(on, off, ["token_entropy"])
    elif mech == "competence":
        # round 0: the same latent u_solve, so an answer differs only where one run is right and the other wrong
        a, b = on[r0], off[r0]
        diff = _differ(a, b)
        assert (a["correct"][diff] != b["correct"][diff]).all()
        assert diff.any()
    elif mech == "parse_fail":
        # round 0: the answers differ exactly where the effect run failed to give one
        a, b = on[r0], off[r0]
        diff = _differ(a, b)
        assert diff.any() and a["answer"][diff].isna().all() and b["answer"].notna().all()
    elif mech == "context_harm":
        # round 0: an answer differs only where the effect run's turn was derailed (u_derail < p_derail)
        a, b = on[r0], off[r0]
        diff = _differ(a, b)
        derailed = [uniforms(derive_seed(3, i, ag, 0, 0), i, "context_harm")[0]
                    < SimBackend("s", **WORLD).p_derail(n)
                    for i, ag, n in zip(a["item_id"], a["agent"], a["prompt_tokens"])]
        assert not (diff & ~np.array(derailed)).any() and diff.any() and not _same(on, off, ["answer"])
    else:
        assert mech not in ROUND0 and not MECHANISMS[mech]["round0"]
        # the mechanism acts in debate turns only: round 0 identical item by item, its text and signals too
        assert _same(on[r0], off[r0], ["answer", "text", *SIGNALS])
        assert not _same(on, off, ["answer"]), f"{mech} changed nothing: the test would be vacuous"


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_renaming_a_model_changes_no_answer(temperature):
    a = debate(temperature=temperature)
    b = debate(temperature=temperature, names={"sim-x": "sim-renamed", "sim-y": "sim-y", "sim-z": "sim-other"})
    assert _same(a, b, ["answer", "text", *SIGNALS])


def test_two_models_in_one_slot_are_comonotone():
    "Competence is a latent: on the same requests the stronger agent is right wherever the weaker one is."
    weak = dict(WORLD, skill=0.4, task_skill={}, parse_fail=0.0)
    a = debate(models={"sim-x": weak, "sim-y": weak, "sim-z": weak})
    b = debate(models={"sim-x": dict(weak, skill=0.8), "sim-y": weak, "sim-z": weak})
    x0 = (a["round"] == 0) & (a["agent"] == "a0")
    assert (b.loc[x0, "correct"] | ~a.loc[x0, "correct"]).all()
    assert (b.loc[x0, "correct"] & ~a.loc[x0, "correct"]).any()


def test_round0_mechanisms_are_the_four_the_notebook_names():
    assert ROUND0 == {"competence", "parse_fail", "signals", "context_harm"}


def test_sim_off_errors():
    with pytest.raises(ConfigError, match="choose from"):
        SimBackend("sim-x", off=["recenci"])
    with pytest.raises(ConfigError, match="sim_off"):
        SimBackend("sim-x", off=3)


def test_sim_off_through_make_backend_and_validation():
    from mad_study.backends import make_backend
    b = make_backend("sim-x", sim_agents={"sim-x": {"recency": 2.0}}, sim_off=["recency"])
    assert b.agent.recency == 0.0 and b.backend_id.endswith(":off=recency")
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params, validate_params
    exp = next(e for e in experiments().values() if e.paper == "madc")
    prof = load_profile("sim")
    p = merge_params(exp, prof, {"sim_off": ["recency"]})
    validate_params(p, exp, prof, {"sim_off": ["recency"]})
    with pytest.raises(ConfigError, match="recenci.*choose from"):
        validate_params({**p, "sim_off": ["recenci"]}, exp, prof, {"sim_off": ["recenci"]})


# ---------------------------------------------------------------- the engines' request seeds
class Recorder:
    "A backend that records each request's seed, answering through `inner`."

    def __init__(self, inner):
        self.inner, self.seeds = inner, []
        self.backend_id, self.kind, self.batch_invariant = inner.backend_id, inner.kind, True

    def generate(self, reqs):
        self.seeds += [r.seed for r in reqs]
        return self.inner.generate(reqs)


def _seeds(backends):
    return sorted(s for b in backends.values() for s in b.seeds)


def _run_twice(run, make):
    "`run(backends, names)` with the models named A and renamed B: the seeds (and what the run returns) must match."
    out = []
    for names in (["sim-a", "sim-b"], ["sim-renamed-1", "sim-renamed-2"]):
        bs = {n: Recorder(make(n, i)) for i, n in enumerate(names)}
        got = run(bs, names)
        out.append((_seeds(bs), got))
    assert out[0][0] == out[1][0] and len(out[0][0]) > 0
    return out[0][1], out[1][1]


def test_seeds_of_run_debate_never_hold_the_model_name():
    def run(bs, names):
        agents = [Agent("a0", names[0]), Agent("a1", names[1]), Agent("a2", names[0])]
        return run_debate(ITEMS[:10], agents, bs, debate_rounds=2, sampling=Sampling(temperature=1.0, seed=1),
                          progress=False)["answer"].tolist()
    a, b = _run_twice(run, lambda n, i: SimBackend(n, skill=0.5 + 0.1 * i))
    assert a == b


def test_seeds_of_madc_reversal_never_hold_the_model_name():
    from mad_study.madc import run_reversal, solution_pools
    item = ITEMS[0]
    base = SimBackend("sim", skill=0.5, response_words=5)
    cot = run_debate([item], make_agents(["sim"]), {"sim": base}, debate_rounds=0, samples=30,
                     sampling=Sampling(temperature=1.0), progress=False)
    pools = [solution_pools(cot, 2, seed=0, repeat=0)]

    def run(bs, names):
        return run_reversal(item, pools, bs[names[0]], names[0], reps_per_count=3,
                            sampling=Sampling(max_new_tokens=4096, temperature=1.0, seed=0))["answer"].tolist()
    a, b = _run_twice(run, lambda n, i: SimBackend(n, skill=0.5, recency=2.0))
    assert a == b


def test_seeds_of_umad_alg1_never_hold_the_model_name():
    from mad_study.umad import alg1_samples

    def run(bs, names):
        agents = [Agent("a0", names[0]), Agent("a1", names[1])]
        tr = run_debate(ITEMS[:6], agents, bs, debate_rounds=1, sampling=Sampling(temperature=1.0, seed=2),
                        progress=False)
        return alg1_samples(tr, ITEMS[:6], bs, k=2)["answer"].tolist()
    a, b = _run_twice(run, lambda n, i: SimBackend(n, skill=0.5 + 0.2 * i))
    assert a == b


def test_seeds_of_svr_mad_never_hold_the_model_name():
    from mad_study.svr_mad import SVR_SAMPLING, SVRConfig
    from mad_study.svr_study import BaselineSettings, evaluate
    items = [Item(f"svrw/{i}", "toy", f"Question {i}? (A) a (B) b (C) c (D) d", "ABCD"[i % 4], "option")
             for i in range(12)]

    def run(bs, names):
        ev = evaluate(items, make_agents([names[0]] * 3 + [names[1]] * 3), bs, config=SVRConfig(S=2, C=2),
                      baseline=BaselineSettings(baselines=()), sampling=SVR_SAMPLING.replace(seed=0))
        return ev["pre"]["answer"].tolist()
    a, b = _run_twice(run, lambda n, i: SimBackend(n, skill=0.5 + 0.2 * i, signal_inversion=0.5))
    assert a == b


def test_seeds_of_role_debates_and_meta_debate_never_hold_the_model_name():
    from mad_study.meta_debate import meta_debate, run_framework, uniform_assignment
    from mad_study.role_sim import RoleSimBackend
    items = [Item(f"rw/{i}", "x", f"question {i}", "ABCD"[i % 4], "option", ("w", "x", "y", "z")) for i in range(8)]

    def run(bs, names):
        md = meta_debate(items, "mad", names, bs)
        tr, out = run_framework("mad", items, uniform_assignment("mad", names[0]), bs)
        return tr["answer"].tolist()
    # role-blind agents: their answers do not depend on the name either
    a, b = _run_twice(run, lambda n, i: RoleSimBackend(n, skill=0.5 + 0.2 * i))
    assert a == b


def test_no_experiment_file_redefines_the_world():
    "One world (issue 50): the sim models' behaviour lives in params/profiles/sim.yaml only; an experiment may switch a mechanism off (sim_off / control_off), never set its own agents."
    from mad_study.reproduce import experiments, read_yaml

    offenders = []
    for eid, e in experiments().items():
        spec = read_yaml(e.path)
        blocks = [spec.get("params") or {}, *((spec.get("profiles") or {}).values())]
        if any(isinstance(b, dict) and b.get("sim_agents") for b in blocks):
            offenders.append(eid)
    assert not offenders, offenders


# ---------------------------------------------------------------- truth-favouring persuasion
def test_persuasion_favours_a_shown_correct_answer_and_nothing_else():
    """persuasion pi: not keeping one's answer, with the correct answer g shown, adopt it with P = pi before conformity,
    so P(adopt g) = pi + (1 - pi) P_off(adopt g) (03b_sim `decide`); with g not shown, no answer moves."""
    from mad_study.sim import turn_uniforms
    item = Item("gsm8k/persuade", "gsm8k", "q", "7", "number")
    base = dict(skill=0.3, conformity=0.5, stubborn_correct=0.0, stubborn_wrong=0.0, recognition=0.0, parse_fail=0.0)
    off, on = SimBackend("s", **base), SimBackend("s", **base, persuasion=0.6)
    us = [turn_uniforms(s, item.id) for s in range(4000)]
    pick = lambda b, shown: [b.decide(item, "5", shown, u) for u in us]
    p_off, p_on = (np.mean([a == "7" for a in pick(b, ["7", "9"])]) for b in (off, on))
    assert abs(p_on - (0.6 + 0.4 * p_off)) < 0.03, (p_off, p_on)
    # the wrong shown answer is adopted less: persuasion only ever turns an answer into the correct one
    changed = [(a, b) for a, b in zip(pick(off, ["7", "9"]), pick(on, ["7", "9"])) if a != b]
    assert changed and all(b == "7" for _, b in changed)
    assert pick(off, ["8", "9"]) == pick(on, ["8", "9"])


def test_a_new_stream_appends_words_and_moves_none():
    "persuasion's uniform is the 17th word: the first 16 are SHAKE-128's first 128 bytes, as before it was added."
    import hashlib
    import struct
    from mad_study.sim import SLOTS, turn_uniforms
    key = (11).to_bytes(8, "little", signed=True) + b"gsm8k/3"
    old = tuple(((w >> 11) + 0.5) * 2.0**-53 for w in struct.unpack("<16Q", hashlib.shake_128(key).digest(128)))
    assert turn_uniforms(11, "gsm8k/3")[:16] == old and SLOTS["persuasion"] == slice(16, 17)
