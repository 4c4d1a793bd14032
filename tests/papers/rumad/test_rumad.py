"""RUMAD (nbs/papers/rumad/13_rumad.ipynb, the study library 13b_rumad_study): equation-level functions, the PPO pieces, the controls and checkpoints, independent of the notebooks' own tests."""
import functools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from mad_study.core import ConfigError
from mad_study import rumad as R
from mad_study import rumad_study as S
from mad_study.multiplicity import gap_interval_text


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
    for _ in range(10): R.ppo_update(p, opt, batch, B=6, ppo=R.PpoSettings(epochs=1, batch_size=20))
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
from mad_study.loading import load_items
from mad_study.debate import FullyConnected, run_debate
from mad_study.protocols import debate_costs
from mad_study.compare import compare_methods
from mad_study.registry import experiments, load_profile
from mad_study.params import merge_params
from mad_study.core import Sampling

CKPT = Path(__file__).resolve().parents[3] / "checkpoints" / "rumad_sim_B12.pt"
MODELS = ["sim-llama-3.1-8b", "sim-glm-4-9b", "sim-deepseek-math-7b"]


def _sim_setup(off: bool = False):
    "The sim world's RUMAD agents (params/profiles/sim.yaml: they derail on long prompts); `off`: the same world with context_harm off."
    sa = merge_params(experiments()["rumad_all"], load_profile("sim"))["sim_agents"]
    return {m: make_backend(m, sim_agents=sa, sim_off=("context_harm",) if off else None) for m in MODELS}, sa


def _run_costs(items, protocol, backends):
    "Per-item final-majority correctness and tokens (`debate_costs`) of one debate run."
    kw = dict(debate_rounds=5, temperature=1.0, max_new_tokens=512, seed=0, progress=False)
    with R.one_thread():
        tr = run_debate(items, S.rumad_agents(MODELS, 6), backends, protocol=protocol,
                        prompt=R.rumad_prompt("rumad", items[0].fmt), **kw)
    return debate_costs(tr)


def _run(items, protocol, backends):
    c = _run_costs(items, protocol, backends)
    return c["correct"].mean(), c["tokens"].mean()


def _controller(variant: str = "B12", off: bool = False):
    path = CKPT.parent / f"rumad_sim_{variant}.pt"
    pol, cfg, meta = R.load_controller(path)
    _, sa = _sim_setup(off)
    # the checkpoint was trained under the sim profile's parameters (what the notebook checks before loading it)
    # (the harm-off world's agents as they ran: context_decay at its neutral 0, so a refit of the harm keeps them)
    meta = S.training_meta(MODELS, "mmlu:dev", 0, "sim", "rumad", 512, "fixture", sa, sim_off=("context_harm",) if off else ())
    assert S.checkpoint_mismatch(path, cfg, meta) is None
    return pol, cfg


def _items90():
    # MMLU test items (the controllers were trained on MMLU dev) and GSM8K (zero-shot transfer): 90 items
    return load_items("mmlu", n=45, save=False) + load_items("gsm8k", n=45, save=False)


@functools.lru_cache(maxsize=None)
def _mad90_costs(off: bool = False):
    "Fully connected MAD on the 90 items, per item, run once for the tests that compare against it."
    backends, _ = _sim_setup(off)
    return _run_costs(_items90(), FullyConnected(), backends)


def _mad90(off: bool = False):
    "Fully connected MAD on the 90 items: (accuracy, tokens per item)."
    c = _mad90_costs(off)
    return c["correct"].mean(), c["tokens"].mean()


def _paired_vs_mad(costs, off: bool = False) -> dict:
    "`compare_methods` of one run's per-item costs against MAD's on the same 90 items (paired by item, the kit's standard)."
    res = pd.concat([_mad90_costs(off).assign(method="MAD"), costs.assign(method="X")], ignore_index=True)
    t, cap = compare_methods(res, "MAD", ["X"])
    return {**t.set_index("method").loc["X"].to_dict(), "caption": cap}


def test_sim_controller_saves_tokens_without_a_resolvable_accuracy_loss():
    # the sim profile's agents derail on long prompts (context_decay calibrated on MAD vs S-MAD star only, as RUMAD's
    # Table 2 shows for dense MAD): the trained B = 12 controller is far cheaper than MAD (the paired token change's
    # interval is below -40%), and 90 items resolve no accuracy loss against MAD (no "at least as accurate" point claim:
    # the gap is within item noise either way, and a tie-break change moved it from +4.4 to -5.6 points)
    backends, _ = _sim_setup(); pol, cfg = _controller()
    r = _paired_vs_mad(_run_costs(_items90(), R.RumadController(pol, R.SimEmbedder(), cfg.lam), backends))
    print(r["caption"])
    # measured (2026-11-29, c2 = 0.01, context_decay 0.088): RUMAD B=12 -3.3 points [-15.3, +8.6] against MAD (McNemar,
    # p = 0.58), tokens -67% [-70, -65]; at c2 = 1 (until issue 51 round 4) it let nobody speak after round 0: -8.9
    # points [-22.1, +4.6], tokens -97%
    assert r["n_items"] == 90
    assert r["token_change_high"] < -0.40                  # at least 40% fewer tokens, resolved by the 90 items
    assert not (r["distinguishable"] and r["diff"] < 0)    # no accuracy loss the 90 items can resolve
    assert r["distinguishable"] == (r["p_adjusted"] < 0.05)


def test_without_derailment_the_accuracy_edge_vanishes():
    # the control: the same world with context_harm off (sim_off), a controller trained the same way on them; it still saves
    # tokens (resolved), and its point accuracy is now below MAD's (silenced agents keep their round-0 answers, and
    # re-answering helps); the assertion is on the point estimate: whether 90 items resolve the gap is printed
    backends, _ = _sim_setup(off=True); pol, cfg = _controller("nodecay", off=True)
    r = _paired_vs_mad(_run_costs(_items90(), R.RumadController(pol, R.SimEmbedder(), cfg.lam), backends), off=True)
    print("no derailment:", r["caption"])
    # measured (2026-11-29, c2 = 0.01, the world with context_harm off): -26.7 points [-36.6, -18.6] against MAD (McNemar
    # p = 9.6e-07, resolved), tokens -63% [-67, -59] (at c2 = 1, until issue 51 round 4, it silenced everyone: -33.3)
    assert r["diff"] < 0 and r["token_change_high"] < -0.40


def test_link_pruning_alone_keeps_mad_accuracy():
    # the ablation without agent activation (Eq. 5 hides links, no agent is silenced by Eq. 4): no accuracy loss
    # against MAD that 90 items resolve; at Table 6's c2 = 0.01 it hides no link either, so it costs what MAD costs
    backends, _ = _sim_setup()
    pol, cfg, _ = R.load_controller(CKPT.parent / "rumad_sim_no_activation.pt")
    assert not cfg.activation
    items = _items90()
    r = _paired_vs_mad(_run_costs(items, R.RumadController(pol, R.SimEmbedder(), cfg.lam, activation=False), backends))
    print("w/o activation:", r["caption"])
    # measured (2026-11-29, c2 = 0.01): +4.4 points [-5.1, +14.3] against MAD (McNemar p = 0.35), tokens +1% [+1, +1]
    # (the tags' text); at c2 = 1 (until issue 51 round 4) it hid links: +16.7 points, tokens -52%
    assert not (r["distinguishable"] and r["diff"] < 0) and abs(r["token_change"]) < 0.05


def test_control_forced_dense_removes_the_saving():
    # the same controller without Eq. 4 (silencing) and Eq. 5 (hidden links): its saving against MAD vanishes
    backends, _ = _sim_setup(); pol, cfg = _controller()
    items = _items90()
    acc_mad, tok_mad = _mad90()
    acc_f, tok_f = _run(items, S.ForcedDense(pol, R.SimEmbedder(), cfg.lam), backends)
    print(f"MAD {acc_mad:.3f} {tok_mad:.0f} | forced dense {acc_f:.3f} {tok_f:.0f} ({100 * R.cost_saving(tok_f, tok_mad):+.1f}%)")
    # measured (2026-11-28, context_decay 0.088): MAD 68.9% at 63.0k, forced dense 72.2% at 63.6k (+0.9%)
    assert abs(R.cost_saving(tok_f, tok_mad)) < 0.05      # no saving (only the tag text differs)
    # accuracy: one seed's gap on 90 items has a standard error of about 5 points (issue 50's world, B12 retrained:
    # seed 0 gives +10, seeds 0-4 give +10, +7, -3, +1, -3), so the gap is judged on the mean over five seeds
    gaps = [acc_f - acc_mad]
    for seed in range(1, 5):
        kw = dict(debate_rounds=5, temperature=1.0, max_new_tokens=512, seed=seed, progress=False)
        with R.one_thread():
            acc = [debate_costs(run_debate(items, S.rumad_agents(MODELS, 6), backends, protocol=p,
                                           prompt=R.rumad_prompt("rumad", items[0].fmt), **kw))["correct"].mean()
                   for p in (FullyConnected(), S.ForcedDense(pol, R.SimEmbedder(), cfg.lam))]
        gaps.append(acc[1] - acc[0])
    assert abs(np.mean(gaps)) <= 0.06, gaps


def _deployed(pol, cfg, items, backends, proto=None):
    "The deployed controller's run on `items` (MMLU wording): (protocol with its records, mean episode return, accuracy)."
    proto = proto or R.RumadController(pol, R.SimEmbedder(), cfg.lam, activation=cfg.activation)
    with R.one_thread():
        tr = run_debate(items, S.rumad_agents(MODELS, 6), backends, protocol=proto, prompt=R.rumad_prompt("rumad", "option"),
                        debate_rounds=5, sampling=Sampling(max_new_tokens=512, temperature=1.0, seed=0), progress=False)
    eps = R.episodes(tr, proto, cfg.token_budget, cfg.lam)
    return proto, float(np.mean([sum(e["rewards"]) for e in eps])), float(np.mean([e["correct"] for e in eps]))


def test_budget_at_table6_c2_does_not_bind():
    # Eq. 6 with Table 6's c2 = 0.01 (the sim profile since issue 51 round 4): the budget term is too weak to bring the
    # deployed links under B; both controllers keep more than B visible links per round on held-out items (at c2 = 1,
    # until round 4, B = 12 deployed 7.1 links and B = 18 18.0, and nobody spoke after round 0)
    backends, _ = _sim_setup()
    items = load_items("mmlu", n=45, save=False)
    ev = {}
    for b in (12, 18):
        pol, cfg, _ = R.load_controller(CKPT.parent / f"rumad_sim_B{b}.pt")
        assert cfg.B == b and cfg.c2 == 0.01
        env = R.RumadEnv(S.rumad_agents(MODELS, 6), backends, R.SimEmbedder(), R.rumad_prompt("rumad", "option"))
        ev[b] = R.evaluate_controller(pol, items, env, cfg, seed=0)
    print({b: (e["links"], round(e["tokens"])) for b, e in ev.items()})
    # the selection finds no evaluation within B on the 10 held-out dev items and keeps the last controller
    assert ev[12]["links"] > 12 and ev[18]["links"] > 18


def test_shuffled_observation_control():
    # the control: the same policy acting on another item's observation (same round, from the deployed run)
    backends, _ = _sim_setup()
    items = load_items("mmlu", n=45, save=False)
    cfg = R.RumadConfig()
    # positive control: a rule that uses its observation (AgreementGate) loses return and accuracy when shuffled
    gate = S.AgreementGate(6, 4, peers=2)                            # within B = 12: 12 links on split rounds
    own, ret, acc = _deployed(gate, cfg, items, backends, R.RumadController(gate, R.SimEmbedder()))
    _, ret_s, acc_s = _deployed(gate, cfg, items, backends, S.ShuffledObservation(gate, R.SimEmbedder(), own.records))
    # measured 2026-11-28 (context_decay 0.088): 6.48, 68.9% -> 6.36, 66.7% (at 0.207: 6.23, 66.7% -> 5.71, 57.8%): the
    # weaker harm makes a wrong decision cheaper, so the shuffle costs the gate less; it still costs both
    print("gate", ret, acc, "shuffled", ret_s, acc_s)
    assert ret_s < ret and acc_s < acc
    # the trained B = 12 controller (Table 6's lr and c2 = 0.01): its decisions vary with what it observes (at c2 = 1,
    # until issue 51 round 4, it was one fixed topology with everyone silent after round 0)
    pol, cfg = _controller()
    own, ret, acc = _deployed(pol, cfg, items, backends)
    sh, ret_s, acc_s = _deployed(pol, cfg, items, backends, S.ShuffledObservation(pol, R.SimEmbedder(), own.records, cfg.lam))
    sets = {tuple(d["active"]) for d in own.records.values()} | {tuple(d["active"]) for d in sh.records.values()}
    # measured 2026-11-29: trained 5.38, 55.6%; shuffled 5.67, 62.2% (the shuffle costs it nothing); 17 speaker sets
    print("trained", ret, acc, "shuffled", ret_s, acc_s, "speaker sets", len(sets))
    assert len(sets) > 1


def test_retraining_reproduces_the_committed_controller():
    # what is reproducible (the notebook says so): the same seed, code and agents give the same rollout log. The committed
    # controller took 300 updates (minutes); the test retrains its first 10 and compares them with the stored log (the
    # rollout's outcomes exactly, the losses and diagnostics to float rounding across CPUs)
    from dataclasses import replace
    _, cfg, meta = R.load_controller(CKPT)
    backends, _ = _sim_setup()
    items = load_items("mmlu:dev", seed=0, source="fixture", save=False)
    env = R.RumadEnv(S.rumad_agents(MODELS, 6), backends, R.SimEmbedder(), R.rumad_prompt("rumad", "option"), 512)
    _, log = R.train_controller(items, env, replace(cfg, updates=10), seed=0)
    ref = pd.DataFrame(meta["log"]).head(10)
    cols = ["episode_return", "tokens", "accuracy", "speakers", "links"]
    assert log[cols].equals(ref[cols])
    for c in ("loss_total", "loss_clipped", "loss_approx_kl", "probe_mu_spread", "probe_saturation"):
        assert np.allclose(log[c], ref[c], rtol=1e-3, atol=1e-4), c


def _committed():
    "The committed controllers of the paper's parameterisation (issue 52's speak heads, rumad_sim_H*, apart)."
    return sorted(p for p in CKPT.parent.glob("rumad_sim_*.pt") if not p.stem.startswith("rumad_sim_H"))


def test_committed_speak_heads_are_issue52s_recipe():
    # issue 52: three training seeds of the speak head, with and without derailment, each with the recipe the sim
    # profile's speak_head asks for (the study loads them only when every training parameter matches)
    paths = sorted(CKPT.parent.glob("rumad_sim_H*.pt"))
    assert [p.stem for p in paths] == [f"rumad_sim_H12_s{k}{o}" for k in range(3) for o in ("", "_nodecay")]
    for p in paths:
        _, cfg, meta = R.load_controller(p)
        assert (cfg.head, cfg.deploy, cfg.budget_reading, cfg.head_peers, cfg.B) == ("agent", "p_speak", "deployed", 2, 12)
        assert meta["seed"] == int(p.stem.split("_s")[-1][0]), p.name
        # the world with context_harm off: the same agents, the mechanism switched off (sim_off)
        assert meta.get("sim_off", []) == (["context_harm"] if p.stem.endswith("nodecay") else []), p.name
        assert "context_decay" in str(meta["sim_agents"]), p.name
        log = pd.DataFrame(meta["log"])
        assert len(log) == cfg.updates == 300 and log["loss_clipped"].tail(25).mean() <= 0.3, p.name
        val = log.loc[log["update"] >= cfg.updates - 100, "val_episode_return"].dropna()
        flat = len(val) >= 4 and val.max() - val.min() <= 0.25
        assert flat == (p.stem.split("rumad_sim_")[1] not in HEADS_NOT_PLATEAUED), (p.name, val.round(3).tolist())


ABLATIONS = ("beta", "no_ep", "no_t", "no_activation", "no_budget")       # Table 3's variants: 300 updates, as RUMAD's


def test_committed_checkpoints_train_as_table6_with_a_calm_clip():
    # issue 39: every committed controller was trained at Table 6's learning rate with the kit's safeguards (issue 50:
    # but Eq. 3's state-dependent sigma and PyTorch's default init, under which the policy moves), its clip
    # fraction at the end of training is at most 0.3, and its return has plateaued: the deployed controller's episode
    # return on the held-out dev items (Sec. 3.6's periodic evaluation: fixed items and seed, the mean weights, so no
    # sampling noise) moves by at most 0.25 over the evaluations of the last 100 updates (the rollout return is noisier:
    # each update draws 10 of the 20 training items), except the variants listed in NOT_PLATEAUED
    paths = _committed()
    # issue 51 round 4, all at Table 6's c2 = 0.01: B12 and its harm-off twin nodecay (seed 0), B18, Table 3's five
    # variants (beta, no_activation, no_budget; no_ep and no_t since round 9), N3_B6, N9_B18
    assert [p.stem.split("rumad_sim_")[1] for p in paths] == [
        "B12", "B18", "N3_B6", "N9_B18", "beta", "no_activation", "no_budget", "no_ep", "no_t", "nodecay"]
    for p in paths:
        _, cfg, meta = R.load_controller(p)
        log = pd.DataFrame(meta["log"])
        assert cfg.lr == R.TABLE6["lr"] and cfg.c2 == R.TABLE6["c2"] == 0.01, p.name
        # issue 50: Eq. 3's actor (sigma from the observation) with PyTorch's default init; the other safeguards kept
        assert cfg.max_grad_norm == 0.5 and (cfg.init, cfg.sigma) == ("default", "state") and cfg.obs_norm, p.name
        # review round 11: Table 3's variants train as long as RUMAD (they had 200 updates)
        assert len(log) == cfg.updates == 300, p.name
        assert log["loss_clipped"].iloc[-1] <= 0.3 and log["loss_clipped"].tail(25).mean() <= 0.3, p.name
        val = log.loc[log["update"] >= cfg.updates - 100, "val_episode_return"].dropna()
        flat = len(val) >= 4 and val.max() - val.min() <= 0.25
        assert flat == (p.stem.split("rumad_sim_")[1] not in NOT_PLATEAUED), (p.name, val.round(3).tolist())


# measured 2026-11-29 (issue 50: retrained with Eq. 3's actor, c2 = 0.01, context_decay 0.088): every one still moves on
# the held-out items over its last 100 updates (B12 and B18 by 0.77, N3_B6 0.95, N9_B18 1.06, nodecay 0.89; Table 3's
# variants, retrained for 300 updates in review round 11: beta 1.76, no_budget 0.78, no_activation 0.51, no_ep 1.10, no_t 2.42): at c2 = 0.01 the agents keep speaking and weights near 0.5 put Eq. 4 on a knife edge,
# so tiny moves flip who speaks. Not plateaued; listed so that the test fails (and this list is revisited) when a retraining changes it
NOT_PLATEAUED = {"B12", "B18", "N3_B6", "N9_B18", "beta", "no_activation", "no_budget", "no_ep", "no_t", "nodecay"}
# the speak heads whose held-out return still moves by more than 0.25 over their last 100 updates (2026-11-28, retrained
# at context_decay 0.088: H12_s1 by 0.33, H12_s2 by 0.54; the other four by at most 0.01): P(speak) near 0.5 flips who
# speaks on 10 held-out items
HEADS_NOT_PLATEAUED = {"H12_s1", "H12_s2"}


def test_the_kit_safeguards():
    # bounded, state-free sigma; orthogonal init with a small output layer (mu ~ 0 at the start); the gradient-norm clip
    cfg = R.RumadConfig(n_agents=4, hidden=32, **R.CLEANRL_START)   # the kit's CleanRL start, by name
    p = R.policy_for(cfg)
    obs = torch.as_tensor(np.random.default_rng(0).random((8, 4, 4)), dtype=torch.float32)
    with torch.no_grad(): d = p.dist(obs)
    assert float(d.mean.abs().max()) < 0.1 and torch.allclose(d.stddev, torch.full_like(d.stddev, R.SIGMA_INIT))
    with torch.no_grad(): p.sigma_param.fill_(-50.0); lo = float(p.dist(obs).stddev.min())
    assert lo == pytest.approx(R.SIGMA_MIN)
    with torch.no_grad(): d = p.dist(obs); act = d.sample(); lp = d.log_prob(act).sum((-1, -2))
    batch = {"obs": obs, "action": act + 3.0, "logp": lp, "adv": torch.linspace(-1, 1, 8), "ret": torch.full((8,), 50.0)}
    logs = R.ppo_update(p, torch.optim.SGD(p.parameters(), lr=0.0), batch, B=2,
                        ppo=R.PpoSettings(batch_size=8, max_grad_norm=0.5))
    assert logs[0]["grad_norm"] > 0.5                                          # the raw gradient was larger ...
    total = math.sqrt(sum(float(q.grad.pow(2).sum()) for q in p.parameters() if q.grad is not None))
    assert total == pytest.approx(0.5, rel=1e-4)                               # ... and was clipped to 0.5
    assert {"approx_kl", "entropy", "clipped"} <= set(logs[0])


def test_probe_stats_see_saturation():
    p = R.policy_for(R.RumadConfig(n_agents=3, hidden=16))
    obs = torch.as_tensor(np.random.default_rng(1).random((30, 3, 3)), dtype=torch.float32)
    assert R.probe_stats(p, obs)["saturation"] == 0.0
    with torch.no_grad(): p.actor[2].bias.fill_(10.0)                        # every second-layer unit at tanh(10)
    st = R.probe_stats(p, obs)
    assert st["saturation"] == 1.0 and st["mu_spread"] < 1e-3                  # saturated: the observation no longer reaches mu


def test_fixed_family_is_the_stated_one():
    fam = S.fixed_family(6, 12)
    assert len(fam) == 25 and all(R.visible_links(f.W) <= 12 for f in fam)
    assert {f.speakers for f in fam if len(f.speakers) == 3} == {(0, 2, 4)}       # one agent of each model first
    for f in fam:                                                               # the decision is the stated one
        act = R.activation_mask(f.W)
        assert act.tolist() == [i in f.speakers for i in range(6)]
        assert all(int((f.W[i, [j for j in range(6) if j != i]] > R.DELTA).sum()) == f.k for i in f.speakers)


# ---- issue 23: review fixes (each of these fails on the code before the fix) ----

def test_activation_forgives_only_float_rounding():
    # Eq. 4 prunes agent 0: its mean external weight 0.3 is below its self-weight 0.3 * (1 + 5e-6); a relative
    # tolerance of 1e-5 (np.isclose's default) kept it speaking
    W = np.full((3, 3), 0.3); W[0, 0] = 0.3 * (1 + 5e-6)
    assert R.activation_mask(W).tolist() == [False, True, True]
    assert R.activation_mask(np.full((7, 7), 0.1)).all()              # equal up to float-sum rounding: speaks


def test_counted_links_are_the_shown_links_in_float32():
    # the policy's weights are float32; 0.10 in float32 is 0.1000000015 > delta: budget_count and prompt_tier agree
    W = np.full((4, 4), 0.1, dtype=np.float32)
    shown = sum(R.prompt_tier(W[i, j]) is not None for i in range(4) for j in range(4) if i != j)
    assert R.budget_count(W, 0) == shown == R.visible_links(W) == 12


def _toy_setup(n=3):
    from mad_study.sim import SimBackend
    from mad_study.debate import make_agents
    return make_agents(["sim"] * n), {"sim": SimBackend("sim")}, load_items("mmlu", n=4, split="dev", save=False)


def test_a_reused_controller_does_not_replay_another_seed():
    agents, backends, items = _toy_setup(4)
    pol = R.TopologyPolicy(4, hidden=16, init_seed=2)                   # untrained: its weights depend on its observation
    kw = dict(debate_rounds=2, temperature=1.0, progress=False, prompt=R.rumad_prompt("rumad", "option"))   # the tags need it
    reused = R.RumadController(pol, R.SimEmbedder())
    run_debate(items, agents, backends, protocol=reused, sampling=Sampling(seed=0), **kw)
    run_debate(items, agents, backends, protocol=reused, sampling=Sampling(seed=1), **kw)
    fresh = R.RumadController(pol, R.SimEmbedder())
    run_debate(items, agents, backends, protocol=fresh, sampling=Sampling(seed=1), **kw)
    stale = sum(not np.array_equal(reused.records[k]["W"], fresh.records[k]["W"]) for k in fresh.records)
    assert stale == 0, f"{stale} of {len(fresh.records)} decisions replayed from the seed-0 run"


def test_beta_ablation_starts_from_the_same_dense_debate():
    S = np.random.default_rng(0).random((6, 6))
    g = R.TopologyPolicy(6, init="dense").act(S)["W"]
    b = R.TopologyPolicy(6, init="dense", dist="beta").act(S)["W"]
    assert np.abs(g - b).max() < 0.05
    assert R.activation_mask(b).all() and R.visible_links(b) == 30


TOY = dict(n_agents=3, debate_rounds=2, rollout=4, batch_size=2, updates=3, lr=1e-2, token_budget=200, init="dense",
           sigma="free")


def test_several_minibatches_per_rollout_let_the_clip_act():
    # Table 6's L = 10 read as debates: a rollout holds L * T transitions, b per minibatch, so after the first Adam step
    # the ratio of Eq. 9 moves away from 1 and the clip acts; L read as transitions (one minibatch) leaves it at 1
    agents, backends, items = _toy_setup()
    cfg = R.RumadConfig(**TOY)
    assert R.rollout_episodes(cfg) == 4
    _, log = R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0)
    assert log["loss_ratio_dev"].max() > 0.05 and log["loss_clipped"].max() > 0
    one = R.RumadConfig(**{**TOY, "rollout": 2, "rollout_unit": "transitions", "batch_size": 2})   # 1 debate of 2 steps, 1 minibatch
    _, log1 = R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), one, seed=0)
    assert log1["loss_ratio_dev"].max() < 1e-5


def test_training_resumes_after_a_kill(tmp_path):
    agents, backends, items = _toy_setup()
    cfg = R.RumadConfig(**{**TOY, "updates": 4})
    full, full_log = R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0)
    state = tmp_path / "c.state.pt"

    def kill(row):
        if row["update"] == 1: raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0, state_path=state, save_every=1,
                           log=kill)
    assert state.exists()
    done = []
    resumed, log = R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0, state_path=state, save_every=1,
                                      log=lambda r: done.append(r["update"]))
    assert done == [2, 3]                                               # updates 0-1 were not run again
    assert log["episode_return"].tolist() == full_log["episode_return"].tolist()
    for k, v in full.state_dict().items(): assert torch.equal(v, resumed.state_dict()[k]), k


def test_periodic_evaluation_selects_the_best_controller():
    # Sec. 3.6: the deployed controller is evaluated every eval_every updates on held-out training items; select="best"
    # returns the evaluated controller with the highest episode return
    agents, backends, items = _toy_setup()
    items = load_items("mmlu", n=8, split="dev", save=False)
    cfg = R.RumadConfig(**{**TOY, "updates": 4, "n_val": 2, "eval_every": 2, "select": "best"})
    pol, log = R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0)
    assert log["val_episode_return"].notna().tolist() == [False, True, False, True]
    best = int(log.loc[log["val_links"] <= cfg.B, "val_episode_return"].idxmax())
    assert log.attrs["selected_update"] == best
    ev = R.evaluate_controller(pol, items[-2:], R.RumadEnv(agents, backends, R.SimEmbedder()), cfg, seed=0)
    assert ev["episode_return"] == pytest.approx(log.loc[best, "val_episode_return"])
    with pytest.raises(ConfigError, match="select"): R.train_controller(items, R.RumadEnv(agents, backends, R.SimEmbedder()),
                                                                        R.RumadConfig(**{**TOY, "select": "top"}))


def test_table_caption_claims_follow_from_the_intervals():
    # compare_families / families_caption (RUMAD Tables 2-4, issue 24): on random paired results, every comparison the
    # caption calls distinguishable has a Holm-adjusted p < 0.05 and an interval that excludes 0; one whose interval
    # holds 0 is called "not distinguishable"; Holm over the whole table (both tasks), not per task
    rng = np.random.default_rng(3)
    rows = [{"task": t, "item_id": f"{t}{i}", "method": m, "correct": float(rng.random() < p), "tokens": float(rng.integers(100, 1000) * k)}
            for t in ("A", "B") for i in range(30) for m, p, k in (("MAD", 0.5, 10), ("R1", 0.95, 1), ("R2", 0.5, 1), ("S", 0.6, 5))]
    t = S.compare_families(pd.DataFrame(rows), {"MAD": ["R1", "R2", "S"]})
    assert t.attrs["n_comparisons"] == 6 and len(t) == 8
    cmp = t[t["method"] != "MAD"]
    assert (cmp["p_adjusted"] >= cmp["p_raw"]).all() and cmp["p_adjusted"].max() <= 1
    cap = S.families_caption(t, highlight=["R1", "R2"])
    for r in cmp[cmp["method"].isin(["R1", "R2"])].to_dict("records"):
        said = f"{r['task']}: {r['method']} vs MAD {100 * r['diff']:+.1f} points {gap_interval_text(r)}, "
        assert said + ("distinguishable" if r["distinguishable"] else "not distinguishable") in cap, said
        assert r["distinguishable"] == (r["p_adjusted"] < 0.05)
    # issue 53: every interval at the family's level (Bonferroni's 1 - 0.05/6) on its verdict's side of 0
    assert cmp["agrees"].tolist() == [True] * 6 and np.allclose(cmp["diff_level"], 1 - 0.05 / 6)
    for r in cmp.to_dict("records"):
        inside = r["diff_low"] <= 0 <= r["diff_high"]
        assert (not inside or r["diff_cut"]) if r["distinguishable"] else inside, r
    assert cmp.set_index(["task", "method"]).loc[("A", "R1"), "distinguishable"]          # +45 points on 30 items: resolved
    assert "holm correction over the table's 6 accuracy comparisons" in cap and "Holm-compatible simultaneous" in cap
    assert "nan" not in cap and "bootstrap" not in cap


# issue 52: a debate with a known optimum (nbs/papers/rumad/13b_rumad_study: ToyDebate); one torch thread, small networks
@functools.lru_cache(maxsize=None)
def _toy_refs():
    env = S.ToyDebate()
    return env, S.toy_references(env, n=600)["return"]


def test_toy_debate_references_have_the_built_in_order():
    _, ret = _toy_refs()
    best_fixed = ret[[k for k in ret.index if k.startswith("best fixed")][0]]
    # the gate with every peer is the speak head's target; the least-similar-peer gate (a quarter of the links) the
    # per-edge action's, and it returns more (6.11 vs 5.94 on 1,000 episodes)
    gate, gate1 = ret["gate, every peer"], ret["gate, least similar peer"]
    assert ret["everyone silent"] < ret["full debate"] < best_fixed < gate < gate1, ret


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_speak_head_learns_the_known_optimum(seed):
    # issue 52's bar, per training seed: above the best fixed topology, >= 90% of silence -> the gate with every peer, decisions
    # that differ by observation, and a shuffled-observation control below it
    env, ret = _toy_refs()
    best_fixed = ret[[k for k in ret.index if k.startswith("best fixed")][0]]
    silent, gate = ret["everyone silent"], ret["gate, every peer"]
    cfg = R.RumadConfig(n_agents=5, hidden=32, lr=1e-3, c2=1.0, B=20, budget_reading="deployed")
    pol, log = S.train_toy_controller(env, cfg, "agent", seed=seed, updates=150, episodes=32)
    got = S.toy_evaluate(env, S.deploy_decision(pol), n=600)
    shuffled = S.toy_evaluate(env, S.deploy_decision(pol), n=600, shuffle=True)
    assert got["return"] > best_fixed and (got["return"] - silent) >= 0.9 * (gate - silent), (got, ret)
    assert got["speakers_disagree"] - got["speakers_agree"] > 2, got
    assert shuffled["return"] < got["return"], (shuffled, got)


def test_a_binding_budget_is_active_and_lowers_links_and_tokens():
    # B = 5 binds (a speaker sees 4 peers): the budget loss is > 0 early, and c2 = 1 deploys fewer links and tokens
    env, _ = _toy_refs()
    got = {}
    for c2 in (1.0, 0.0):
        cfg = R.RumadConfig(n_agents=5, hidden=32, lr=1e-3, c2=c2, B=5, budget_reading="deployed")
        pol, log = S.train_toy_controller(env, cfg, "agent", seed=0, updates=150, episodes=32)
        got[c2] = {**S.toy_evaluate(env, S.deploy_decision(pol), n=600), "early": log["loss_budget"].iloc[:10].mean()}
    assert got[1.0]["early"] > 0, got
    assert got[1.0]["links"] < got[0.0]["links"] and got[1.0]["tokens"] < got[0.0]["tokens"], got


def test_deployed_budget_reading_acts_on_speakers_and_links():
    # the expected-count reading leaves the self-weights alone; the deployed one raises them when over budget
    mu = torch.zeros(1, 6, 6, requires_grad=True)
    R.budget_loss(torch.distributions.Normal(mu, torch.ones(1, 6, 6)), 6, reading="deployed").backward()
    off = ~torch.eye(6, dtype=torch.bool)
    assert (mu.grad[0][~off] < 0).all() and (mu.grad[0][off] > 0).all()
    # the speak head: exact expectation, zero when within budget
    d = torch.distributions.Normal(torch.zeros(1, 1, 6), torch.ones(1, 1, 6))
    assert R.deployed_links(d).item() == pytest.approx(15.0)
    assert R.budget_loss(d, 15.0, reading="deployed").item() == 0.0


def test_p_speak_deployment_is_the_trained_distribution():
    # per edge: P(speak) by Monte Carlo agrees with sampling the policy; the speak head: Phi(mu / sigma)
    g = torch.Generator().manual_seed(1)
    mu = torch.randn(1, 4, 4, generator=g)
    d = torch.distributions.Normal(mu, torch.full((1, 4, 4), 0.7))
    w = torch.sigmoid(d.sample((4000,)))[:, 0]
    emp = np.mean([R.activation_mask(x.numpy()) for x in w], 0)
    assert np.abs(R.speak_probability(d, n_samples=4000)[0].numpy() - emp).max() < 0.05
    h = torch.distributions.Normal(torch.tensor([[[0.0, 1.0]]]), torch.ones(1, 1, 2))
    assert R.speak_probability(h)[0].tolist() == pytest.approx([0.5, 0.8413], abs=1e-4)


def test_printed_tables_3_and_4_are_the_papers():
    # RUMAD Tables 3-4 as printed (arXiv 2602.23864), in the notebook's variant labels: the numbers the tables sit beside
    from mad_study.loading import paper_table

    t3 = paper_table("rumad_tab3").astype({"accuracy_pct": float, "tokens_k": float})
    assert t3.shape == (18, 4) and set(t3["task"]) == {"MMLU", "GPQA", "GSM8K"}
    labels = {"RUMAD", "β distribution", "w/o R_ep", "w/o R_t", "w/o agent activation", "w/o L_budget"}
    assert set(t3["variant"]) == labels
    mmlu = t3[t3["task"] == "MMLU"].set_index("variant")
    assert mmlu.loc["RUMAD"].tolist() == ["MMLU", 68.3, 11.4] and mmlu.loc["w/o agent activation", "tokens_k"] == 51.9
    t4 = paper_table("rumad_tab4").astype({"agents": int, "B": float, "accuracy_pct": float, "tokens_k": float})
    assert t4.shape == (8, 5) and set(zip(t4["agents"], t4["B"])) == {(3, 6.0), (6, 12.0), (6, 18.0), (9, 18.0)}
    # Table 4's N = 6, B = 12 row is Table 3's full RUMAD
    six = t4[(t4["agents"] == 6) & (t4["B"] == 12)].set_index("task")
    assert six.loc["MMLU", "accuracy_pct"] == mmlu.loc["RUMAD", "accuracy_pct"] and six.loc["GSM8K", "tokens_k"] == 10.5


# ---- issue 50: the sim profile's per-edge actor moves under Table 6's lr; with no signal it does not ----
def _moved(cfg, zero_adv: bool, monkeypatch, updates: int = 30) -> tuple[float, float]:
    """(relative L2 of the actor's parameters from their initial values, KL(trained || initial) per decision summed
    over the edges on fixed random observations) after `updates` PPO updates of a 6-agent controller in the sim world;
    `zero_adv`: every advantage set to 0 (the reward gives the policy no signal; the value loss still trains the critic)."""
    import dataclasses
    backends, _ = _sim_setup()
    items = load_items("mmlu:dev", seed=0, source="fixture", save=False)[:20]
    env = R.RumadEnv(S.rumad_agents(MODELS, 6), backends, R.SimEmbedder(), "auto", 512)
    if zero_adv:
        orig = R._batch
        monkeypatch.setattr(R, "_batch", lambda eps, c: {**(b := orig(eps, c)), "adv": torch.zeros_like(b["adv"])})
    cfg = dataclasses.replace(cfg, updates=updates)
    p0 = R.policy_for(cfg, init_seed=0)
    pol, log = R.train_controller(items, env, cfg, seed=0)
    w0, w1 = p0.state_dict(), pol.state_dict()
    keys = [k for k in w0 if not k.startswith("critic")]
    rel = math.sqrt(sum(float(((w1[k] - w0[k]).double() ** 2).sum()) for k in keys)) / \
        math.sqrt(sum(float((w0[k].double() ** 2).sum()) for k in keys))
    obs = torch.as_tensor(np.random.default_rng(0).random((64, 6, 6)), dtype=torch.float32)
    obs = (obs + obs.transpose(1, 2)) / 2
    with torch.no_grad():
        kl = torch.distributions.kl_divergence(pol.dist(obs), p0.dist(obs)).sum((-1, -2)).mean().item()
    return rel, kl


def test_the_sim_actor_moves_with_a_reward_signal_and_not_without(monkeypatch):
    # the sim profile's actor (params/rumad/rumad_all.yaml train: Eq. 3's sigma from the observation, PyTorch's default
    # init) at Table 6's lr 1e-4: 30 updates (150 Adam steps) move it. The control has no signal for the actor: every
    # advantage 0 and no budget term (use_budget=False; with c2 = 0.01 alone Adam would scale that term's small but
    # steady gradient up to full-size steps and drive sigma up, measured: KL 13 in 30 updates); only the critic learns
    cfg = R.RumadConfig(rollout=10)                                   # the defaults: init default, sigma state
    assert (cfg.init, cfg.sigma) == ("default", "state")
    rel, kl = _moved(cfg, False, monkeypatch)
    import dataclasses
    rel0, kl0 = _moved(dataclasses.replace(cfg, use_budget=False), True, monkeypatch)
    assert kl > 0.005 and rel > 0.005, (rel, kl)
    assert kl0 < 1e-6 and rel0 < 1e-6, (rel0, kl0)
