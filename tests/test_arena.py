"""The arena (issue 25): it runs end to end on a small sim slice through `mad-study reproduce`, writes every registered
artefact with a caption that states its item count, and `mad-study plan arena` prices it on real models."""
import json

from mad_study.report import load_registry
from mad_study.reproduce import reproduce
from mad_study.cli import main


def test_arena_runs_on_a_small_sim_slice(scratch):
    res = reproduce(["arena"], "sim", {"n_items": 8}, log=lambda *a: None, replace_reference=True)   # into figures/
    assert len(res) == 1 and res[0].ok, res[0].error
    out = scratch / "figures" / "arena"
    arts = [a["id"] for a in load_registry()["arena"]["artefacts"]]
    for a in arts:
        assert (out / f"{a}.json").exists(), a
    side = json.loads((out / "arena.json").read_text())
    cap = side["notes"]["caption"]
    assert cap.startswith("The arena: every method on the same 24 items (mmlu, gpqa, hle_mc)") and "Distinguishable from MAD" in cap
    assert "from the control: " in cap and len(cap) <= 1200                  # issue 51: a caption a reader finishes
    assert (out / "arena.items.csv").exists() and (out / "arena_pareto.png").exists()
    assert side["label"].startswith("SYNTHETIC AGENTS")
    _issue40_checks(out, side)


def _issue40_checks(out, side):
    "Issue 40 on the arena's own files: the budget, the intervals' family, the oracle off the front, per-item files."
    import pandas as pd
    cap, sc = side["notes"]["caption"], side["notes"]["sc_budget"]
    assert sc["matched"] and abs(sc["spend"] - 1) <= sc["tolerance"] and f"spending {100 * sc['spend']:.1f}%" in cap
    stats = side["notes"]["statistics"]                                   # issue 51: the tests in full in the sidecar
    assert "Holm-compatible simultaneous interval" in cap and side["notes"]["parted"] == []
    assert all("Holm-compatible simultaneous intervals (" in v for v in stats.values())
    tab = pd.read_csv(out / "arena.csv").set_index("method")
    assert tab.loc["madc_truth_last", "oracle"] and not tab.loc["madc_truth_last", "pareto"]
    for tag in ("mad", "sc"):
        g = tab.dropna(subset=[f"diff_low_vs_{tag}"])
        excl = (g[f"diff_low_vs_{tag}"] > 0) | (g[f"diff_high_vs_{tag}"] < 0) | g[f"diff_cut_vs_{tag}"].eq(True)
        assert (excl == g[f"distinguishable_vs_{tag}"].astype(bool)).all() and g[f"agrees_vs_{tag}"].astype(bool).all()
    pe, pi = pd.read_csv(out / "arena_persuasion.csv"), pd.read_csv(out / "arena_persuasion.items.csv")
    back = pi.groupby(["method", "source_model", "target_model"])["weight"].sum()
    want = pe.set_index(["method", "source", "target"])["weight"]
    assert len(back) == len(want) and abs(back.to_numpy() - want.loc[back.index].to_numpy()).max() < 1e-3   # CSVs: 6 digits
    un, ui = pd.read_csv(out / "arena_uncertainty.csv"), pd.read_csv(out / "arena_uncertainty.items.csv")
    ent = ui.groupby(["method", "round"])["viewpoint_entropy"].mean()
    assert (ent - un.set_index(["method", "round"])["viewpoint_entropy"]).abs().max() < 1e-4


def test_plan_arena_paper_profile(capsys):
    assert main(["plan", "arena", "--profile", "paper"]) == 0
    txt = capsys.readouterr().out
    assert "arena" in txt and "llama-3.1-8b-instruct" in txt


def test_the_table_is_the_arena():
    "Issue 37: one table drives the arena: the committed table's methods and labels are its entries, in its report order."
    import pandas as pd
    from mad_study.arena import ARENA, ARENA_GROUPS
    from mad_study.core import project_root
    tab = pd.read_csv(project_root() / "figures" / "arena" / "arena.csv")
    items = pd.read_csv(project_root() / "figures" / "arena" / "arena.items.csv", usecols=["method"])
    assert dict(zip(tab["method"], tab["label"])) == {m.key: m.label for m in ARENA}
    report = sorted(ARENA, key=lambda m: list(ARENA_GROUPS).index(m.group))
    assert list(dict.fromkeys(items["method"])) == [m.key for m in report]
    assert tab.loc[tab["oracle"], "method"].tolist() == [m.key for m in ARENA if m.oracle]


def test_a_method_is_one_entry():
    "Issue 37: a new entry is planned from its own budget formula, nothing else changes."
    from mad_study.arena import ARENA, ArenaMethod, plan_arena
    p = {"n_items": 10, "tasks": ["mmlu"], "models": ["a", "b"], "agents_per_model": 2, "debate_rounds": 3,
         "max_new_tokens": 100}
    new = ArenaMethod("new", "A new method", "engine", lambda arena, key: None,
                      calls=lambda s: s.agents * s.debate_rounds, shown=lambda s: s.agents - 1)
    base, more = plan_arena(p), plan_arena(p, (*ARENA, new))
    assert more["generations"] - base["generations"] == 10 * 4 * 3
    assert more["prompt_tokens"] - base["prompt_tokens"] == 10 * 12 * (250 + 3 * 100)


def test_arena_runs_in_the_world():
    """Issue 50: the arena sets no agents of its own; its sim models are the world's (params/profiles/sim.yaml), and the
    role-playing sim it runs them as (`RoleSimBackend`) solves with the world's competence, `task_skill` included."""
    from mad_study.core import Item
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params, validate_params
    from mad_study.role_sim import RoleSimBackend
    from mad_study.sim import SimBackend
    prof, e = load_profile("sim"), experiments()["arena"]
    p = merge_params(e, prof)
    validate_params(p, e, prof)
    assert "sim_agents" not in (e.spec.get("profiles") or {}).get("sim", {})
    it = Item("gpqa/t0", "gpqa", "q", "A", "option", ("w", "x", "y", "z"))
    for m in p["models"]:
        assert p["sim_agents"][m] == prof["sim_agents"][m]
        spec = {**prof["sim_agents"][m], "task_skill": {"gpqa": 0.9}}
        assert RoleSimBackend(m, **spec).p_solve(it) == SimBackend(m, **spec).p_solve(it)
