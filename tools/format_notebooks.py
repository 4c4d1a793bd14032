#!/usr/bin/env python3
"""Notebooks a reader can hold on a screen (issue 37): format, lint-fix and split the code cells of nbs/*.ipynb.

Run from anywhere with the project's venv:  `.venv/bin/python tools/format_notebooks.py`  (`--no-split` only formats
and fixes; `--metrics` only prints the metrics). It is deterministic and re-runnable: a second run changes nothing.

1. `ruff format nbs` (pyproject.toml: line length 100).
2. `ruff check`'s findings are fixed in the notebooks: an unused import that is a re-export (listed in the notebook's
   nbdev `_all_`, or imported from / reached through the module elsewhere in the repository) gets `# noqa: F401`;
   the others are removed by `ruff check --fix` (safe fixes only: unused imports, `import a, b`, empty f-strings);
   a few unused local variables are removed by the patches in PATCHES.
3. Code cells are split, one idea per cell: an export cell with several top-level definitions (def / class) becomes
   one cell per definition (the constants just above a definition go with it, the calls after it, such as a
   registration, stay with it); then any cell over MAX_PIECE lines with several top-level statements is cut at
   statement boundaries into pieces of about equal size, at most MAX_PIECE lines where the statements allow. A
   statement keeps the comment lines above it. The cell's `#|` directives (`#| export`, `#| hide`, `#| slow`, ...)
   open every piece. Not split: cells with a `default_exp` directive, with metadata tags (papermill's `parameters`),
   or that do not parse as Python (IPython magics). A new cell's id is derived from the old id and its index.
4. `ruff format nbs` again, then nbdev-clean and nbdev-export.
"""
import argparse
import ast
import hashlib
import io
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
BIN = Path(sys.executable).parent
MAX_PIECE = 40  # lines a piece of an export cell aims to stay under (past its directives)
TEST_PIECE = 12  # the same for the other cells (tests, examples): about the 450 characters of issue 37
NO_SPLIT_DIRECTIVES = ("default_exp",)
FIGURE = re.compile(r"plt\.subplots\(|plt\.figure\(|panel_figure\(|\.subplots\(")
# IPython rebinds these after every cell (`_i` the last input, `_` the last output, ...): a name of this form set in one
# piece of a cell and read in a later piece keeps the two pieces together
IPYTHON_NAMES = re.compile(r"_{1,3}|_i{1,3}|_i?\d+|_oh|_ih|_dh|In|Out")

# unused local variables (F841, whose ruff fix is unsafe): notebook, the exact text, its replacement
PATCHES = [
    ("03g_hf.ipynb", '    torch = torch_parts()["torch"]\n', ""),
    ("05_metrics.ipynb", "    multi = any(isinstance(a, (list, tuple)) for a in answers)\n", ""),
    (
        "05_metrics.ipynb",
        re.compile(r"agents_col, tasks = (\(?\s*)(transcript\[\"agent\"\]\.to_numpy\(dtype=object\)\[order\]),"
                   r"\s*transcript\[\"task\"\]\.to_numpy\(dtype=object\)\s*(,\s*)?\)?"),
        r"agents_col = \2",
    ),
]


def tool(name: str) -> str:
    p = BIN / name
    return str(p) if p.exists() else (shutil.which(name) or name)


def run(*args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def notebooks() -> list[Path]:
    return sorted(NBS.glob("*.ipynb"))


def load(p: Path) -> dict:
    return json.loads(p.read_text(encoding="utf-8"))


def save(p: Path, nb: dict):
    with open(p, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")


def src(c: dict) -> str:
    return "".join(c["source"])


def as_source(text: str) -> list[str]:
    lines = text.split("\n")
    return [l + "\n" for l in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


# ---------------------------------------------------------------- metrics
def metrics() -> dict:
    sizes, lines, nlines = [], [], []
    for p in notebooks():
        for c in load(p)["cells"]:
            if c["cell_type"] != "code":
                continue
            s = src(c)
            sizes.append(len(s))
            ls = s.splitlines()
            lines += ls
            nlines.append(len(ls))
    return dict(
        cells=len(sizes),
        lines=len(lines),
        long_pct=round(100 * sum(len(l) > 100 for l in lines) / max(len(lines), 1), 1),
        median_chars=statistics.median(sizes),
        over40=sum(n > 40 for n in nlines),
        over60=sum(n > 60 for n in nlines),
        max_lines=max(nlines),
        max_chars=max(sizes),
    )


def show(label: str, m: dict):
    print(f"{label}: {m['cells']} code cells, {m['lines']} lines, {m['long_pct']}% over 100 chars, median "
          f"{m['median_chars']} chars/cell, {m['over40']} cells over 40 lines, {m['over60']} over 60, "
          f"longest {m['max_lines']} lines / {m['max_chars']} chars")


# ---------------------------------------------------------------- lint fixes
def module_of(nb: dict) -> str | None:
    for c in nb["cells"]:
        m = re.search(r"^#\|\s*default_exp\s+(\S+)", src(c), re.M)
        if c["cell_type"] == "code" and m:
            return m.group(1)
    return None


def nb_all(nb: dict) -> set[str]:
    "The names a notebook lists in nbdev's `_all_` (re-exported by its module)."
    names = set()
    for c in nb["cells"]:
        for m in re.finditer(r"^_all_\s*=\s*\[(.*?)\]", src(c), re.M | re.S):
            names |= set(re.findall(r"[\"'](\w+)[\"']", m.group(1)))
    return names


def corpus() -> str:
    "Every other place a module's name could be reached from: tests, benchmarks, tools and the notebooks' code."
    parts = [p.read_text(encoding="utf-8") for d in ("tests", "benchmarks", "tools") for p in (ROOT / d).rglob("*.py")]
    parts += [src(c) for p in notebooks() for c in load(p)["cells"] if c["cell_type"] == "code"]
    return "\n".join(parts)


def used_elsewhere(mod: str, name: str, text: str) -> bool:
    if re.search(rf"\b{re.escape(mod)}\.{re.escape(name)}\b", text):
        return True
    for m in re.finditer(rf"from\s+(?:mad_study)?\.{re.escape(mod)}\s+import\s+(\([^)]*\)|[^\n]*)", text):
        if re.search(rf"\b{re.escape(name)}\b", m.group(1)):
            return True
    return bool(re.search(rf"setattr\([^,\n]+,\s*[\"']{re.escape(name)}[\"']", text))


def keep_reexports() -> int:
    "Mark the unused imports that are re-exports with `# noqa: F401`; returns how many."
    r = run(tool("ruff"), "check", "nbs", "--select", "F401", "--output-format", "json", check=False)
    found = json.loads(r.stdout or "[]")
    text, n = corpus(), 0
    by_nb: dict[str, list[dict]] = {}
    for d in found:
        by_nb.setdefault(d["filename"], []).append(d)
    for fn, ds in sorted(by_nb.items()):
        p = Path(fn)
        nb = load(p)
        mod, reexported, changed = module_of(nb), nb_all(nb), False
        for d in ds:
            cell = nb["cells"][d["cell"] - 1]
            lines = src(cell).split("\n")
            row, col, end = d["location"]["row"], d["location"]["column"], d["end_location"]
            span = lines[row - 1][col - 1 : end["column"] - 1] if end["row"] == row else ""
            name = span.split(" as ")[-1].strip().split(".")[0] if " as " in span else span.split(".")[-1]
            if not (name in reexported or (mod and used_elsewhere(mod, name, text))):
                continue
            i = d.get("noqa_row", row) - 1
            if "noqa" in lines[i]:
                continue
            lines[i] += "  # noqa: F401"
            cell["source"], changed, n = as_source("\n".join(lines)), True, n + 1
        if changed:
            save(p, nb)
    return n


def apply_patches() -> int:
    n = 0
    for name, old, new in PATCHES:
        p = NBS / name
        if not p.exists():
            continue
        nb, hit = load(p), False
        for c in nb["cells"]:
            s = src(c)
            t = old.sub(new, s) if isinstance(old, re.Pattern) else s.replace(old, new)
            if t != s:
                c["source"], hit = as_source(t), True
        if hit:
            save(p, nb)
            n += 1
    return n


def balanced_wrap(text: str, width: int) -> list[str]:
    "Wrap at spaces into as few lines as `width` allows, of about equal length (no one-word last line)."
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    for w in range(math.ceil(len(text) / len(lines)), width):
        even = textwrap.wrap(text, w, break_long_words=False, break_on_hyphens=False)
        if len(even) == len(lines):
            return even
    return lines


def wrap_comments() -> int:
    """Comments past column 100: a trailing comment moves onto its own line(s) above its code line, a comment line is
    wrapped at spaces (not `#|` directives, `noqa` / `type:` / `fmt:` pragmas, or a comment with no space to wrap at)."""
    n = 0
    for p in notebooks():
        nb, changed = load(p), False
        for c in nb["cells"]:
            if c["cell_type"] != "code":
                continue
            s = src(c)
            lines = s.split("\n")
            if not any(len(l) > 100 for l in lines):
                continue
            try:
                toks = list(tokenize.generate_tokens(io.StringIO(s).readline))
            except (tokenize.TokenError, SyntaxError, IndentationError):
                continue
            out = {}
            for t in toks:
                if t.type != tokenize.COMMENT:
                    continue
                r, col = t.start
                line = lines[r - 1]
                if len(line) <= 100 or re.search(r"noqa|type:|fmt:|^#\|", t.string):
                    continue
                code = line[:col].rstrip()
                indent = len(line) - len(line.lstrip())
                text = t.string.lstrip("#").strip()
                width = 100 - indent - 2
                if len(code) > 100 or " " not in text or width < 40:
                    continue
                wrapped = balanced_wrap(text, width)
                out[r] = [" " * indent + "# " + w for w in wrapped] + ([code] if code else [])
            if out:
                new = []
                for i, l in enumerate(lines, 1):
                    new += out.get(i, [l])
                c["source"], changed, n = as_source("\n".join(new)), True, n + len(out)
        if changed:
            save(p, nb)
    return n


# ---------------------------------------------------------------- splitting
def split_directives(lines: list[str]) -> tuple[list[str], list[str]]:
    i = 0
    while i < len(lines) and lines[i].startswith("#|"):
        i += 1
    return lines[:i], lines[i:]


def units(body: list[str]) -> list[tuple[int, int, bool, str]] | None:
    "Top-level statements of a cell body: (first line, end line, is a definition, kind); None if it does not parse."
    try:
        tree = ast.parse("\n".join(body))
    except SyntaxError:
        return None
    out, prev_end = [], 0
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        s = start
        while s > prev_end and (not body[s - 1].strip() or body[s - 1].lstrip().startswith("#")):
            s -= 1  # the comment lines (and blank lines) above a statement go with it
        while s < start and not body[s].strip():
            s += 1
        is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and IPYTHON_NAMES.fullmatch(n.id)]
        stores = {n.id for n in names if not isinstance(n.ctx, ast.Load)}
        loads = {n.id for n in names if isinstance(n.ctx, ast.Load)}
        out.append([s, node.end_lineno, is_def, type(node).__name__, stores, loads])
        prev_end = node.end_lineno
    if out:
        out[0][0] = 0  # lines above the first statement stay with it
        for a, b in zip(out, out[1:]):
            a[1] = b[0]  # blank lines between statements: trimmed later
        out[-1][1] = len(body)
    return [tuple(u) for u in out]


def group_definitions(us) -> list[list]:
    "Export cells: one group per definition; assignments just above a definition join it, other statements stay."
    defs = [i for i, u in enumerate(us) if u[2]]
    if len(defs) < 2:
        return [list(us)]
    starts = []
    for k, i in enumerate(defs):
        if k == 0:
            starts.append(0)
            continue
        j = i
        while j - 1 > defs[k - 1] and us[j - 1][3] in ("Assign", "AnnAssign"):
            j -= 1
        starts.append(j)
    return [list(us[a:b]) for a, b in zip(starts, starts[1:] + [len(us)])]


def size_split(group, nlines, limit, opens=lambda u: False) -> list[list]:
    "Cut a group of statements into pieces of about equal size, at most `limit` lines where statements allow."
    total = sum(nlines(u) for u in group)
    if total <= limit or len(group) < 2:
        return [group]
    target = total / math.ceil(total / limit)
    pieces, cur, size = [], [], 0
    for u in group:
        n = nlines(u)
        idea = opens(u)  # a comment line above a statement opens a new idea
        if cur and (size + n > limit or size >= target or (idea and size >= limit // 3)):
            pieces.append(cur)
            cur, size = [], 0
        cur.append(u)
        size += n
    pieces.append(cur)
    return pieces


def new_id(old: str, k: int, taken: set[str]) -> str:
    seed = f"{old}:{k}"
    while True:
        h = hashlib.sha1(seed.encode()).hexdigest()[:8]
        if h not in taken:
            taken.add(h)
            return h
        seed += "+"


def split_cell(c: dict) -> list[str] | None:
    "The sources of a code cell's pieces, or None to leave it whole."
    if c.get("metadata", {}).get("tags"):
        return None
    lines = src(c).split("\n")
    dirs, body = split_directives(lines)
    if any(re.match(rf"#\|\s*{d}\b", l) for l in dirs for d in NO_SPLIT_DIRECTIVES):
        return None
    if FIGURE.search("\n".join(body)) and not any(re.match(r"#\|\s*export", l) for l in dirs):
        return None  # a figure is built whole in one cell: split, the inline backend shows it half-drawn
    us = units(body)
    if not us or len(us) < 2:
        return None
    export = any(re.match(r"#\|\s*export", l) for l in dirs)

    def text(group):
        b = body[group[0][0] : group[-1][1]]
        while b and not b[0].strip():
            b.pop(0)
        while b and not b[-1].strip():
            b.pop()
        return b

    nlines = lambda u: len(text([u]))
    opens = lambda u: bool(text([u])) and text([u])[0].lstrip().startswith("#")
    groups = group_definitions(us) if export else [list(us)]
    pieces = [p for g in groups for p in size_split(g, nlines, MAX_PIECE if export else TEST_PIECE, opens)]
    k = 1
    while k < len(pieces):
        stored = {n for p in pieces[:k] for u in p for n in u[4]}
        if stored & {n for u in pieces[k] for n in u[5]}:
            pieces[k - 1 : k + 1] = [pieces[k - 1] + pieces[k]]
        else:
            k += 1
    if len(pieces) < 2:
        return None
    return ["\n".join(dirs + text(p)) for p in pieces]


def merge_repeated_ifs(text: str) -> str:
    "Top-level `if X:` blocks that follow one another with the same header become one block (a figure's pieces)."
    out, last_if = [], None
    for line in text.split("\n"):
        top = line[:1] not in (" ", "\t", "")
        head, _, note = line.partition("  #")
        if top and last_if is not None and head.rstrip() == last_if:
            while out and not out[-1].strip():
                out.pop()
            if note.strip():
                out.append("    #" + note.rstrip())
            continue
        if top:
            last_if = head.rstrip() if re.match(r"if .*:$", head.rstrip()) else None
        out.append(line)
    return "\n".join(out)


def join_figures() -> int:
    "Join each figure an earlier run split: from the cell that makes it to the next cell calling save_figure."
    joined = 0
    for p in notebooks():
        nb = load(p)
        cells, out, i = nb["cells"], [], 0
        while i < len(cells):
            c, s = cells[i], src(cells[i])
            chain = [c]
            if c["cell_type"] == "code" and FIGURE.search(s) and "save_figure(" not in s and not s.startswith("#|"):
                j = i + 1
                while j < len(cells) and cells[j]["cell_type"] == "code" and not src(cells[j]).startswith("#|"):
                    chain.append(cells[j])
                    if "save_figure(" in src(cells[j]):
                        break
                    j += 1
                if "save_figure(" not in src(chain[-1]) or len(chain) < 2:
                    chain = [c]
            if len(chain) > 1:
                d = dict(c)
                d["execution_count"], d["outputs"] = None, []
                d["source"] = as_source(merge_repeated_ifs("\n".join(src(x) for x in chain)))
                out.append(d)
                joined += len(chain) - 1
            else:
                out.append(c)
            i += len(chain)
        if len(out) != len(cells):
            nb["cells"] = out
            save(p, nb)
    return joined


def split_all() -> tuple[int, int]:
    before = after = 0
    for p in notebooks():
        nb = load(p)
        taken = {c.get("id") for c in nb["cells"]}
        cells, changed = [], False
        for c in nb["cells"]:
            pieces = split_cell(c) if c["cell_type"] == "code" else None
            if not pieces:
                cells.append(c)
                continue
            before, after, changed = before + 1, after + len(pieces), True
            for k, s in enumerate(pieces):
                d = dict(c)
                d["id"] = c["id"] if k == 0 else new_id(c["id"], k, taken)
                d["execution_count"], d["outputs"], d["metadata"] = None, [], dict(c.get("metadata", {}))
                d["source"] = as_source(s)
                cells.append(d)
        if changed:
            nb["cells"] = cells
            save(p, nb)
    return before, after


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-split", action="store_true", help="format and fix only")
    ap.add_argument("--metrics", action="store_true", help="print the metrics and stop")
    ap.add_argument("--join-figures", action="store_true", help="first join figure cells split earlier")
    a = ap.parse_args()
    m0 = metrics()
    show("before", m0)
    if a.metrics:
        return
    ruff = tool("ruff")
    if a.join_figures:
        print(f"figure cells joined: {join_figures()}")
        for p in notebooks():  # and the blocks of figure cells joined earlier
            nb = load(p)
            for c in nb["cells"]:
                if c["cell_type"] == "code" and FIGURE.search(src(c)) and not src(c).startswith("#|"):
                    c["source"] = as_source(merge_repeated_ifs(src(c)))
            save(p, nb)
    run(ruff, "format", "nbs")
    print(f"re-exports kept with `# noqa: F401`: {keep_reexports()}")
    print(f"notebooks patched (unused variables): {apply_patches()}")
    r = run(ruff, "check", "nbs", "--fix", "--exit-zero")
    print("ruff check --fix:", (r.stdout.strip().splitlines() or ["-"])[-1])
    moved = 0
    for _ in range(5):  # formatting can re-indent a moved comment past column 100 again
        n = wrap_comments()
        if n == 0:
            break
        moved += n
        run(ruff, "format", "nbs")
    print(f"comments past column 100 wrapped or moved: {moved}")
    if not a.no_split:
        b, n = split_all()
        print(f"split {b} code cells into {n}")
        run(ruff, "format", "nbs")
    run(tool("nbdev-clean"))
    run(tool("nbdev-export"))
    show("after", metrics())
    r = run(ruff, "check", "nbs", check=False)
    print("ruff check:", "clean" if r.returncode == 0 else "\n" + r.stdout)


if __name__ == "__main__":
    main()
