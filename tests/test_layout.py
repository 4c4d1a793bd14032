"""The package's layout (issue 26): the static import graph of `mad_study/*.py` has no cycle and no paper module imports
the command line; the notebooks' code cells fit on a screen (none over 60 lines, at most 20 over 40).

The graph is read from the source (ast), not from `sys.modules`: imports inside functions count, and so does
`importlib.import_module("mad_study.x")` with a literal name, so a lazy import cannot hide a cycle.
"""
import ast
import json
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mad_study"
PAPERS = ("baseline", "umad", "umad_train", "madc", "svr_mad", "rumad", "meta_debate")   # modules of the paper notebooks
CLI = "reproduce"
MAX_LINES, LONG_LINES, MAX_LONG = 60, 40, 20      # no code cell over 60 lines; at most 20 over 40


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
    assert [p for p in papers if CLI in nx.descendants(g, p)] == []
    assert list(g.predecessors(CLI)) == []                  # the top floor: nothing imports the command line


def test_registries_and_backend_family_floors():
    g = import_graph()
    assert set(nx.descendants(g, "registry")) <= {"core"}            # below the papers, the CLI and the backends
    family = {"interface", "registry", "checkpoints", "hf", "cache", "serving", "vision", "twins", "sim"}
    assert family <= set(g.successors("backends")) | set(nx.descendants(g, "backends"))
    assert [m for m in family if "backends" in nx.descendants(g, m)] == []   # the factory sits on top of its family


def cell_lengths(nbs: Path = ROOT / "nbs") -> dict[str, list[int]]:
    "Notebook name -> the line count of each of its code cells."
    out = {}
    for nb in sorted(nbs.glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        out[nb.name] = [len("".join(c["source"]).splitlines()) for c in cells if c["cell_type"] == "code"]
    return out


def test_code_cells_fit_on_a_screen():
    lengths = cell_lengths()
    over60 = {nb: [n for n in ls if n > MAX_LINES] for nb, ls in lengths.items()}
    over40 = {nb: [n for n in ls if n > LONG_LINES] for nb, ls in lengths.items()}
    total = sum(map(len, lengths.values()))
    n60, n40 = sum(map(len, over60.values())), sum(map(len, over40.values()))
    print(f"{total} code cells: {n40} over {LONG_LINES} lines (limit {MAX_LONG}), {n60} over {MAX_LINES} (limit 0)")
    for nb in lengths:
        if over40[nb]: print(f"  {nb}: over {LONG_LINES}: {sorted(over40[nb], reverse=True)}")
    assert n60 == 0, {nb: v for nb, v in over60.items() if v}
    assert n40 <= MAX_LONG, f"{n40} code cells over {LONG_LINES} lines"


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
