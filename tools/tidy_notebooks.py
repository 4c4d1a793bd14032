#!/usr/bin/env python3
"""Tidy the notebooks without cutting them (issue 49): format, move hung comments, clean and export.

Run from anywhere with the project's venv:  `.venv/bin/python tools/tidy_notebooks.py`. Deterministic; a second run
changes nothing. It never splits or joins a cell: a test keeps its set-up, action and check in one cell, a figure is
built whole, and where a cell is cut is the writer's decision, not a formatter's.

1. `ruff format nbs` (pyproject.toml: line length 100, magic trailing commas ignored, so a call that fits on one line
   is written on one line).
2. A comment hung on a closing bracket (`)  # why`, what ruff leaves when a commented line is too long) moves above
   the line that opens that bracket, at its indentation; `ruff format nbs` then joins the call where it fits.
3. `nbdev-clean`, then `nbdev-export`.
`hung_comments(source)` is what tests/test_layout.py uses to check that no cell holds one.
"""
import io
import json
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OPEN, CLOSE = "([{", ")]}"
# directives a tool reads where they stand: never moved
KEEP = ("# noqa", "# type:", "# pragma", "# fmt:")


def _tokens(src: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def hung_comments(src: str) -> list[tuple[int, int, int, str]]:
    """(line, line of the opening bracket, column, comment) of each comment that follows only closing brackets
    (and a comma or colon) on its line; [] where the cell does not tokenize (IPython magics)."""
    toks = _tokens(src)
    if toks is None:
        return []
    lines, stack, opener = src.split("\n"), [], {}
    for t in toks:
        if t.type == tokenize.OP and t.string in OPEN:
            stack.append(t.start[0])
        elif t.type == tokenize.OP and t.string in CLOSE and stack:
            opener[t.start] = stack.pop()
    found = []
    for i, t in enumerate(toks):
        if t.type != tokenize.COMMENT or t.string.startswith(KEEP):
            continue
        row, before = t.start[0], lines[t.start[0] - 1][: t.start[1]].strip()
        if not before or before.rstrip(",:;").strip(" )]}") != "":
            continue
        first = next(
            (u for u in toks[:i] if u.start[0] == row and u.type == tokenize.OP and u.string in CLOSE), None
        )
        if first is not None and first.start in opener:
            found.append((row, opener[first.start], t.start[1], t.string))
    return found


def unhang(src: str) -> tuple[str, int]:
    "The source with every hung comment moved above the line that opens its bracket, and how many moved."
    moves, lines = hung_comments(src), src.split("\n")
    for row, top, col, text in sorted(moves, key=lambda m: -m[0]):
        lines[row - 1] = lines[row - 1][:col].rstrip()
        indent = len(lines[top - 1]) - len(lines[top - 1].lstrip())
        lines.insert(top - 1, " " * indent + text)
    return "\n".join(lines), len(moves)


def unhang_notebook(path: Path) -> int:
    nb, moved = json.loads(path.read_text(encoding="utf-8")), 0
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        new, k = unhang("".join(c["source"]))
        if k:
            moved += k
            c["source"] = new.splitlines(keepends=True)
    if moved:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return moved


def main():
    run = lambda *a: subprocess.run([str(BIN / a[0]), *a[1:]], cwd=ROOT, check=True)
    run("ruff", "format", "nbs")
    moved = sum(unhang_notebook(p) for p in sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts))
    print(f"moved {moved} hung comments above their statements")
    run("ruff", "format", "nbs")
    run("nbdev-clean")
    run("nbdev-export")


if __name__ == "__main__":
    main()
