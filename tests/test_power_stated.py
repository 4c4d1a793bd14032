"""Issue 50: every sim figure that judges a paper's claim states its power.

"Choose each sim figure's n from power: the n at which the paper's effect size would be resolved with 80% power under
the kit's own test, stated in the caption." The committed sidecars (figures/*/*.json; MAD_STUDY_CLAIMS_FIGURES points
them at another figures/ folder, e.g. a scratch `mad-study reproduce`'s) are read: each claim a sim artefact judges
(an effect word other than "not testable") carries `power.claim_power`'s sentence in its `n` (what its items resolve
with 80% power and, for a printed effect, the n that effect needs), or says why it has none; the figure's caption says
what its items resolve.
"""
import json
import os
from pathlib import Path

import pytest

from conftest import ROOT
from mad_study.power import claim_power

# the words of a claim the items could settle one way or the other (effect_verdict's, less "not testable": a world
# without the mechanism, where no n would settle it)
JUDGED = {"yes", "no", "smaller than printed", "not resolved"}
# what claim_power's sentence says: a resolvable effect at 80% power, or why there is none
STATED = ("with 80% power", "no power statement")


def figures_root() -> Path:
    return Path(os.environ.get("MAD_STUDY_CLAIMS_FIGURES") or ROOT / "figures")


def unstated(meta: dict) -> list[str]:
    "What a sidecar leaves out of the power rule: judged claims without claim_power's sentence, a caption without it."
    notes = meta.get("notes") or {}
    verdict = notes.get("verdict") or {}
    claims = [c for c in verdict.get("claims") or [] if c.get("effect") in JUDGED]
    out = [f"claim {c.get('claim', '?')[:60]!r} ({c['effect']}): n = {str(c.get('n'))[:60]!r}"
           for c in claims if not any(s in str(c.get("n") or "") for s in STATED)]
    caption = " ".join(str(notes.get(k) or "") for k in ("figure_caption", "caption"))
    if claims and "power" not in caption.lower():
        out.append("the caption states no power")
    return out


def test_the_rule_finds_a_claim_without_its_power():
    "A planted sidecar: one judged claim stated, one not, a not-testable one exempt; then the caption."
    said = claim_power([12.0, -8.0] * 50, printed=8.0)["sentence"]
    meta = {"notes": {"figure_caption": "80% power: " + said, "verdict": {"claims": [
        {"claim": "a", "effect": "yes", "n": said},
        {"claim": "b", "effect": "not resolved", "n": "100 items"},
        {"claim": "c", "effect": "not testable", "n": None}]}}}
    assert unstated(meta) == ["claim 'b' (not resolved): n = '100 items'"]
    meta["notes"]["figure_caption"] = "no word on it"
    assert unstated(meta)[-1] == "the caption states no power"


def _sim_sidecars():
    for f in sorted(figures_root().glob("*/*.json")):
        try:
            meta = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("profile") == "sim" and (meta.get("notes") or {}).get("verdict"):
            yield f, meta


def test_every_judged_sim_claim_states_its_power():
    found = {f"{f.parent.name}/{f.stem}": unstated(meta) for f, meta in _sim_sidecars()}
    if not found:
        pytest.skip(f"no sim sidecar with a verdict under {figures_root()}")
    bad = {k: v for k, v in found.items() if v}
    assert not bad, "\n".join(f"{k}: {p}" for k, v in bad.items() for p in v)
