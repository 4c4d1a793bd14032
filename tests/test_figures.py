"""Issue 28: every figure the notebooks produce passes the layout check (no overlapping text, no text outside the canvas,
no axis label cut off, no point label past its axes, no empty band under the title) and carries its caption."""
import json
import os
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from conftest import ROOT, mad_study
from mad_study.report import SYNTHETIC_LABEL, label_figure, layout_problems, load_registry, panel_figure


def test_layout_check_finds_what_a_reviewer_rejects():
    fig, axes = panel_figure(2)
    a, b = axes[0]
    a.annotate("S-MAD ring", (1, 1)); a.annotate("RUMAD B=18", (1, 1)); a.set_xlim(0, 2); a.set_ylim(0, 2)   # two labels on one point
    b.annotate("a label that runs far past the right edge of its axes", (1.5, 1)); b.set_xlim(0, 2); b.set_ylim(0, 2)
    fig.suptitle("title")
    probs = layout_problems(fig)
    assert any("'S-MAD ring' overlaps" in p and "'RUMAD B=18'" in p for p in probs), probs
    assert any("runs past its axes" in p for p in probs), probs
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(3, 2)); ax.plot([0, 1]); ax.set_ylabel("y"); fig.subplots_adjust(left=0.0)   # y-label cut off
    assert any(p.startswith("y-label 'y'") and "outside the canvas" in p for p in layout_problems(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(3, 3)); fig.subplots_adjust(top=0.6); fig.suptitle("title", y=0.98)     # empty band
    assert any("empty band" in p for p in layout_problems(fig))
    plt.close(fig)


def test_clean_figure_passes_and_label_goes_above():
    fig, axes = panel_figure(3)
    for ax in axes.flat: ax.plot([0, 1], [0, 1]); ax.set_xlabel("tokens (k per item)"); ax.set_ylabel("accuracy (%)"); ax.set_title("MMLU (30 items)")
    fig.suptitle("A title"); label_figure(fig, SYNTHETIC_LABEL)
    assert layout_problems(fig) == []
    plt.close(fig)


def _figure_sidecars(folder: Path):
    for side in sorted(folder.glob("*/*.json")):
        meta = json.loads(side.read_text())
        if any(f.endswith(".png") for f in meta.get("files", [])): yield side, meta


def _check(folder: Path, ids: set[str] | None = None) -> list[str]:
    bad = []
    for side, meta in _figure_sidecars(folder):
        if ids is not None and meta["artefact"] not in ids: continue
        notes = meta.get("notes", {})
        if notes.get("layout_problems") is None: bad.append(f"{side.name}: no layout check recorded")
        elif notes["layout_problems"]: bad.append(f"{side.name}: {notes['layout_problems']}")
        if not notes.get("figure_caption"): bad.append(f"{side.name}: no caption")
    return bad


def test_sim_figures_pass_the_layout_check(scratch):
    "Regenerate the cheapest paper's figures (Du et al. baseline, sim) into a scratch folder: every figure is clean."
    env = {**os.environ, "MAD_STUDY_FIGURES": str(scratch / "figures"), "MAD_STUDY_RUNS": str(scratch / "runs")}
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert list(_figure_sidecars(scratch / "figures")), "no figure was made"
    assert _check(scratch / "figures") == []


def test_committed_figures_pass_the_layout_check():
    "Every committed figure recorded the layout check with no problem, and its caption (`make reproduce` writes both)."
    ids = {a["id"] for d in load_registry().values() for a in d.get("artefacts", [])}
    assert _check(ROOT / "figures", ids) == []
