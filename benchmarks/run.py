#!/usr/bin/env python
"""Benchmarks of the mad_study kit: `make bench` (= `python benchmarks/run.py`).

1. Generation throughput: one debate round (6 agents x 4 GSM8K items, greedy, fixed max_new_tokens) with the embedded
   SmolLM2-135M in 4-bit nf4 on the CPU: the batched engine (`HFBackend.generate` on the whole round) vs. one request at
   a time (how the reference implementations call their models). With `--device cuda`, the same with a paper-profile model.
2. Memory: weight footprint of the embedded model in nf4, int8 and full precision (measured), and `mad-study plan`'s
   estimates for the paper profiles.
3. Cache: the cpu-profile baseline experiment (du_gsm8k, small) cold vs. warm (every generation cached; the warm run
   must not even load the model).
4. Analysis: every metric of the kit on a synthetic transcript of 500 items x 6 agents x 5 rounds x 16 samples.
5. Serving: the same debate round through `OpenAIBackend` against a local `transformers serve --continuous-batching` of
   the embedded model (full precision, CPU): all requests in flight vs one at a time (goal >= 3x, identical text), two
   servers behind one base_url list vs one, and vs the in-process batched `HFBackend` (same precision). Needs the
   `serving` extra; skipped with the reason otherwise.
8. Sim: agent turns per second through the whole `run_debate` path on synthetic agents, this checkout vs a baseline
   commit (`--sim-baseline`) in a temporary git worktree, each in a subprocess, A B A B (issue 50: goal >= 10x).

Ratios are measured within one run. The summary table is printed last and written, with the machine, versions and
date, to benchmarks/RESULTS.md."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"throughput": 2.5, "memory": 0.35, "cache": 20.0, "analysis": 10.0}
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(*a):
    print(*a, flush=True)


def _quiet():
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    for name in ("transformers", "bitsandbytes", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error(); hf_logging.disable_progress_bar()
    except ImportError:
        pass


# ------------------------------------------------------------------ machine and versions
def machine_info() -> dict:
    import importlib.metadata as md
    def v(n):
        try: return md.version(n)
        except md.PackageNotFoundError: return None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    mem = None
    try:
        import psutil
        mem = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"): cpu = line.split(":", 1)[1].strip(); break
    except OSError:
        pass
    gpu = None
    try:
        import torch
        if torch.cuda.is_available(): gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": platform.node(),
            "platform": platform.platform(), "cpu": cpu, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "memory_gib": mem, "gpu": gpu, "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "python": platform.python_version(), "commit": commit,
            "versions": {n: v(n) for n in ("mad_study", "torch", "transformers", "bitsandbytes", "numpy", "pandas", "scipy", "math-verify")}}


# ------------------------------------------------------------------ 1. throughput
def profile_tokens(profile: str = "cpu", experiment: str = "params/baseline/du_gsm8k.yaml") -> int:
    "The max_new_tokens the kit's `profile` gives Du et al.'s GSM8K debate (the workload of benchmarks 1 and 5)."
    from mad_study.reproduce import read_yaml
    spec = read_yaml(ROOT / experiment)
    return int(((spec.get("profiles") or {}).get(profile) or {}).get("max_new_tokens") or spec["params"]["max_new_tokens"])


def debate_round_requests(n_items: int = 4, n_agents: int = 6, max_new_tokens: int = 24, round_: int = 1):
    """The requests of one debate round (Du et al. GSM8K prompts). Round 1: each agent sees the other agents' round-0
    solutions (written by synthetic agents of different skill, so every prompt differs); round 0: the question alone."""
    from mad_study.core import Sampling
    from mad_study.loading import load_items
    from mad_study.debate import Agent, run_debate
    from mad_study.sim import SimBackend

    class Recorder:
        def __init__(self, inner): self.inner, self.requests = inner, []
        def generate(self, reqs): self.requests += list(reqs); return self.inner.generate(reqs)

    items = load_items("gsm8k", n=n_items, seed=0)
    recs = {f"sim-{i}": Recorder(SimBackend(f"sim-{i}", skill=0.3 + 0.1 * i, response_words=40)) for i in range(n_agents)}
    agents = [Agent(f"a{i}", f"sim-{i}") for i in range(n_agents)]
    run_debate(items, agents, recs, debate_rounds=1, prompt="du_gsm8k", sampling=Sampling(max_new_tokens=max_new_tokens), progress=False)
    return [r for rec in recs.values() for r in rec.requests if r.meta["round"] == round_]


def bench_throughput(model: str = "smollm2-135m-instruct", quant: str = "nf4", max_new_tokens: int = 48,
                     batch_size: int | None = None, device: str = "cpu", cpu_4bit_kernel: str = "dequantize") -> dict:
    """1. One debate round batched vs one at a time, on the 4-bit CPU path `cpu_4bit_kernel` (the kit's: dequantize), with
    the backend's default batch size; and, in the same run, batched the way the kit did before (2026-11-24): transformers'
    own KV cache, the whole batch prefilled together, batch_size 16."""
    import dataclasses
    from mad_study.backends import HFBackend, cpu_description
    reqs = debate_round_requests(max_new_tokens=max_new_tokens)
    be = HFBackend(model, quant=quant, batch_size=batch_size, progress=False, cpu_4bit_kernel=cpu_4bit_kernel)
    t = time.perf_counter(); be.load(); load_s = time.perf_counter() - t
    be.generate(reqs[:2])                                              # warm-up (kernels, allocator)
    prompt = [len(be.encode(r.messages)) for r in reqs]
    log(f"  {len(reqs)} requests, prompts {min(prompt)}-{max(prompt)} tokens, max_new_tokens={max_new_tokens}, {model} {quant} on {device}")
    # timed in the order A B A B (one at a time on the first half of the round, batched, one at a time on the second half,
    # batched again): a load that drifts during the run weighs on both modes alike (the machine is shared)
    half, bs = len(reqs) // 2, be.batch_size

    def before():                                     # C: the kit's batched path before the row prefill and reserved cache
        be.cpu_prefill_rows, be.batch_size = False, 16
        try: return be.generate(reqs)
        finally: be.cpu_prefill_rows, be.batch_size = True, bs

    single, t_a1 = _timed(lambda: [be.generate([r])[0] for r in reqs[:half]])
    batched, t_b1 = _timed(lambda: be.generate(reqs))
    old, t_c1 = _timed(before)
    single2, t_a2 = _timed(lambda: [be.generate([r])[0] for r in reqs[half:]])
    batched2, t_b2 = _timed(lambda: be.generate(reqs))
    _, t_c2 = _timed(before)
    single += single2
    t_single, t_batched, t_before = t_a1 + t_a2, (t_b1 + t_b2) / 2, (t_c1 + t_c2) / 2
    log(f"  one at a time: {t_a1:.1f} s + {t_a2:.1f} s; batched (batch_size={bs}): {t_b1:.1f} s, {t_b2:.1f} s; "
        f"as before (batched prefill, transformers' cache, batch_size 16): {t_c1:.1f} s, {t_c2:.1f} s")
    # the prefill alone (one new token), the work no batching removes: the same compute-bound pass over each prompt
    first = [dataclasses.replace(r, max_new_tokens=1) for r in reqs[:bs]]
    _, t_pb = _timed(lambda: be.generate(first))
    _, t_ps = _timed(lambda: [be.generate([r]) for r in first])
    log(f"  prefill alone ({len(first)} prompts, 1 new token): batched {t_pb:.1f} s, one at a time {t_ps:.1f} s")
    tok_s = sum(g.completion_tokens for g in single) / t_single
    tok_b = sum(g.completion_tokens for g in batched) / t_batched
    return {"model": model, "quant": quant, "device": device, "requests": len(reqs), "max_new_tokens": max_new_tokens,
            "batch_size": bs, "prompt_tokens": [min(prompt), max(prompt)], "load_s": round(load_s, 1),
            "completion_tokens": sum(g.completion_tokens for g in batched), "single_s": round(t_single, 2),
            "batched_s": round(t_batched, 2), "single_runs_s": [round(t_a1, 2), round(t_a2, 2)], "batched_runs_s": [round(t_b1, 2), round(t_b2, 2)],
            "same_batched_runs": sum(a.text == b.text for a, b in zip(batched, batched2)),
            "before": {"runs_s": [round(t_c1, 2), round(t_c2, 2)], "batched_s": round(t_before, 2), "speedup": round(t_before / t_batched, 2),
                       "ratio": round(t_single / t_before, 2), "same_text": sum(a.text == b.text for a, b in zip(batched, old))},
            "prefill": {"prompts": len(first), "batched_s": round(t_pb, 2), "single_s": round(t_ps, 2),
                        "share_of_batched": round(t_pb * len(reqs) / len(first) / t_batched, 2)}, "single_tok_s": round(tok_s, 1), "batched_tok_s": round(tok_b, 1),
            "ratio": round(tok_b / tok_s, 2), "same_text": sum(a.text == b.text for a, b in zip(batched, single)),
            "logprob_max_diff": max(abs(a.logprob_sum - b.logprob_sum) for a, b in zip(batched, single)
                                    if a.text == b.text and a.logprob_sum is not None),
            "path": _path_name(be, device), "cpu": cpu_description() if device == "cpu" else device,
            "layers": be.stats.get("cpu_4bit_layers"), "batch_invariant": be.batch_invariant}


# ------------------------------------------------------------------ 1g. the GPU: today's path vs the new one
def _gpu_run(be, reqs, **attrs) -> tuple[list, float, list]:
    "Generate `reqs` with the backend's attributes set to `attrs` for the call; (generations, seconds, batch sizes)."
    old = {k: getattr(be, k) for k in attrs}
    for k, v in attrs.items(): setattr(be, k, v)
    try:
        be.stats["batch_sizes"] = []
        _sync(); t = time.perf_counter()
        out = be.generate(reqs)
        _sync(); dt = time.perf_counter() - t
        return out, dt, list(be.stats["batch_sizes"])
    finally:
        for k, v in old.items(): setattr(be, k, v)


def _sync():
    import torch
    if torch.cuda.is_available(): torch.cuda.synchronize()


def _peak_gib(reset: bool = False) -> float | None:
    import torch
    if not torch.cuda.is_available(): return None
    if reset: torch.cuda.reset_peak_memory_stats()
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


TODAY = dict(auto_batch=False, batch_size=16, device_reserved_cache=False)   # the kit's GPU path before 2026-11-26
NEW = dict(auto_batch=True, batch_size=None, device_reserved_cache=True)


def bench_gpu(model: str = "random:qwen2.5-7b-instruct", n_items: int = 16, n_agents: int = 6, max_new_tokens: int = 128,
              budget_s: float = 420, save=None, bf16: bool = True) -> dict:
    """1g. One debate round at paper scale on the GPU (Du et al.'s GSM8K round 1: `n_items` x `n_agents` requests,
    greedy, `max_new_tokens`): the kit's path before 2026-11-26 (batches of 16, transformers' dynamic cache) and the
    new one (batches from free memory, the reserved cache) in one process on a warm GPU, nf4; then bf16 (new path),
    and bf16 with CUDA graphs while `budget_s` lasts. `save(res)` is called after every step (partial results)."""
    import dataclasses, torch
    from mad_study.backends import make_backend, get_model
    t_start, res = time.time(), {"model": model, "steps": {},
                           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (dry run)"}
    save = save or (lambda r: None)
    reqs = debate_round_requests(n_items=n_items, n_agents=n_agents, max_new_tokens=max_new_tokens)
    res.update(requests=len(reqs), max_new_tokens=max_new_tokens, params_b=get_model(model).params_b)
    t = time.perf_counter(); be = make_backend(model, quant="nf4", progress=False).load()
    res["nf4_load_s"] = round(time.perf_counter() - t, 1)             # includes building the random model once
    res["nf4_footprint_gib"] = round(be.memory_footprint() / 2**30, 2)
    prompt = [len(be.encode(r.messages)) for r in reqs]
    res["prompt_tokens"] = [min(prompt), max(prompt)]
    log(f"  {len(reqs)} requests, prompts {min(prompt)}-{max(prompt)} tokens, {max_new_tokens} new tokens, {model}")

    def step(name, backend, rq, mode):
        _peak_gib(reset=True)
        out, dt, sizes = _gpu_run(backend, rq, **mode)
        n = sum(g.completion_tokens for g in out)
        res["steps"][name] = dict(seconds=round(dt, 2), tokens=n, tok_s=round(n / dt, 1), batches=sizes,
                                  peak_gib=_peak_gib())
        log(f"  {name}: {dt:.1f} s, {n / dt:.0f} tok/s, batches {sizes}")
        save(res)
        return out

    today = step("nf4 today", be, reqs, TODAY)
    new = step("nf4 new", be, reqs, NEW)
    res["same_text_nf4"] = sum(a.text == b.text for a, b in zip(today, new))
    if bf16:                                                 # the full run: a small round and the prefill alone
        step("nf4 today, 24 requests", be, reqs[:24], TODAY)
        step("nf4 new, 24 requests", be, reqs[:24], NEW)
        first = [dataclasses.replace(r, max_new_tokens=1) for r in reqs]
        step("nf4 new, prefill only", be, first, NEW)
    res["speedup_nf4"] = round(res["steps"]["nf4 new"]["tok_s"] / res["steps"]["nf4 today"]["tok_s"], 2)
    be.close(); del be
    if not bf16: res["seconds"] = round(time.time() - t_start); save(res); return res
    t = time.perf_counter(); bf = make_backend(model, quant="none", progress=False).load()
    res["bf16_load_s"] = round(time.perf_counter() - t, 1)
    step("bf16 today", bf, reqs, TODAY)
    bnew = step("bf16 new", bf, reqs, NEW)
    res["speedup_bf16_vs_nf4_today"] = round(res["steps"]["bf16 new"]["tok_s"] / res["steps"]["nf4 today"]["tok_s"], 2)
    if time.time() - t_start < budget_s:                     # CUDA graphs: the first call compiles
        try:
            t = time.perf_counter(); _gpu_run(bf, reqs[:4], **NEW, cuda_graphs=True); res["graphs_compile_s"] = round(time.perf_counter() - t, 1)
            g = step("bf16 new + CUDA graphs", bf, reqs, dict(NEW, cuda_graphs=True))
            res["same_text_graphs"] = sum(a.text == b.text for a, b in zip(bnew, g))
        except Exception as e:
            res["graphs_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    res["seconds"] = round(time.time() - t_start)
    save(res)
    return res


def _path_name(be, device: str) -> str:
    "The 4-bit path a backend ran (for the report): bitsandbytes' bf16 kernel, or dequantize (once per call / per token)."
    if device != "cpu" or be.quant not in ("nf4", "fp4"): return f"{be.quant} on {device}"
    if be._bf16_kernel: return "bitsandbytes' AVX512-BF16 kernel (opted in)"
    return "dequantize, float32 (the kit's path)"


# ------------------------------------------------------------------ 5. serving
SERVING_TARGET = 3.0                       # all in flight vs one at a time, continuous batching on the CPU
SERVING_CB = {"num_blocks": 64}            # 64 pages of 256 tokens: room for the round's prompts and answers, not all the RAM


def _timed(f):
    t = time.perf_counter(); out = f(); return out, time.perf_counter() - t


def _prompt_range(reqs) -> list[int]:
    "Shortest and longest prompt of `reqs` in the embedded SmolLM2's tokens (its chat template)."
    from transformers import AutoTokenizer
    from mad_study.backends import embedded_checkpoint
    tok = AutoTokenizer.from_pretrained(embedded_checkpoint())
    texts = [tok.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in r.messages], tokenize=False,
                                     add_generation_prompt=True) for r in reqs]
    n = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    return [min(n), max(n)]


def _one_per_item(reqs, n: int) -> list:
    "The first `n` requests of distinct items (round 0: every agent of an item gets the same prompt)."
    seen, out = set(), []
    for r in reqs:
        if r.meta["item"].id not in seen: seen.add(r.meta["item"].id); out.append(r)
    assert len(out) >= n, f"only {len(out)} distinct items"
    return out[:n]


def _served_rounds(be, srv, sets: dict) -> dict:
    "Each timed mode of benchmark 5 on its own requests (see `bench_serving`), plus the untimed identical-text checks."
    from mad_study.serving import FlightMeter
    one_by_one = lambda rs: [be.generate([r])[0] for r in rs]
    ntok = lambda gs: sum(g.completion_tokens or 0 for g in gs)
    out = {}
    for name in ("round0", "round1"):
        fl, sg = sets[name]
        be.flight = FlightMeter(); m = srv.mark()
        flight, t_f = _timed(lambda: be.generate(fl))
        seen, meter = srv.requests_seen(since=m), be.flight.summary()
        m = srv.mark()
        single, t_s = _timed(lambda: one_by_one(sg))
        seen_single = srv.requests_seen(since=m)
        same = one_by_one(fl)                                                  # untimed: the identical-text check
        log(f"  {name}: all {len(fl)} in flight {t_f:.1f} s (server held {seen['max_in_flight']} at once), one at a time {t_s:.1f} s")
        out[name] = dict(flight_s=round(t_f, 2), single_s=round(t_s, 2), flight_tok_s=round(ntok(flight) / t_f, 1),
                         single_tok_s=round(ntok(single) / t_s, 1), ratio=round((ntok(flight) / t_f) / (ntok(single) / t_s), 2),
                         same_text=sum(a.text == b.text for a, b in zip(flight, same)), prompt_tokens=_prompt_range(fl),
                         completion_tokens=ntok(flight), server_max_in_flight=seen["max_in_flight"],
                         server_max_in_flight_single=seen_single["max_in_flight"], client_in_flight_mean=meter["mean"], texts=[g.text for g in flight])
    pf, ps = sets["prefill"]                                                   # round 1's prompts, one new token each
    _, t_pf = _timed(lambda: be.generate(pf)); _, t_ps = _timed(lambda: one_by_one(ps))
    log(f"  round 1 prefill only (1 new token): all in flight {t_pf:.1f} s, one at a time {t_ps:.1f} s")
    out["prefill"] = dict(flight_s=round(t_pf, 2), single_s=round(t_ps, 2), ratio=round(t_ps / t_pf, 2))
    return out


def bench_serving(n_requests: int = 8, max_new_tokens: int = 48, cb: dict | None = None, replicas: bool = True) -> dict:
    """5. `n_requests` turns of a debate round through `OpenAIBackend` against `transformers serve --continuous-batching`:
    all in flight vs one at a time for round 0 (the question: the goal) and round 1 (peers' solutions: prefill-bound), round
    1's prefill alone, the server's own count of requests in flight, two one-thread servers behind one base_url list vs one
    two-thread server, and the in-process batched `HFBackend` (same precision)."""
    import dataclasses
    from mad_study.backends import HFBackend, embedded_checkpoint
    from mad_study.serving import OpenAIBackend, TransformersServer, serving_available
    if (why := serving_available()): return {"error": why}
    cb = dict(SERVING_CB if cb is None else cb)
    n = n_requests
    # transformers' continuous batching shares the KV blocks of prompt prefixes it has seen (allow_block_sharing, no CLI
    # switch): a request timed after the same request ran would skip its prefill. So every timed mode gets requests of its
    # own (disjoint turns of the same round, prompts of the same lengths) and the identical-text checks run untimed after.
    r1 = debate_round_requests(n_items=9, max_new_tokens=max_new_tokens)              # 54 turns: 6 disjoint sets of n=8 + warm-up
    assert 6 * n + 4 <= len(r1), f"at most {(len(r1) - 4) // 6} serving requests"
    r1_sets = [r1[i * n:(i + 1) * n] for i in range(6)]
    r0 = _one_per_item(debate_round_requests(n_items=2 * n, max_new_tokens=max_new_tokens, round_=0), 2 * n)
    one_token = lambda rs: [dataclasses.replace(r, max_new_tokens=1) for r in rs]
    sets = {"round0": (r0[:n], r0[n:]), "round1": (r1_sets[0], r1_sets[1]), "prefill": (one_token(r1_sets[2]), one_token(r1_sets[3]))}
    mk = lambda urls, conc: OpenAIBackend("smollm2-135m-instruct", urls, served_model=str(embedded_checkpoint()), server="transformers",
                                          concurrency=conc, timeout=1800)
    with TransformersServer(embedded_checkpoint(), continuous_batching=True, cb=cb) as srv:
        log(f"  transformers serve ({srv.batching}, {cb}) healthy after {srv.started_in:.1f} s; {n} requests, max_new_tokens={max_new_tokens}")
        be = mk(srv.base_url, n)
        be.generate(r1[-4:][:1]); be.generate(r1[-4:])                   # warm-up (untimed): one request, then a batch in flight
        out = _served_rounds(be, srv, sets)
        start_s, batching, retried, failed = srv.started_in, srv.batching, be.stats["retried"], be.stats["failed"]
    rep = _replicas(mk, cb, r1_sets[4], r1_sets[5], r1[-4:], n) if replicas else {}
    hf = HFBackend("smollm2-135m-instruct", quant="none", batch_size=n, progress=False)
    hf.generate(r1_sets[0][:1])
    local, t_local = _timed(lambda: hf.generate(r1_sets[0]))
    log(f"  in process, batched (quant none), round 1: {t_local:.1f} s")
    local_rate = sum(g.completion_tokens for g in local) / t_local
    o1 = out["round1"]
    return {"requests": n, "max_new_tokens": max_new_tokens, "start_s": round(start_s, 1), "cores": os.cpu_count(),
            "batching": f"{batching} ({', '.join(f'{k}={v}' for k, v in cb.items())})", **out,
            "local_s": round(t_local, 2), "local_tok_s": round(local_rate, 1), "vs_local": round(o1["flight_tok_s"] / local_rate, 2),
            "same_as_local": sum(a == b.text for a, b in zip(o1["texts"], local)), "retried": retried, "failed": failed, "replicas": rep}


def _replicas(mk, cb: dict, two_set: list, one_set: list, warm: list, n: int) -> dict:
    """Two servers of one thread each behind one base_url list vs one server of two threads (this machine's cores split, not
    oversubscribed), each all in flight on round-1 requests of its own."""
    from mad_study.backends import embedded_checkpoint
    from mad_study.serving import TransformersServer
    threads = max(1, (os.cpu_count() or 2) // 2)
    with TransformersServer(embedded_checkpoint(), continuous_batching=True, cb=cb, threads=threads) as s1, \
         TransformersServer(embedded_checkpoint(), continuous_batching=True, cb=cb, threads=threads) as s2:
        be2 = mk([s1.base_url, s2.base_url], max(1, n // 2))
        be2.generate(warm[:2]); be2.generate(warm)                            # warm-up (untimed): each server, then both
        two, t_two = _timed(lambda: be2.generate(two_set))
    with TransformersServer(embedded_checkpoint(), continuous_batching=True, cb=cb) as s:
        be = mk(s.base_url, n)
        be.generate(warm[:1]); be.generate(warm)
        one, t_one = _timed(lambda: be.generate(one_set))
    log(f"  two servers of {threads} thread(s): {t_two:.1f} s; one server of {os.cpu_count()}: {t_one:.1f} s")
    rate = lambda gs, t: sum(g.completion_tokens or 0 for g in gs) / t
    return dict(two_s=round(t_two, 2), one_s=round(t_one, 2), ratio=round(rate(two, t_two) / rate(one, t_one), 2), threads=threads)


# ------------------------------------------------------------------ 2. memory
def bench_memory(model: str = "smollm2-135m-instruct", quants=("nf4", "int8", "none"), device: str = "cpu") -> dict:
    import torch
    from mad_study.backends import HFBackend, loaded_footprint_bytes, weight_memory_gb
    rows = []
    for q in quants:
        be = HFBackend(model, quant=q, progress=False)
        t = time.perf_counter(); be.load(); load_s = time.perf_counter() - t
        fp = loaded_footprint_bytes(be)
        dt_bytes = 4 if be.compute_dtype == torch.float32 else 2
        rows.append({"quant": q, "measured_mb": round(fp / 1e6, 1), "estimate_mb": round(weight_memory_gb(model, q, dtype_bytes=dt_bytes) * 1e3, 1),
                     "load_s": round(load_s, 2), "compute_dtype": str(be.compute_dtype).replace("torch.", "")})
        log(f"  {model} {q}: {fp / 1e6:.1f} MB measured, load {load_s:.1f} s")
        be.close(); del be
    full = next(r for r in rows if r["quant"] == "none")["measured_mb"]
    for r in rows: r["share_of_full"] = round(r["measured_mb"] / full, 3)
    return {"model": model, "device": device, "rows": rows, "ratio": next(r for r in rows if r["quant"] == "nf4")["share_of_full"],
            "plan": plan_estimates()}


def plan_estimates() -> dict:
    "`mad-study plan --profile paper` for every experiment: weight memory per model (nf4 and full bf16) and per experiment."
    from mad_study.backends import weight_memory_gb
    from mad_study.registry import load_profile, resolve_targets
    from mad_study.params import merge_params, plan_experiment, validate_params
    prof = load_profile("paper")
    models, exps = {}, []
    for e in resolve_targets(["all"]):
        p = merge_params(e, prof); validate_params(p, e, prof)
        pl = plan_experiment(e, p)
        mem = {m: g for m, g in pl["weight_memory_gb"].items() if g is not None}
        exps.append({"experiment": e.id, "generations": pl["generations"], "models": len(mem), "weights_gb": round(sum(mem.values()), 1)})
        for m, g in mem.items():
            d = models.setdefault(m, {"model": m, "nf4_gb": g, "bf16_gb": round(weight_memory_gb(m, "none"), 2), "experiments": 0})
            d["experiments"] += 1
    for d in models.values(): d["nf4_share"] = round(d["nf4_gb"] / d["bf16_gb"], 3)
    return {"models": sorted(models.values(), key=lambda d: d["nf4_gb"]), "experiments": exps,
            "largest": max(exps, key=lambda d: d["weights_gb"]) if exps else None}


# ------------------------------------------------------------------ 3. cache
def bench_cache(n_items: int = 2, max_new_tokens: int = 24, e2e: bool = True) -> dict:
    """The cpu-profile du_gsm8k experiment (the baseline notebook's steps: items, debate, accuracy table), cold (empty
    cache) and warm (same cache), each with fresh backends, in this process; then `mad-study reproduce` warm."""
    import pandas as pd
    tmp = Path(tempfile.mkdtemp(prefix="mad_bench_cache_"))
    os.environ["MAD_STUDY_RUNS"], os.environ["MAD_STUDY_FIGURES"] = str(tmp / "runs"), str(tmp / "figures")
    from mad_study.debate import FullyConnected, make_agents
    from mad_study.metrics import accuracy_by_round
    from mad_study.report import Study
    from mad_study.registry import load_profile, resolve_targets
    from mad_study.params import merge_params, validate_params
    overrides = {"n_items": n_items, "max_new_tokens": max_new_tokens}
    (exp,) = resolve_targets(["du_gsm8k"]); prof = load_profile("cpu")
    p = merge_params(exp, prof, overrides); validate_params(p, exp, prof, overrides)

    def experiment():
        study = Study(p, paper="baseline")
        items = study.items(p["task"], n=p["n_items"])
        tr = study.debate("debate", items, make_agents(p["models"]), protocol=FullyConnected(), debate_rounds=p["debate_rounds"],
                          prompt=p["prompt"], temperature=p["temperature"], max_new_tokens=p["max_new_tokens"], progress=False)
        study.save_table(accuracy_by_round(tr), "baseline")
        loaded = any(getattr(getattr(b, "inner", b), "model", None) is not None for b in study._backends.values())
        return tr, study.cache.stats(), loaded

    t = time.perf_counter(); tr_cold, st_cold, loaded_cold = experiment(); cold = time.perf_counter() - t
    log(f"  cold: {cold:.1f} s ({st_cold['computed']} generations computed, model loaded: {loaded_cold})")
    t = time.perf_counter(); tr_warm, st_warm, loaded_warm = experiment(); warm = time.perf_counter() - t
    log(f"  warm: {warm:.3f} s ({st_warm['hits']} cache hits, model loaded: {loaded_warm})")
    out = {"experiment": "du_gsm8k", "profile": "cpu", "overrides": overrides, "models": p["models"], "generations": len(tr_cold),
           "distinct": st_cold["computed"],
           "cold_s": round(cold, 2), "warm_s": round(warm, 3), "ratio": round(cold / warm, 1), "warm_loaded_model": loaded_warm,
           "warm_hits": st_warm["hits"], "warm_misses": st_warm["misses"], "same_transcript": bool(tr_cold.equals(tr_warm))}
    if e2e:                                                            # the command, warm: papermill and imports dominate
        cmd = [str(Path(sys.executable).parent / "mad-study"), "reproduce", "du_gsm8k", "--profile", "cpu",
               "-p", f"n_items={n_items}", "-p", f"max_new_tokens={max_new_tokens}"]
        t = time.perf_counter(); r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy())
        out["e2e_warm_s"] = round(time.perf_counter() - t, 1)
        side = json.loads((tmp / "figures" / "baseline" / "baseline.json").read_text()) if r.returncode == 0 else {}
        out["e2e_warm_cache"] = side.get("cache")
        log(f"  `mad-study reproduce du_gsm8k --profile cpu` warm: {out['e2e_warm_s']} s, cache {out['e2e_warm_cache']}"
            + ("" if r.returncode == 0 else f" (FAILED: {r.stderr.strip().splitlines()[-1:]})"))
    return out


# ------------------------------------------------------------------ 4. analysis
def synthetic_transcript(n_items=500, n_agents=6, n_rounds=5, n_samples=16, seed=0):
    """A transcript of n_items x n_agents x n_rounds x n_samples GSM8K-style turns built with numpy: accuracy rising
    over rounds, wrong answers near the gold value, 3% unparsed, texts ending in a boxed answer."""
    import numpy as np
    import pandas as pd
    from mad_study.core import transcript_frame
    rng = np.random.default_rng(seed)
    I, A, R, S = (x.ravel() for x in np.meshgrid(np.arange(n_items), np.arange(n_agents), np.arange(n_rounds), np.arange(n_samples), indexing="ij"))
    n = I.size
    gold = I * 7 % 97 + 3
    correct = rng.random(n) < 0.45 + 0.08 * R / max(n_rounds - 1, 1) + 0.03 * (A % 3)
    wrong = gold + rng.choice([-10, -2, -1, 1, 2, 10], size=n, p=[.05, .15, .3, .3, .15, .05])
    ans = np.where(correct, gold, wrong).astype(str).astype(object)
    ans[rng.random(n) < 0.03] = None
    filler = "We consider the given quantities and combine them step by step, checking each intermediate result. "
    text = np.array([filler * 3 + (f"So the final answer is \\boxed{{{a}}}." if a is not None else "I could not reach a conclusion.")
                     for a in ans], dtype=object)
    gold_s = gold.astype(str)
    df = pd.DataFrame(dict(experiment="bench", item_id=np.char.add("gsm8k/", I.astype(str)), task="gsm8k", gold=gold_s,
                           round=R, agent=np.char.add("a", A.astype(str)), role="debater", model="synthetic", sample=S,
                           position=A, visible_peers="", reused=False, prompt_tokens=200 + 180 * R, completion_tokens=rng.integers(40, 200, n),
                           text=text, answer=ans, correct=np.array([a is not None and a == g for a, g in zip(ans, gold_s)]),
                           logprob_sum=rng.normal(-30, 5, n), logprob_mean=rng.normal(-0.3, 0.1, n), token_entropy=rng.gamma(2, 0.3, n)))
    return transcript_frame(df)


def bench_analysis(n_items=500, n_agents=6, n_rounds=5, n_samples=16) -> dict:
    import numpy as np
    from mad_study import madc as MC
    from mad_study import metrics as M
    from mad_study import umad as U
    from mad_study import stats as S
    from mad_study.extract import extract_answer
    from mad_study.equivalence import parse_failure_rate
    from mad_study.voting import group_rows, vote_table
    t = time.perf_counter(); tr = synthetic_transcript(n_items, n_agents, n_rounds, n_samples); build = time.perf_counter() - t
    log(f"  transcript: {len(tr):,} rows ({n_items} items x {n_agents} agents x {n_rounds} rounds x {n_samples} samples), built in {build:.1f} s")
    ans = tr["answer"].to_numpy(dtype=object, na_value=None)
    gold, agent = tr["gold"].to_numpy(dtype=object), tr["agent"].to_numpy(dtype=object)
    last = n_rounds - 1

    def per_item_round(f):
        _, groups = group_rows(tr, ["item_id", "round"])
        return [f(idx) for idx in groups]

    def path_consistency(idx):
        a, x = agent[idx], ans[idx]
        return MC.path_consistency([x[a == name].tolist() for name in dict.fromkeys(a.tolist())], fmt="number")

    def per_item_accuracy():
        acc = tr.groupby(["item_id", "round"])["correct"].mean().unstack()
        return acc[0].to_numpy(dtype=float), acc[last].to_numpy(dtype=float)

    def reversal_points():
        curves = tr.groupby(["item_id", "round"])["correct"].mean().unstack()
        return [MC.reversal_point(range(n_rounds), row, level=0.5) for row in curves.to_numpy(dtype=float)]

    a0, aL = per_item_accuracy()
    cost = M.token_cost(tr)
    steps = [
        ("accuracy_by_round (agents + majority vote, Wilson CIs, parse failures)", lambda: M.accuracy_by_round(tr)),
        ("vote_table (majority vote per item, sample, round)", lambda: vote_table(tr)),
        ("uncertainty_table (UMAD TU / Sys-EU / Sys-AU per item-round)", lambda: U.uncertainty_table(tr)),
        ("flip_table (UMAD flips, round 0 -> 1 and 0 -> last)", lambda: (U.flip_table(tr), U.flip_table(tr, 0, last))),
        ("token_cost + token_savings", lambda: (M.token_cost(tr), M.token_savings(cost["total_tokens"].iloc[0], 1e4))),
        ("viewpoint_entropy per item-round (MADC A.2)", lambda: per_item_round(lambda i: MC.viewpoint_entropy(ans[i].tolist(), fmt="number"))),
        ("viewpoint_log_likelihood per item-round (MADC A.1)", lambda: per_item_round(lambda i: MC.viewpoint_log_likelihood(ans[i].tolist(), gold[i[0]], "number"))),
        ("path_consistency per item-round (MADC Eq. 2)", lambda: per_item_round(path_consistency)),
        ("reversal_point per item (MADC RQ3)", reversal_points),
        ("bootstrap_ci + paired_test (ttest, wilcoxon, mcnemar) over items", lambda: (
            S.bootstrap_ci(aL), S.paired_test(a0, aL), S.paired_test(a0, aL, "wilcoxon"),
            S.paired_test((a0 > 0.5).astype(float), (aL > 0.5).astype(float), "mcnemar"))),
        ("parse_failure_rate (all answers)", lambda: parse_failure_rate(ans.tolist())),
    ]
    rows = []
    for name, f in steps:
        t = time.perf_counter(); f(); dt = time.perf_counter() - t
        rows.append({"metric": name, "seconds": round(dt, 3)})
        log(f"  {dt:6.2f} s  {name}")
    total = sum(r["seconds"] for r in rows)
    texts = tr["text"].to_numpy(dtype=object)[:20000]
    t = time.perf_counter(); [extract_answer(s, "number") for s in texts]; ext = (time.perf_counter() - t) / len(texts)
    log(f"  (answer extraction, not a metric: {ext * 1e6:.0f} us per response; {ext * len(tr):.1f} s for all {len(tr):,})")
    return {"rows": len(tr), "shape": [n_items, n_agents, n_rounds, n_samples], "build_s": round(build, 1), "metrics": rows,
            "total_s": round(total, 2), "slowest": max(rows, key=lambda r: r["seconds"])["metric"],
            "extract_us_per_call": round(ext * 1e6, 1)}



def bench_stats(n_items: int = 100_000) -> dict:
    """7. Statistics at any n (issue 53): `paired_difference` on `n_items` items (one 0/1 answer per item: Tango's
    interval and McNemar's score test; averaged answers: the t-interval), `compare_methods` on three methods, and the
    chunked bootstrap `boot_mean_ci` (2,000 resamples) as used for token changes, each timed once with its peak Python
    memory (tracemalloc); goal < 5 s for `paired_difference` (it took 53 s and a 1.6 GB index array before)."""
    import tracemalloc
    import warnings
    import numpy as np
    import pandas as pd
    from mad_study.stats import boot_mean_ci, paired_difference
    from mad_study.compare import compare_methods
    g = np.random.default_rng(0)
    a01, b01 = (g.random(n_items) < 0.6).astype(float), (g.random(n_items) < 0.55).astype(float)
    am, bm = g.integers(0, 4, n_items) / 3, g.integers(0, 4, n_items) / 3
    res = pd.DataFrame({"item_id": np.tile(np.arange(n_items), 3), "method": np.repeat(["r", "x", "y"], n_items),
                        "correct": np.r_[a01, b01, (g.random(n_items) < 0.6).astype(float)], "tokens": 100.0})
    def measure(f):
        tracemalloc.start(); t = time.perf_counter(); f(); dt = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        return round(dt, 3), round(peak / 2**20, 1)
    out = {"n_items": n_items}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["paired_01_s"], out["paired_01_mb"] = measure(lambda: paired_difference(a01, b01))
        out["paired_means_s"], out["paired_means_mb"] = measure(lambda: paired_difference(am, bm))
        out["compare_s"], out["compare_mb"] = measure(lambda: compare_methods(res, "r"))
        out["boot_s"], out["boot_mb"] = measure(lambda: boot_mean_ci(am - bm, 0.95, 2000, 0))
    out["row"] = [f"7. statistics: `paired_difference` on {n_items:,} items",
                  f"0/1 answers **{out['paired_01_s']} s** ({out['paired_01_mb']} MB peak), averaged answers "
                  f"{out['paired_means_s']} s; `compare_methods` on 3 methods {out['compare_s']} s ({out['compare_mb']} MB); "
                  f"a 2,000-resample bootstrap {out['boot_s']} s ({out['boot_mb']} MB)", "< 5 s",
                  _met(max(out["paired_01_s"], out["paired_means_s"]) < 5)]
    log("   " + " | ".join(map(str, out["row"])))
    return out


# ------------------------------------------------------------------ 8. the sim: turns per second through the whole debate path
SIM_BASELINE = "dc1de10"          # the commit before the engine's speed work (issue 50)
SIM_TARGET = 10.0
SIM_WORKLOADS = {
    # Du et al.'s GSM8K debate as the sim profile runs it, with more threads: 3 agents, round 0 + 2 debate rounds,
    # 8 samples per item at temperature 1
    "du_gsm8k": dict(task="gsm8k", n=100, agents=3, debate_rounds=2, samples=8, prompt="du_gsm8k", temperature=1.0),
    # MADC's few-shot prompt on BBH logical deduction (7 objects): 6 agents, round 0 + 3 debate rounds, one sample
    "madc_bbh": dict(task="bbh_logical_deduction_7", n=100, agents=6, debate_rounds=3, samples=1, prompt="madc",
                     temperature=1.0),
}


def _sim_workload(w: dict) -> tuple:
    """A sim workload's items, agents, backends and `run_debate` keywords, from the `mad_study` this process imports
    (the baseline commit's or this checkout's: names both have)."""
    from mad_study.core import Sampling
    from mad_study.debate import Agent
    from mad_study.sim import SimBackend, sim_items
    items = sim_items(w["task"], w["n"])
    bes = {f"sim-{i}": SimBackend(f"sim-{i}", skill=0.45 + 0.05 * i) for i in range(w["agents"])}
    agents = [Agent(f"a{i}", f"sim-{i}") for i in range(w["agents"])]
    kw = dict(debate_rounds=w["debate_rounds"], samples=w["samples"], prompt=w["prompt"],
              sampling=Sampling(temperature=w["temperature"]), progress=False)
    return items, agents, bes, kw


def sim_child(root: str) -> dict:
    """One timed pass of every sim workload with the kit in `root` (this process imports `mad_study` from there):
    {workload: {turns, seconds, turns_s, answers, accuracy per round}}. Called in a subprocess by `bench_sim`; uses only
    names that the baseline commit has too."""
    sys.path.insert(0, root)
    import hashlib
    import mad_study
    from mad_study.debate import run_debate
    try:
        import mad_study.extract as extract_mod                              # the extractors' module since issue 49
    except ImportError:
        import mad_study.answers as extract_mod                              # the baseline commit's
    import mad_study.debate as debate_mod
    assert Path(mad_study.__file__).resolve().is_relative_to(Path(root).resolve()), mad_study.__file__
    out = {}
    for name, w in SIM_WORKLOADS.items():
        items, agents, bes, kw = _sim_workload(w)
        run_debate(items[:2], agents, bes, **kw)                                  # warm: imports, compiled patterns
        memo = getattr(extract_mod, "_extract_memo", None)
        if memo is not None: memo.cache_clear()                                   # no text parsed before the timed pass
        # the child's own CPU time (one thread): on a shared machine the wall clock also counts other jobs' turns
        t, w = time.process_time(), time.perf_counter()
        df = run_debate(items, agents, bes, **kw)
        dt, wall = time.process_time() - t, time.perf_counter() - w
        answers = df["answer"].fillna("\x00").tolist()
        out[name] = {"turns": len(df), "seconds": round(dt, 3), "turns_s": round(len(df) / dt, 1),
                     "wall_s": round(wall, 3), "wall_turns_s": round(len(df) / wall, 1),
                     "answers_sha": hashlib.sha256("\x1f".join(answers).encode()).hexdigest()[:16], "answers": answers,
                     "accuracy": {int(r): round(float(v), 4) for r, v in df.groupby("round")["correct"].mean().items()}}
        out[name]["parts_us"] = _sim_parts(debate_mod, run_debate, items, agents, bes, kw, memo)
    return out


def _sim_parts(debate_mod, run_debate, items, agents, bes, kw, memo) -> dict:
    """A second pass, untimed in the headline: CPU microseconds per turn in the backends' `generate` or
    `generate_round` (the sim), in
    `extract_answer` (the parser) and in the rest (the engine: requests, prompts, rows, frame), by timing wrappers."""
    spent = {"sim": 0.0, "parse": 0.0}

    class Timed:
        def __init__(self, inner):
            self.inner, self.kind = inner, getattr(inner, "kind", None)  # run as the sim is
            if callable(getattr(inner, "generate_round", None)): self.generate_round = self.round  # the columnar hook
        def generate(self, reqs):
            t = time.process_time(); out = self.inner.generate(reqs); spent["sim"] += time.process_time() - t
            return out
        def round(self, *a):
            t = time.process_time(); out = self.inner.generate_round(*a); spent["sim"] += time.process_time() - t
            return out

    parse = debate_mod.extract_answer
    def timed_parse(*a, **k):
        t = time.process_time(); out = parse(*a, **k); spent["parse"] += time.process_time() - t
        return out
    if memo is not None: memo.cache_clear()
    debate_mod.extract_answer = timed_parse
    try:
        t = time.process_time()
        df = run_debate(items, agents, {k: Timed(b) for k, b in bes.items()}, **kw)
        total = time.process_time() - t
    finally:
        debate_mod.extract_answer = parse
    n = len(df)
    return {"sim": round(1e6 * spent["sim"] / n, 1), "parse": round(1e6 * spent["parse"] / n, 1),
            "engine": round(1e6 * (total - spent["sim"] - spent["parse"]) / n, 1), "total": round(1e6 * total / n, 1)}


def sim_floor(root: str) -> dict:
    """8b. The floor under a sim turn (this checkout only): each operation that any path with the same draws and the same
    texts must do, replayed alone, in a loop, on the inputs one run of each workload gave it, in CPU microseconds per
    turn: the request seeds (`derive_seed`), the turns' uniforms (`batch_uniforms`), the debate prompts
    (`debate_message`), the sim reading each new prompt (`_count_words`, `read_final_answers`), deciding (`decide`,
    `_independent`), writing each new text (`_composed` unmemoised), the signals (`_signal_values`), parsing each new
    text (`extract_answer`, its memo cleared as in the timed pass) and grading each new answer (`is_correct`), and the
    frame (`transcript_columns`). Everything else in a turn (loops, lists, conversations, memo look-ups, the memory a
    first pass faults in) is glue. A lower bound, warm: the best ratio any path with these operations can reach is
    today's microseconds per turn over this floor."""
    import gc
    sys.path.insert(0, root)
    import mad_study.debate as D
    import mad_study.extract as E
    import mad_study.sim as S
    from mad_study.debate import run_debate
    from mad_study.sim import SimBackend
    out = {}
    for name, w in SIM_WORKLOADS.items():
        items, agents, bes, kw = _sim_workload(w)
        rec = {k: [] for k in ("seed", "uniforms", "prompt", "round", "decide", "alone", "signals", "composed", "parse",
                               "grade", "frame")}
        saved, depth = [], [0]  # depth: inside a spied `decide` or `_independent` (`decide` calls `_independent`)

        def spy(owner, attr, key, nested=False):
            f = getattr(owner, attr)
            saved.append((owner, attr, f))

            def g(*a, **k):
                if not nested:
                    rec[key].append((a, k))
                    return f(*a, **k)
                if depth[0] == 0: rec[key].append((a, k))
                depth[0] += 1
                try: return f(*a, **k)
                finally: depth[0] -= 1
            setattr(owner, attr, g)
        spy(D, "derive_seed", "seed"); spy(S, "batch_uniforms", "uniforms"); spy(D, "debate_message", "prompt")
        spy(SimBackend, "generate_round", "round"); spy(SimBackend, "decide", "decide", nested=True)
        spy(SimBackend, "_independent", "alone", nested=True); spy(SimBackend, "_signal_values", "signals")
        spy(S, "_composed", "composed"); spy(D, "extract_answer", "parse"); spy(D, "is_correct", "grade")
        spy(D, "transcript_columns", "frame")
        try:
            df = run_debate(items, agents, bes, **kw)
        finally:
            for owner, attr, f in reversed(saved): setattr(owner, attr, f)
        turns = len(df)
        # the sim's reading of each debate prompt: its newest user message (the older ones are memo look-ups)
        read = [next(m["content"] for m in reversed(msgs) if m["role"] == "user")
                for (be, messages, *_), _ in rec["round"] for msgs in messages
                if any(m["role"] == "assistant" for m in msgs) or len(msgs) > 2]
        distinct = lambda calls: list(dict.fromkeys((a, tuple(sorted(k.items()))) for a, k in calls))
        ops = {
            "seeds": (D.derive_seed, rec["seed"]),
            "uniforms": (S.batch_uniforms, rec["uniforms"]),
            "prompts": (D.debate_message, rec["prompt"]),
            "reading": (lambda s: (S._count_words(s), S.read_final_answers(s)), [((s,), {}) for s in read]),
            "deciding": (None, [(("decide",) + a, k) for a, k in rec["decide"]] + [(("alone",) + a, k) for a, k in rec["alone"]]),
            "writing": (S._composed.__wrapped__, [(a, dict(k)) for a, k in distinct(rec["composed"])]),
            "signals": (None, [(("signals",) + a, k) for a, k in rec["signals"]]),
            "parsing": (D.extract_answer, [(a, dict(k)) for a, k in distinct((x, {}) for x, _ in rec["parse"] if isinstance(x[0], str))]),
            "grading": (D.is_correct, [(a, dict(k)) for a, k in distinct(rec["grade"])]),
            "frame": (D.transcript_columns, rec["frame"]),
        }
        methods = {"decide": SimBackend.decide, "alone": SimBackend._independent, "signals": SimBackend._signal_values}
        parts = {}
        gc.disable()  # as `run_debate` runs the sim: the recorded inputs are many objects for a collector to walk
        for op, (f, calls) in ops.items():
            if op == "parsing": E._extract_memo.cache_clear()
            t = time.process_time()
            if f is None:
                for a, k in calls: methods[a[0]](*a[1:], **k)
            else:
                for a, k in calls: f(*a, **k)
            parts[op] = round(1e6 * (time.process_time() - t) / turns, 2)
        gc.enable()
        out[name] = {"turns": turns, "parts_us": parts, "floor_us": round(sum(parts.values()), 1),
                     "calls": {op: len(c) for op, (_, c) in ops.items()}}
    return out


def _sim_child_run(root: Path, fn: str = "sim_child") -> dict:
    "`sim_child(root)` (or another function `fn` of this file) in a fresh interpreter (PYTHONPATH = `root`, one thread)."
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import run as R; " \
           f"print('@@' + json.dumps(R.{fn}({str(root)!r})))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=900)
    for line in r.stdout.splitlines():
        if line.startswith("@@"): return json.loads(line[2:])
    raise RuntimeError(f"sim child in {root} failed: {(r.stderr.strip().splitlines() or ['no output'])[-1][:300]}")


def bench_sim(baseline: str = SIM_BASELINE) -> dict:
    """8. The sim's agent turns per second through the whole debate path (`run_debate` on `SimBackend`: requests and
    prompts composed, texts generated, parsed by `extract_answer`, graded, the transcript frame built), in THIS checkout
    (new) and in a temporary `git worktree` of `baseline` (today), each in its own subprocess, in the order A B A B;
    medians per side; the ratio new / today per workload (goal >= 10x, issue 50). The answer columns of the two sides are
    compared for the record: identical, or "different draws" (the sim's random streams changed) with the accuracy per
    round of each side beside it. The temporary worktree is removed afterwards, also on error."""
    import shutil
    import statistics
    base = Path(tempfile.mkdtemp(prefix="mad-bench-sim-")) / "baseline"
    try:
        r = subprocess.run(["git", "worktree", "add", "--detach", str(base), baseline], cwd=ROOT, capture_output=True,
                           text=True)
        if r.returncode:
            return {"error": f"git worktree add {baseline}: {r.stderr.strip()[-200:]}", "baseline": baseline}
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=base, capture_output=True, text=True).stdout.strip()
        runs = {"today": [], "new": []}
        for side in ("today", "new", "today", "new"):                             # A B A B: a drifting load weighs on both
            runs[side].append(_sim_child_run(base if side == "today" else ROOT))
            log(f"  {side}: " + ", ".join(f"{k} {v['turns_s']:,.0f} turns/s" for k, v in runs[side][-1].items()))
        floors = [_sim_child_run(ROOT, "sim_floor") for _ in range(3)]                # 8b: this checkout's floor
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
        shutil.rmtree(base.parent, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
    out = {"baseline": baseline, "baseline_commit": sha, "workloads": {}}
    for name, w in SIM_WORKLOADS.items():
        a = [x[name] for x in runs["today"]]; b = [x[name] for x in runs["new"]]
        ta, tb = statistics.median(x["turns_s"] for x in a), statistics.median(x["turns_s"] for x in b)
        same = sum(x == y for x, y in zip(a[0]["answers"], b[0]["answers"]))
        out["workloads"][name] = {
            **w, "turns": b[0]["turns"], "today_turns_s": ta, "new_turns_s": tb, "ratio": round(tb / ta, 2),
            "today_runs": [x["turns_s"] for x in a], "new_runs": [x["turns_s"] for x in b],
            "wall_ratio": round(statistics.median(x["wall_turns_s"] for x in b) / statistics.median(x["wall_turns_s"] for x in a), 2),
            "today_us_per_turn": round(1e6 / ta, 1), "new_us_per_turn": round(1e6 / tb, 1),
            "same_answers": same, "identical": same == b[0]["turns"] and a[0]["turns"] == b[0]["turns"],
            "repeatable": all(x["answers_sha"] == a[0]["answers_sha"] for x in a) and
                          all(x["answers_sha"] == b[0]["answers_sha"] for x in b),
            "today_accuracy": a[0]["accuracy"], "new_accuracy": b[0]["accuracy"],
            "today_parts_us": _median_parts(a), "new_parts_us": _median_parts(b)}
        fl = [x[name] for x in floors]
        floor = statistics.median(x["floor_us"] for x in fl)
        out["workloads"][name]["floor"] = {
            "floor_us": floor, "runs_us": [x["floor_us"] for x in fl], "calls": fl[0]["calls"],
            "parts_us": {k: round(statistics.median(x["parts_us"][k] for x in fl), 2) for k in fl[0]["parts_us"]},
            "glue_us": round(1e6 / tb - floor, 1), "ceiling": round(1e6 / ta / floor, 1)}
    rows = out["workloads"]
    words = "; ".join(
        f"{k} ({v['turns']:,} turns): today {v['today_turns_s']:,.0f}, new {v['new_turns_s']:,.0f} turns per CPU second, "
        f"**{v['ratio']}x** (wall clock {v['wall_ratio']}x; us per turn today {_parts(v['today_parts_us'])}, new "
        f"{_parts(v['new_parts_us'])}); answers " + ("identical" if v["identical"] else
                                          f"different draws (accuracy per round today {_acc(v['today_accuracy'])}, "
                                          f"new {_acc(v['new_accuracy'])})") for k, v in rows.items())
    out["row"] = [f"8. sim: agent turns per second through `run_debate` on `SimBackend` (new vs `{baseline}`, same run, "
                  "medians of A B A B)", words, f">= {SIM_TARGET:.0f}x", _met(min(v["ratio"] for v in rows.values()) >= SIM_TARGET)]
    out["floor_row"] = [
        "8b. sim floor: CPU us per turn of the operations any path with these draws and texts must do, each replayed "
        "alone (median of 3 children); the best ratio such a path can reach is today's us per turn over it",
        "; ".join(f"{k}: floor {v['floor']['floor_us']} us (new path {v['new_us_per_turn']}: glue {v['floor']['glue_us']}), "
                  f"ceiling **{v['floor']['ceiling']}x**" for k, v in rows.items()),
        f"ceiling >= {SIM_TARGET:.0f}x for the goal to be reachable",
        _met(min(v["floor"]["ceiling"] for v in rows.values()) >= SIM_TARGET)]
    log("   " + " | ".join(map(str, out["row"])))
    return out


def _median_parts(runs: list) -> dict:
    import statistics
    return {k: round(statistics.median(x["parts_us"][k] for x in runs), 1) for k in runs[0]["parts_us"]}


def _parts(p: dict) -> str:
    return f"sim {p['sim']}, parser {p['parse']}, engine {p['engine']}"


def _acc(acc: dict) -> str:
    return "/".join(f"{100 * v:.1f}" for _, v in sorted(acc.items(), key=lambda kv: int(kv[0]))) + "%"


# ------------------------------------------------------------------ report
def _sandbox_as_nobody(n: int) -> dict:
    """As root: the same medians as user nobody, the unprivileged path (no cgroup: the memory watch; /tmp made in a
    user namespace of the kit's own), run as tests/test_sandbox.py runs it: setpriv, the system's Python and a copy of
    mad_study/sandbox.py with the libseccomp binding. {} where that cannot be had, else {"nobody_ms", "nobody_layers"}
    or {"nobody_error"}."""
    import shutil
    setpriv, py = shutil.which("setpriv"), "/usr/bin/python3"
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not setpriv or not os.path.exists(py): return {}
    try: import pyseccomp; binding = [pyseccomp.__file__]
    except Exception: binding = []
    code = ("import json, statistics, time\nfrom sandbox import run_program, sandbox_check\nok, why = sandbox_check()\n"
            "if not ok: print(json.dumps({'nobody_error': why})); raise SystemExit\nrun_program('print(1)')\nts = []\n"
            f"for _ in range({n}):\n    t = time.perf_counter(); r = run_program('print(1)'); ts.append(time.perf_counter() - t)\n"
            "    assert r.ok, r.error\nprint(json.dumps({'nobody_ms': round(1000 * statistics.median(ts), 1), "
            "'nobody_layers': r.sandbox}))")
    with tempfile.TemporaryDirectory(prefix="mad-bench-nobody-") as d:
        os.chmod(d, 0o755)
        for src in (str(ROOT / "mad_study" / "sandbox.py"), *binding):
            shutil.copy(src, d); os.chmod(os.path.join(d, os.path.basename(src)), 0o644)
        r = subprocess.run([setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", py, "-c", code], cwd=d,
                           capture_output=True, text=True, timeout=600)
    try: return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError): return {"nobody_error": (r.stderr or r.stdout)[-300:]}


def bench_sandbox(n: int = 20) -> dict:
    """6. Sandbox: start-up cost per program-of-thought program (`print(1)`, median of `n`): the OS sandbox as it runs
    by default (bubblewrap with its seccomp filter, fresh keyring and, where one can be made, a cgroup; as root the
    private mount view), next to bubblewrap without the filter (`syscall_filter=False`), the in-process-guard-only
    mode (`isolation='none'`) and, as root, the unprivileged path as user nobody, all measured in this run, with the
    load average before and after; goal < 50 ms (issue 36; the README's earlier 16 ms was bubblewrap without the
    filter on another run). `row` is the summary-table row."""
    import statistics
    from mad_study.sandbox import os_isolation_available, run_program, sandbox_check, sandbox_provenance
    def cost(**kw):
        run_program("print(1)", **kw)                                    # warm (the first call also tries bwrap once)
        ts = []
        for _ in range(n):
            t = time.perf_counter(); r = run_program("print(1)", **kw); ts.append(time.perf_counter() - t)
            if not r.ok: raise RuntimeError(r.error)
        return round(1000 * statistics.median(ts), 1)
    load = lambda: ", ".join(f"{x:.2f}" for x in os.getloadavg())
    out = {"n": n, "load_before": load(), "none_ms": cost(isolation="none")}
    name = "6. sandbox: start-up cost per program (`print(1)`, median)"
    if not os_isolation_available():
        out["error"] = sandbox_check()[1]
        out["row"] = [name, f"not run: {out['error']} (in-process guard only: {out['none_ms']} ms)", "< 50 ms", "n/a"]
    else:
        out["bwrap_ms"] = cost()
        out["layers"] = run_program("print(1)").sandbox
        out["no_filter_ms"] = cost(syscall_filter=False) if sandbox_check(syscall_filter=False)[0] else None
        out.update({k: v for k, v in sandbox_provenance().items() if k != "sandbox"})
        out.update(_sandbox_as_nobody(n))
        out["load_after"] = load()
        who = "as root" if hasattr(os, "geteuid") and os.geteuid() == 0 else "as this user"
        nobody = (f"; as user nobody (no cgroup: memory watch) **{out['nobody_ms']} ms**" if "nobody_ms" in out else
                  f"; as user nobody: not run ({out['nobody_error']})" if "nobody_error" in out else "")
        out["row"] = [name, f"bubblewrap with the seccomp filter {who} **{out['bwrap_ms']} ms** (cgroup: "
                            f"{out['sandbox_cgroup']}; without the filter {out['no_filter_ms']} ms){nobody}; in-process "
                            f"guard only {out['none_ms']} ms; median of {n}, load average {out['load_before']} before, "
                            f"{out['load_after']} after", "< 50 ms",
                      _met(out["bwrap_ms"] < 50 and out.get("nobody_ms", 0) < 50)]
    log("   " + " | ".join(map(str, out["row"])))
    return out


def _met(ok):
    return "yes" if ok else "**no**"


def summary_rows(res: dict) -> list[list[str]]:
    rows = []
    for key in ("throughput", "throughput_bf16", "throughput_gpu"):
        t = res.get(key)
        if t is None: continue
        if "error" in t:
            rows.append([f"1. generation throughput ({t.get('device', '?')})", f"not run: {t['error']}", f">= {TARGETS['throughput']}x", "n/a"]); continue
        kit = key != "throughput_bf16"
        rows.append([f"1{'' if kit else 'b'}. generation throughput: one debate round ({t['requests']} requests, {t['max_new_tokens']} new tokens), "
                     f"{t['model']} {t['quant']} on {t['device']}, {t.get('path', '?')}",
                     f"batched {t['batched_tok_s']} tok/s vs one at a time {t['single_tok_s']} tok/s: **{t['ratio']}x**; "
                     f"identical greedy text {t['same_text']} of {t['requests']}"
                     + (f"; prefill ~{100 * t['prefill']['share_of_batched']:.0f}% of the batched time" if t.get("prefill") else "")
                     + (f"; the batched path as it was before 2026-11-24 (batch 16, batched prefill, transformers' cache), same run: {t['before']['ratio']}x" if t.get("before") else ""),
                     f">= {TARGETS['throughput']}x{', all identical' if t.get('batch_invariant') else ''}" if kit else "comparison",
                     _met(t["ratio"] >= TARGETS["throughput"] and (not t.get("batch_invariant") or t["same_text"] == t["requests"]))
                     if kit else "n/a"])
    m = res.get("memory")
    if m:
        r = {x["quant"]: x for x in m["rows"]}
        rows.append([f"2. memory: weights of {m['model']} ({m['device']}; full = {r['none']['compute_dtype']})",
                     f"nf4 {r['nf4']['measured_mb']} MB, int8 {r['int8']['measured_mb']} MB, full {r['none']['measured_mb']} MB: "
                     f"nf4 = **{100 * m['ratio']:.1f}%** of full", f"<= {100 * TARGETS['memory']:.0f}%", _met(m["ratio"] <= TARGETS["memory"])])
    c = res.get("cache")
    if c:
        rows.append([f"3. cache: cpu-profile du_gsm8k ({c['overrides']['n_items']} items, {c['overrides']['max_new_tokens']} new tokens, "
                     f"{c['generations']} agent turns = {c['distinct']} distinct generations)",
                     f"cold {c['cold_s']} s, warm {c['warm_s']} s (model loaded when warm: {c['warm_loaded_model']}): **{c['ratio']}x**",
                     f">= {TARGETS['cache']:.0f}x", _met(c["ratio"] >= TARGETS["cache"] and not c["warm_loaded_model"])])
    a = res.get("analysis")
    if a:
        rows.append([f"4. analysis: every metric on {a['rows']:,} transcript rows ({' x '.join(map(str, a['shape']))})",
                     f"**{a['total_s']} s** in all (slowest: {a['slowest'].split(' (')[0]})", f"< {TARGETS['analysis']:.0f} s",
                     _met(a["total_s"] < TARGETS["analysis"])])
    if res.get("stats"): rows.append(res["stats"]["row"])
    v = res.get("serving")
    if v:
        if "error" in v: rows.append(["5. serving (transformers serve, CPU)", f"not run: {v['error']}", f">= {SERVING_TARGET}x", "n/a"])
        else:
            z, o, r = v["round0"], v["round1"], v.get("replicas") or {}
            rows.append([f"5. serving: {v['requests']} turns of a debate round through `OpenAIBackend`, `transformers serve` with {v['batching']} (CPU)",
                         f"round 0 (prompts {z['prompt_tokens'][0]}-{z['prompt_tokens'][1]} tokens): all in flight **{z['ratio']}x** one at a time "
                         f"(server held {z['server_max_in_flight']} at once; identical greedy text {z['same_text']} of {v['requests']}); "
                         f"round 1 (prompts {o['prompt_tokens'][0]}-{o['prompt_tokens'][1]}): {o['ratio']}x (identical {o['same_text']} of {v['requests']}; "
                         f"its prefill alone {v['prefill']['ratio']}x); round 1 vs in-process batched {v['vs_local']}x"
                         + (f"; 2 servers of {r['threads']} thread(s) {r['ratio']}x 1 server" if r else ""),
                         f">= {SERVING_TARGET}x on round 0, all identical",
                         _met(z["ratio"] >= SERVING_TARGET and z["same_text"] == v["requests"])])
    if res.get("sandbox"): rows.append(res["sandbox"]["row"])
    m = res.get("sim")
    if m:
        rows.append(m["row"] if "row" in m else ["8. sim: agent turns per second", f"not run: {m['error']}",
                                                 f">= {SIM_TARGET:.0f}x", "n/a"])
        if "floor_row" in m: rows.append(m["floor_row"])
    return rows


def md_table(header, rows) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render(res: dict, info: dict, argv: list[str]) -> str:
    L = ["# Benchmarks", "",
         f"`make bench` (`{' '.join(['python benchmarks/run.py', *argv]).strip()}`) on {info['date']} (commit {info['commit']}; "
         f"{info.get('bench_seconds', '?')} s in all). See [README.md](README.md) for what each benchmark measures.", "",
         f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB RAM, GPU: {info['gpu'] or 'none'}; "
         f"{info['platform']}; load average at start {info['load_average']} (the machine is shared: absolute timings are noisy, "
         "ratios are measured within one run).", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v) + f", Python {info['python']}.", "",
         md_table(["benchmark", "measured", "target", "met"], summary_rows(res)), ""]
    for key in ("throughput", "throughput_bf16", "throughput_gpu"):
        t = res.get(key)
        if t and "error" not in t:
            L += [f"## 1{'b' if key == 'throughput_bf16' else ''}. Generation throughput ({t['device']}"
                  f"{': bitsandbytes AVX512-BF16 kernel, for comparison' if key == 'throughput_bf16' else ''})", "",
                  f"One debate round of Du et al.'s GSM8K debate: {t['requests']} requests (6 agents x 4 items; each agent sees the other "
                  f"five agents' round-0 solutions, prompts of {t['prompt_tokens'][0]}-{t['prompt_tokens'][1]} tokens), greedy, "
                  f"max_new_tokens = {t['max_new_tokens']}, {t['model']} in {t['quant']} ({t['device']}). Batched: the kit's "
                  f"`HFBackend.generate` on the whole round (batch_size {t['batch_size']}, left-padded, per-row stopping"
                  f"{'; on the CPU each prompt prefilled alone, the batch decoded together' if t['device'] == 'cpu' else ''}). One at a time: "
                  "`generate([request])` per request, as the reference implementations call their models. Tokens/s counts the "
                  "tokens actually generated (a row that stops early is not credited with padding).", "",
                  md_table(["mode", "seconds", "tokens/s"], [["one at a time", t["single_s"], t["single_tok_s"]],
                                                             ["batched", t["batched_s"], t["batched_tok_s"]]]), "",
                  f"Ratio {t['ratio']}x; greedy outputs identical batched vs. one at a time for {t['same_text']} of {t['requests']} "
                  f"requests (log-prob sums of the identical ones apart by at most {t.get('logprob_max_diff', 0):.2g}); "
                  f"model load {t['load_s']} s (not timed). CPU: {t.get('cpu', '?')}; 4-bit path: {t.get('path', '?')} "
                  f"(layers per path: {t.get('layers')}).", ""]
            if t.get("prefill"):
                pf = t["prefill"]
                L += [f"Timed in the order one at a time (first half of the round, {t['single_runs_s'][0]} s), batched ({t['batched_runs_s'][0]} s), "
                      f"{'batched as before (below), ' if t.get('before') else ''}one at a time (second half, {t['single_runs_s'][1]} s), "
                      f"batched again ({t['batched_runs_s'][1]} s{', then as before' if t.get('before') else ''}; same text as the first "
                      f"batched run for {t['same_batched_runs']} of {t['requests']}). The prefill alone ({pf['prompts']} of the round's prompts, one "
                      f"new token): batched {pf['batched_s']} s, one at a time {pf['single_s']} s. Scaled to the round it is about "
                      f"{100 * pf['share_of_batched']:.0f}% of the batched time: a compute-bound pass over each prompt that batching does not "
                      f"shorten, so the ratio is bounded by the prompts' length against the answers' ({t['max_new_tokens']} new tokens on "
                      f"{t['prompt_tokens'][0]}-{t['prompt_tokens'][1]}-token prompts).", ""]
            if t.get("before"):
                b = t["before"]
                L += [f"After each batched run, the same round batched the way the kit did before 2026-11-24 (transformers' own KV cache, "
                      f"grown by `torch.cat` every step; the whole batch prefilled together; batch_size 16): {b['runs_s'][0]} s and "
                      f"{b['runs_s'][1]} s, so the kit's batched path is **{b['speedup']}x** faster than it was, and the old path's "
                      f"ratio in this run is {b['ratio']}x (same greedy text as the kit's batched path for {b['same_text']} of "
                      f"{t['requests']}). On the CPU the kit now prefills each prompt alone into a KV cache reserved for the whole "
                      "generation and decodes the batch together (03g_hf, `_prefill_rows`).", ""]
    m = res.get("memory")
    if m:
        L += ["## 2. Memory", "", f"Weights and buffers of the loaded {m['model']} on the {m['device']} (transformers' "
              "`get_memory_footprint`), next to the kit's estimate (`weight_memory_gb`). bitsandbytes keeps the embeddings and "
              "the LM head in the compute dtype, which is most of a 135M model's full-size weights.", "",
              md_table(["quantization", "compute dtype", "measured MB", "estimate MB", "share of full", "load s"],
                       [[r["quant"], r["compute_dtype"], r["measured_mb"], r["estimate_mb"], f"{100 * r['share_of_full']:.1f}%", r["load_s"]]
                        for r in m["rows"]]), "",
              "`mad-study plan --profile paper` estimates (weights only; KV cache and activations come on top), per model:", "",
              md_table(["model", "nf4 GB", "bf16 GB", "nf4 share", "experiments"],
                       [[d["model"], d["nf4_gb"], d["bf16_gb"], f"{100 * d['nf4_share']:.0f}%", d["experiments"]] for d in m["plan"]["models"]]), ""]
        if m["plan"]["largest"]:
            lg = m["plan"]["largest"]
            L += [f"Largest experiment by weights held at once: {lg['experiment']} ({lg['models']} models, {lg['weights_gb']} GB in nf4).", ""]
    c = res.get("cache")
    if c:
        L += ["## 3. Cache", "", f"The cpu-profile baseline experiment (du_gsm8k: {', '.join(c['models'])}; overrides {c['overrides']}): "
              "the notebook's steps (items, debate, accuracy table) with a fresh Study each time, first with an empty generation "
              "cache, then with the same cache. HFBackend loads its model lazily, so the warm run never loads it. (The three "
              "agents are the same greedy model, so each round's three requests are one generation: "
              f"{c['generations']} agent turns, {c['distinct']} distinct generations.)", "",
              md_table(["run", "seconds", "cache (distinct generations)", "model loaded"], [
                  ["cold", c["cold_s"], f"{c['distinct']} computed", True],
                  ["warm", c["warm_s"], f"{c['warm_hits']} read, {c['warm_misses']} missing", c["warm_loaded_model"]]]), "",
              f"Ratio {c['ratio']}x; identical transcripts: {c['same_transcript']}."]
        if "e2e_warm_s" in c:
            L += [f"The whole command warm (`mad-study reproduce du_gsm8k --profile cpu -p n_items={c['overrides']['n_items']} "
                  f"-p max_new_tokens={c['overrides']['max_new_tokens']}`, same cache): {c['e2e_warm_s']} s, cache {c['e2e_warm_cache']}; "
                  "starting the notebook kernel and importing the libraries take most of it."]
        L += [""]
    a = res.get("analysis")
    if a:
        L += ["## 4. Analysis", "", f"A synthetic transcript of {a['rows']:,} rows ({' x '.join(map(str, a['shape']))}: items x agents x "
              f"rounds x samples; GSM8K-style numeric answers, 3% unparsed), built with numpy in {a['build_s']} s (not timed). "
              "Each metric of `mad_study.metrics` (and the majority vote of `mad_study.debate`) on all of it, one process, one core:", "",
              md_table(["metric", "seconds"], [[r["metric"], r["seconds"]] for r in a["metrics"]] + [["**all together**", f"**{a['total_s']}**"]]), "",
              f"Answer extraction (not a metric: transcripts store the extracted answer) costs {a['extract_us_per_call']} us per response.", ""]
    v = res.get("serving")
    if v and "error" not in v:
        z, o, pf, r = v["round0"], v["round1"], v["prefill"], v.get("replicas") or {}
        L += ["## 5. Serving", "", f"{v['requests']} agent turns of Du et al.'s GSM8K debate (max_new_tokens = {v['max_new_tokens']}, greedy) through "
              "`OpenAIBackend` against `transformers serve` of the embedded SmolLM2 (full precision, CPU, 127.0.0.1; healthy after "
              f"{v['start_s']} s) with **{v['batching']}**: one background loop holds every request in flight in a paged KV cache and "
              "runs them as one batch. The server shares the KV blocks of prompt prefixes it has already seen (transformers' "
              "`allow_block_sharing`, no command-line switch), so each timed mode gets requests of its own, of the same round and "
              "prompt lengths, never seen by the server (the rows compare tokens per second); the identical-text checks send the "
              "in-flight requests again one at a time, untimed. Round 0 is every agent's first answer (the question alone; one turn "
              "per question); round 1 is the debate turn (each agent sees the other five agents' round-0 solutions).", "",
              md_table(["round", "prompt tokens", "one at a time s (tok/s)", "all in flight s (tok/s)", "ratio", "server held at once", "identical text"],
                       [[k, f"{x['prompt_tokens'][0]}-{x['prompt_tokens'][1]}", f"{x['single_s']} ({x['single_tok_s']})", f"{x['flight_s']} ({x['flight_tok_s']})",
                         f"**{x['ratio']}x**", f"{x['server_max_in_flight']} (one at a time: {x['server_max_in_flight_single']})", f"{x['same_text']} of {v['requests']}"]
                        for k, x in (("0", z), ("1", o))]), "",
              f"Goal >= {SERVING_TARGET}x, met on round 0: {z['ratio']}x. Round 1 gains {o['ratio']}x, and the reason is measured: its prefill alone "
              f"(the same turns with one new token) takes {pf['flight_s']} s all in flight against {pf['single_s']} s one at a time "
              f"({pf['ratio']}x). On the CPU, transformers' continuous batching attends with SDPA and one dense mask over every token of the "
              "batch (no varlen kernel off the GPU), so the in-flight prefill of 8 long prompts does the attention work of one prompt 8x "
              "as long, while one at a time the prompts are short and the prefill is cheap; only the decode steps gain, by sharing each "
              "weight read. Round 1's prompts are about 5x its answers, round 0's under 2x. On a GPU server (vLLM, "
              "SGLang: varlen attention) the prefill batches too; a paper profile's answers of 1,024+ tokens also tip the balance "
              "back to decoding.", "",
              f"The client counted {o['client_in_flight_mean']} requests in flight on average in round 1; {v['retried']} retried, {v['failed']} failed. "
              f"In-process `HFBackend` (quant none, one padded batch) on round 1's in-flight turns: {v['local_s']} s ({v['local_tok_s']} tok/s): "
              f"the server reaches {v['vs_local']}x of it; same text for {v['same_as_local']} of {v['requests']} (a different kernel path: paged "
              "attention vs padded batches).", ""]
        if r:
            L += [f"Replicas: two servers of {r['threads']} thread(s) each (`TransformersServer(threads=...)`: OMP_NUM_THREADS, the cores split, "
                  f"not oversubscribed) behind one `base_url` list (each `concurrency` {max(1, v['requests'] // 2)}) vs one server using all "
                  f"{v['cores']} cores, all in flight, each on round-1 turns of its own: {r['two_s']} s vs {r['one_s']} s, **{r['ratio']}x** in tokens per "
                  "second. Each server batches half the round: its decode steps share each weight read among half the requests (a loss) "
                  "and its prefill attends over half the tokens (a gain on the CPU, where the prefill's mask spans the whole batch: see "
                  "above); the ratio is the measured balance. Two servers of two threads each on two cores oversubscribe them (0.11x "
                  "measured before `threads` existed). Replicas scale when each has its own cores or GPU.", ""]
    m = res.get("sim")
    if m and "workloads" in m:
        L += ["## 8. The sim: agent turns per second", "",
              f"`run_debate` on `SimBackend` agents (skills 0.45, 0.50, ...; the whole path: requests and prompts composed, texts "
              f"generated, parsed by `extract_answer`, graded, the transcript frame built), timed in this checkout (new) and in a "
              f"temporary `git worktree` of `{m['baseline']}` ({m['baseline_commit']}, today), each pass in a fresh subprocess "
              "after a two-item warm-up, in the order today, new, today, new; medians. Turns per second of the child's own CPU "
              "time (one thread; on a shared machine the wall clock also counts other jobs), the wall-clock ratio beside it. Answers compared item by item: identical, "
              "or different draws where the sim's random streams changed (then the accuracy per round of each side, in %).", "",
              md_table(["workload", "turns", "today turns/s (us/turn)", "new turns/s (us/turn)", "ratio (wall clock)", "answers"],
                       [[f"{k}: {w['task']}, {w['agents']} agents, {w['debate_rounds']} debate rounds, {w['samples']} samples, "
                         f"prompt {w['prompt']}, temperature {w['temperature']}", f"{w['turns']:,}",
                         f"{w['today_turns_s']:,.0f} ({w['today_us_per_turn']})", f"{w['new_turns_s']:,.0f} ({w['new_us_per_turn']})",
                         f"**{w['ratio']}x** ({w['wall_ratio']}x)", "identical" if w["identical"] else
                         f"different draws ({w['same_answers']:,} equal; accuracy per round today {_acc(w['today_accuracy'])}, "
                         f"new {_acc(w['new_accuracy'])})"] for k, w in m["workloads"].items()]), "",
              "Where a turn's CPU time goes (a second pass of each child with timing wrappers, medians; microseconds per "
              "turn): the sim (`SimBackend.generate`), the parser (`extract_answer`) and the engine (everything else: "
              "requests and prompts, plans, rows, the transcript frame).", "",
              md_table(["workload", "today: sim / parser / engine (total)", "new: sim / parser / engine (total)"],
                       [[k, *(f"{p['sim']} / {p['parse']} / {p['engine']} ({p['total']})"
                              for p in (w["today_parts_us"], w["new_parts_us"]))] for k, w in m["workloads"].items()]), ""]
        if all("floor" in w for w in m["workloads"].values()):
            ops = list(next(iter(m["workloads"].values()))["floor"]["parts_us"])
            L += ["### 8b. The floor under a turn", "",
                  "Each operation that any path with the same draws and texts must do (`sim_floor`), replayed alone in a loop on "
                  "the inputs one run of the workload gave it (this checkout; median of three fresh children; the collector paused "
                  "as `run_debate` pauses it for the sim; the parser's memo cleared as in the timed pass), in CPU microseconds per "
                  "turn. Seeds: `derive_seed` per turn; uniforms: `batch_uniforms`; prompts: `debate_message` per debate turn; "
                  "reading: the sim's `_count_words` and `read_final_answers` of each new prompt; deciding: `decide` / "
                  "`_independent`; writing: each new text (`_composed` unmemoised); signals: `_signal_values`; parsing: "
                  "`extract_answer` of each new text; grading: `is_correct` of each new answer; frame: `transcript_columns`. "
                  "Glue is the new path's microseconds per turn (above) less the floor: loops, lists, conversations, memo "
                  "look-ups and the memory a first pass faults in. The floor is a lower bound (warm, no glue), so today's "
                  "microseconds per turn over it bound the ratio that these operations, as written, allow.", "",
                  md_table(["workload", *ops, "floor", "new path", "glue", "ceiling (today / floor)"],
                           [[k, *(w["floor"]["parts_us"][o] for o in ops), f"**{w['floor']['floor_us']}**",
                             w["new_us_per_turn"], w["floor"]["glue_us"], f"**{w['floor']['ceiling']}x**"]
                            for k, w in m["workloads"].items()]), ""]
    return "\n".join(L)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: also throughput and memory of --gpu-model on the GPU")
    ap.add_argument("--gpu-model", default="random:qwen2.5-7b-instruct",
                    help="model for --device cuda: random:<registry name> (built on the GPU, no download) or a hub model")
    ap.add_argument("--gpu-out", default=str(ROOT / "benchmarks" / "RESULTS-gpu.md"), help="where the GPU results go")
    ap.add_argument("--only", default="throughput,memory,cache,analysis,serving", help="comma-separated subset")
    ap.add_argument("--serving-requests", type=int, default=8, help="requests of the round sent through the server (benchmark 5)")
    ap.add_argument("--serving-tokens", type=int, default=None, help="max_new_tokens per request in benchmark 5 (default: the cpu profile's, as for 1)")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="new tokens per request in the throughput benchmark (CPU; default: what the cpu profile gives du_gsm8k)")
    ap.add_argument("--sim-baseline", default=SIM_BASELINE, help="the commit benchmark 8 (sim) compares this checkout with")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    ap.add_argument("--json", default=None, help="also write the raw results as JSON")
    ap.add_argument("--no-e2e", action="store_true", help="skip the warm `mad-study reproduce` run of the cache benchmark")
    a = ap.parse_args(argv)
    a.max_new_tokens = a.max_new_tokens or profile_tokens()
    a.serving_tokens = a.serving_tokens or profile_tokens()
    only = set(a.only.split(","))
    gpu_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""                             # the CPU benchmarks run on the CPU even on a GPU machine
    _quiet()
    info = machine_info()
    if a.device == "cuda": info["gpu"] = "requested (see section 1 and 2, GPU)"
    res: dict = {}
    t0 = time.time()
    if "throughput" in only:
        log("1. generation throughput (CPU)")
        res["throughput"] = bench_throughput(max_new_tokens=a.max_new_tokens)
    if "memory" in only:
        log("2. memory (CPU)")
        res["memory"] = bench_memory()
    if "cache" in only:
        log("3. cache: cold vs warm")
        res["cache"] = bench_cache(e2e=not a.no_e2e)
    if "analysis" in only:
        log("4. analysis")
        res["analysis"] = bench_analysis()
    if "stats" in only:
        log("7. statistics at any n"); res["stats"] = bench_stats()
    if "serving" in only:
        log("5. serving: OpenAIBackend against a local transformers serve")
        res["serving"] = bench_serving(a.serving_requests, a.serving_tokens)
    if "sandbox" in only or not {"throughput", "memory", "cache", "analysis", "serving"} - only:
        log("6. sandbox: start-up cost per program"); res["sandbox"] = bench_sandbox()
    if "sim" in only or not {"throughput", "memory", "cache", "analysis", "serving"} - only:
        log(f"8. sim: turns per second, this checkout vs {a.sim_baseline}"); res["sim"] = bench_sim(a.sim_baseline)
    if res.get("throughput") and "error" not in res["throughput"]:
        from mad_study.backends import cpu_has_bf16_kernel
        if cpu_has_bf16_kernel():                                # what the kit's batch-invariant path costs on this CPU
            log("1b. the same round on bitsandbytes' AVX512-BF16 kernel (for comparison)")
            res["throughput_bf16"] = bench_throughput(max_new_tokens=a.max_new_tokens, cpu_4bit_kernel="bf16")
    if a.device == "cuda":
        log(f"1g. generation throughput and memory on the GPU ({a.gpu_model})")
        res.update(run_gpu_child(a.gpu_model, gpu_env))
        Path(a.gpu_out).write_text(render_gpu(res, info) + "\n")
        where = save_measurement(res)
        log(f"wrote {a.gpu_out}" + (f"; the measurement for `mad-study plan`: {where}" if where else ""))
    info["bench_seconds"] = round(time.time() - t0)
    text = render(res, info, argv)
    if res.keys() - {"gpu"}: Path(a.out).write_text(text + "\n")      # --only gpu leaves the CPU results as they are
    if a.json: Path(a.json).write_text(json.dumps({"info": info, "results": res}, indent=1, default=str))
    log("")
    log(f"wrote {Path(a.out).relative_to(ROOT) if Path(a.out).is_relative_to(ROOT) else a.out} ({info['bench_seconds']} s)")
    log("")
    log(md_table(["benchmark", "measured", "target", "met"], summary_rows(res)))
    return 0


def run_gpu_child(model: str, gpu_env: str | None, partial: Path | None = None) -> dict:
    """The GPU benchmark (`bench_gpu`) in a child process that sees the GPU (this one hides it for the CPU benchmarks);
    its partial results go to `partial` after every step, so a run cut short still reports what it measured."""
    partial = partial or Path(tempfile.gettempdir()) / "mad-study-bench-gpu.json"
    code = ("import json, os, sys, torch; sys.path.insert(0, %r); import run as R; R._quiet(); out = {}\n"
            "save = lambda r: open(%r, 'w').write(json.dumps(r, default=str))\n"
            "try:\n    assert torch.cuda.is_available(), 'no CUDA GPU is visible'\n"
            "    E = os.environ.get; out['gpu'] = R.bench_gpu(%r, save=save, budget_s=float(E('MAD_BENCH_GPU_BUDGET', 420)), "
            "n_items=int(E('MAD_BENCH_GPU_ITEMS', 16)), bf16=E('MAD_BENCH_GPU_BF16', '1') == '1')\n"
            "except Exception as e:\n    out['gpu'] = {'device': 'cuda', 'error': str(e).splitlines()[0][:300]}\n"
            "print('@@' + json.dumps(out, default=str))\n") % (str(Path(__file__).parent), str(partial), model)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if gpu_env is not None: env["CUDA_VISIBLE_DEVICES"] = gpu_env
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    for line in r.stdout.splitlines():
        if line.startswith("@@"): return json.loads(line[2:])
        log(line)
    err = (r.stderr.strip().splitlines() or ["failed"])[-1][:300]
    got = json.loads(partial.read_text()) if partial.exists() else {}
    return {"gpu": {**got, "device": got.get("device", "cuda"), "error": err}}


def render_gpu(res: dict, info: dict) -> str:
    "RESULTS-gpu.md: the GPU benchmark's steps, the machine, and what they show."
    g, V = res.get("gpu", {}), info.get("versions", {})
    lines = [f"# GPU benchmark ({time.strftime('%Y-%m-%d')})", "",
             f"Machine: {g.get('device', '?')} (host CPU {info.get('cpu')}, {info.get('cores')} cores); commit "
             f"{info.get('commit')}; torch {V.get('torch')}, transformers {V.get('transformers')}, "
             f"bitsandbytes {V.get('bitsandbytes')}. Written by `make bench --device cuda` "
             f"(`benchmarks/run.py`, `bench_gpu`).", ""]
    if g.get("error"): lines += [f"**Error:** {g['error']}", ""]
    lines += [f"Workload: one debate round of Du et al.'s GSM8K (round 1, six agents each seeing five peers' solutions), "
              f"{g.get('requests')} requests, prompts {g.get('prompt_tokens')} tokens, {g.get('max_new_tokens')} new "
              f"tokens, greedy; model `{g.get('model')}` (random weights in the published shape: no download). "
              f"Every step in one process on a warm GPU (warm-up at load). *Today* = the kit's GPU path before "
              f"2026-11-26 (batches of 16, transformers' dynamic cache); *new* = batches sized from free memory "
              f"(`batch_size='auto'`), requests sorted by prompt length, the reserved KV cache.", "",
              "| step | seconds | tokens | tok/s | batches | peak GiB |", "|---|---|---|---|---|---|"]
    for name, st in g.get("steps", {}).items():
        b = st["batches"]
        bs = ", ".join(map(str, b)) if len(b) <= 8 else f"{len(b)} batches of {min(b)}-{max(b)}"
        lines.append(f"| {name} | {st['seconds']} | {st['tokens']} | {st['tok_s']:,.0f} | {bs} | {st['peak_gib']} |")
    keys = ("speedup_nf4", "same_text_nf4", "speedup_bf16_vs_nf4_today", "graphs_compile_s", "same_text_graphs",
            "graphs_error", "nf4_load_s", "nf4_footprint_gib", "bf16_load_s", "seconds")
    lines += ["", *[f"- `{k}`: {g[k]}" for k in keys if k in g]]
    return "\n".join(lines)


def save_measurement(res: dict) -> Path | None:
    """The GPU benchmark's tok/s where `mad-study plan` finds it: `cache_home()/measurements/throughput.json` (the
    latest measurement on this machine) and `benchmarks/gpu_throughput.json` (the one committed with the kit)."""
    g = res.get("gpu", {})
    if "steps" not in g: return None
    from mad_study.core import cache_home
    rec = {"device": g["device"], "date": time.strftime("%Y-%m-%d"), "model": g["model"], "params_b": g["params_b"],
           "tok_s": {k: v["tok_s"] for k, v in g["steps"].items()}, "requests": g["requests"],
           "max_new_tokens": g["max_new_tokens"]}
    out = cache_home() / "measurements" / "throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for p in (out, ROOT / "benchmarks" / "gpu_throughput.json"): p.write_text(json.dumps(rec, indent=1) + "\n")
    return out

if __name__ == "__main__":
    sys.exit(main())
