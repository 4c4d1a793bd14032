#!/usr/bin/env python3
"""Long docstrings become prose (issue 37): a docstring of an exported definition over LIMIT characters keeps its
opening sentences (as many as still name the paper, section or equation the cite test asks for, within LIMIT) and
the rest moves to the markdown cell just above the definition (a new one when the cell above is code).

Run with the project's venv: `.venv/bin/python tools/docstrings_to_prose.py [notebook ...]`, then
`tools/format_notebooks.py`. Deterministic; a second run changes nothing. Prints the docstrings it could not
shorten (a first sentence over LIMIT, or no prefix that keeps the citation).
"""
import ast
import json
import re
import secrets
import textwrap
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mad_study import cite  # noqa: E402

LIMIT = 300
# docstrings a test reads whole (tests/test_svr_mad.py: the config's docstring names every field, and
# svr_mad's names `tie_seed` and the counts D, r, c)
KEEP = {"svr_mad.SVRConfig", "svr_mad.svr_mad"}
# hand-written summaries where no prefix of the docstring is short enough: the summary stays, the whole docstring
# moves to the prose above (each keeps the paper, section or equation the cite test asks for)
SUMMARIES = {
    "stats.compare_methods": "Many methods against `reference` on the same items, paired by item (DESIGN"
    " \"Statistics\"; Holm 1979): per method accuracy, gap, interval, adjusted test, TOST and verdict;"
    " returns (table, caption sentence).",
    "umad.decomposition_table": "UMAD Alg. 1 per item and turn: TU, Sys-EU and Sys-AU from each agent's K"
    " trajectory-level samples (App. C.1), with accuracies, parse failures and the finite-K EU floor.",
    "stats.self_consistency_at_budget": "Self-consistency (Wang et al. 2023) at the token budget of `debate`:"
    " K samples of one model, K corrected by the measured spend until it is within `tolerance` per item.",
    "svr_mad.evaluate": "SVR-MAD Sec. 5 / App. A evaluation on one task: round 0, the kept problems, prior"
    " signals, probes and every method's per-problem costs.",
    "stats.paired_difference": "Difference a - b of two methods matched by item: mean, percentile bootstrap"
    " interval over items (Efron & Tibshirani 1993, Ch. 13) and a paired test.",
    "madc.strategy_tests": "Paired tests between MADC's strategies over units, a unit's rows averaged first:"
    " means, difference with interval, p-values and Holm-adjusted significance (MADC Figs. 3-5).",
    "metrics.with_defaults": "`transcript` with the columns a metric reads: each of `need` present (else one"
    " line naming it), the other schema columns filled with their defaults (the kit's own).",
    "report.run_params": "The parameters this run of `notebook` was given: its `parameters` cell's names with"
    " their values in `ns`, and the serving keys papermill injected (the kit's own).",
    "trajectory.trajectory_summary": "Per condition, DebateLLM-style trajectory metrics (Smit et al. 2024):"
    " change, adoption, sway and correction rates, consensus, first correct round, tokens.",
    "metrics.accuracy_by_round": "Accuracy per round for each agent and (optionally) the majority vote, with"
    " Wilson's interval or the item-clustered bootstrap (the kit's own).",
    "madc.reversal_table": "Reversal points per curve (`mad_study.metrics.reversal_point`): the first crossing"
    " and, per order, the crossing after the first pool (MADC Tables 6-11).",
    "sandbox.python_view": "The interpreter the sandbox runs and the host paths it needs, bound read-only at"
    " the same paths (the kit's own).",
    "sandbox.BwrapOptions": "What `bwrap_argv` sets beyond the interpreter: /tmp's size, the privileged"
    " fallback, the seccomp and status descriptors and the staged mounts (the kit's own).",
    "arena.engine_debate": "A runner: a debate on the kit's engine (`mad_study.protocols.run_protocol`):"
    " Du et al.'s all-to-all MAD, an order of MADC's, or one of `make_baseline`'s.",
    "data.complete_transcript": "A copy of `df` with every schema column: a missing required one is one line"
    " naming it, a missing optional one gets its default, `correct` is graded (the kit's own).",
    "twins.build_mllama": "meta-llama/Llama-3.2-11B-Vision-Instruct twin: a tiny"
    " MllamaForConditionalGeneration with its processor (the kit's own).",
    "core.Inference": "How `compare_methods` tests (the kit's own settings object, DESIGN \"Statistics\"):"
    " level, margin, resamples, test, correction and which items are compared.",
    "arena.ArenaMethod": "One method of the arena (the kit's own): its key, label, group, runner, budget per"
    " item and figure style.",
    "arena.Arena": "One arena run (the kit's own): items, agents and backends every method runs on, the"
    " settings, and each method's per-item results, transcripts and notes.",
    "sandbox.clean_text": "What a transcript may show of a program's output: escape sequences, control"
    " characters and direction overrides removed (Boucher & Anderson, USENIX Security 2023).",
    "answers.load_answer_corpus": "The labelled corpus of model outputs the extraction rules are checked on"
    " (`mad_study/fixtures/`), one dict per entry (the kit's own).",
}
# the cite test's section pattern (tests/test_cite.py)
SECTION = re.compile(
    r"\b(Eqs?|Alg|Algorithm|Apps?|Appendix|Secs?|Section|Tables?|Tab|Figs?|Figures?|Prompt)\b\.?\s*[A-Z0-9]"
)
ABBREV = re.compile(r"(\bet al|\bEqs?|\bSecs?|\bFigs?|\bApps?|\bAlg|\bTab|\be\.g|\bi\.e|\bvs|\bcf|\bNo|\bresp)\.$")


def sentences(doc: str) -> list[str]:
    "Split at '. ' before a new sentence, not after an abbreviation (et al., Eq., e.g., ...)."
    out, start = [], 0
    for m in re.finditer(r"(?<=[.])\s+(?=[A-Z`(*\"'])", doc):
        head = doc[start : m.start()]
        if ABBREV.search(head):
            continue
        out.append(head)
        start = m.end()
    out.append(doc[start:])
    return [s for s in out if s.strip()]


def cites(text: str, qual: str) -> bool:
    return cite.kit_own(qual) or bool(cite.named_refs(text)) or bool(SECTION.search(text))


def split_doc(doc: str, qual: str) -> tuple[str, str] | None:
    "(kept, moved) or None where no short prefix keeps the citation; at '; ' where no sentence is short enough."
    text = " ".join(doc.split())
    cut = _split(sentences(text), qual)
    if cut is None:
        cut = _split([p + ";" for p in text.split("; ")[:-1]] + [text.split("; ")[-1]], qual)
        if cut is not None:
            cut = (cut[0][:-1] + ".", cut[1][:1].upper() + cut[1][1:])
    return cut


def _split(parts: list[str], qual: str) -> tuple[str, str] | None:
    need = cites(" ".join(parts), qual)
    for k in range(1, len(parts)):
        kept = " ".join(parts[:k])
        if len(kept) > LIMIT:
            return None
        if not need or cites(kept, qual):
            return kept, " ".join(parts[k:])
    return None


def literal(text: str, indent: str) -> str:
    "The docstring's source: one line when it fits in 100 columns, else wrapped in triple quotes."
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    if len(body) + len(indent) + 2 <= 100:
        return f'"{body}"'
    lines = textwrap.wrap(body, 100 - len(indent) - 3, break_long_words=False, break_on_hyphens=False)
    return '"""' + ("\n" + indent).join(lines) + '"""'


def md_cell(text: str) -> dict:
    return {"cell_type": "markdown", "id": secrets.token_hex(4), "metadata": {}, "source": text.splitlines(True)}


def rewrite(path: Path) -> tuple[int, list[str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    mod = next((ln.split()[-1] for c in nb["cells"] for ln in c["source"] if ln.startswith("#| default_exp")), None)
    if mod is None:
        return 0, []
    done, skipped, cells = 0, [], []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] != "code" or not src.startswith("#| export"):
            cells.append(c)
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError:
            cells.append(c)
            continue
        edits, moved = [], []
        for n in tree.body:
            if not isinstance(n, (ast.FunctionDef, ast.ClassDef)) or n.name.startswith("_"):
                continue
            doc = ast.get_docstring(n, clean=True)
            if not doc or len(doc) <= LIMIT:
                continue
            qual = f"{mod}.{n.name}"
            if qual in KEEP:
                continue
            if qual in SUMMARIES:
                cut = (SUMMARIES[qual], " ".join(doc.split()))
            else:
                cut = split_doc(doc, qual)
            if cut is None:
                skipped.append(qual)
                continue
            node = n.body[0]
            lines = src.splitlines(True)
            a = sum(len(x) for x in lines[: node.lineno - 1]) + node.col_offset
            b = sum(len(x) for x in lines[: node.end_lineno - 1]) + node.end_col_offset
            edits.append((a, b, literal(cut[0], " " * node.col_offset)))
            para = f"`{n.name}`, in more detail: {cut[1]}"
            moved.append("\n".join(textwrap.wrap(para, 100, break_long_words=False, break_on_hyphens=False)))
        if not edits:
            cells.append(c)
            continue
        for a, b, t in sorted(edits, reverse=True):
            src = src[:a] + t + src[b:]
        c["source"] = src.splitlines(True)
        text = "\n\n".join(moved)
        if cells and cells[-1]["cell_type"] == "markdown":
            prev = "".join(cells[-1]["source"]).rstrip("\n")
            cells[-1]["source"] = (prev + "\n\n" + text).splitlines(True)
        else:
            cells.append(md_cell(text))
        cells.append(c)
        done += len(edits)
    if done:
        nb["cells"] = cells
        with open(path, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return done, skipped


def main():
    paths = [Path(p) for p in sys.argv[1:]] or sorted((ROOT / "nbs").glob("*.ipynb"))
    total, left = 0, []
    for p in paths:
        n, s = rewrite(p)
        total += n
        left += s
        if n or s:
            print(f"{p.name}: {n} shortened" + (f"; left: {', '.join(s)}" if s else ""))
    print(f"{total} docstrings moved to prose; {len(left)} left")


if __name__ == "__main__":
    main()
