"""OpenAIBackend against a real OpenAI-compatible server: `transformers serve` on the embedded SmolLM2 checkpoint,
on 127.0.0.1 and a free port (started once per module, always stopped), plus a stub server for answered errors.

Skipped with a reason where the `serving` extra (fastapi, uvicorn, httpx) or the embedded model is missing."""
import logging
import threading
import time

import pytest

from mad_study.core import GenRequest
from mad_study.serving import (FlightMeter, OpenAIBackend, ServingError, StubServer, TransformersServer, echo_completion,
                               free_port, serving_available)

_why = serving_available()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

N_TOK = 8                                  # short answers: the server runs on a shared 2-core CPU in CI


def chat(q, **kw):
    return GenRequest([{"role": "user", "content": q}], max_new_tokens=kw.pop("max_new_tokens", N_TOK), **kw)


@pytest.fixture(scope="module")
def checkpoint():
    from mad_study.backends import ModelUnavailable, embedded_checkpoint
    try: return embedded_checkpoint()
    except ModelUnavailable as e: pytest.skip(str(e))


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    "One `transformers serve` for the module; the kill/restart test restarts it on the same port."
    srv = TransformersServer(checkpoint, log_path=tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        yield srv.start()
    finally:
        srv.stop()
        assert srv.proc is None or srv.proc.poll() is not None        # always stopped


@pytest.fixture(scope="module")
def cb_server(checkpoint, tmp_path_factory):
    "`transformers serve --continuous-batching` (a small paged cache: 32 blocks of 256 tokens), started once, always stopped."
    srv = TransformersServer(checkpoint, log_path=tmp_path_factory.mktemp("serve-cb") / "serve.log", continuous_batching=True,
                             cb=dict(num_blocks=32))
    try:
        yield srv.start()
    finally:
        srv.stop()
        assert srv.proc is None or srv.proc.poll() is not None


def backend(server, **kw):
    return OpenAIBackend("smollm2-135m-instruct", server.base_url, served_model=server.served_model, server="transformers", **kw)


def test_batch_equals_one_by_one(server):
    be = backend(server, concurrency=3)
    qs = [chat(f"What is {i} + {i}?") for i in range(3)]
    batch = be.generate(qs)
    single = [be.generate([q])[0] for q in qs]
    assert [g.text for g in batch] == [g.text for g in single]
    assert all(g.text and g.finish_reason in ("stop", "length") for g in batch)
    assert all(0 < g.completion_tokens <= N_TOK and g.prompt_tokens > 0 for g in batch)    # the server's usage report
    # transformers serve gives no log-probs: the signals are missing (never zero) and the provenance says why
    assert all(g.logprob_sum is None and g.token_entropy is None and g.perplexity is None for g in batch)
    assert be.provenance()["signals"] == {"missing: the server returned no logprobs": 6}


def test_round_reaches_the_server_concurrently(cb_server):
    "A round through `generate` is held by the server all at once (its own log says so); the same requests one at a time never overlap."
    be = backend(cb_server, concurrency=4, timeout=120)
    qs = [chat(f"What is {i} times 3?") for i in range(4)]
    be.generate(qs[:1])                                  # the first request starts the server's batching loop
    m, be.flight = cb_server.mark(), FlightMeter()
    batch = be.generate(qs)
    seen = cb_server.requests_seen(since=m)
    assert seen["received"] == seen["answered"] == 4 and seen["max_in_flight"] >= 2, seen
    assert be.provenance()["in_flight"]["max"] >= 2
    m, be.flight = cb_server.mark(), FlightMeter()
    single = [be.generate([q])[0] for q in qs]
    assert cb_server.requests_seen(since=m) == dict(received=4, answered=4, max_in_flight=1)
    assert be.provenance()["in_flight"]["mean"] == 1.0 and be.provenance()["requests"] == {"ok": 9, "retried": 0, "failed": 0}
    assert [g.text for g in batch] == [g.text for g in single] and all(g.text for g in batch)     # greedy: batching changes no text
    assert cb_server.batching == "continuous batching"


def test_seed_gives_the_same_text_twice(server):
    be = backend(server, concurrency=1)                # transformers serve seeds one global RNG: one request at a time
    s = lambda seed: chat("Tell me a story.", temperature=1.0, top_p=0.95, seed=seed)
    first = be.generate([s(7)])[0].text
    assert be.generate([s(7)])[0].text == first
    others = {be.generate([s(k)])[0].text for k in (1, 2)}
    assert len(others | {first}) >= 2                  # it really samples (temperature 1 is not silently greedy)


def test_wrong_model_name_and_wrong_url(server):
    with pytest.raises(ServingError) as e:
        OpenAIBackend("smollm2-135m-instruct", server.base_url, served_model="no-such-model", server="transformers").generate([chat("hi")])
    msg = str(e.value)
    assert "\n" not in msg and "HTTP 400" in msg and "no-such-model" in msg and "served_model" in msg
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ServingError, match="cannot reach the server after 2 tries"):
        OpenAIBackend("smollm2-135m-instruct", dead, max_retries=1, backoff=0.01).generate([chat("hi")])
    with pytest.raises(ServingError, match="HTTP 404"):                           # base_url without /v1
        OpenAIBackend("smollm2-135m-instruct", server.base_url[:-3], served_model=server.served_model,
                      server="transformers").generate([chat("hi")])


def test_server_answering_errors_gives_one_clear_message(caplog):
    with StubServer(lambda n, body: (503, {"detail": "overloaded"})) as stub:
        be = OpenAIBackend("smollm2-135m-instruct", stub.base_url, served_model="m", max_retries=2, backoff=0.01, concurrency=4)
        with caplog.at_level(logging.WARNING, logger="mad_study.serving"):
            gens = be.generate([chat(f"q{i}") for i in range(5)])
    assert [g.finish_reason for g in gens] == ["error"] * 5 and stub.calls == 15       # 1 try + 2 retries each
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "5 of 5 generations failed" in lines[0] and "HTTP 503: overloaded" in lines[0]
    assert len(be.failures) == 5


def test_killed_server_rerun_computes_only_the_missing(server, tmp_path):
    "Kill the server mid-run: finished generations are cached, the rest are failed generations; after a restart the re-run computes only those."
    from mad_study.backends import CachedBackend, GenerationCache
    cache = GenerationCache(tmp_path / "g.sqlite")
    qs = [chat(f"Name a colour, number {i}.", max_new_tokens=4) for i in range(6)]
    be = backend(server, concurrency=1, max_retries=1, backoff=0.05)
    def killer():
        while be.stats["ok"] < 2: time.sleep(0.02)          # two answered (the chunk is committed when it ends)
        server.kill()
    t = threading.Thread(target=killer, daemon=True); t.start()
    first = CachedBackend(be, cache).generate(qs)
    t.join(5)
    done = [g for g in first if g.finish_reason != "error"]
    assert 2 <= len(done) < len(qs) and len(cache) == len(done)
    assert len(be.failures) == len(qs) - len(done) and all("cannot connect" in f["error"] for f in be.failures)
    server.start()                                       # same port, same URL
    again = CachedBackend(backend(server, concurrency=2), cache)
    res = again.generate(qs)
    assert again.stats()["computed"] == len(qs) - len(done) and all(g.finish_reason != "error" for g in res)
    assert [g.text for g in res if g.cached] == [g.text for g in done]


def test_reproduce_names_failed_generations(scratch):
    "`mad-study reproduce ... -p backend=openai`: server errors become failed generations, the run finishes, the report names them."
    import json, os
    from conftest import mad_study
    fail_first_round = lambda n, body: (500, {"detail": "boom"}) if len(body["messages"]) == 1 else (200, echo_completion(body))
    with StubServer(fail_first_round) as stub:
        args = ["reproduce", "du_gsm8k", "--profile", "cpu", "-p", "backend=openai", "-p", f"base_url={stub.base_url}",
                "-p", "served_model=smollm2", "-p", "n_items=1", "-p", "max_retries=0",
                "--replace-reference"]                                    # n_items=1: the experiment's own folder
        r = mad_study(*args, env=os.environ.copy(), timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        # the cpu profile's three agents sample with their own seeds: three distinct round-0 requests, each failed once
        assert "with 3 failed generation(s)" in r.stdout and "HTTP 500: boom (after 1 tries)" in r.stdout, r.stdout
        log = scratch / "runs" / "cpu" / "du_gsm8k" / "failed_generations.jsonl"
        rec = json.loads(log.read_text().splitlines()[0])
        assert rec["round"] == 0 and rec["item"].startswith("gsm8k/") and "api_key" not in rec
        stats = json.loads((log.parent / "serving_stats.json").read_text())     # what the run's requests did, per model
        assert sum(m["requests"]["failed"] for m in stats.values()) == 3 and all(m["in_flight"]["mean"] >= 1 for m in stats.values())
        served = [l for l in r.stdout.splitlines() if l.startswith("  du_gsm8k: ") and "answered" in l]   # the end-of-run report
        assert served and "3 failed" in "".join(served) and "in flight on average" in served[0], r.stdout
        stub.script = lambda n, body: (200, echo_completion(body))        # the server is fixed: the re-run has no failures
        r2 = mad_study(*args, env=os.environ.copy(), timeout=600)
        assert r2.returncode == 0 and "failed generation" not in r2.stdout, r2.stdout
        assert not log.exists()


def test_docs_serve_what_plan_prints():
    "Every `vllm serve <id>` in docs/serving.md is a registry model's hub id, the name `plan` prints and the kit asks for."
    import re
    from pathlib import Path
    from mad_study.registry import MODELS
    from mad_study.serving import serve_command
    doc = (Path(__file__).parents[1] / "docs" / "serving.md").read_text()
    served = re.findall(r"vllm serve ([\w.-]+/[\w.-]+)", doc)                # a hub id (not `<hub id>`, `...`)
    hub = {s.hub_id: name for name, s in MODELS.items() if s.kind == "hf"}
    assert served and not [s for s in served if s not in hub], [s for s in served if s not in hub]
    assert serve_command("glm-4-9b-chat").split()[2] in served          # the -hf repository, as `plan` prints it


def test_served_round_advances_one_bar():
    "A served round, concurrent: each answer advances the active progress bar once (done, tok/s)."
    import io
    from mad_study.interface import Progress
    buf = io.StringIO()
    with StubServer(lambda n, body: (200, echo_completion(body))) as stub:
        be = OpenAIBackend("smollm2-135m-instruct", stub.base_url, served_model="m", concurrency=3)
        with Progress(5, desc="served", progress=True, delay=0, file=buf, leave=True) as bar:
            gens = be.generate([chat(f"q{i}") for i in range(5)])
    assert len(gens) == 5 and bar.n == 5
    assert "served: 100%" in buf.getvalue() and "5/5" in buf.getvalue() and "tok/s" in buf.getvalue()
