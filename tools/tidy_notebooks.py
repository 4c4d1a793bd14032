#!/usr/bin/env python3
"""Tidy the notebooks without cutting them (issue 49): format, move hung comments, clean and export.

Run from anywhere with the project's venv:  `.venv/bin/python tools/tidy_notebooks.py`. Deterministic; a second run
changes nothing. It never splits or joins a cell: a test keeps its set-up, action and check in one cell, a figure is
built whole, and where a cell is cut is the writer's decision, not a formatter's.

Each code cell (cells with IPython magics or shell lines are left as they are):
1. A trailing comma before a closing bracket on a later line goes (`strip_trailing_commas`; a one-element tuple keeps
   its comma): it is what keeps a formatter writing one item a line (issue 49: a third of the notebooks' lines).
2. yapf packs the code at 100 columns ([tool.yapf] in pyproject.toml): arguments, items and parameters fill a line
   before the next one starts, as nbdev's and fastcore's notebooks are written; ruff (black's style) would put every
   argument of a call that does not fit on its own line.
3. A comment hung on a closing bracket (`)  # why`) moves above the line that opens that bracket, at its
   indentation; yapf then packs again.
4. A comment paragraph with a line past the 100th column is re-filled at its indentation (`wrap_comments`), a
   comment after code moved above its line first (comments above the line they explain); list items and deeper
   indented lines start paragraphs of their own. Tool
   directives (`#|`, `# noqa`, ...) stay where they are.
5. A docstring paragraph with a line past the 100th column is re-filled at its indentation (`wrap_docstrings`);
   paragraphs that hold a list, a table, an example or deeper-indented lines are left as written. Other long strings
   (captions, f-strings) are the writer's to split.
Then `nbdev-clean` and `nbdev-export`. `--check` changes nothing and exits 1 naming the cells it would change (what
`make lint` and tests/test_layout.py run). `ruff check nbs` (lint) is separate and unchanged.
`hung_comments(source)` is what tests/test_layout.py uses to check that no cell holds one.
"""
import io
import json
import keyword
import re
import subprocess
import sys
import textwrap
import tokenize
import tomllib
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


_LIST_ITEM = re.compile(r"^(?:[-*+]\s|\d+[.)]\s|\s)")


def wrap_comments(src: str, width: int = 100) -> str:
    """The source with every comment paragraph that passes column `width` re-filled at its indentation. A comment
    after code that passes it moves above its line first (its own paragraph). A paragraph is a run of whole-line
    comments at one indentation, broken by a bare `#`, a list item (`# - `, `# 1. `), a deeper-indented line or a
    moved comment; directives (`#|`, `KEEP`) are never touched. Unchanged when the cell does not tokenize."""
    toks = _tokens(src)
    if toks is None:
        return src
    lines = src.split("\n")
    own = lambda t: t.startswith("# ") and not t.startswith(("#|", "# |", *KEEP))
    starts = set()
    # 1. a long line's comment after code moves above the line, as a paragraph of its own
    for t in sorted((t for t in toks if t.type == tokenize.COMMENT), key=lambda t: -t.start[0]):
        row, col = t.start
        line = lines[row - 1]
        before = line[:col].rstrip()
        if len(line) <= width or not before.strip() or not own(t.string):
            continue
        indent = len(line) - len(line.lstrip())
        lines[row - 1:row] = [" " * indent + t.string.rstrip(), before]
        starts = {r + 1 if r >= row - 1 else r for r in starts} | {row - 1}
    # 2. paragraphs of whole-line comments, re-filled where a line passes the width
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not (line.lstrip().startswith("# ") and own(line.lstrip())):
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        para = [line]
        j = i + 1
        while (j < len(lines) and j not in starts and lines[j].startswith(" " * indent + "# ")
               and len(lines[j]) - len(lines[j].lstrip()) == indent and own(lines[j].lstrip())
               and not _LIST_ITEM.match(lines[j].lstrip()[2:])):
            para.append(lines[j])
            j += 1
        if any(len(l) > width for l in para):
            words = " ".join(l.strip()[2:].strip() for l in para)
            room = max(width - indent - 2, 40)
            para = [" " * indent + "# " + w for w in textwrap.wrap(words, room, break_long_words=False,
                                                                  break_on_hyphens=False)]
        out += para
        i = j
    return "\n".join(out)


_NOT_PROSE = ("-", "*", ">>>", "|", "+", "```")


def _prose(line: str, indent: int) -> bool:
    "A docstring line that may be re-filled: at the paragraph's indentation, no list item, table, example or `\\`."
    body = line[indent:]
    return (line[:indent].strip() == "" and body.strip() != "" and not body.startswith((" ", "\t"))
            and not body.lstrip('rRbBuU"\'').startswith(_NOT_PROSE) and not line.rstrip().endswith("\\")
            and not (body[:1].isdigit() and body.split(" ", 1)[0].rstrip(".)").isdigit()))


def wrap_docstrings(src: str, width: int = 100) -> str:
    """The source with every docstring paragraph that passes column `width` re-filled at its indentation (the
    words and their order unchanged); a paragraph that is not plain prose (`_prose`) is left. Unchanged when the
    cell does not parse."""
    import ast
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src
    lines = src.split("\n")
    docs = [n.body[0] for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
            and isinstance(n.body[0].value.value, str)]
    for d in sorted(docs, key=lambda d: -d.lineno):
        first = lines[d.lineno - 1]
        indent = len(first) - len(first.lstrip())
        one = first.strip()
        # a one-line "docstring" past the width becomes a triple-quoted one, then is filled as below
        if (d.lineno == d.end_lineno and len(first) > width and len(one) > 2 and one[0] == one[-1] == '"'
                and one[1:2] != '"' and '"""' not in one and not one[-2:-1] in ('"', "\\")):
            first = lines[d.lineno - 1] = " " * indent + '""' + one + '""'
        if not first.lstrip().lstrip("rRuU").startswith(('"""', "'''")):
            continue
        rows = list(range(d.lineno - 1, d.end_lineno))
        # paragraphs: runs of non-blank lines
        paras, cur = [], []
        for r in rows:
            if lines[r].strip() in ("", '"""', "'''"):
                if cur:
                    paras.append(cur)
                cur = []
            else:
                cur.append(r)
        if cur:
            paras.append(cur)
        for para in reversed(paras):
            if not any(len(lines[r]) > width for r in para) or not all(_prose(lines[r], indent) for r in para):
                continue
            words = " ".join(lines[r].strip() for r in para).split()
            filled = textwrap.wrap(" ".join(words), width - indent, break_long_words=False,
                                   break_on_hyphens=False)
            lines[para[0]:para[-1] + 1] = [" " * indent + w for w in filled]
    return "\n".join(lines)


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


def _bracket_groups(toks: list[tokenize.TokenInfo]) -> dict[int, tuple[int, int]]:
    "{index of an opening bracket token: (index of its closing token, top-level commas inside)}"
    stack, groups = [], {}
    for i, t in enumerate(toks):
        if t.type == tokenize.OP and t.string in OPEN:
            stack.append([i, 0])
        elif t.type == tokenize.OP and t.string in CLOSE and stack:
            o, n = stack.pop()
            groups[o] = (i, n)
        elif t.type == tokenize.OP and t.string == "," and stack:
            stack[-1][1] += 1
    return groups


def strip_trailing_commas(src: str) -> str:
    """`src` without the trailing commas that precede a closing bracket on a later line (`f(\n  a,\n  b,\n)`), which
    make a formatter keep one item a line. Kept: a comma followed by a comment, and the comma of a one-element tuple
    (`(x,)`, a subscript `a[x,]`), where it is syntax, not layout."""
    toks = _tokens(src)
    if toks is None:
        return src
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    drop = []
    for o, (c, n) in _bracket_groups(toks).items():
        j = c - 1
        while j > o and toks[j].type in skip:
            j -= 1
        if toks[j].type != tokenize.OP or toks[j].string != "," or toks[j].start[0] == toks[c].start[0]:
            continue
        prev = toks[o - 1] if o else None
        called = prev is not None and (prev.type == tokenize.NAME and not keyword.iskeyword(prev.string)
                                       or prev.string in (")", "]"))
        if n == 1 and (toks[o].string == "(" and not called or toks[o].string == "[" and called):
            continue
        drop.append(toks[j].start)
    lines = src.split("\n")
    for row, col in sorted(drop, reverse=True):
        lines[row - 1] = lines[row - 1][:col] + lines[row - 1][col + 1:]
    return "\n".join(lines)


def yapf_style() -> dict:
    "yapf's settings: [tool.yapf] in pyproject.toml (one place for the layout rule)."
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["yapf"]


def formattable(src: str) -> bool:
    "A cell yapf can read: Python without IPython magics or shell lines."
    return _tokens(src) is not None and not any(l.lstrip().startswith(("%", "!")) for l in src.splitlines())


def tidy_source(src: str, style: dict | None = None) -> str:
    "One code cell tidied: trailing commas, packed by yapf, hung comments moved, packed again (until it is stable)."
    if not formattable(src):
        return src
    from yapf.yapflib.yapf_api import FormatCode
    style = style or yapf_style()
    out = src
    for _ in range(4):
        new = FormatCode(unhang(strip_trailing_commas(out))[0], style_config=style)[0].rstrip("\n")
        new = wrap_docstrings(wrap_comments(new, style.get("column_limit", 100)), style.get("column_limit", 100))
        if new == out:
            break
        out = new
    return out


def notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def tidy_notebook(path: Path, check: bool = False, style: dict | None = None) -> list[str]:
    "Tidy every code cell of one notebook (or, with `check`, only say which cells would change): their ids."
    nb, changed = json.loads(path.read_text(encoding="utf-8")), []
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        old = "".join(c["source"])
        new = tidy_source(old, style)
        if new != old:
            changed.append(c.get("id", "?"))
            c["source"] = new.splitlines(keepends=True)
    if changed and not check:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    style = yapf_style()
    changed = {str(p.relative_to(ROOT)): ids for p in notebooks() if (ids := tidy_notebook(p, check, style))}
    if check:
        for nb, ids in changed.items():
            print(f"{nb}: {len(ids)} cells would be reformatted (run tools/tidy_notebooks.py): {ids[:5]}")
        return 1 if changed else 0
    print(f"reformatted {sum(map(len, changed.values()))} cells in {len(changed)} notebooks")
    run = lambda *a: subprocess.run([str(BIN / a[0]), *a[1:]], cwd=ROOT, check=True)
    run("nbdev-clean")
    run("nbdev-export")
    return 0


if __name__ == "__main__":
    sys.exit(main())
