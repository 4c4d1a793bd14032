"""A room per layer and a room per paper (issue 49): move the notebooks, the papers' tests and printed tables into
folders, and rewrite every reference to them. Run from anywhere: `.venv/bin/python tools/relayout.py`.

The layout it makes is the table `ROOMS` below (room -> its notebooks in reading order, with the words a reader
finds beside each); the README's Layout section is written from it (`readme_layout`), so read either of those, not
a copy here. In short: a room per layer under nbs/ (core, data, backends, engine, sandbox, evaluation, study; a
notebook `ROOMS` does not name goes to `DEFAULT_ROOM`, study) and a room per paper, nbs/papers/<paper>/, with

    tests/papers/<paper>/                tests/test_<paper>*.py
    mad_study/fixtures/papers/<paper>/   the paper's printed tables, paper_<name>.csv (`loading.paper_table` finds them)

with params/<paper>/ and figures/<paper>/ as they were, so that a paper's key names one folder in each tree
(`find . -path '*/madc/*'`). Numeric prefixes stay: they keep the reading order inside a folder. The package
`mad_study` stays flat: its import paths, the experiment files and the cite registry name modules, not folders.

What it does, in order (each step prints what it did):
1. `git mv` every top-level `nbs/*.ipynb` into its room (a notebook `ROOMS` does not name goes to nbs/study/, with a
   message), `tests/test_<paper>*.py` into tests/papers/<paper>/, `mad_study/fixtures/paper_<key>_*.csv` into
   mad_study/fixtures/papers/<paper>/.
2. Rewrites the references in every tracked text file (not the generated `mad_study/*.py`, not this file): the mapping
   old -> new is built from the tree as it is, so a reference written later to an old path is rewritten by a rerun.
   Forms: `nbs/<stem>[.ipynb]`, `"nbs" / "<stem>.ipynb"`, `"nbs", "<stem>.ipynb"`, `tests/test_<x>.py`,
   `fixtures/paper_<x>.csv`; then `FIXUPS`, the few edits a pattern cannot make (each reported: applied, already
   there, or NOT FOUND for a person to check).
3. `[tool.nbdev] recursive = true` and the fixtures' sub-folders in the package data (pyproject.toml), the README's
   Layout section, then tools/tidy_notebooks.py (yapf, then `nbdev-clean` and `nbdev-export`).

A second run changes nothing. `--dry-run` prints the plan and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SELF = "tools/relayout.py"

# room -> [(notebook stem, what a reader finds there)], in reading order
ROOMS: dict[str, list[tuple[str, str]]] = {
    "core": [
        ("00_core", "core types and paths"),
        ("00b_cite", "citing"),
        ("01_answers", "answers"),
        ("01a_extract", "extraction"),
        ("01b_grading", "grading"),
        ("01c_equivalence", "equivalence classes"),
    ],
    "data": [
        ("02_data", "data: the benchmark registry"),
        ("02a_gold", "the gold check"),
        ("02b_registry", "registries: models, experiments, planners"),
        ("02c_lookalikes", "synthetic look-alike items"),
        ("02d_loading", "loading: fixtures, the hub, saved subsets"),
        ("02e_user_data", "your own questions and transcripts"),
    ],
    "backends": [
        ("03_backends", "the factory"),
        ("03a_interface", "interface"),
        ("03b_sim", "synthetic agents"),
        ("03c_serving", "serving"),
        ("03d_vision", "vision"),
        ("03e_twins", "architecture twins"),
        ("03f_checkpoints", "the kit's checkpoints"),
        ("03g_hf", "transformers + bitsandbytes"),
        ("03h_cache", "generation cache"),
    ],
    "engine": [
        ("02c_voting", "voting"),
        ("04_debate", "debate engine"),
        ("04a_prompts", "prompts"),
        ("04b_protocols", "efficient-debate protocols"),
        ("04c_roles", "role debates"),
        ("04e_role_sim", "role-skilled synthetic agents"),
    ],
    "sandbox": [("04d_sandbox", "the program-of-thought sandbox")],
    "evaluation": [
        ("05_metrics", "metrics"),
        ("05b_stats", "statistics"),
        ("05c_trajectory", "trajectory metrics"),
        ("05d_compare", "many methods against one: compare_methods and its caption"),
        ("05e_multiplicity", "many tests: corrections, family intervals, family_gaps"),
        ("05f_power", "power and sample sizes"),
    ],
    "study": [
        ("06_report", "report"),
        ("06a_figcheck", "the figure layout check"),
        ("15_arena", "the cross-method arena"),
        ("16_calibration", "the sim world's calibration: targets, fit, table"),
        ("20_params", "a run's parameters: profiles, merging, validation, planning"),
        ("20a_run_outputs", "a run's outputs: staging, promotion, failures"),
        ("20b_reproduce", "reproduce: running experiments"),
        ("20c_cli", "the command line"),
        ("20d_finished_runs", "finished runs: loading and comparing them"),
        ("21_doctor", "doctor"),
    ],
    "papers/baseline": [("09_baseline", "Du et al. 2024")],
    "papers/umad": [("10_umad", "UMAD"), ("10b_umad_train", "its training")],
    "papers/madc": [("11_madc", "MADC")],
    "papers/svr": [("12_svr_mad", "SVR-MAD")],
    "papers/rumad": [("13_rumad", "RUMAD")],
    "papers/meta_debate": [("14_meta_debate", "Meta-Debate")],
}
DEFAULT_ROOM = "study"
PAPERS = ("baseline", "umad", "madc", "svr", "rumad", "meta_debate")
# the key a printed table's file name starts with (paper_<key>_...) -> its paper
FIXTURE_KEYS = {
    "baseline": "baseline",
    "du": "baseline",
    "umad": "umad",
    "madc": "madc",
    "svr": "svr",
    "rumad": "rumad",
    "meta": "meta_debate",
    "meta_debate": "meta_debate",
}

# (file as it is after the move, old text, new text): what a pattern cannot rewrite
FIXUPS: list[tuple[str, str, str]] = [
    # kit_path's test writes a project's own copy of 00_core: its folder now has a room
    (
        "nbs/core/00_core.ipynb",
        'Path(d, "nbs").mkdir()',
        'Path(d, "nbs", "core").mkdir(parents=True)',
    ),
    (
        "nbs/core/00_core.ipynb",
        "nbdev-test starts notebooks in `nbs/`,",
        "nbdev-test starts a notebook in its folder under `nbs/`,",
    ),
    (
        "nbs/core/00_core.ipynb",
        "(nbdev-test runs this in nbs/)",
        "(nbdev-test runs this in nbs/core/)",
    ),
    # run_params finds a notebook anywhere under nbs/ when the kernel is not in its folder
    (
        "nbs/study/06_report.ipynb",
        '        path = kit_path(Path("nbs") / path.name)\n',
        '        nbs = kit_path("nbs")\n        path = next(iter(sorted(nbs.rglob(path.name))), nbs / path.name)\n',
    ),
    (
        "nbs/study/06_report.ipynb",
        "its notebook's folder), else in nbs/.",
        "its notebook's folder), else anywhere under nbs/ (its room: nbs/<layer>/ or nbs/papers/<paper>/).",
    ),
    (
        "nbs/study/20b_reproduce.ipynb",
        "# the kernel runs in the kit's nbs/:",
        "# the kernel runs in its notebook's folder:",
    ),
    # paper_table finds a printed table in its paper's folder, fixtures/papers/<paper>/
    (
        "nbs/data/02_data.ipynb",
        '    p = fixtures_dir() / f"paper_{name}.csv"\n    if not p.exists():\n',
        '    p = next(iter(sorted(fixtures_dir().rglob(f"paper_{name}.csv"))), None)\n    if p is None:\n',
    ),
    (
        "nbs/data/02_data.ipynb",
        'fixtures_dir().glob("paper_*.csv")',
        'fixtures_dir().rglob("paper_*.csv")',
    ),
    (
        "mad_study/fixtures/README.md",
        "## The papers' printed tables (`paper_<name>.csv`)",
        "## The papers' printed tables (`papers/<paper>/paper_<name>.csv`)",
    ),
    # the checks that walk the notebooks walk the rooms
    (
        "tests/test_layout.py",
        'for nb in sorted(nbs.glob("*.ipynb"))',
        'for nb in sorted(p for p in nbs.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)',
    ),
    ("tests/test_cite.py", 'ROOT.glob("nbs/*.ipynb")', 'ROOT.glob("nbs/**/*.ipynb")'),
    (
        "tools/tidy_notebooks.py",
        'sorted((ROOT / "nbs").glob("*.ipynb"))',
        'sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)',
    ),
    (
        "tests/test_env.py",
        "# the contents API lists the paper notebooks under nbs/ (",
        "# the contents API lists a paper's notebooks under nbs/papers/<paper>/ (",
    ),
    (
        "tests/test_env.py",
        '/api/contents/nbs?content=1"',
        '/api/contents/nbs/papers/umad?content=1"',
    ),
    (
        "tests/papers/umad/test_umad_train.py",
        "The evaluation of nbs/10b (umad_trained)",
        "The evaluation of 10b_umad_train (umad_trained)",
    ),
    ("pyproject.toml", "\nrecursive = false\n", "\nrecursive = true\n"),
    (
        "pyproject.toml",
        'mad_study = ["fixtures/*", "refs/*"]',
        'mad_study = ["fixtures/*", "fixtures/papers/*/*", "refs/*"]',
    ),
    (
        "pyproject.toml",
        "the notebooks (nbs/*.ipynb, the source of truth)",
        "the notebooks (nbs/**/*.ipynb, the source of truth)",
    ),
]

README_START, README_END = "<!-- layout: written by tools/relayout.py -->", "<!-- end of layout -->"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def tracked() -> list[str]:
    return [p for p in git("ls-files", "-z").split("\0") if p]


def stem_rooms() -> dict[str, str]:
    return {stem: room for room, nbs in ROOMS.items() for stem, _ in nbs}


def plan_moves(files: list[str]) -> list[tuple[str, str]]:
    "(old, new) of every file still in its old place; a message for a notebook the table does not name."
    rooms, moves = stem_rooms(), []
    for f in files:
        p = Path(f)
        if p.parent == Path("nbs") and p.suffix == ".ipynb":
            room = rooms.get(p.stem)
            if room is None:
                room = DEFAULT_ROOM
                print(
                    f"NEW NOTEBOOK {f}: tools/relayout.py's ROOMS does not name it; it goes to nbs/{room}/ "
                    f"(name its room in ROOMS and rerun: the script moves it there and rewrites its references)"
                )
            moves.append((f, f"nbs/{room}/{p.name}"))
        elif p.parent == Path("tests") and (
            m := re.match(rf"test_({'|'.join(PAPERS)})(?:_\w*)?\.py$", p.name)
        ):
            moves.append((f, f"tests/papers/{m.group(1)}/{p.name}"))
        elif p.parent == Path("mad_study/fixtures") and (
            m := re.match(r"paper_([a-z]+)_.*\.csv$", p.name)
        ):
            if (paper := FIXTURE_KEYS.get(m.group(1))) is None:
                print(
                    f"UNKNOWN PAPER KEY {f}: FIXTURE_KEYS has no {m.group(1)!r}; left where it is "
                    f"(paper_table finds it anywhere under fixtures/)"
                )
                continue
            moves.append((f, f"mad_study/fixtures/papers/{paper}/{p.name}"))
    known = {Path(f).stem for f in files if f.startswith("nbs/") and f.endswith(".ipynb")}
    for stem in stem_rooms():
        if stem not in known:
            print(
                f"MISSING NOTEBOOK {stem}.ipynb: ROOMS names it but the tree has no such notebook (renamed?)"
            )
    for f in files:
        if f.startswith("nbs/") and f.endswith(".ipynb") and f.count("/") > 1:
            room = rooms.get(Path(f).stem)
            if room is not None and Path(f).parent.as_posix() != f"nbs/{room}":
                print(f"TO ITS ROOM {f}: ROOMS puts it in nbs/{room}/")
                moves.append((f, f"nbs/{room}/{Path(f).name}"))
    return moves


def mapping(files: list[str]) -> dict[str, dict[str, str]]:
    "old -> new for every notebook, test and printed table that is in a room now (after the moves)."
    nbs, tests, fixtures = {}, {}, {}
    for f in files:
        p = Path(f)
        if f.startswith("nbs/") and p.suffix == ".ipynb" and len(p.parts) > 2:
            nbs[p.stem] = p.parent.as_posix()[len("nbs/") :]
        elif f.startswith("tests/papers/") and p.suffix == ".py":
            tests[p.stem] = p.parent.as_posix()
        elif f.startswith("mad_study/fixtures/papers/") and p.suffix == ".csv":
            fixtures[p.stem] = p.parent.as_posix()[len("mad_study/fixtures/") :]
    return {"nbs": nbs, "tests": tests, "fixtures": fixtures}


def alternation(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def rewriters(m: dict[str, dict[str, str]]):
    "(name, pattern, replacement function) of each reference form."
    out = []
    if m["nbs"]:
        stems = alternation(m["nbs"])
        room = lambda s: m["nbs"][s]
        # "nbs" / "10_umad.ipynb" and Path(d, "nbs", "10_umad.ipynb") -> "nbs/papers/umad/10_umad.ipynb"
        out.append(
            (
                "path join",
                re.compile(rf"""(["'])nbs\1(\s*/\s*|,\s*)\1({stems})\.ipynb\1"""),
                lambda x: f"{x[1]}nbs/{room(x[3])}/{x[3]}.ipynb{x[1]}",
            )
        )
        out.append(
            (
                "nbs/<stem>",
                # nbs/05b_stats, and nbs/<room>/05b_stats when the notebook has changed rooms since
                re.compile(rf"(?<![\w.-])nbs/(?:[a-z_]+/){{0,2}}({stems})(?![\w-])"),
                lambda x: f"nbs/{room(x[1])}/{x[1]}",
            )
        )
    if m["tests"]:
        out.append(
            (
                "tests/<file>",
                re.compile(rf"(?<![\w.-])tests/({alternation(m['tests'])})\.py"),
                lambda x: f"{m['tests'][x[1]]}/{x[1]}.py",
            )
        )
    if m["fixtures"]:
        out.append(
            (
                "fixtures/<table>",
                re.compile(rf"(?<![\w.-])fixtures/({alternation(m['fixtures'])})\.csv"),
                lambda x: f"fixtures/{m['fixtures'][x[1]]}/{x[1]}.csv",
            )
        )
        # the fixtures' README names its files from its own folder
        out.append(
            (
                "fixtures README",
                re.compile(rf"`({alternation(m['fixtures'])})\.csv`"),
                lambda x: f"`{m['fixtures'][x[1]]}/{x[1]}.csv`",
            )
        )
    out.append(
        (
            "generic fixture path",
            re.compile(r"fixtures/paper_<name>\.csv"),
            lambda x: "fixtures/papers/<paper>/paper_<name>.csv",
        )
    )
    return out


def rewrite_text(f: str, text: str, rules) -> tuple[str, int]:
    n = 0
    for name, pat, repl in rules:
        if name == "fixtures README" and f != "mad_study/fixtures/README.md":
            continue
        # count the references that change (a path already in its room is matched and left as it is)
        k = sum(repl(x) != x[0] for x in pat.finditer(text))
        if k:
            text = pat.sub(repl, text)
        n += k
    if f.startswith("tests/papers/"):
        # the repository's root is three folders up from tests/papers/<paper>/
        text, k = re.subn(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents)\[1\]", r"\1[3]", text)
        n += k
    return text, n


def notebook_sources(text: str):
    "The notebook's JSON and its cells' sources as strings (None when it does not parse)."
    try:
        nb = json.loads(text)
    except ValueError:
        return None, []
    return nb, ["".join(c.get("source", [])) for c in nb.get("cells", [])]


def edit_file(f: str, edit, src: str | None = None, write: bool = True) -> int:
    """Apply `edit(text) -> (text, n)` to a tracked file (to each cell's source of a notebook); write when it changed
    (`src`: where the file is now, when not at `f`; `write=False`: count only)."""
    path = ROOT / (src or f)
    try:
        raw = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return 0
    if "\0" in raw:
        return 0
    total = 0
    if f.endswith(".ipynb"):
        nb, sources = notebook_sources(raw)
        if nb is None:
            print(f"NOT A NOTEBOOK {f}: its JSON does not parse; left as it is")
            return 0
        for cell, src in zip(nb["cells"], sources):
            new, n = edit(src)
            if n and new != src:
                cell["source"] = new.splitlines(keepends=True)
                total += n
        if total and write:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        new, total = edit(raw)
        if total and new != raw:
            if write:
                path.write_text(new, encoding="utf-8")
        else:
            total = 0
    return total


def apply_fixups(dry: bool, before: dict[str, str]) -> list[str]:
    "Apply FIXUPS (`before`: a file's place before the moves, for a dry run); the files changed."
    changed = []
    for f, old, new in FIXUPS:
        path = ROOT / before.get(f, f)
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if f.endswith(".ipynb"):
            sources = notebook_sources(text)[1]
            has = lambda s: any(s in src for src in sources)
        else:
            has = lambda s: s in text
        if not path.exists():
            print(f"  FIXUP NOT FOUND {f}: no such file (check: {old!r})")
        elif has(new) and not has(old):
            print(f"  already there   {f}: {new.strip()[:70]!r}")
        elif has(old):
            if not dry:
                edit_file(f, lambda s: (s.replace(old, new), s.count(old)))
            print(f"  applied         {f}: {old.strip()[:50]!r} -> {new.strip()[:60]!r}")
            changed.append(f)
        else:
            print(f"  FIXUP NOT FOUND {f}: {old.strip()[:70]!r} (edited since? check it by hand)")
    return changed


def readme_layout() -> str:
    "The README's Layout block, from ROOMS."
    rows = []
    notebooks = lambda room: sorted(p for p in (ROOT / "nbs" / room).glob("*.ipynb"))
    for room, nbs in ROOMS.items():
        if room.startswith("papers/"):
            continue
        words = dict(nbs)
        # the notebooks a room holds now, with the words ROOMS gives (a newcomer by its name)
        items = [
            f"{p.stem.split('_')[0]} {words.get(p.stem, p.stem.split('_', 1)[-1])}"
            for p in notebooks(room)
        ]
        items = items or [f"{s.split('_')[0]} {w}" for s, w in nbs]
        rows.append((f"  {room}/", ", ".join(items)))
    papers = ", ".join(
        f"{r[len('papers/') :]} ({', '.join(s.split('_')[0] for s, _ in nbs)})"
        for r, nbs in ROOMS.items()
        if r.startswith("papers/")
    )
    rows.append(("  papers/<paper>/", papers))
    lines = [
        "nbs/          nbdev notebooks: the source of truth, a folder per layer and a folder per paper"
    ]
    for head, text in rows:
        words, line = text.split(" "), head.ljust(22)
        for w in words:
            if len(line) + len(w) > 118 and line.strip():
                lines.append(line.rstrip())
                line = " " * 22
            line += w + " "
        lines.append(line.rstrip())
    lines += [
        "mad_study/    the package, generated by nbdev-export (never edit by hand); flat: mad_study.<module>",
        "  fixtures/papers/<paper>/   the paper's printed tables (paper_<name>.csv, read by loading.paper_table)",
        "params/       experiment files params/<paper>/<experiment>.yaml, profiles params/profiles/*.yaml, and the",
        "              artefact registry params/artefacts.yaml",
        "figures/      regenerated figures (PNG + vector PDF) and tables per paper, figures/<paper>/ (+ INDEX.md,",
        "              GALLERY.md, a JSON sidecar per artefact with its provenance and caption, per-item results)",
        "tests/        pytest: end-to-end runs, backends, properties; a paper's own tests in tests/papers/<paper>/",
        "docs/         serving the models (serving.md); facts from the papers' released code (reference_code.md)",
        "benchmarks/   `make bench`: throughput, memory, cache and analysis speed",
        "tools/        tidy_notebooks.py (format, clean, export); relayout.py (made this layout)",
    ]
    prose = (
        "A paper's parts sit under its key (baseline, umad, madc, svr, rumad, meta_debate) in each tree: its notebooks\n"
        "in nbs/papers/<paper>/, its experiment files in params/<paper>/, its printed tables in\n"
        "mad_study/fixtures/papers/<paper>/, its tests in tests/papers/<paper>/, its figures in figures/<paper>/\n"
        "(`find . -path '*/madc/*'` lists MADC's). Inside a folder the numeric prefixes give the reading order. The\n"
        "package stays flat (`mad_study.madc`, `mad_study.stats`, ...): users' code, the experiment files and the cite\n"
        "registry name modules, not folders, and keep working; the folders of nbs/ show the architecture. A new\n"
        "notebook in nbs/ goes to nbs/study/ when `tools/relayout.py` runs, until its `ROOMS` table names its room.\n"
    )
    return f"{README_START}\n```\n" + "\n".join(lines) + f"\n```\n\n{prose}{README_END}\n"


def write_readme(dry: bool) -> bool:
    path = ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    block = readme_layout()
    if README_START in text and README_END in text:
        a, b = text.index(README_START), text.index(README_END) + len(README_END) + 1
        new = text[:a] + block + text[b:]
    else:
        m = re.search(r"## Layout\n\n```\n.*?\n```\n", text, re.S)
        if m is None:
            print(
                "README: no '## Layout' section with a code block; the layout is not written there"
            )
            return False
        new = text[: m.start()] + "## Layout\n\n" + block + text[m.end() :]
    if new == text:
        print("README: Layout section already up to date")
        return False
    if not dry:
        path.write_text(new, encoding="utf-8")
    print("README: Layout section written")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ap.add_argument(
        "--no-nbdev", action="store_true", help="skip tools/tidy_notebooks.py, nbdev-export and nbdev-clean"
    )
    a = ap.parse_args(argv)

    print("1. moves (git mv)")
    moves = plan_moves(tracked())
    for old, new in moves:
        print(f"  {old} -> {new}")
        if (ROOT / new).exists():
            print(f"STOP: {new} exists already; move or merge {old} by hand, then rerun")
            return 1
        if not a.dry_run:
            (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
            git("mv", old, new)
    if not moves:
        print("  nothing to move")

    files = tracked()
    if a.dry_run:
        # what the tree would be after the moves
        done = dict(moves)
        files = [done.get(f, f) for f in files]
    m = mapping(files)
    print("2. references: the mapping old -> new")
    for kind, prefix in (("nbs", "nbs/"), ("tests", "tests/"), ("fixtures", "fixtures/")):
        for stem, where in sorted(m[kind].items(), key=lambda kv: (kv[1], kv[0])):
            new = {
                "nbs": f"nbs/{where}/{stem}",
                "tests": f"{where}/{stem}",
                "fixtures": f"fixtures/{where}/{stem}",
            }
            print(f"  {prefix}{stem} -> {new[kind]}")
    rules = rewriters(m)
    changed, before = [], {n: o for o, n in moves}
    for f in files:
        src = ROOT / (before.get(f, f) if a.dry_run else f)
        if f == SELF or (f.startswith("mad_study/") and f.endswith(".py")) or not src.is_file():
            continue
        n = edit_file(
            f,
            lambda s, f=f: rewrite_text(f, s, rules),
            src=str(src.relative_to(ROOT)),
            write=not a.dry_run,
        )
        if n:
            print(f"  {f}: {n} reference{'s' * (n > 1)}")
            changed.append(f)
    if not changed:
        print("  no reference to rewrite")

    print("3. fixups (what a pattern cannot rewrite)")
    changed += apply_fixups(a.dry_run, {n: o for o, n in moves} if a.dry_run else {})
    write_readme(a.dry_run)

    if a.dry_run or a.no_nbdev:
        return 0
    nbs = sorted(
        {f for f in changed if f.endswith(".ipynb")} | {n for _, n in moves if n.endswith(".ipynb")}
    )
    run = lambda *c: subprocess.run(
        [str(BIN / c[0]) if (BIN / c[0]).exists() else c[0], *c[1:]], cwd=ROOT, check=True
    )
    if nbs:
        print(f"4. tools/tidy_notebooks.py ({len(nbs)} notebooks moved or rewritten)")
        run(sys.executable, str(ROOT / "tools" / "tidy_notebooks.py"))
    print("5. nbdev-export and nbdev-clean")
    run("nbdev-export")
    run("nbdev-clean")
    print(
        "done: review `git status`, then commit (notebooks, mad_study/ with _modidx.py, and the rest together)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
