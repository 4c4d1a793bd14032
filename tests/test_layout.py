"""The package's layout (issue 26): the static import graph of `mad_study/*.py` has no cycle and no paper module imports
the command line; the notebooks' code lines fit the width (packed by yapf at 100 columns, comments and docstring prose
re-filled there by tools/tidy_notebooks.py; at most 2% of code lines over 100 characters: long strings) and an export cell holds one definition. Cell sizes are printed, not targeted (issue 49: a median-size
target rewarded cutting a test from its set-up; a test cell is as long as its set-up, action and check).

The graph is read from the source (ast), not from `sys.modules`: imports inside functions count, and so does
`importlib.import_module("mad_study.x")` with a literal name, so a lazy import cannot hide a cycle.
"""
import ast
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mad_study"
PAPERS = ("baseline", "umad", "umad_train", "madc", "svr_mad", "rumad", "meta_debate")   # modules of the paper notebooks
CLI = "cli"
# issue 37: what a reader holds on a screen, measured over every code cell of nbs/*.ipynb
# yapf's column limit; tools/tidy_notebooks.py re-fills comments and docstring prose at it (2,518 lines over 100,
# 5.7%, fell to ~800, 1.8%), so what passes it is long strings (captions, f-strings, test texts) and docstring lists
# or tables: at most 2% of code lines.
WIDTH, MAX_WIDE_PCT = 100, 2.0
LONG, MAX_CELL_LINES, MAX_CELL_CHARS = 40, 125, 7000   # an export cell over 40 lines holds one definition; none past the caps


def _target(node: ast.AST, modules: set[str]) -> set[str]:
    "The package modules one import node (or `importlib.import_module('mad_study.x')` call) names."
    if isinstance(node, ast.ImportFrom):
        if node.level == 1 or node.module == "mad_study" or (node.module or "").startswith("mad_study."):
            base = (node.module or "").removeprefix("mad_study").lstrip(".")
            if base: return {base.split(".")[0]}
            return {a.name for a in node.names}                  # from . import x / from mad_study import x
        return set()
    if isinstance(node, ast.Import):
        return {a.name.split(".")[1] for a in node.names if a.name.startswith("mad_study.")}
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("mad_study.")):
        return {str(node.args[0].value).split(".")[1]}
    return set()


def import_graph(pkg: Path = PKG) -> nx.DiGraph:
    "Module -> the package modules it imports anywhere in its source (top level, inside functions, import_module)."
    modules = {p.stem for p in pkg.glob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for p in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            for m in _target(node, modules) & modules:
                if m != p.stem: g.add_edge(p.stem, m)
    return g


def test_the_graph_reader_sees_every_kind_of_import(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from mad_study.c import y\n")
    (tmp_path / "c.py").write_text("import importlib\ndef g(): return importlib.import_module('mad_study.a')\n")
    (tmp_path / "d.py").write_text("import mad_study.a\nfrom mad_study import b\nimport os\n")
    g = import_graph(tmp_path)
    assert set(g.edges) == {("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("d", "b")}
    assert nx.find_cycle(g)


def test_no_import_cycle_among_the_package_modules():
    g = import_graph()
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    print(f"{g.number_of_nodes()} modules, {g.number_of_edges()} imports")
    assert cycles == [], f"import cycles: {cycles}"


def test_no_paper_module_imports_the_command_line():
    g = import_graph()
    papers = [p for p in PAPERS if p in g]
    assert {"umad", "madc", "rumad", "svr_mad", "meta_debate"} <= set(papers)
    assert [p for p in papers if {CLI, "reproduce"} & nx.descendants(g, p)] == []   # nor what runs them
    assert list(g.predecessors(CLI)) == []                  # the top floor: nothing imports the command line


def test_registries_and_backend_family_floors():
    g = import_graph()
    assert set(nx.descendants(g, "registry")) <= {"core"}            # below the papers, the CLI and the backends
    family = {"interface", "registry", "checkpoints", "hf", "cache", "serving", "vision", "twins", "sim"}
    assert family <= set(g.successors("backends")) | set(nx.descendants(g, "backends"))
    assert [m for m in family if "backends" in nx.descendants(g, m)] == []   # the factory sits on top of its family


def code_cells(nbs: Path = ROOT / "nbs") -> list[tuple[str, dict, str]]:
    "(notebook name, cell, source) of every code cell of the notebooks."
    return [(nb.name, c, "".join(c["source"])) for nb in sorted(p for p in nbs.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            for c in json.loads(nb.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def statements(source: str) -> list[ast.stmt] | None:
    "A cell's top-level statements (None: it does not parse, e.g. IPython magics)."
    try: return ast.parse(source).body
    except SyntaxError: return None


def test_code_lines_fit_the_width():
    cells = code_cells()
    lines = [l for _, _, s in cells for l in s.splitlines()]
    wide = 100 * sum(len(l) > WIDTH for l in lines) / len(lines)
    median = statistics.median(len(s) for _, _, s in cells)
    print(f"{len(cells)} code cells, {len(lines)} lines: {wide:.1f}% over {WIDTH} characters, median {median} characters")
    assert wide <= MAX_WIDE_PCT, f"{wide:.1f}% of code lines are over {WIDTH} characters"


def test_a_long_export_cell_holds_one_definition():
    """Past 40 lines an export cell is one function, class, table or block (with the imports and constants above it),
    never a run of definitions that could each have their own cell; no cell is past the caps. Test and figure cells
    are not cut: a test keeps its set-up, action and check together, a figure is built whole (issue 49)."""
    several, huge, over60 = [], [], []
    for nb, c, s in cells_over(LONG):
        n, body = len(s.splitlines()), statements(s)
        if n > MAX_CELL_LINES or len(s) > MAX_CELL_CHARS: huge.append((nb, c["id"], n, len(s)))
        if n > 60: over60.append((nb, c["id"], n))
        if not s.startswith("#| export"): continue
        rest = [t for t in body or [] if not isinstance(t, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign))]
        if body is None or len(rest) > 1: several.append((nb, c["id"], n, [type(t).__name__ for t in rest]))
    huge += [(nb, c["id"], len(s.splitlines()), len(s)) for nb, c, s in code_cells() if len(s) > MAX_CELL_CHARS
             and len(s.splitlines()) <= LONG]
    for row in sorted(over60, key=lambda r: -r[2]): print("  over 60 lines:", *row)
    print(f"{len(over60)} code cells over 60 lines")
    assert several == [], f"export cells over {LONG} lines with several definitions (one definition per export cell)"
    assert huge == [], f"cells over {MAX_CELL_LINES} lines or {MAX_CELL_CHARS} characters"


def cells_over(n: int) -> list[tuple[str, dict, str]]:
    return [(nb, c, s) for nb, c, s in code_cells() if len(s.splitlines()) > n]


def ruff() -> str:
    exe = Path(sys.executable).parent / "ruff"
    if exe.exists(): return str(exe)
    if shutil.which("ruff"): return shutil.which("ruff")
    pytest.skip("ruff is not installed (the dev extra installs it)")


def test_ruff_check_passes_on_the_notebooks():
    "`ruff check nbs` (lint rules in pyproject.toml), as `make lint` runs it."
    r = subprocess.run([ruff(), "check", "nbs"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_notebooks_are_tidy():
    """Every code cell as tools/tidy_notebooks.py writes it (yapf's packing at 100 columns, no trailing comma that asks
    for one item a line, no hung comment), as `make lint` checks; the tool's own rules are tested below."""
    sys.path.insert(0, str(ROOT / "tools"))
    from tidy_notebooks import main
    assert main(["--check"]) == 0, "run tools/tidy_notebooks.py"


def test_tidy_packs_and_keeps_syntax():
    "The tidy rules on small cells: packed arguments, trailing commas gone where they are layout, kept where syntax."
    sys.path.insert(0, str(ROOT / "tools"))
    from tidy_notebooks import strip_trailing_commas, tidy_source
    one_a_line = "f(\n    a,\n    b,\n)\nx = [\n    1,\n    2,\n]\n"
    assert tidy_source(one_a_line) == "f(a, b)\nx = [1, 2]"
    # a one-element tuple and a subscript's tuple keep their comma: it is syntax
    kept = "t = (\n    1,\n)\nv = a[\n    i,\n]\n"
    assert strip_trailing_commas(kept) == kept
    # a comma before a comment stays (the comment explains the item); a magic cell is left alone
    assert strip_trailing_commas("f(\n    a,  # why\n)\n") == "f(\n    a,  # why\n)\n"
    assert tidy_source("%time f(\n  a,\n)") == "%time f(\n  a,\n)"


def test_no_private_name_imported_across_modules():
    "A helper another module needs is shared API: public, named for what it does (issue 37)."
    import ast
    bad = []
    for p in sorted((ROOT / "mad_study").glob("*.py")):
        if p.name == "_modidx.py": continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and ("mad_study" in node.module or node.level):
                bad += [f"{p.stem} <- {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def test_no_comment_hung_on_a_closing_bracket():
    """A comment explains the line below it, not a closing bracket: `)  # why` is what ruff leaves when a commented
    line is too long, and reads as a note on nothing (issue 49). tools/tidy_notebooks.py moves them."""
    sys.path.insert(0, str(ROOT / "tools"))
    from tidy_notebooks import hung_comments, unhang
    test_src = "x = f(\n    1\n)  # why\n"
    assert hung_comments(test_src) and unhang(test_src)[0] == "# why\nx = f(\n    1\n)\n"
    hung = [(nb, c["id"], line) for nb, c, s in code_cells() for line, *_ in hung_comments(s)]
    assert hung == [], f"{len(hung)} comments hung on a closing bracket (run tools/tidy_notebooks.py): {hung[:5]}"


def _measures():
    "tools/measure_notebooks.py: the definitions issue 49's table uses, for the kit's library notebooks."
    sys.path.insert(0, str(ROOT / "tools"))
    import measure_notebooks as m
    return m, m.kit_notebooks()


def test_few_test_cells_only_set_up():
    "At most 16% of test cells (nbdev's share) neither check nor show anything (issue 49)."
    m, nbs = _measures()
    bad, total = m.setup_only(nbs)
    print(f"set-up-only test cells: {bad}/{total} = {100 * bad / total:.1f}%")
    assert 100 * bad / total <= m.TARGETS["setup_only_pct"]


def test_export_cells_are_followed_by_their_test_or_usage():
    "At least 40% of export cells are directly followed by a test or usage cell (issue 49; nbdev 36%, fastcore 47%)."
    m, nbs = _measures()
    hits, total = m.export_then_use(nbs)
    print(f"export cells followed by a test or usage: {hits}/{total} = {100 * hits / total:.1f}%")
    assert 100 * hits / total >= m.TARGETS["export_then_use_pct"]


def test_measured_hung_comments_are_zero():
    "No comment hung on a closing bracket, as tools/measure_notebooks.py counts them (issue 49)."
    m, nbs = _measures()
    assert m.hung(nbs) == m.TARGETS["hung"]
