"""UMAD training (nbs/papers/umad/10b_umad_train.ipynb, mad_study.umad_train) on the CPU with the tiny random model: the whole Alg. 2
loop, checkpoints and their loader, LoRA on 4-bit base weights, and a toy run whose verifiable reward rises."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from mad_study.core import ConfigError, GenRequest, derive_seed
from mad_study.loading import load_items
from mad_study.umad import grpo_advantage, umad_advantages
from mad_study import umad_train as U
from mad_study.core import Sampling

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


def test_checkpoint_loads_by_name_like_a_registry_model(items, scratch):
    "mad_study.backends resolves `umad-train:<checkpoint>/<agent>`: get_model, make_backend (cached), and a clear error."
    from mad_study.backends import CachedBackend, get_model, make_backend
    cfg = U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=4, lr=1e-3)
    tr = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name="byname")
    tr.step(items[:1])
    U.save_checkpoint(tr, "byname")                                   # runs/checkpoints/byname under the scratch runs/
    spec = get_model("umad-train:byname/a0")
    assert (spec.name, spec.kind, spec.params_b) == ("umad-train:byname/a0", "hf", get_model("tiny-random-llama").params_b)
    be = make_backend("umad-train:byname/a0", quant="none", cache=scratch / "c.sqlite", progress=False)
    assert isinstance(be, CachedBackend) and be.backend_id.startswith("umad-train:byname/a0@") and str(scratch) not in be.backend_id
    req = [GenRequest(MSGS, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)]
    first = be.generate(req)[0]
    assert first.text == tr.policies["tiny-random-llama@a0"].backend.generate(req)[0].text and first.completion_tokens > 0
    assert be.generate(req)[0].cached
    with pytest.raises(ConfigError) as e: make_backend("umad-train:never-trained/a0", quant="none")
    assert "checkpoint='never-trained'" in str(e.value) and str(scratch / "runs" / "checkpoints" / "never-trained") in str(e.value)
    with pytest.raises(ConfigError, match="no such agent"): get_model("umad-train:byname/a5")
    with pytest.raises(ConfigError, match="<checkpoint>/<agent>"): get_model("umad-train:byname")


@pytest.mark.parametrize("variant", ["umad", "ippo", "nll_only", "intrinsic_only"])
def test_eq4_eq5_advantages_are_what_the_update_receives(items, variant, monkeypatch):
    """The advantages each policy's GRPO update gets (and so the loss's -A/n gradient per token, see `grpo_loss`'s
    test) are, row by row, those of `mad_study.umad` on the rollouts' correctness and token NLL: `umad_advantages`
    (Eq. 4 and Eq. 5, as their unit tests define them) for UMAD, plain `grpo_advantage` for IPPO, one switch each."""
    from mad_study.umad import au_weight, group_standardize, umad_rewards
    got = {}
    def spy(self, P, C, A):
        got[self.backend.tag] = list(A); return dict(sequences=len(A))
    monkeypatch.setattr(U.Policy, "update", spy)
    real_rollout = U.rollout
    def graded(*a, **kw):      # the random model is never right: a fixed pattern of correctness makes the advantages non-zero
        tr = real_rollout(*a, **kw)
        return tr.assign(correct=np.random.default_rng(7).random(len(tr)) < 0.5)
    monkeypatch.setattr(U, "rollout", graded)
    cfg = U.TrainConfig(variant=variant, group_size=3, batch_size=2, max_new_tokens=6, temperature=1.0,
                        grading="lenient")     # the faked `correct` is the reward (strict re-grading: 10b's reward_correct)
    tr = U.UMADTrainer(["tiny-random-llama", "tiny-random-llama"], cfg, name=f"spy-{variant}")
    tr.step(items)
    ta = tr.last_transcript
    for k, pol in tr.policies.items():
        rows = ta[ta["model"] == k]
        exp = []
        for r in rows.itertuples():
            g = ta[ta["item_id"] == r.item_id]
            c = np.zeros((3, 2, 2)); u = np.zeros((3, 2, 2))
            for q in g.itertuples():
                c[q.sample, int(q.agent[1:]), q.round] = float(q.correct); u[q.sample, int(q.agent[1:]), q.round] = -q.logprob_mean
            a = {"umad": umad_advantages(c, u), "ippo": grpo_advantage(c),
                 "nll_only": au_weight(group_standardize(u, axis=0)) * grpo_advantage(c),
                 "intrinsic_only": grpo_advantage(umad_rewards(c, cfg.eta))}[variant]
            exp.append(a[r.sample, int(r.agent[1:]), r.round])
        assert len(got[pol.backend.tag]) == len(exp) == 2 * 3 * 2          # items x G x turns of this agent
        assert np.allclose(got[pol.backend.tag], exp) and np.abs(exp).max() > 0.1
    if variant != "ippo":      # the switch changes what the update receives
        ippo = [grpo_advantage(ta[(ta["item_id"] == i) & (ta["agent"] == a) & (ta["round"] == r)].sort_values("sample")["correct"].astype(float).to_numpy())
                for (i, a, r), _ in ta.groupby(["item_id", "agent", "round"])]
        mine = [ta[(ta["item_id"] == i) & (ta["agent"] == a) & (ta["round"] == r)].sort_values("sample")["advantage"].to_numpy()
                for (i, a, r), _ in ta.groupby(["item_id", "agent", "round"])]
        assert not np.allclose(np.concatenate(ippo), np.concatenate(mine))


def test_evaluation_path_on_a_trained_checkpoint(items, scratch):
    "The evaluation of 10b_umad_train (umad_trained): trained agents by name, a debate through make_backend, Table 1's layout, Fig. 3's decomposition."
    from mad_study.backends import make_backend
    from mad_study.debate import run_debate
    from mad_study.umad import decomposition_summary, decomposition_table, umad_role
    pair = ["tiny-random-llama", "tiny-random-llama"]
    name = U.checkpoint_name("umad_train", "test", pair, "umad")
    tr = U.UMADTrainer(pair, U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=4, lr=1e-3), name=name)
    tr.step(items[:1]); U.save_checkpoint(tr, name)
    ags = U.trained_agents(name)
    assert [a.model for a in ags] == [f"umad-train:{name}/a0", f"umad-train:{name}/a1"]
    assert [a.role for a in ags] == [umad_role(m) for m in pair]          # the App. F roles it was trained with
    bes = {a.model: make_backend(a.model, quant="none", cache=scratch / "c.sqlite", progress=False) for a in ags}
    ev = run_debate(items[:1], ags, bes, protocol=U.umad_protocol(), prompt=U.UMAD_PROMPT, samples=2, debate_rounds=1,
                    sampling=Sampling(max_new_tokens=6, temperature=0.6, top_p=0.95, seed=0), history="none", progress=False)
    ev = ev.assign(setting="Homogeneous MAD", variant="umad")
    assert len(ev) == 1 * 2 * 2 * 2 and set(ev["model"]) == {a.model for a in ags}
    tab = U.trained_table(ev, turns=[1, 2])
    assert list(tab["Method"]) == ["UMAD (T=1)", "UMAD (T=2)"] and "Parse failures (%)" in tab
    dec = decomposition_summary(decomposition_table(ev.assign(config="UMAD"), by=("config",)), by=("config",))
    assert list(dec["turn"]) == [1, 2] and {"tu", "eu", "au", "acc_a0", "acc_a1"} <= set(dec.columns)
    with pytest.raises(ConfigError, match="no such trained checkpoint"): U.trained_agents("umad_train-test-nothing-umad")


@pytest.mark.slow
def test_cpu_profile_smoke_run_writes_a_checkpoint_the_evaluation_loads(scratch):
    """The whole loop with the embedded SmolLM2-135M as umad_train's cpu profile configures it (LoRA, G = 2, one step on
    a MATH-train fixture question), then umad_trained's cpu evaluation path on its checkpoint. Smaller than the profile
    to stay a test (one question, 8 new tokens, bf16 base weights instead of nf4: bitsandbytes' 4-bit layers are slow
    on the CPU, about 13 minutes here; LoRA on nf4 is tested with the tiny model above)."""
    pytest.importorskip("peft"); pytest.importorskip("bitsandbytes")
    from mad_study.backends import make_backend
    from mad_study.debate import run_debate
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    prof = load_profile("cpu")
    p = merge_params(experiments()["umad_train"], prof)
    pair, v = p["pairs"][0], p["variants"][0]
    assert (p["finetune"], p["train_quant"], pair) == ("lora", "none", ["smollm2-135m-instruct"] * 2)   # the cpu profile (see its yaml)
    cfg = U.TrainConfig.from_params(p, variant=v, quant="none", max_new_tokens=8, batch_size=1)
    name = U.checkpoint_name("umad_train", "cpu", pair, v)
    trainer = U.UMADTrainer(pair, cfg, name=name)
    hist = trainer.train(load_items(p["train_task"], n=1, seed=0), max_steps=p["max_steps"])
    assert len(hist) == 1 and hist.loc[0, "questions"] == 1
    assert all(hist.loc[0, f"{k}/sequences"] > 0 for k in trainer.policies)
    U.save_checkpoint(trainer, name)
    e = merge_params(experiments()["umad_trained"], prof)
    assert U.checkpoint_name(e["checkpoint_experiment"], "cpu", e["pairs"][0], e["variants"][0]) == name
    ags = U.trained_agents(name)
    bes = {a.model: make_backend(a.model, quant="none", cache=scratch / "c.sqlite", progress=False) for a in ags}
    ev = run_debate(load_items(e["tasks"][0], n=e["eval_n_items"], seed=0), ags, bes, protocol=U.umad_protocol(), prompt=U.UMAD_PROMPT,
                    samples=e["samples"], debate_rounds=e["debate_rounds"], sampling=Sampling(max_new_tokens=8, temperature=e["eval_temperature"], top_p=e["eval_top_p"], seed=0), history="none", progress=False)
    assert (ev["completion_tokens"] > 0).all()
    tab = U.trained_table(ev.assign(setting="Homogeneous MAD", variant="umad"), turns=e["report_turns"])
    assert tab.shape[0] == 2 and tab["MATH500 A0"].str.len().gt(0).all()


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


def test_lora_on_4bit_base_starts_at_reference(items, tmp_path):
    "Runs on the GPU where there is one (the policy takes it): pi = pi_ref at step 0 there too (issue 38)."
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
    if not torch.cuda.is_available():                               # the CPU path is exact: the same sampled text
        assert tb.generate(req)[0].text == pol.backend.generate(req)[0].text
    else:                                                           # CUDA is not: the same trained adapter weights
        lora = lambda m: sorted(round(float(p.float().sum()), 3) for n, p in m.named_parameters() if "lora_" in n)
        assert lora(tb.load().model) == lora(pol.model) and lora(pol.model)


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
    "Pooled over three seeds: one seed's six steps of eight samples are too few to show the rise every time (seed 0 alone did not, once the draw became Gumbel-max)."
    trained = np.stack([_toy_run(1e-3, seed=s) for s in range(3)]).mean(0)
    control = np.stack([_toy_run(0.0, seed=s) for s in range(3)]).mean(0)
    assert trained[-3:].mean() > trained[0] + 0.05
    assert trained[-3:].mean() > control[-3:].mean() + 0.05


def test_plan_counts_table2_sizes():
    p = dict(train_task="math_train", n_items=7500, batch_size=256, group_size=5, train_turns=2, epochs=2,
             max_new_tokens=2048, pairs=[["qwen2.5-3b-instruct", "qwen3-4b-instruct-2507"]], variants=["umad", "ippo"])
    pl = U.plan_train(p)
    assert pl["rollouts"] == 2 * (2 * 7498 * 5)                      # MATH train: 7,498 questions with a gold
    assert pl["generations"] == 2 * (2 * 7498 * 5 * 2 * 2)
    assert pl["completion_tokens"] == pl["generations"] * 2048 and pl["prompt_tokens"] > 0
    assert pl["optimizer_steps"] == 2 * (2 * 30 * 2)                  # 30 steps per epoch, one update per agent
    assert pl["train_memory_gb"]["qwen3-4b-instruct-2507"]["full"] > 70 > pl["train_memory_gb"]["qwen3-4b-instruct-2507"]["lora_nf4"]


@pytest.mark.parametrize("profile", ["sim", "cpu", "paper"])
def test_experiment_file_validates_and_plans(profile):
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params, plan_experiment, validate_params
    prof = load_profile(profile)
    e = experiments()["umad_train"]
    assert e.notebook.name == "10b_umad_train.ipynb" and e.artefacts == ["umad_train"]
    p = merge_params(e, prof)
    validate_params(p, e, prof)
    assert p["train_task"] == "math_train"                               # the MATH training split (its fixture in sim / cpu)
    U.TrainConfig.from_params(p, quant=p["train_quant"])                 # every profile gives a valid configuration
    pl = plan_experiment(e, p)                                           # mad_study.umad_train is imported: its planner
    assert pl["rollouts"] > 0 and "train_memory_gb" in pl
    if profile == "paper":
        assert (p["group_size"], p["train_turns"], p["batch_size"], p["lr"], p["beta"], p["eta"], p["alpha"]) == (5, 2, 256, None, 0.001, 0.25, 0.25)
        assert (p["finetune"], U.TrainConfig.from_params(p, quant=p["train_quant"]).lr) == ("lora", U.LR_LORA)   # fits one 80 GB GPU
        # heterogeneous: 4 debate variants x 2 epochs + Single-GRPO 15 epochs; homogeneous: IPPO and UMAD (Table 1) x 2 epochs
        assert pl["rollouts"] == (4 * 2 * 7498 * 5 + 15 * 7498 * 5) + 2 * 2 * 7498 * 5
        mem = pl["train_memory_gb"]["qwen3-4b-instruct-2507"]
        assert mem["full"] > 70 > 5 > mem["lora_nf4"]                    # full fine-tuning needs a big GPU per agent, LoRA on nf4 a few GB


@pytest.mark.parametrize("profile", ["sim", "cpu", "paper"])
def test_evaluation_experiment_validates_and_plans(profile):
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params, plan_experiment, validate_params
    prof = load_profile(profile)
    e = experiments()["umad_trained"]
    assert e.notebook.name == "10b_umad_train.ipynb" and e.artefacts == ["umad_tab1_trained", "umad_tab3", "umad_fig3"]
    p = merge_params(e, prof)
    validate_params(p, e, prof)
    pl = plan_experiment(e, p)
    assert pl["generations"] > 0
    # the checkpoints it evaluates are those umad_train writes in the same profile
    t = merge_params(experiments()["umad_train"], prof)
    assert [U.checkpoint_name("umad_train", profile, q, v) for q in t["pairs"] for v in U.setting_variants(q, t["variants"])] == \
           [U.checkpoint_name(p["checkpoint_experiment"], profile, q, v) for q in p["pairs"] for v in U.setting_variants(q, p["variants"])]
    if profile == "paper":   # (heterogeneous: 5 variants x 5 tasks + the base pair on MATH500; homogeneous: 2 x 5 tasks) x 5 seeds x 2 agents x 5 turns
        n = 1319 + 500 + 40 + 30 + 30
        assert pl["generations"] == ((5 + 2) * n + 500) * 5 * 2 * 5


def test_status_stays_needs_gpu_without_trained_checkpoints(scratch):
    "The artefacts of the trained checkpoints are 'needs GPU (training)' until a paper-profile evaluation saves them."
    from mad_study.report import index_table
    df = index_table().set_index("id")
    for a in ("umad_tab1_trained", "umad_tab3", "umad_fig3", "umad_train"):
        assert df.loc[a, "status"] == "needs GPU (training)", a
    assert df.loc["umad_tab3", "experiment"] == "params/umad/umad_trained.yaml"


# ---------------------------------------------------------------- 4-bit training path (issue 20)
def _nf4_policy(tag):
    pol = U.Policy("tiny-random-llama", U.TrainConfig(finetune="lora", quant="nf4", lora_r=4, lora_alpha=8, lr=1e-2,
                                                      micro_batch_size=2), tag=tag)
    P = [pol.backend.encode(MSGS)] * 2
    C = [pol.backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Blue.", "I cannot say.")]
    return pol, P, C


def _assert_one_kernel(pol, P, C):
    """Alg. 2 line 29 at step 0 (zero adapters): pi_theta (with grad), pi_old (no grad) and pi_ref are the same numbers,
    before and after a rollout; and the backward never goes through a 4-bit kernel that has no gradient."""
    import warnings
    import bitsandbytes as bnb
    def same():
        lp = pol._fwd(pol.model, P, C)[0]
        assert lp.requires_grad
        with torch.no_grad(): old = pol._fwd(pol.model, P, C)[0]
        ref = pol.ref_logprobs(P, C)
        assert torch.equal(lp.detach(), old) and torch.equal(lp.detach(), ref)          # ratio = 1, KL = 0 exactly
    same()                                                                            # issue 20's case: no rollout yet
    pol.backend.generate([GenRequest(MSGS, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=1)])   # a rollout (eval, no grad)
    same()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rec = pol.update(P, C, [1.0, -1.0])
    assert not [x for x in w if "autograd kernel was not registered" in str(x.message)]   # bf16 gemv: silently wrong gradients
    assert rec["kl"] == 0.0 and rec["clipped"] == 0.0
    layers = [m for m in pol.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and pol.four_bit_layers == len(layers)
    assert not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in layers)   # never repacked


def test_4bit_training_reference_runs_through_the_policy_kernels():
    """With zero adapters the policy's log-probs (with gradient) equal pi_old's and pi_ref's (without) exactly. On a CPU
    with AVX512-BF16 bitsandbytes would otherwise serve the no-gradient forwards from its repacked bf16 kernel (about 0.02
    apart per token), and after the first rollout every forward, whose backward then has no gradient kernel."""
    pytest.importorskip("peft"); bnbm = pytest.importorskip("bitsandbytes.nn.modules")
    print("CPU AVX512-BF16:", bnbm.has_avx512bf16())
    _assert_one_kernel(*_nf4_policy("kernel"))


def test_4bit_training_path_is_pinned_even_where_the_bf16_kernel_is_chosen(monkeypatch):
    "The same rule with bitsandbytes told the CPU has AVX512-BF16 (its layers then choose the bf16 repack): runs on every CPU."
    pytest.importorskip("peft"); bnbm = pytest.importorskip("bitsandbytes.nn.modules")
    monkeypatch.setattr(bnbm, "has_avx512bf16", lambda: True)
    pol, P, C = _nf4_policy("forced")
    _assert_one_kernel(pol, P, C)
    assert all(m.support_avx512bf16_for_cpu is False for m in pol.model.modules() if isinstance(m, bnbm.Linear4bit))


# ---------------------------------------------------------------- issue 23, points 7-11
def test_cache_identity_holds_what_determines_the_weights(items, tmp_path):
    "Run A (lr 1e-2) then run B (lr 0) under one name and cache: none of B's rollouts is served from A's entries."
    from mad_study.backends import GenerationCache
    cache = GenerationCache(tmp_path / "g.sqlite")
    cfg = dict(group_size=2, batch_size=1, max_new_tokens=4)
    a = U.UMADTrainer(["tiny-random-llama"] * 2, U.TrainConfig(lr=1e-2, **cfg), name="run", cache=cache)
    a.step(items[:1]); a.step(items[:1])
    n = len(cache)
    assert n == 2 * (2 * 2 * 2)                                       # 2 steps x G x agents x turns
    b = U.UMADTrainer(["tiny-random-llama"] * 2, U.TrainConfig(lr=0.0, **cfg), name="run", cache=cache)
    b.step(items[:1]); b.step(items[:1])
    assert len(cache) == 2 * n                                        # every request of B is a new entry
    pa, pb = a.policies["tiny-random-llama@a0"], b.policies["tiny-random-llama@a0"]
    assert pa.backend.backend_id != pb.backend.backend_id and pa.lineage in pa.backend.backend_id


def test_lineage_moves_with_the_update_inputs():
    p1 = U.Policy("tiny-random-llama", U.TrainConfig(lr=1e-3), tag="l")
    p2 = U.Policy("tiny-random-llama", U.TrainConfig(lr=1e-3), tag="l")
    assert p1.lineage == p2.lineage                                   # same config, same parent
    P, C = [p1.backend.encode(MSGS)], [[5, 6, 7]]
    p1.update(P, C, [1.0]); p2.update(P, C, [-1.0])
    assert p1.version == p2.version == 1 and p1.lineage != p2.lineage and p1.backend.backend_id != p2.backend.backend_id


def _tensor_bytes(ts):
    seen, n = set(), 0
    for t in ts:
        if t is None or t.dim() == 0 or t.data_ptr() in seen: continue
        seen.add(t.data_ptr()); n += t.numel() * t.element_size()
    return n


def test_train_memory_estimate_is_what_policy_allocates():
    "Full fine-tuning: weights, gradients, AdamW moments and the frozen reference, per parameter, as `train_memory_gb` counts them."
    from mad_study.backends import get_model
    pol = U.Policy("tiny-random-llama", U.TrainConfig(lr=1e-3), tag="mem")
    pol.update([pol.backend.encode(MSGS)], [[5, 6, 7]], [1.0])
    params = list(pol.model.parameters())
    n = sum(p.numel() for p in params)
    got = _tensor_bytes(params) + _tensor_bytes(pol.ref.parameters()) + _tensor_bytes(p.grad for p in params) + \
        _tensor_bytes(t for s in pol.opt.state.values() for t in s.values())
    assert got / n == U.FULL_BYTES_PER_PARAM + U.REF_BYTES_PER_PARAM == 20.0
    assert U.train_memory_gb("tiny-random-llama", "full") == pytest.approx(get_model("tiny-random-llama").params_b * 20.0)
    assert U.train_memory_gb("qwen2.5-3b-instruct", "full") == pytest.approx(61.8, abs=0.1)
    assert U.train_memory_gb("qwen3-4b-instruct-2507", "full") == pytest.approx(80.4, abs=0.1)


def test_paper_profile_refuses_a_training_that_does_not_fit_before_any_rollout(monkeypatch):
    """The paper profile on one 80 GB GPU: its default (LoRA) passes the check; the paper's full fine-tuning of both agents
    in one process (~142 GB) is refused with the fixes named, before any model is loaded or rollout made."""
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    def never(*a, **kw): raise AssertionError("loaded a model or made a rollout before the memory check")
    monkeypatch.setattr(U, "Policy", never); monkeypatch.setattr(U, "rollout", never)
    p = merge_params(experiments()["umad_train"], load_profile("paper"))
    pair = p["pairs"][0]
    cfg = lambda **kw: U.TrainConfig.from_params(p, quant=p["train_quant"], gpu_memory_gb=80, **kw)
    assert (p["finetune"], cfg().lr) == ("lora", U.LR_LORA)
    assert max(U.check_train_memory(pair, cfg())["per_gpu"]) < 0.9 * 80          # the default fits one 80 GB GPU
    with pytest.raises(ConfigError) as e: U.UMADTrainer(pair, cfg(finetune="full", lr=1e-6), name="too-big")
    msg = str(e.value)
    assert "142.2 GB" in msg and "80 GB" in msg
    assert "finetune=lora -p train_quant=nf4" in msg and "policy_gpus=2" in msg and "bigger GPU" in msg
    with pytest.raises(ConfigError, match="80.4 GB"): U.UMADTrainer(pair, cfg(finetune="full", policy_gpus=2), name="x")
    assert U.check_train_memory(pair, cfg(finetune="full", policy_gpus=2), gpu_gb=141)["per_gpu"] == [61.8, 80.4]   # two H200


def test_empty_generation_is_zero_reward_counted_and_left_out(items, monkeypatch):
    "One generation without a token (an over-long prompt) in a UMAD batch: the step goes on, the row has zero reward and no NLL."
    real = U.rollout
    def one_empty(*a, **kw):
        tr = real(*a, **kw); k = tr.index[(tr["agent"] == "a0") & (tr["round"] == 0)][0]
        tr.loc[k, ["text", "completion_tokens", "logprob_mean", "correct"]] = ["", 0, None, True]
        return tr
    monkeypatch.setattr(U, "rollout", one_empty)
    tr = U.UMADTrainer(["tiny-random-llama"] * 2, U.TrainConfig(variant="nll_only", group_size=2, batch_size=1, max_new_tokens=4, lr=1e-3), name="empty")
    rec = tr.step(items[:1])
    ta = tr.last_transcript
    assert rec["empty_generations"] == 1 and ta["empty"].sum() == 1
    row = ta[ta["empty"]].iloc[0]
    assert row["reward"] == 0.0 and np.isnan(row["nll"])
    assert rec["tiny-random-llama@a0/sequences"] == 2 * 2 - 1 and tr.policies["tiny-random-llama@a0"].skipped_empty == 1
    assert rec["tiny-random-llama@a1/sequences"] == 2 * 2


def test_update_uses_the_configured_readings(items, monkeypatch):
    "The loss averaging and the KL clamp of the config reach `grpo_loss`; the team reward reaches the advantages."
    seen = []
    real = U.grpo_loss
    def spy(*a, **kw): seen.append((kw["grpo"].agg, kw["grpo"].kl_clamp)); return real(*a, **kw)
    monkeypatch.setattr(U, "grpo_loss", spy)
    cfg = U.TrainConfig(variant="ippo", group_size=2, batch_size=1, max_new_tokens=4, lr=1e-3, loss_agg="seq-mean-token-mean",
                        kl_clamp=None, reward="team")
    tr = U.UMADTrainer(["tiny-random-llama"] * 2, cfg, name="readings")
    tr.step(items[:1])
    assert seen and set(seen) == {("seq-mean-token-mean", None)}
    ta = tr.last_transcript
    g = ta.sort_values(["sample", "agent", "round"])
    team = U.team_rewards(g["correct"].astype(float).to_numpy().reshape(2, 2, 2))
    assert np.allclose(g["reward"].to_numpy(), team.reshape(-1))


class StandInEngine:
    "A stand-in rollout engine (as vLLM would be): fixed answers with log-probs; records every weight sync."
    backend_id = "stand-in-engine"
    def __init__(self, policy):
        self.policy, self.synced, self.requests = policy, [], 0
    def sync(self, policy):
        self.synced.append((policy.version, float(sum(p.detach().double().sum() for p in policy.params))))
    def generate(self, requests):
        from mad_study.core import Generation
        self.requests += len(requests)
        return [Generation(f"The answer is \\boxed{{{(r.seed + i) % 3}}}.", prompt_tokens=10, completion_tokens=9,
                           logprob_sum=-9.0 * (1 + (r.seed % 5) / 10), logprob_mean=-(1 + (r.seed % 5) / 10)) for i, r in enumerate(requests)]


def test_rollouts_come_from_an_engine_behind_the_backend_interface(items, monkeypatch, tmp_path):
    "Rollouts from a stand-in engine: HF generate never runs, the engine is synced once per policy version, the update trains."
    from mad_study.backends import GenerationCache
    def no_hf(*a, **kw): raise AssertionError("the in-process HF engine generated")
    monkeypatch.setattr(U.PolicyBackend, "_generate_batch", no_hf)
    engines = {}
    def make(policy): engines[policy.backend.tag] = StandInEngine(policy); return engines[policy.backend.tag]
    cache = GenerationCache(tmp_path / "g.sqlite")
    cfg = U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=16, lr=1e-2)
    tr = U.UMADTrainer(["tiny-random-llama"] * 2, cfg, name="eng", cache=cache, engine=make)
    w0 = tr.policies["tiny-random-llama@a0"].params[0].detach().clone()
    tr.step(items[:1]); tr.step(items[:1])
    assert tr.last_transcript["text"].str.startswith("The answer is").all()
    for e in engines.values():
        assert [v for v, _ in e.synced] == [0, 1] and e.synced[0][1] != e.synced[1][1]   # new weights pushed after the update
        assert e.requests == 2 * (2 * 2)                                                 # 2 steps x G x turns
    assert not torch.equal(w0, tr.policies["tiny-random-llama@a0"].params[0])
    bid = tr.backends["tiny-random-llama@a0"].backend_id
    assert bid.startswith("stand-in-engine:policy:eng/tiny-random-llama@a0:") and bid.endswith(":v2")
    with pytest.raises(ConfigError, match="sync"): U.EngineBackend(tr.policies["tiny-random-llama@a0"], object())


def test_rollout_batch_is_a_parameter():
    pol = U.Policy("tiny-random-llama", U.TrainConfig(rollout_batch=3), tag="rb")
    pol.backend.generate([GenRequest(MSGS, max_new_tokens=2, temperature=1.0, top_p=1.0, seed=s) for s in range(7)])
    assert pol.backend.batch_size == 3 and pol.backend.stats["batches"] == 3
    with pytest.raises(ConfigError, match="rollout_batch"): U.TrainConfig(rollout_batch=0)


def test_plan_prints_rollout_gpu_hours_per_engine(capsys):
    from mad_study.cli import main
    assert main(["plan", "umad_train", "--profile", "paper"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "rollout_gpu_hours" in l)
    for eng, (tps, src) in U.ROLLOUT_THROUGHPUT.items():
        assert f"'{eng}': " in line and f"GPU-h at {tps:,} tok/s ({src})" in line
    assert "200-300 GPU-h" in line
    pl = U.plan_train(dict(pairs=[["qwen2.5-3b-instruct", "qwen3-4b-instruct-2507"]], variants=["umad"], n_items=7500))
    hf = int(pl["rollout_gpu_hours"]["hf"].split(" GPU-h")[0][3:].replace(",", ""))
    assert hf == round(pl["completion_tokens"] / 520 / 3600)


def test_vllm_lora_engine_against_a_stub_server(items, tmp_path):
    "VLLMLoRAEngine: the adapter of every policy version is saved, loaded by its lineage name, the previous one unloaded; rollouts are that adapter's."
    pytest.importorskip("peft")
    from mad_study.serving import StubServer, echo_completion
    with StubServer(lambda n, body: (200, {}) if "lora_name" in body else (200, echo_completion(body))) as srv:
        cfg = U.TrainConfig(group_size=2, batch_size=1, max_new_tokens=8, finetune="lora", lora_r=4, lora_alpha=8, shared_policy=True)
        tr = U.UMADTrainer(["tiny-random-llama"] * 2, cfg, name="srv",
                           engine=lambda p: U.VLLMLoRAEngine(p, srv.base_url, tmp_path / "adapters", concurrency=2))
        pol = tr.policies["tiny-random-llama"]
        lineages = [pol.lineage]; tr.step(items[:1]); lineages.append(pol.lineage); tr.step(items[:1])
        loads = [b for b in srv.bodies if "lora_path" in b]
        names = [f"srv_tiny-random-llama-{l}" for l in lineages]
        assert [b["lora_name"] for b in loads] == names
        assert all((Path(b["lora_path"]) / "adapter_config.json").exists() for b in loads)
        assert [b["lora_name"] for b in srv.bodies if "lora_name" in b and "lora_path" not in b] == names[:1]    # unloaded
        chats = [b for b in srv.bodies if "messages" in b]
        assert len(chats) == 2 * (2 * 2 * 2) and {b["model"] for b in chats} == set(names) and all(b.get("logprobs") for b in chats)
        assert tr.last_transcript["text"].str.startswith("echo: ").all()
    with pytest.raises(ConfigError, match="finetune='lora'"): U.VLLMLoRAEngine(U.Policy("tiny-random-llama", U.TrainConfig(), tag="f"), "http://x", tmp_path)
