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
import numpy as np
import pandas as pd
import seaborn as sns

from mad_study.report import (SYNTHETIC_LABEL, label_figure, label_points, layout_problems,
                               load_registry, method_style, panel_figure, tidy_bar_grids)


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



def _one():
    return plt.subplots(figsize=(3.4, 2.2), layout="constrained")


def _found(fig, what):
    out = [p for p in layout_problems(fig) if what in p]
    plt.close(fig)
    return out


def _label_on_marker(dx):
    fig, ax = _one(); ax.plot([1, 2, 3], [1, 2, 3], "o", ls="", label="MAD")
    ax.text(2 + dx, 2 - dx, "SID-ET")
    return fig


def _text_on_line(y):
    fig, ax = _one(); ax.plot([0, 1], [0, 1], label="RUMAD"); ax.text(0.45, y, "on the line")
    return fig


def _legend(loc, anchor=None):
    fig, ax = _one()
    for i in range(3):
        ax.plot(np.linspace(0, 1, 20), np.full(20, 0.9 - 0.1 * i), "o-", ms=3, label=f"m{i}")
    ax.legend(loc=loc, bbox_to_anchor=anchor); return fig


def _pair(dx):
    fig, ax = _one(); ax.set_xlim(0, 3); ax.set_ylim(0, 3)
    ax.scatter([1, 2], [1, 2], color=method_style("MADC")["color"], s=40, label="MADC", zorder=3)
    ax.scatter([1 + dx], [1], color=method_style("MAD")["color"], s=30, label="MAD"); return fig


def _pvalue(y):
    acc = np.random.default_rng(0).normal(60, 5, 40)
    d = pd.DataFrame({"s": np.repeat(["Fixed", "Random"], 20), "acc": acc})
    fig, ax = _one(); sns.boxplot(d, x="s", y="acc", ax=ax); ax.set_ylim(35, 90)
    ax.text(0.5, y, "p = 0.003")
    return fig


def _small(size):
    fig, ax = _one(); ax.plot([0, 1]); ax.text(0.1, 0.8, "note", fontsize=size); return fig


def _bars(tidy):
    fig, ax = _one(); ax.bar(["MAD", "MADC"], [50, 70]); ax.grid(True)      # whitegrid: both axes
    if tidy: tidy_bar_grids(fig)
    return fig


@pytest.mark.parametrize("make, bad, good, what", [
    (_label_on_marker, 0, 0.4, "text 'SID-ET' covers 'MAD'"),
    (_text_on_line, 0.48, 0.9, "text 'on the line' covers 'RUMAD'"),
    (_legend, "upper right", "upper left", "legend covers data"),
    (_pair, 0.005, 0.3, "marker of 'MAD' hidden under a marker of 'MADC'"),
    (_pvalue, 60, 84, "text 'p = 0.003' covers PathPatch"),
    (_small, 5, 7, "text 'note' is 5.0 pt (under 7)"),
    (_bars, False, True, "grid lines of the categorical x axis run through its bars"),
])
def test_each_planted_defect_is_flagged_and_the_clean_figure_is_not(make, bad, good, what):
    "Issue 42: the check reads the drawn figure (markers, lines, legends, patches, size), not text only."
    assert _found(make(bad), what), what
    clean = make(good, (1.01, 1)) if make is _legend else make(good)
    assert layout_problems(clean) == [], layout_problems(clean)
    plt.close(clean)


def test_labels_placed_by_label_points_sit_beside_their_points():
    "adjustText, then the nearest free place: no label on a marker, a line or another label."
    fig, axes = panel_figure(2)
    for ax in axes.flat:
        names = ["MAD", "S-MAD star", "GroupDebate", "MADC"]
        x, y = [1, 1.02, 2, 1.5], [50, 50.5, 60, 55]
        for a, b, n in zip(x, y, names):
            ax.scatter(a, b, color=method_style(n)["color"], marker=method_style(n)["marker"])
        ax.plot([1, 2], [50, 60], color="0.5", lw=0.8)
        label_points(ax, x, y, names)
    assert layout_problems(fig) == []
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
