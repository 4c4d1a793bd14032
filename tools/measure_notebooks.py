#!/usr/bin/env python3
"""Measure the notebooks as documents, on the same scale as nbdev's and fastcore's own (issue 49).

    .venv/bin/python tools/measure_notebooks.py                 # the kit (this checkout) beside the anchors
    .venv/bin/python tools/measure_notebooks.py --kit-ref main  # also the kit as committed at a git ref
    .venv/bin/python tools/measure_notebooks.py --scope nbs/core nbs/engine   # also a column for some folders

Every column is measured by the same functions below (one docstring per measure says what it counts). The anchors
are read from local mirrors of github:AnswerDotAI/nbdev and github:AnswerDotAI/fastcore (the `fetch` tool puts them
under /work/.mirror/; `--nbdev` / `--fastcore` point elsewhere) with `git show`, so no work tree is needed; a missing
mirror leaves its column out. A project's notebooks are its *library* notebooks: those with at least one export cell
(nbdev's tutorials and test fixtures, which export nothing, are not what the kit's notebooks are compared with); its
modules are the package's `*.py` files except `__init__.py`, `_modidx.py` and `all.py`.

`measure(notebooks, modules)` returns the row values; tests/test_layout.py calls the ratio functions on the kit.
"""

import argparse
import ast
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tidy_notebooks import hung_comments  # noqa: E402

MIRRORS = Path("/work/.mirror")
ANCHORS = {"nbdev": ("AnswerDotAI+nbdev", "nbdev"), "fastcore": ("AnswerDotAI+fastcore", "fastcore")}
# issue 49's targets: set-up-only test cells at most nbdev's share, export cells followed by a test or usage at least
# 40%, no hung comment, code lines per notebook (median) at most twice fastcore's
TARGETS = {"setup_only_pct": 16.0, "export_then_use_pct": 40.0, "hung": 0}
EXPORT = re.compile(r"^\s*#\s*\|\s*export|^\s*#\s*export\b", re.M)
DIRECTIVE = re.compile(r"^\s*#\s*\|")
CHECK_CALL = re.compile(r"^(test_\w*|assert\w*|raises|warns|expect_fail|check\w*|pytest\.(raises|warns|approx))$")
SHOW_CALL = {"print", "display", "show_doc", "pprint", "show", "Markdown", "HTML"}
BRACKET_ONLY = re.compile(r"^[)\]}]+[,:;]?$")
STRING = re.compile(r"('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\")")


# --- reading notebooks and modules -------------------------------------------------------------------------------
def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def is_export(cell: dict) -> bool:
    "An export cell: a code cell whose directives include `#| export` (or `exports`, or nbdev 1's `# export`)."
    return cell["cell_type"] == "code" and bool(EXPORT.search(source(cell)))


def is_test(cell: dict) -> bool:
    """A test or usage cell: a non-export code cell holding code (not only directives such as `#| default_exp`, and
    not empty). Used by "export cell directly followed by a test or usage cell" and "runs of 3+ test cells"."""
    if cell["cell_type"] != "code" or is_export(cell):
        return False
    return any(l.strip() and not DIRECTIVE.match(l) for l in source(cell).splitlines())


def is_preamble(cell: dict) -> bool:
    "A test cell that holds only imports (a notebook's preamble): not counted by `setup_only`."
    body = parse(source(cell))
    return bool(body) and all(isinstance(t, (ast.Import, ast.ImportFrom)) for t in body)


def code_lines(src: str) -> list[str]:
    "The non-blank lines of a code cell that are not cell directives (`#| ...`)."
    return [l for l in src.splitlines() if l.strip() and not DIRECTIVE.match(l)]


def parse(src: str) -> list[ast.stmt] | None:
    "Top-level statements; IPython magics and shell lines (`%`, `!`) are dropped first; None where it still fails."
    lines = ["" if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines()]
    try:
        return ast.parse("\n".join(lines)).body
    except SyntaxError:
        return None


def git_files(repo: Path, ref: str, pattern: str) -> dict[str, str]:
    "{path: text} of the files of `repo` at `ref` whose path matches `pattern` (read with git, no work tree)."
    names = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", ref], capture_output=True,
                           text=True, check=True).stdout.split()
    return {n: subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{n}"], capture_output=True, text=True,
                              check=True).stdout for n in names if re.fullmatch(pattern, n)}


def load(nb_texts: dict[str, str], mod_texts: dict[str, str]) -> tuple[dict[str, list[dict]], dict[str, str]]:
    "Library notebooks (those with an export cell) -> cells, and modules, from {path: text} maps."
    nbs = {}
    for name, text in sorted(nb_texts.items()):
        cells = json.loads(text)["cells"]
        if any(is_export(c) for c in cells):
            nbs[name] = cells
    skip = {"__init__.py", "_modidx.py", "all.py"}
    return nbs, {n: t for n, t in sorted(mod_texts.items()) if Path(n).name not in skip}


# --- the measures ---------------------------------------------------------------------------------------------------
def lines_per_notebook(nbs: dict[str, list[dict]]) -> list[int]:
    """Code lines per notebook: non-blank, non-directive lines of all its code cells (report: median and max)."""
    return [sum(len(code_lines(source(c))) for c in cells if c["cell_type"] == "code") for cells in nbs.values()]


def export_then_use(nbs: dict[str, list[dict]]) -> tuple[int, int]:
    """Export cells directly followed by a test or usage cell: the next cell of the notebook (markdown counts as a
    cell, so prose between them breaks the pair) is a non-export code cell. (hits, export cells)"""
    hits = total = 0
    for cells in nbs.values():
        for i, c in enumerate(cells):
            if is_export(c):
                total += 1
                hits += i + 1 < len(cells) and is_test(cells[i + 1])
    return hits, total


def checks(body: list[ast.stmt]) -> bool:
    "Does the code assert anything: an `assert`, a call named test_* / assert* / raises / warns / expect_fail / check*?"
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            full = ast.unparse(f) if isinstance(f, ast.Attribute) else name
            if CHECK_CALL.match(name) or CHECK_CALL.match(full):
                return True
    return False


def shows(body: list[ast.stmt]) -> bool:
    "Does the cell show a value: its last statement is an expression, or a top-level statement calls print/display?"
    if body and isinstance(body[-1], ast.Expr):
        return True
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in SHOW_CALL:
                    return True
    return False


def setup_only(nbs: dict[str, list[dict]]) -> tuple[int, int]:
    """Test cells that neither check nor show anything: a test cell (`is_test`, imports-only cells left out) with no
    check (`checks`) whose last statement is not an expression and that prints or displays nothing (`shows`). A cell
    that does not parse, and a cell of comments only (code commented out), counts as neither. (set-up-only cells,
    test cells)"""
    bad = total = 0
    for cells in nbs.values():
        for c in cells:
            if not is_test(c) or is_preamble(c):
                continue
            total += 1
            body = parse(source(c))
            bad += body is None or not (checks(body) or shows(body))
    return bad, total


def test_runs(nbs: dict[str, list[dict]], k: int = 3) -> int:
    """Runs of `k` (3) or more consecutive test cells: adjacent cells with no prose or export between them."""
    runs = 0
    for cells in nbs.values():
        n = 0
        for c in cells + [{"cell_type": "markdown", "source": ""}]:
            if is_test(c):
                n += 1
                continue
            runs += n >= k
            n = 0
    return runs


def stored_outputs(nbs: dict[str, list[dict]]) -> int:
    "Code cells with a stored output (any entry in `outputs`)."
    return sum(bool(c.get("outputs")) for cells in nbs.values() for c in cells if c["cell_type"] == "code")


def hung(nbs: dict[str, list[dict]]) -> int:
    "Comments hung on a closing bracket, `)  # why` (tools/tidy_notebooks.hung_comments), over all code cells."
    return sum(len(hung_comments(source(c))) for cells in nbs.values() for c in cells if c["cell_type"] == "code")


def top_level_commas(line: str) -> int:
    "Commas of a line outside its string literals and outside brackets opened on the same line."
    depth = n = 0
    for ch in STRING.sub('""', line):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            n += 1
    return n


def sparse_lines(nbs: dict[str, list[dict]]) -> tuple[int, int]:
    """Lines holding one item and a comma, or only a bracket: a code line that is only closing brackets (with a
    comma, colon or semicolon), or that ends with its only top-level comma and opens no bracket it does not close
    (one argument, one list item, one dict entry per line). Comment lines are not code lines here. (sparse, lines)"""
    sparse = total = 0
    for cells in nbs.values():
        for c in cells:
            if c["cell_type"] != "code":
                continue
            for l in code_lines(source(c)):
                s = l.strip()
                if s.startswith("#"):
                    continue
                total += 1
                s = s.split("  #")[0].rstrip()
                one_item = s.endswith(",") and top_level_commas(s) == 1 and s.count("(") + s.count("[") + s.count(
                    "{") == s.count(")") + s.count("]") + s.count("}")
                sparse += bool(BRACKET_ONLY.match(s)) or one_item
    return sparse, total


def module_lines(mods: dict[str, str]) -> list[int]:
    "Module lines: every line of each package module (`wc -l`), excluding `__init__`, `_modidx` and `all`."
    return [t.count("\n") for t in mods.values()]


def measure(nbs: dict[str, list[dict]], mods: dict[str, str]) -> dict[str, str]:
    "The table's row values for one project."
    pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
    lines, ml = lines_per_notebook(nbs), module_lines(mods)
    (eu, ex), (so, tc), (sp, tl) = export_then_use(nbs), setup_only(nbs), sparse_lines(nbs)
    return {
        "library notebooks": f"{len(nbs)}",
        "code lines per notebook, median (max)": f"{statistics.median(lines):,.0f} ({max(lines):,})" if lines else "-",
        "export cell directly followed by a test or usage cell": f"{pct(eu, ex)} ({eu}/{ex})",
        "test cells that neither check nor show anything": f"{pct(so, tc)} ({so}/{tc})",
        "runs of 3+ consecutive test cells": f"{test_runs(nbs)}",
        "code cells with a stored output": f"{stored_outputs(nbs)}",
        "comments hung on a closing bracket": f"{hung(nbs)}",
        "lines holding one item and a comma, or only a bracket": f"{pct(sp, tl)}",
        "module lines, median": f"{statistics.median(ml):,.0f}" if ml else "-",
    }


# --- the three projects ---------------------------------------------------------------------------------------------
def kit(ref: str | None = None, scope: list[str] | None = None):
    "The kit's notebooks (nbs/**) and modules (mad_study/*.py): the work tree, or as committed at `ref`."
    if ref:
        nb_t, mod_t = git_files(ROOT, ref, r"nbs/.*\.ipynb"), git_files(ROOT, ref, r"mad_study/[^/]*\.py")
    else:
        nb_t = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "nbs").rglob("*.ipynb")
                if ".ipynb_checkpoints" not in p.parts}
        mod_t = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "mad_study").glob("*.py")}
    if scope:
        nb_t = {n: t for n, t in nb_t.items() if any(n.startswith(s.rstrip("/")) for s in scope)}
        mod_t = {}
    return load(nb_t, mod_t)


def kit_notebooks() -> dict[str, list[dict]]:
    "The kit's library notebooks in this work tree (what tests/test_layout.py measures)."
    return kit()[0]


def anchor(name: str, repo: Path | None = None):
    "An anchor project's library notebooks and modules, read from its mirror at HEAD; None where no mirror exists."
    folder, pkg = ANCHORS[name]
    repo = repo or MIRRORS / folder / "repo"
    if not repo.exists():
        return None
    return load(git_files(repo, "HEAD", r"nbs/.*\.ipynb"), git_files(repo, "HEAD", rf"{pkg}/[^/]*\.py"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kit-ref", action="append", default=[], help="also measure the kit as committed at this ref")
    p.add_argument("--scope", nargs="*", default=None, help="also a column for these nbs/ folders or notebooks")
    p.add_argument("--nbdev", type=Path, default=None)
    p.add_argument("--fastcore", type=Path, default=None)
    a = p.parse_args(argv)
    cols = {"kit": measure(*kit())}
    for ref in a.kit_ref:
        cols[f"kit @{ref}"] = measure(*kit(ref))
    if a.scope:
        cols["kit, scope"] = measure(*kit(scope=a.scope))
        for ref in a.kit_ref:
            cols[f"scope @{ref}"] = measure(*kit(ref, scope=a.scope))
    for name in ANCHORS:
        got = anchor(name, getattr(a, name))
        if got is not None:
            cols[name] = measure(*got)
    rows = list(next(iter(cols.values())))
    print("| measure | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for r in rows:
        print(f"| {r} | " + " | ".join(c[r] for c in cols.values()) + " |")


if __name__ == "__main__":
    main()
