"""The arena (issue 25): it runs end to end on a small sim slice through `mad-study reproduce`, writes every registered
artefact with a caption that states its item count, and `mad-study plan arena` prices it on real models."""
import json

from mad_study.report import load_registry
from mad_study.reproduce import main, reproduce


def test_arena_runs_on_a_small_sim_slice(scratch):
    res = reproduce(["arena"], "sim", {"n_items": 8}, log=lambda *a: None)
    assert len(res) == 1 and res[0].ok, res[0].error
    out = scratch / "figures" / "arena"
    arts = [a["id"] for a in load_registry()["arena"]["artefacts"]]
    for a in arts:
        assert (out / f"{a}.json").exists(), a
    side = json.loads((out / "arena.json").read_text())
    cap = side["notes"]["caption"]
    assert cap.startswith("24 items (mmlu, gpqa, hle_mc)") and "Distinguishable from MAD" in cap
    assert "Distinguishable from self-consistency at MAD's budget" in cap
    assert (out / "arena.items.csv").exists() and (out / "arena_pareto.png").exists()
    assert side["label"].startswith("SYNTHETIC AGENTS")


def test_plan_arena_paper_profile(capsys):
    assert main(["plan", "arena", "--profile", "paper"]) == 0
    txt = capsys.readouterr().out
    assert "arena" in txt and "llama-3.1-8b-instruct" in txt
