"Vision-language items (issue 14): images through transcripts, the cache, the VLM and served backends, the loaders."
import base64
import dataclasses
import os

import numpy as np
import pytest

from mad_study.backends import CachedBackend, GenerationCache, make_backend
from mad_study.core import GenRequest, image_hash, load_image, load_transcript, put_image, save_transcript
from mad_study.loading import HubUnavailableError, load_items
from mad_study.debate import make_agents, run_debate
from mad_study.serving import OpenAIBackend, StubServer


@pytest.fixture
def vision_items():
    return load_items("mathvision", n=4, seed=0, save=False)


def test_image_item_round_trips_through_transcript_and_cache(tmp_path, vision_items):
    cache = GenerationCache(tmp_path / "gen.sqlite")
    backends = {"sim-a": CachedBackend(make_backend("sim-a"), cache), "sim-b": CachedBackend(make_backend("sim-b"), cache)}
    tr = run_debate(vision_items, make_agents(["sim-a", "sim-b"]), backends, debate_rounds=1, progress=False)
    p = save_transcript(tr, tmp_path / "t.parquet")
    back = load_transcript(p)
    by_item = {it.id: it.images[0] for it in vision_items}
    assert (back["images"] == back["item_id"].map(by_item)).all()                   # hashes, never pixels
    assert all(image_hash(load_image(h)) == h for h in back["images"].unique())      # and they resolve to the images
    assert cache.stats()["computed"] == len(tr) and cache.stats()["hits"] == 0
    run_debate(vision_items, make_agents(["sim-a", "sim-b"]), backends, debate_rounds=1, progress=False)
    assert cache.stats()["hits"] == len(tr)                                          # a re-run: all from the cache
    # the same question with another image is another request
    swapped = [dataclasses.replace(it, images=vision_items[(k + 1) % 4].images) for k, it in enumerate(vision_items)]
    before = cache.stats()["computed"]
    run_debate(swapped, make_agents(["sim-a", "sim-b"]), backends, debate_rounds=0, progress=False)
    assert cache.stats()["computed"] == before + 2 * len(swapped)


def test_tiny_vlm_behind_the_cache(tmp_path, vision_items):
    cache = GenerationCache(tmp_path / "gen.sqlite")
    vb = make_backend("tiny-random-llava", quant="nf4", cache=cache)
    reqs = [GenRequest([{"role": "user", "content": it.question}], max_new_tokens=6, meta={"item": it}) for it in vision_items[:2]]
    first = vb.generate(reqs)
    again = vb.generate(reqs)
    assert [g.text for g in first] == [g.text for g in again] and all(g.cached for g in again)
    assert all(g.logprob_mean is not None for g in first)


def test_vision_loaders_hub_path_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for task, split in [("mathvision", "testmini"), ("mathvision_all", "test"), ("realworldqa", "test")]:
        with pytest.raises(HubUnavailableError, match="source='fixture' works offline"):
            load_items(task, split=split, source="hub", save=False)


def test_openai_backend_sends_images(vision_items):
    it = vision_items[0]
    with StubServer() as stub:
        be = OpenAIBackend("qwen2.5-vl-7b-instruct", stub.base_url, served_model="vlm", max_retries=0)
        g = be.generate([GenRequest([{"role": "user", "content": it.question}], max_new_tokens=4, meta={"item": it})])[0]
    assert g.finish_reason == "stop"
    parts = stub.bodies[0]["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"] and parts[1]["text"] == it.question
    png = base64.b64decode(parts[0]["image_url"]["url"].split(",", 1)[1])
    assert image_hash(png) == it.images[0]                                           # the server receives the item's pixels


def test_text_model_refuses_images_and_missing_images_are_named(tmp_path, vision_items, monkeypatch):
    from mad_study.core import ConfigError
    with pytest.raises(ConfigError, match="text-only model cannot see"):
        make_backend("tiny-random-llama", quant="none").generate(
            [GenRequest([{"role": "user", "content": "q"}], max_new_tokens=2, meta={"item": vision_items[0]})])
    h = put_image(np.zeros((4, 4, 3), dtype=np.uint8), root=tmp_path)
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "elsewhere"))
    with pytest.raises(ConfigError, match="not in the image store"):
        load_image(h)
