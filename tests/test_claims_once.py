"""Issue 51 (round 7): one claim verdict per printed number in the whole kit.

The calibration table (nbs/study/16_calibration, figures/sim/calibration.*) says how well the sim world reproduces a
printed number and whether its mechanism moves it; where a figure judges the paper's claim on that number, the row
names it (`claim_judged_in`, from `JUDGED_IN`: the row's target spec names its artefact) and carries no claim word.
These tests read the committed sidecars (figures/*/*.json; MAD_STUDY_CLAIMS_FIGURES points them at another figures/
folder, e.g. a scratch `mad-study reproduce`'s) against that map, so they hold for whatever `make reproduce` writes:
- every row naming an artefact finds it, and a claim there whose `paper` (or `claim`) text carries the row's number
  as the figure prints it (`claim_key`);
- no printed number carries claim verdict words in two places (two figures, a figure and a calibration row, or two
  calibration rows). One figure may judge several claims, each named and each against its own printed number (Du et
  al.'s debate - single +8.0: the debate's gain; their debate - majority +4.0: the gain beyond its control): a reader
  sees both beside each other, with the headline saying which one stands for the paper.
"""
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT
from mad_study.calibration import (calibration_targets, claim_judged_in, claim_rows, fitted_apart_rows,
                                   not_shown_rows)

# effect_verdict's words: a claim's verdict (the calibration rows' mechanism checks use other words)
WORDS = {"yes", "no", "smaller than printed", "not resolved", "not testable"}


def figures_root() -> Path:
    return Path(os.environ.get("MAD_STUDY_CLAIMS_FIGURES") or ROOT / "figures")


def claims_by_artefact(root: Path) -> dict[str, list[dict]]:
    "artefact -> its claims (the sidecar's notes.verdict.claims, or its one verdict where it lists none)."
    out: dict[str, list[dict]] = {}
    for f in sorted(root.glob("*/*.json")):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict) or not d.get("artefact"):
            continue
        v = (d.get("notes") or {}).get("verdict")
        claims = (v.get("claims") or [v]) if isinstance(v, dict) else []
        out.setdefault(d["artefact"], []).extend(c for c in claims if isinstance(c, dict))
    return out


def _text(c: dict) -> str:
    return f"{c.get('paper') or ''} | {c.get('claim') or ''}".lower()


def code_map() -> pd.DataFrame:
    "Every calibration row the code says a figure judges: its artefact and the text that claim carries."
    t = pd.concat([calibration_targets(), claim_rows()], ignore_index=True)
    t = t[(t["family"] == "world") & t["statistic"].notna()]
    rows = pd.concat([pd.concat([t, claim_judged_in(t)], axis=1), fitted_apart_rows()], ignore_index=True)
    return rows.loc[rows["claim_judged_in"] != "none",
                    ["source", "quantity", "sim_model", "task", "claim_judged_in", "claim_key"]]


def problems(claims: dict[str, list[dict]], judged: pd.DataFrame, calibration: pd.DataFrame | None = None) -> list[str]:
    """The disagreements: a row's artefact missing, or no claim there carrying its number; a printed number with two
    claim verdict words in two places (figures, plus each calibration row's `verdict`; one figure's own claims count
    once)."""
    out = []
    for (art, key), _ in judged.groupby(["claim_judged_in", "claim_key"], dropna=False):
        if art not in claims:
            out.append(f"{art}: no sidecar with this artefact")
        elif key and not any(key.lower() in _text(c) for c in claims[art]):
            out.append(f"{art}: no claim carries '{key}'")
    for key in sorted({k for k in judged["claim_key"] if k}):
        k = key.lower()
        where = [a for a, cs in claims.items() if a != "calibration" for c in cs
                 if k in _text(c) and c.get("effect") in WORDS]
        if calibration is not None:
            here = calibration[calibration["claim_key"].fillna("").str.lower() == k]
            where += ["calibration"] * int(here["verdict"].isin(WORDS).sum())
        places = len({a for a in where if a != "calibration"}) + where.count("calibration")
        if places > 1:
            out.append(f"'{key}' carries {len(where)} claim verdicts: {', '.join(where)}")
    return out


def test_every_judged_row_finds_its_claim_and_no_number_is_judged_twice():
    claims = claims_by_artefact(figures_root())
    judged = code_map()
    # the map is not empty and names figures, not the table itself
    assert len(judged) >= 20 and "calibration" not in set(judged["claim_judged_in"])
    assert problems(claims, judged) == []
    # the lines the table does not show name a figure that exists (or none)
    ns = not_shown_rows()
    assert set(ns["claim_judged_in"]) - {"none"} <= set(claims), set(ns["claim_judged_in"]) - set(claims)


def test_the_committed_calibration_table_carries_no_second_verdict():
    path = figures_root() / "sim" / "calibration.csv"
    tab = pd.read_csv(path, keep_default_na=False)
    if "claim_judged_in" not in tab.columns:
        pytest.skip(f"{path} predates the claim_judged_in column (issue 51): rerun `mad-study reproduce calibration`")
    judged = tab[tab["claim_judged_in"].isin(["", "none"]) == False]   # noqa: E712
    # a row a figure judges carries the mechanism check, not a claim word; the map is the code's
    assert not judged["verdict"].isin(WORDS).any(), judged.loc[judged["verdict"].isin(WORDS), "quantity"].tolist()
    shown = judged[judged["claim_key"] != ""]
    key = ["source", "quantity", "sim_model", "task"]
    want = code_map().astype({"task": str}).set_index(key)["claim_judged_in"]
    got = shown.astype({"task": str}).set_index(key)["claim_judged_in"]
    assert got.sort_index().equals(want.reindex(got.index).sort_index()), (got, want)
    assert set(want.index) <= set(got.index), set(want.index) - set(got.index)
    assert problems(claims_by_artefact(figures_root()), shown, tab) == []


def test_a_planted_second_verdict_fails(tmp_path):
    root = figures_root()
    (tmp_path / "madc").mkdir()
    src = root / "madc" / "madc_tab1.json"
    shutil.copy(src, tmp_path / "madc" / "madc_tab1.json")
    judged = code_map().query("claim_judged_in == 'madc_tab1'")
    assert problems(claims_by_artefact(tmp_path), judged) == []
    # a copy of the sidecar under another artefact name: Table 1's 3B gains now carry two verdicts
    d = json.loads(src.read_text())
    d["artefact"] = "madc_tab1_copy"
    (tmp_path / "madc" / "madc_tab1_copy.json").write_text(json.dumps(d))
    found = problems(claims_by_artefact(tmp_path), judged)
    assert any("'truth last - MAD +17.4' carries 2 claim verdicts" in p for p in found), found
    # a calibration row that judges a number its figure judges: two verdicts as well
    (tmp_path / "madc" / "madc_tab1_copy.json").unlink()
    cal = judged.head(1).assign(verdict="yes")
    found = problems(claims_by_artefact(tmp_path), judged, cal)
    assert any("madc_tab1, calibration" in p for p in found), found
    # a figure whose claim no longer carries the row's number is found too
    d = json.loads(src.read_text())
    for c in d["notes"]["verdict"]["claims"]:
        c["paper"] = c["paper"].replace("+17.4", "+17.5")
    (tmp_path / "madc" / "madc_tab1.json").write_text(json.dumps(d))
    assert "madc_tab1: no claim carries 'truth last - MAD +17.4'" in problems(claims_by_artefact(tmp_path), judged)
