"""RUMAD (nbs/13_rumad.ipynb): equation-level functions and the PPO pieces, independent of the notebook's own tests."""
import functools
import math

import numpy as np
import pytest
import torch

from mad_study.core import ConfigError
from mad_study import rumad as R


def test_tiers_at_the_printed_thresholds():
    # Eq. 5: strict inequalities; exactly 0.40 / 0.25 / 0.10 fall to the tier below
    assert [R.prompt_tier(w) for w in (0.40 + 1e-9, 0.40, 0.25 + 1e-9, 0.25, 0.10 + 1e-9, 0.10)] == \
        ["Critical", "Reference", "Reference", "Background", "Background", None]


def test_activation_is_mean_external_weight_at_least_self_weight():
    W = np.array([[0.2, 0.3, 0.1], [0.9, 0.95, 0.9], [0.5, 0.5, 0.5]])
    # a0: mean(0.3, 0.1) = 0.2 >= 0.2 speaks; a1: 0.9 < 0.95 silent; a2: 0.5 >= 0.5 speaks
    assert R.activation_mask(W).tolist() == [True, False, True]


def test_similarity_is_eq2_with_answer_equivalence():
    e = np.array([[1.0, 0.0], [0.6, 0.8]])
    S = R.similarity_matrix(e, ["0.5", "1/2"], lam=0.25, fmt="number")
    assert S[0, 1] == pytest.approx(0.25 * 0.6 + 0.75 * 1.0)
    S = R.similarity_matrix(e, ["A", "B"], lam=0.25, fmt="option")
    assert S[0, 1] == pytest.approx(0.25 * 0.6)


def test_budget_loss_gradient_pushes_weights_below_delta_when_over_budget():
    mu = torch.full((1, 6, 6), 0.0, requires_grad=True)             # every weight 0.5 > delta: 30 links, B = 12
    opt = torch.optim.SGD([mu], lr=2.0)
    for _ in range(300):
        loss = R.budget_loss(torch.distributions.Normal(mu, torch.ones(1, 6, 6)), 12)
        opt.zero_grad(); loss.backward(); opt.step()
    W = torch.sigmoid(mu.detach())[0].numpy()
    assert R.budget_count(W, 12) == 0                               # the printed Eq. 6 is satisfied at the end
    assert (W[~np.eye(6, dtype=bool)] <= 0.5).all()


def test_reward_components_with_table5_weights():
    assert R.ALPHA == {"accuracy": 1.0, "consensus": 0.3, "progress": 0.1, "efficiency": 0.2, "improvement": 1.0, "sparsity": 0.1}
    assert R.BETA == {"accuracy": 2.0, "consensus": 0.5, "efficiency": 0.3, "improvement": 0.2}
    c = {"accuracy": 0.0, "consensus": 1.0, "progress": 0.0, "efficiency": -1.0, "improvement": 0.0, "sparsity": 1.0}
    assert R.step_reward(c) == pytest.approx(0.3 - 0.2 - 0.1)
    assert R.episode_reward(c) == pytest.approx(0.5 - 0.3)
    assert R.progress_reward(True, 2, 5) == pytest.approx(0.8)
    assert R.efficiency_reward(600, 1200) == pytest.approx(0.5)
    assert R.improvement_reward(False, True) == 1.0 and R.improvement_reward(True, False) == 0.0
    assert R.sparsity_penalty(np.full((3, 3), 0.3)) == pytest.approx(2 / 3)


def test_table2_savings_recomputed():
    assert round(100 * R.cost_saving(11.43, 62.58), 2) == -81.74
    assert round(100 * R.cost_saving(10.46, 76.90), 2) == -86.40
    assert 100 * R.cost_saving(33.39, 57.80) == pytest.approx(-42.24, abs=0.011)     # printed from unrounded costs


def test_ppo_update_lowers_the_loss_on_a_fixed_batch():
    p = R.TopologyPolicy(4, hidden=32, init_seed=3)
    g = np.random.default_rng(1)
    obs = torch.as_tensor(g.random((20, 4, 4)), dtype=torch.float32)
    with torch.no_grad():
        d = p.dist(obs); act = d.sample(); lp = d.log_prob(act).sum((-1, -2))
    batch = {"obs": obs, "action": act, "logp": lp, "adv": torch.as_tensor(g.standard_normal(20), dtype=torch.float32),
             "ret": torch.as_tensor(g.standard_normal(20), dtype=torch.float32)}
    before, _ = R.ppo_loss(p, batch, B=6)
    opt = torch.optim.Adam(p.parameters(), lr=3e-3)
    for _ in range(10): R.ppo_update(p, opt, batch, B=6, epochs=1, batch_size=20)
    after, _ = R.ppo_loss(p, batch, B=6)
    assert after.item() < before.item()


def test_bad_input_is_a_clear_error():
    with pytest.raises(ConfigError, match="distribution"): R.TopologyPolicy(3, dist="laplace")
    with pytest.raises(ConfigError, match="reward mode"): R.RumadConfig.from_params({"rewards": "x"}) and R.episodes(None, None, 1, rewards="x")
    with pytest.raises(ConfigError, match="topology"): R.SparseTopology("tree")
    with pytest.raises(ConfigError, match="unknown RUMAD"): R.RumadConfig.from_params({"B2": 3})


# ---- the sim claim, its control, and a short training run (uses the committed checkpoint; no training) ----
from pathlib import Path

from mad_study.backends import make_backend
from mad_study.data import load_items
from mad_study.debate import FullyConnected, run_debate
from mad_study.protocols import debate_costs
from mad_study.reproduce import experiments, load_profile, merge_params

CKPT = Path(__file__).resolve().parents[1] / "checkpoints" / "rumad_sim_B12.pt"
MODELS = ["sim-llama-3.1-8b", "sim-glm-4-9b", "sim-deepseek-math-7b"]


def _sim_setup(off: bool = False):
    "The rumad_all sim profile's synthetic agents (they derail on long prompts); `off`: the same without `context_decay`."
    sa = merge_params(experiments()["rumad_all"], load_profile("sim"))["sim_agents"]
    sa = {m: {k: v for k, v in sa[m].items() if not (off and k == "context_decay")} for m in MODELS}
    return {m: make_backend(m, sim_agents=sa) for m in MODELS}, sa


def _run(items, protocol, backends):
    kw = dict(debate_rounds=5, temperature=1.0, max_new_tokens=512, seed=0, progress=False)
    with R.one_thread():
        tr = run_debate(items, R.rumad_agents(MODELS, 6), backends, protocol=protocol,
                        prompt=R.rumad_prompt("rumad", items[0].fmt), **kw)
    c = debate_costs(tr)
    return c["correct"].mean(), c["tokens"].mean()


def _controller(variant: str = "B12", off: bool = False):
    path = CKPT.parent / f"rumad_sim_{variant}.pt"
    pol, cfg, meta = R.load_controller(path)
    _, sa = _sim_setup(off)
    # the checkpoint was trained under the sim profile's parameters (what the notebook checks before loading it)
    assert R.checkpoint_mismatch(path, cfg, R.training_meta(MODELS, "mmlu:dev", 0, "sim", "rumad", 512, "fixture", sa)) is None
    return pol, cfg


def _items90():
    # MMLU test items (the controllers were trained on MMLU dev) and GSM8K (zero-shot transfer): 90 items
    return load_items("mmlu", n=45, save=False) + load_items("gsm8k", n=45, save=False)


@functools.lru_cache(maxsize=None)
def _mad90(off: bool = False):
    "Fully connected MAD on the 90 items: (accuracy, tokens per item), run once for the tests that compare against it."
    backends, _ = _sim_setup(off)
    return _run(_items90(), FullyConnected(), backends)


def test_sim_controller_saves_tokens_at_equal_or_better_accuracy():
    # the sim profile's agents derail on long prompts (context_decay 0.15, calibrated on MAD vs S-MAD star only, as
    # RUMAD's Table 2 shows for dense MAD): the trained B = 12 controller is at least as accurate as MAD, far cheaper
    backends, _ = _sim_setup(); pol, cfg = _controller()
    acc_mad, tok_mad = _mad90()
    acc_r, tok_r = _run(_items90(), R.RumadController(pol, R.SimEmbedder(), cfg.lam), backends)
    print(f"MAD {acc_mad:.3f} {tok_mad:.0f} | RUMAD {acc_r:.3f} {tok_r:.0f} ({100 * R.cost_saving(tok_r, tok_mad):+.1f}%)")
    # measured: MAD 67.8% at 63.1k tokens per item, RUMAD B=12 70.0% at 28.0k (-55.6%)
    assert acc_r >= acc_mad
    assert R.cost_saving(tok_r, tok_mad) < -0.40          # at least 40% fewer tokens


def test_without_derailment_the_accuracy_edge_vanishes():
    # the control: the same agents without context_decay, a controller trained the same way on them; it still saves
    # tokens, but it is now LESS accurate than MAD (silenced agents keep their round-0 answers, and re-answering helps)
    backends, _ = _sim_setup(off=True); pol, cfg = _controller("nodecay", off=True)
    acc_mad, tok_mad = _mad90(off=True)
    acc_r, tok_r = _run(_items90(), R.RumadController(pol, R.SimEmbedder(), cfg.lam), backends)
    print(f"no derailment: MAD {acc_mad:.3f} {tok_mad:.0f} | RUMAD {acc_r:.3f} {tok_r:.0f} ({100 * R.cost_saving(tok_r, tok_mad):+.1f}%)")
    # measured: MAD 90.0% at 63.0k tokens per item, RUMAD B=12 85.6% at 22.8k (-64%)
    assert acc_r < acc_mad and R.cost_saving(tok_r, tok_mad) < -0.40


def test_without_derailment_table5_reward_prefers_the_trade_off_to_mad():
    # why, without derailment, the controller gives up accuracy: on the deployed debates the Table 5 reward of the
    # trained B = 12 controller is higher than that of the dense start (= MAD: every agent speaks and sees everyone),
    # although it is less accurate
    backends, _ = _sim_setup(off=True); pol, cfg = _controller("nodecay", off=True)
    items, agents, ps = load_items("mmlu", n=45, save=False), R.rumad_agents(MODELS, 6), R.rumad_prompt("rumad", "option")
    mad = R.evaluate_controller(R.TopologyPolicy(6, init="dense"), items, agents, backends, cfg, R.SimEmbedder(), seed=0, prompt=ps)
    rumad = R.evaluate_controller(pol, items, agents, backends, cfg, R.SimEmbedder(), seed=0, prompt=ps)
    print(mad, rumad)
    # measured: dense start 6.95 (100% accuracy, 63.6k tokens), trained 7.16 (84.4%, 22.8k)
    assert rumad["episode_return"] > mad["episode_return"] and rumad["accuracy"] < mad["accuracy"]


def test_link_pruning_alone_keeps_mad_accuracy():
    # the ablation without agent activation (Eq. 5 hides links, no agent is silenced by Eq. 4): MAD's accuracy or
    # better at a lower cost. On the derailing agents it is the most accurate variant (shorter prompts, and every agent
    # re-answers), unlike the paper's Table 3, where removing activation costs accuracy
    backends, _ = _sim_setup()
    pol, cfg, _ = R.load_controller(CKPT.parent / "rumad_sim_no_activation.pt")
    assert not cfg.activation
    items = _items90()
    acc_mad, tok_mad = _mad90()
    acc_n, tok_n = _run(items, R.RumadController(pol, R.SimEmbedder(), cfg.lam, activation=False), backends)
    print(f"MAD {acc_mad:.3f} {tok_mad:.0f} | w/o activation {acc_n:.3f} {tok_n:.0f} ({100 * R.cost_saving(tok_n, tok_mad):+.1f}%)")
    # measured: MAD 67.8% at 63.1k, without activation 81.1% at 41.7k (-33.8%)
    assert acc_n >= acc_mad and R.cost_saving(tok_n, tok_mad) < -0.15


def test_control_forced_dense_removes_the_saving():
    # the same controller without Eq. 4 (silencing) and Eq. 5 (hidden links): its saving against MAD vanishes
    backends, _ = _sim_setup(); pol, cfg = _controller()
    items = _items90()
    acc_mad, tok_mad = _mad90()
    acc_f, tok_f = _run(items, R.ForcedDense(pol, R.SimEmbedder(), cfg.lam), backends)
    print(f"MAD {acc_mad:.3f} {tok_mad:.0f} | forced dense {acc_f:.3f} {tok_f:.0f} ({100 * R.cost_saving(tok_f, tok_mad):+.1f}%)")
    # measured: MAD 67.8% at 63.1k, forced dense 64.4% at 63.6k (+0.9%)
    assert abs(R.cost_saving(tok_f, tok_mad)) < 0.05      # no saving (only the tag text differs)
    assert abs(acc_f - acc_mad) <= 0.06


def test_larger_budget_communicates_at_least_as_much():
    # Eq. 6 binds: the B = 18 controller, trained exactly as the B = 12 one but for B, keeps at least as many visible
    # links (w > delta) per deployed round and spends more tokens on the same items: a different, denser controller
    backends, _ = _sim_setup()
    items = load_items("mmlu", n=45, save=False)
    ev = {}
    for b in (12, 18):
        pol, cfg, _ = R.load_controller(CKPT.parent / f"rumad_sim_B{b}.pt")
        assert cfg.B == b
        ev[b] = R.evaluate_controller(pol, items, R.rumad_agents(MODELS, 6), backends, cfg, R.SimEmbedder(), seed=0,
                                      prompt=R.rumad_prompt("rumad", "option"))
    print({b: (e["links"], round(e["tokens"])) for b, e in ev.items()})
    # measured: B = 12 15.0 links and 28.0k tokens per item, B = 18 15.0 links and 35.6k tokens
    assert ev[18]["links"] >= ev[12]["links"] and ev[18]["tokens"] > 1.1 * ev[12]["tokens"]


SHORT = dict(n_agents=6, debate_rounds=5, B=12, init="dense", lr=0.01, c2=0.1, updates=50)   # the sim profile's, 50 updates


def test_short_training_raises_the_deployed_episode_reward():
    # a short PPO run (the sim profile's settings, 50 updates instead of 100, fixed seed) from the dense start (= MAD);
    # the deployed controller (mean weights) is measured before and after on the same 30 held-out MMLU test items with
    # the same agent seeds, so the difference is the training, not rollout noise
    backends, _ = _sim_setup()
    cfg = R.RumadConfig(**SHORT)
    agents, ps = R.rumad_agents(MODELS, 6), R.rumad_prompt("rumad", "option")
    ev = load_items("mmlu", n=30, save=False)
    before = R.evaluate_controller(R.TopologyPolicy(6, cfg.hidden, init=cfg.init, init_seed=0), ev, agents, backends, cfg,
                                   R.SimEmbedder(), seed=1, prompt=ps)
    pol, log = R.train_controller(load_items("mmlu", split="dev", save=False), agents, backends, cfg, R.SimEmbedder(),
                                  seed=0, prompt=ps)
    after = R.evaluate_controller(pol, ev, agents, backends, cfg, R.SimEmbedder(), seed=1, prompt=ps)
    print(before, after)
    # measured: return 5.16 -> 5.72, tokens 63.6k -> 40.9k, links 30 -> 20, accuracy 63.3% -> 66.7% (not asserted)
    assert after["episode_return"] > before["episode_return"] + 0.1
    assert after["tokens"] < 0.7 * before["tokens"] and after["links"] < before["links"]
