"""Issue 28: every figure the notebooks produce passes the layout check (no overlapping text, no text outside the canvas,
no axis label cut off, no point label past its axes, no empty band under the title) and carries its caption."""
import json
import os
import warnings
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from conftest import ROOT, mad_study
import numpy as np
import pandas as pd
import seaborn as sns

from mad_study.figcheck import layout_problems, tidy_bar_grids
from mad_study.report import (LAYOUT_CHECK_VERSION, SYNTHETIC_LABEL, FigureOutput, label_figure, label_points,
                               load_registry, method_style, panel_figure, save_figure)


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


def _value_on_cap(on_cap):
    fig, ax = _one(); b = ax.bar(["MAD", "SVR-MAD"], [40, 70], yerr=[8, 8], capsize=4); ax.set_ylim(0, 100)
    if on_cap:
        for i, v in enumerate([40, 70]): ax.text(i, v + 2, f"{v}", ha="center", va="bottom")   # svr_fig2, round 3
    else: ax.bar_label(b, fmt="%.0f")                                                         # past the bar's end
    tidy_bar_grids(fig); return fig


def _crossed(dx):
    fig, ax = _one(); ax.set_xlim(0, 3); ax.set_ylim(0, 100)
    ax.errorbar([1], [50], yerr=[[20], [20]], fmt="o", capsize=3, label="S-MAD ring")
    ax.text(1 + dx, 62, "S-MAD ring", ha="center", va="center"); return fig                # arena_pareto, round 3


def _band(y, legend_loc="upper left"):
    fig, ax = _one(); x = np.linspace(0, 1, 20); ax.set_ylim(0, 1.2)
    ax.plot(x, 0.3 + 0.1 * x, label="MAD"); ax.fill_between(x, 0.1 + 0.1 * x, 0.5 + 0.1 * x, alpha=0.3, label="95% CI")
    ax.text(0.3, y, "n = 100 items")
    ax.legend(loc=legend_loc, bbox_to_anchor=(1.01, 1) if legend_loc == "upper left" else None); return fig


def _legend_on_band(loc):
    return _band(1.0, loc)


def _empty(nan):
    fig, axes = panel_figure(2)
    for ax, acc, title in zip(axes[0], [[0.4, 0.6], [np.nan if nan else 0.5] * 2], ["30 hard problems", "115 hard problems"]):
        ax.bar(["MAD", "SVR-MAD"], acc); ax.axhline(0.5, color="0.5", lw=0.6); ax.set_title(title)
    tidy_bar_grids(fig); return fig


@pytest.mark.parametrize("make, bad, good, what", [
    (_value_on_cap, True, False, "text '70' covers error bar"),
    (_crossed, 0, 0.8, "text 'S-MAD ring' covers error bar of 'S-MAD ring'"),
    (_band, 0.2, 1.0, "text 'n = 100 items' covers band '95% CI'"),
    (_legend_on_band, "lower right", "upper left", "legend covers data: band '95% CI'"),
    (_empty, True, False, "panel '115 hard problems' draws no data"),
])
def test_issue_51_defects_are_flagged_and_the_clean_figure_is_not(make, bad, good, what):
    "Issue 51: error bars, caps and bands are obstacles for text and legends; a titled panel without data is an error."
    assert _found(make(bad), what), what
    clean = make(good)
    assert layout_problems(clean) == [], layout_problems(clean)
    plt.close(clean)


def test_an_all_nan_series_raises_when_labelled():
    fig, ax = _one(); ax.plot([1, 2], [np.nan, np.nan])
    with pytest.raises(ValueError, match=r"no finite position to label for \['MAD', 'SVR-MAD'\]"):
        label_points(ax, [1, 2], [np.nan, np.nan], ["MAD", "SVR-MAD"])
    plt.close(fig)


@pytest.mark.parametrize("n_chars, data", [(1500, None), (300, pd.DataFrame({"acc": [0.5]}))])
def test_a_long_caption_is_a_problem_and_a_figure_without_data_says_so(tmp_path, monkeypatch, n_chars, data):
    "Issue 51: a caption over 1,200 characters is a layout problem; `data` None is recorded with the check's version."
    monkeypatch.setenv("MAD_STUDY_FIGURES", str(tmp_path)); monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path))
    fig, ax = _one(); ax.plot([0, 1], [0, 1])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        save_figure(fig, "f", "demo", caption="x" * n_chars, data=data, output=FigureOutput(("png",), show=False))
    plt.close(fig)
    assert [type(x.message).__name__ for x in w] == (["LayoutWarning"] if n_chars > 1200 else [])
    notes = json.loads((tmp_path / "demo" / "f.json").read_text())["notes"]
    assert notes["check_version"] == LAYOUT_CHECK_VERSION
    assert notes["layout_problems"] == ([f"caption {n_chars} chars: move the pairwise numbers to the table"]
                                        if n_chars > 1200 else [])
    assert notes["data"] == (None if data is None else "f.data.csv")
    assert _data_problems(tmp_path, {"f"}) == (["demo/f.json: no data file"] if data is None else [])


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


# Issue 51: a caption over 1,200 characters is a layout problem (save_figure records it, save_table records it as
# `table_problems`). Every figure's and every table's caption is under the limit (the last four long table captions,
# arena, madc_tab1, meta_tab2 and svr_tab1, moved their pairwise numbers into the tables' columns): a long caption fails.
CAPTIONS_STRICT = True


def _check(folder: Path, ids: set[str] | None = None, report: list | None = None) -> list[str]:
    bad = []
    def add(side, probs, strict=CAPTIONS_STRICT):
        hard = [p for p in probs if strict or not p.startswith("caption ")]
        if hard: bad.append(f"{side.name}: {hard}")
        if report is not None and len(hard) < len(probs): report.append(f"{side.parent.name}/{side.name}: "
                                                                        f"{[p for p in probs if p not in hard]}")
    for side, meta in _figure_sidecars(folder):
        if ids is not None and meta["artefact"] not in ids: continue
        notes = meta.get("notes", {})
        if notes.get("layout_problems") is None: bad.append(f"{side.name}: no layout check recorded")
        else: add(side, notes["layout_problems"], strict=True)
        if not notes.get("figure_caption"): bad.append(f"{side.name}: no caption")
    for side in sorted(folder.glob("*/*.json")):                    # a table's caption too long to finish (issue 51)
        meta = json.loads(side.read_text())
        if (ids is None or meta.get("artefact") in ids) and (meta.get("notes") or {}).get("table_problems"):
            add(side, meta["notes"]["table_problems"])
    return bad


def _report(what: str, items: list[str]):
    if items: warnings.warn(f"{len(items)} {what}: {items}")


# Issue 51: every figure with its data file. A sidecar written by the check of version 2 or later (notes["check_version"])
# fails without one; older sidecars (made before save_figure had `data=`) are reported, not failed, until every figure
# is regenerated. Every committed figure has been regenerated with its data: the check is strict for all of them.
DATA_REQUIRED_FROM_VERSION = 0


def _data_problems(folder: Path, ids: set[str] | None = None, strict_from: int = DATA_REQUIRED_FROM_VERSION,
                   report: list | None = None) -> list[str]:
    "Figures without their data file (`notes['data']` missing, None, or not on disk): failures, and `report`ed old ones."
    bad = []
    for side, meta in _figure_sidecars(folder):
        if ids is not None and meta["artefact"] not in ids: continue
        data = (meta.get("notes") or {}).get("data")
        if data and (side.parent / data).is_file(): continue
        why = f"{side.parent.name}/{side.name}: " + ("no data file" if not data else f"data file {data} is missing")
        (bad if (meta.get("notes") or {}).get("check_version", 1) >= strict_from else
         report if report is not None else []).append(why)
    return bad


def test_sim_figures_pass_the_layout_check(scratch):
    "Regenerate the cheapest paper's figures (Du et al. baseline, sim) into a scratch folder: every figure is clean."
    env = {**os.environ, "MAD_STUDY_FIGURES": str(scratch / "figures"), "MAD_STUDY_RUNS": str(scratch / "runs")}
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert list(_figure_sidecars(scratch / "figures")), "no figure was made"
    long: list[str] = []
    assert _check(scratch / "figures", report=long) == []
    _report("caption(s) over 1,200 characters (CAPTIONS_STRICT is off)", long)


def test_committed_figures_pass_the_layout_check():
    "Every committed figure recorded the layout check with no problem, and its caption (`make reproduce` writes both)."
    ids = {a["id"] for d in load_registry().values() for a in d.get("artefacts", [])}
    long: list[str] = []
    assert _check(ROOT / "figures", ids, report=long) == []
    _report("caption(s) over 1,200 characters (CAPTIONS_STRICT is off)", long)


def test_committed_figures_have_their_data_file():
    "Issue 51: every committed figure lists <artefact>.data.csv in its sidecar; old sidecars are reported until regenerated."
    ids = {a["id"] for d in load_registry().values() for a in d.get("artefacts", [])}
    old: list[str] = []
    bad = _data_problems(ROOT / "figures", ids, report=old)
    _report("committed figure(s) made before the data check, without a data file", old)
    assert bad == []
