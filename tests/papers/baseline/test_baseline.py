"""Tests of the Du et al. baseline's sim set-up (issue 50): the experiment runs in the one world, and its control (the
same world with the debate's truth-favouring mechanisms off) has round-0 answers identical to the effect run's."""
import pandas as pd
import pytest
import yaml

from mad_study.core import Sampling, kit_path
from mad_study.backends import make_backend
from mad_study.debate import FullyConnected, make_agents, run_debate
from mad_study.registry import experiments, load_profile
from mad_study.params import merge_params
from mad_study.sim import check_off, sim_items


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(tmp_path / "figures"))


def test_baseline_runs_in_the_world_with_a_control():
    d = yaml.safe_load(kit_path("params/baseline/du_gsm8k.yaml").read_text())
    assert "sim_agents" not in d["params"] and all("sim_agents" not in (v or {}) for v in d["profiles"].values())
    p = merge_params(experiments()["du_gsm8k"], load_profile("sim"))
    assert p["sim_agents"] == load_profile("sim")["sim_agents"]
    assert check_off(p["control_off"]) and p["n_items"] >= 100


def _du(off, items):
    m = "sim-qwen2.5-7b"
    b = {m: make_backend(m, sim_agents=load_profile("sim")["sim_agents"], sim_off=off)}
    return run_debate(items, make_agents([m] * 3), b, protocol=FullyConnected(), debate_rounds=1, prompt="du_gsm8k",
                      sampling=Sampling(temperature=1.0, max_new_tokens=1024, seed=0), progress=False)


def test_control_round0_identical_item_by_item():
    off = tuple(merge_params(experiments()["du_gsm8k"], load_profile("sim"))["control_off"])
    items = sim_items("gsm8k", 80)
    on, ctl = _du((), items), _du(off, items)
    key = ["item_id", "sample", "agent"]
    r0 = lambda t: t[t["round"] == 0].sort_values(key)[key + ["text", "answer", "correct"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(r0(on), r0(ctl))
    # the mechanisms act in the debate turn: some round-1 answer differs
    r1 = lambda t: t[t["round"] == 1].sort_values(key)["answer"].tolist()
    assert r1(on) != r1(ctl)
