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
# docstrings a test reads whole (tests/test_svr_mad.py: the config's docstring names every field)
KEEP = {"svr_mad.SVRConfig"}
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
