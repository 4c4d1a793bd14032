"""UMAD training (nbs/10b_umad_train.ipynb, mad_study.umad_train) on the CPU with the tiny random model: the whole Alg. 2
loop, checkpoints and their loader, LoRA on 4-bit base weights, and a toy run whose verifiable reward rises."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from mad_study.core import ConfigError, GenRequest, derive_seed
from mad_study.data import load_items
from mad_study.umad import grpo_advantage, umad_advantages
from mad_study import umad_train as U

MSGS = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def items():
    return load_items("math500", n=2, seed=0, source="fixture")


def test_alg2_switches_reproduce_the_ablations():
    rng = np.random.default_rng(1)
    c = rng.integers(0, 2, size=(5, 2, 2)).astype(float)
    u = rng.uniform(0.1, 2.0, size=c.shape)
    assert np.allclose(U.alg2_advantages(c, u), umad_advantages(c, u))                       # Full UMAD
    assert np.allclose(U.alg2_advantages(c, u, eq4=False, eq5=False), grpo_advantage(c))     # Standard IPPO
    # NLL-only never flips the sign of IPPO's advantage; Intrinsic-only leaves the last turn as IPPO has it
    assert (np.sign(U.alg2_advantages(c, u, eq5=False)) == np.sign(grpo_advantage(c))).all()
    assert np.allclose(U.alg2_advantages(c, u, eq4=False)[:, :, -1], grpo_advantage(c)[:, :, -1])


def test_whole_loop_and_checkpoint_round_trip(items, tmp_path):
    cfg = U.TrainConfig(group_size=2, batch_size=2, max_new_tokens=8, lr=1e-3, micro_batch_size=4)
    tr = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name="toy")
    w0 = tr.policies["tiny-random-llama@a0"].model.model.layers[0].mlp.up_proj.weight.detach().clone()
    rec = tr.step(items)
    assert sorted(tr.policies) == ["tiny-random-llama@a0", "tiny-random-llama@a1"]
    assert rec["tiny-random-llama@a0/sequences"] == 2 * 2 * 2          # items x G x T_train turns of agent a0
    assert {m: set(g["agent"]) for m, g in tr.last_transcript.groupby("model")} == \
        {"tiny-random-llama@a0": {"a0"}, "tiny-random-llama@a1": {"a1"}}
    pol = tr.policies["tiny-random-llama@a0"]
    assert not torch.equal(w0, pol.model.model.layers[0].mlp.up_proj.weight)
    assert pol.backend.version == 1
    U.save_checkpoint(tr, "toy", root=tmp_path / "toy")
    meta = U.load_checkpoint_meta("toy", root=tmp_path / "toy")
    assert (meta["step"], meta["agents"]["a1"]["base_model"], meta["config"]["group_size"]) == (1, "tiny-random-llama", 2)
    tb = U.trained_backend("toy", "a1", root=tmp_path / "toy", progress=False)
    assert tb.backend_id.startswith("umad-train:toy/a1@") and str(tmp_path) not in tb.backend_id
    req = [GenRequest(MSGS, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)]
    assert tb.generate(req)[0].text == tr.policies["tiny-random-llama@a1"].backend.generate(req)[0].text
    sd, ref = tb.load().model.state_dict(), tr.policies["tiny-random-llama@a1"].model.state_dict()
    assert torch.allclose(sd["model.layers.1.self_attn.q_proj.weight"], ref["model.layers.1.self_attn.q_proj.weight"])
    with pytest.raises(ConfigError, match="no such agent"): U.checkpoint_spec("toy", "a7", root=tmp_path / "toy")
    with pytest.raises(ConfigError, match="no such trained checkpoint"): U.checkpoint_spec("nope", root=tmp_path / "nope")


def test_gradient_checkpointing_gives_the_same_gradient():
    norms = []
    for gc in (False, True):
        pol = U.Policy("tiny-random-llama", U.TrainConfig(lr=1e-2, micro_batch_size=2, gradient_checkpointing=gc), tag=f"gc-{gc}")
        C = [pol.backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Blue.", "I cannot say.")]
        norms.append(pol.update([pol.backend.encode(MSGS)] * 2, C, [1.0, -1.0])["grad_norm"])
        assert not pol.model.training                                   # back to eval mode for the next rollouts
    assert norms[0] == pytest.approx(norms[1], rel=1e-5) and norms[0] > 0


def test_rollouts_are_cached_per_policy_version(items, tmp_path):
    from mad_study.backends import GenerationCache
    cache = GenerationCache(tmp_path / "g.sqlite")
    cfg = U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=4, lr=1e-3)
    a = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name="c", cache=cache)
    a.step(items[:1])
    n = len(cache)
    b = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name="c", cache=cache)
    b.step(items[:1])                                               # the same run again: served from the cache
    assert len(cache) == n
    assert a.last_transcript["text"].tolist() == b.last_transcript["text"].tolist()
    a.step(items[:1])                                               # the next version's rollouts are new entries
    assert len(cache) > n


def test_lora_on_4bit_base_runs_on_cpu(items, tmp_path):
    pytest.importorskip("peft"); pytest.importorskip("bitsandbytes")
    cfg = U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=6, lr=1e-2, finetune="lora", quant="nf4",
                        lora_r=4, lora_alpha=8, shared_policy=True)
    tr = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name="toy-lora")
    assert list(tr.policies) == ["tiny-random-llama"]               # shared: both agents' turns train one model
    pol = tr.policies["tiny-random-llama"]
    assert "Linear4bit" in {type(m).__name__ for m in pol.model.modules()}
    trainable = {n: p.detach().clone() for n, p in pol.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    P = [pol.backend.encode(MSGS)] * 2
    C = [pol.backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Blue.", "I cannot say.")]
    assert torch.allclose(pol._fwd(pol.model, P, C)[0].detach(), pol.ref_logprobs(P, C))   # adapters start at zero: pi = pi_ref
    rec = tr.step(items[:1])
    assert rec["tiny-random-llama/sequences"] == 2 * 2 * 2          # G x N agents x T turns
    assert any(not torch.equal(trainable[n], p) for n, p in pol.model.named_parameters() if p.requires_grad)
    U.save_checkpoint(tr, "toy-lora", root=tmp_path / "lora")
    assert (tmp_path / "lora" / "tiny-random-llama" / "adapter_config.json").exists()
    tb = U.trained_backend("toy-lora", "a0", root=tmp_path / "lora", progress=False)
    req = [GenRequest(MSGS, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)]
    assert tb.generate(req)[0].text == pol.backend.generate(req)[0].text


def _toy_run(lr, steps=6, G=8, seed=0):
    "One prompt, 8 completions of 8 tokens per step at temperature 0.3; reward = share of tokens among the initial model's 8 most sampled."
    pol = U.Policy("tiny-random-llama", U.TrainConfig(lr=lr, temperature=0.3, micro_batch_size=G), tag=f"toy-{lr}-{seed}")
    msgs = [{"role": "user", "content": "Say something."}]
    prompt, tok = pol.backend.encode(msgs), pol.backend.tokenizer
    def sample(s, n):
        gens = pol.backend.generate([GenRequest(msgs, max_new_tokens=8, temperature=0.3, top_p=1.0, seed=derive_seed(seed, s, g)) for g in range(n)])
        return [tok(x.text, add_special_tokens=False)["input_ids"] or [pol.backend.eos_ids[0]] for x in gens]
    target = {t for t, _ in Counter(t for c in sample("init", 16) for t in c).most_common(8)}
    out = []
    for s in range(steps):
        ids = sample(s, G)
        r = np.array([np.mean([t in target for t in c]) for c in ids])
        pol.update([prompt] * G, ids, list(grpo_advantage(r)))
        out.append(r.mean())
    return np.array(out)


@pytest.mark.slow
def test_toy_reward_rises_and_not_without_learning():
    trained, control = _toy_run(1e-3), _toy_run(0.0)
    assert trained[-3:].mean() > trained[0] + 0.05
    assert trained[-3:].mean() > control[-3:].mean() + 0.05


def test_plan_counts_table2_sizes():
    p = dict(train_task="math_train", n_items=7500, batch_size=256, group_size=5, train_turns=2, epochs=2,
             max_new_tokens=2048, pairs=[["qwen2.5-3b-instruct", "qwen3-4b-instruct-2507"]], variants=["umad", "ippo"])
    pl = U.plan_train(p)
    assert pl["rollouts"] == 2 * (2 * 7500 * 5)
    assert pl["generations"] == 2 * (2 * 7500 * 5 * 2 * 2)
    assert pl["train_memory_gb"]["qwen3-4b-instruct-2507"]["full"] > 70 > pl["train_memory_gb"]["qwen3-4b-instruct-2507"]["lora_nf4"]


@pytest.mark.parametrize("profile", ["sim", "cpu", "paper"])
def test_experiment_file_validates_and_plans(profile):
    from mad_study.reproduce import experiments, load_profile, merge_params, plan_experiment, validate_params
    prof = load_profile(profile)
    e = experiments()["umad_train"]
    assert e.notebook.name == "10b_umad_train.ipynb" and e.artefacts == ["umad_train"]
    p = merge_params(e, prof)
    validate_params(p, e, prof)
    U.TrainConfig.from_params(p, quant=p["train_quant"])                 # every profile gives a valid configuration
    pl = plan_experiment(e, p)                                           # mad_study.umad_train is imported: its planner
    assert pl["rollouts"] > 0 and "train_memory_gb" in pl
    if profile == "paper":
        assert (p["group_size"], p["train_turns"], p["batch_size"], p["lr"], p["beta"], p["eta"], p["alpha"]) == (5, 2, 256, 1e-6, 0.001, 0.25, 0.25)
        assert pl["rollouts"] == 2 * (4 * 2 * 7500 * 5 + 15 * 7500 * 5)  # 2 settings x (4 debate variants x 2 epochs + Single-GRPO 15 epochs)
