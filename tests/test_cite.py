"""Citing the kit (issue 29): the BibTeX file parses with a maintained parser, every exported function and protocol that
names a work has its key, `mad-study cite` on a finished sim run of each paper prints that paper, every sidecar lists
its reference keys, and nothing points readers to a file or site the repository lacks.

Two allow-lists below are explicit and temporary: docstrings and pointers in notebooks that other branches were
editing when this test was written (the lead applies the listed edits after merging, then empties the lists).
"""
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import bibtexparser
import pandas as pd
import pytest

from mad_study import cite

ROOT = Path(__file__).resolve().parents[1]

# exported name -> what its docstring must add (notebooks busy on other branches); remove an entry once applied
PENDING_DOCSTRINGS: dict[str, str] = {}        # exports whose docstring still owes a sentence (all applied)
# file -> pointers it may still hold (notebooks busy on other branches): replace with docs/reference_code.md,
# params/artefacts.yaml / figures/INDEX.md and the BibTeX key qiao2026umad, then remove the entry
PENDING_POINTERS: dict[str, tuple[str, ...]] = {}   # notebooks still pointing outside the repository (all fixed)
# files a reader is told to write (examples), not files the repository should have
EXAMPLE_PATHS = ("params/profiles/cluster.yaml", "nbs/my_study.ipynb", "params/my_study/my_exp.yaml")   # README: "Your own study"
# a docstring that names an equation, algorithm line, section, table, figure, appendix or prompt of a paper
SECTION = re.compile(r"\b(Eqs?|Alg|Algorithm|Apps?|Appendix|Secs?|Section|Tables?|Tab|Figs?|Figures?|Prompt)\b\.?\s*[A-Z0-9]")


def _public():
    "{module.Name: object} of every public exported function and class."
    out = {}
    for q, mod in sorted(cite._exported().items()):
        o = getattr(importlib.import_module(mod), q.split(".")[1], None)
        if o is not None: out[q] = o
    return out


def test_bibtex_parses_with_bibtexparser_and_agrees_with_the_kit_reader():
    text = cite.bib_path().read_text(encoding="utf-8")
    lib = bibtexparser.parse_string(text)
    assert not lib.failed_blocks, [type(b).__name__ + ": " + b.raw[:80] for b in lib.failed_blocks]
    ours = cite.references()
    assert sorted(e.key for e in lib.entries) == sorted(ours)
    norm = lambda s: " ".join(str(s).split())
    for e in lib.entries:
        assert e.entry_type.lower() == ours[e.key]["ENTRYTYPE"]
        for f in e.fields:
            assert norm(f.value) == ours[e.key][f.key.lower()], (e.key, f.key)
        assert {"title", "author", "year"} <= {f.key.lower() for f in e.fields}, e.key
        assert "doi" not in {f.key.lower() for f in e.fields}, f"{e.key}: a DOI nobody checked"
    for k in ("qiao2026umad", "zhang2025madc", "jiang2026svrmad", "wang2026rumad", "zhang2026metadebate"):
        assert k in ours                                            # the five papers


def test_every_registered_key_exists_and_every_registered_name_is_exported():
    keys = set(cite.references())
    used = {*cite.ALIASES.values(), *(k for v in cite.PAPER_REFS.values() for k in v),
            *(k for v in cite.MODULE_REFS.values() for k in v), *(k for v in cite.REFS.values() for k in v),
            *(k for v in cite.PROTOCOL_REFS.values() for k in v), *(k for v in cite.TASK_REFS.values() for k in v),
            *(k for _, v in cite.MODEL_REFS for k in v), *(k for d in cite.PARAM_REFS.values() for v in d.values() for k in v)}
    assert used - keys == set()
    exported = cite._exported()
    assert [n for n in cite.REFS if n not in exported] == []
    assert [f"{m}.{n}" for m, ns in cite.KIT_OWN.items() for n in ns if n != "*" and f"{m}.{n}" not in exported] == []
    assert [n for n in PENDING_DOCSTRINGS if n not in exported] == []


def test_every_work_a_docstring_names_has_its_key():
    missing = {}
    for q, o in _public().items():
        named = cite.named_refs(inspect.getdoc(o))
        if (lack := named - set(cite.refs_of(q)) - set(cite.MENTIONS.get(q, ()))): missing[q] = sorted(lack)
    assert missing == {}


def test_every_public_function_from_the_literature_names_it():
    "Each export names a work or a section/equation in its docstring, or is the kit's own machinery (KIT_OWN)."
    silent = [q for q, o in _public().items()
              if not cite.kit_own(q) and not cite.named_refs(d := inspect.getdoc(o) or "") and not SECTION.search(d)]
    assert sorted(set(silent) - set(PENDING_DOCSTRINGS)) == []
    stale = sorted(set(PENDING_DOCSTRINGS) - set(silent))
    assert stale == [], f"applied: remove from PENDING_DOCSTRINGS: {stale}"
    # whatever implements something from the literature cites more than the kit
    assert [q for q in _public() if not cite.kit_own(q) and not cite.refs_of(q)] == []


def test_every_protocol_class_and_name_has_keys():
    from mad_study.debate import ORDERINGS, Protocol
    from mad_study.protocols import BASELINES
    classes = {q for q, o in _public().items() if inspect.isclass(o) and issubclass(o, Protocol)}
    assert {"debate.FullyConnected", "protocols.GroupDebate", "madc.MADCPeers", "rumad.RumadController"} <= classes
    assert [q for q in classes if not cite.refs_of(q)] == []
    for name in ("fully_connected", *ORDERINGS, *BASELINES): assert cite.refs_of(name), name


def test_every_task_and_model_of_the_registries_is_covered():
    from mad_study.backends import MODELS
    from mad_study.data import TASKS
    assert [t for t in TASKS if not cite.task_refs(t)] == []
    uncited = [m for m in MODELS if not m.startswith(("sim", "tiny-random")) and not cite.model_refs(m)
               and not m.startswith(cite.MODEL_NO_PAPER)]
    assert uncited == []


def _cli(*args) -> tuple[int, str]:
    from mad_study.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf): rc = main(["cite", *args])
    return rc, buf.getvalue()


def test_cli_prints_bibtex_of_a_function_a_protocol_and_an_experiment(capsys):
    rc, out = _cli("mad_study.umad.uncertainty_decomposition", "groupdebate", "svr_tab1")
    assert rc == 0 and out.startswith("@software{madstudy")
    lib = bibtexparser.parse_string(out)
    keys = {e.key for e in lib.entries}
    assert {"madstudy", "qiao2026umad", "liu2024groupdebate", "jiang2026svrmad", "luong2025imo", "phan2026hle"} <= keys
    from mad_study.cli import main
    assert main(["cite", "not_a_thing"]) == 2 and "not_a_thing" in capsys.readouterr().err


PAPER_EXPERIMENT = {"baseline": "du_gsm8k", "madc": "madc_fig1", "umad": "umad_decomposition", "svr": "svr_main",
                    "meta_debate": "meta_tab1", "rumad": "rumad_derail"}


@pytest.mark.parametrize("paper", sorted(PAPER_EXPERIMENT))
def test_cite_a_built_sim_run_folder_of_each_paper(paper, tmp_path):
    "A run folder as `mad-study reproduce` leaves it (executed notebook with injected sim parameters, a transcript)."
    from mad_study.registry import experiments, load_profile
    from mad_study.params import merge_params
    exp = experiments()[PAPER_EXPERIMENT[paper]]
    p = merge_params(exp, load_profile("sim"))
    run = tmp_path / "sim" / exp.id; run.mkdir(parents=True)
    src = "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in p.items())
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "outputs": [], "source": src}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (run / exp.notebook.name).write_text(json.dumps(nb))
    pd.DataFrame({"model": ["sim-generic"], "task": ["gsm8k"]}).to_parquet(run / "t.parquet")
    rc, out = _cli(str(run), "--keys")
    keys = out.split()
    assert rc == 0 and keys[0] == "madstudy" and keys[1] == cite.PAPER_REFS[paper][0]
    assert "cobbe2021gsm8k" in keys                                   # read from the transcript


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    "One real sim run of one experiment per paper (about a minute on 2 cores), into scratch folders."
    d = tmp_path_factory.mktemp("cite_runs")
    env = {**os.environ, "MAD_STUDY_RUNS": str(d / "runs"), "MAD_STUDY_FIGURES": str(d / "figures")}
    r = subprocess.run([sys.executable, "-c", "import sys; from mad_study.cli import main; sys.exit(main())", "reproduce", *PAPER_EXPERIMENT.values(),
                        "--profile", "sim", "--jobs", "2"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return d


@pytest.mark.slow
@pytest.mark.parametrize("paper", sorted(PAPER_EXPERIMENT))
def test_cite_a_finished_sim_run_of_each_paper_and_its_sidecars(paper, sim_runs):
    run = sim_runs / "runs" / "sim" / PAPER_EXPERIMENT[paper]
    rc, out = _cli(str(run))
    keys = {e.key for e in bibtexparser.parse_string(out).entries}
    assert rc == 0 and {"madstudy", cite.PAPER_REFS[paper][0]} <= keys
    sidecars = [json.loads(f.read_text()) for f in (sim_runs / "figures" / paper).glob("*.json")]
    assert sidecars and all(s["references"][:2] == ["madstudy", cite.PAPER_REFS[paper][0]] for s in sidecars)
    assert all(set(s["references"]) <= set(cite.references()) for s in sidecars)


# ------------------------------------------------------------------ pointers readers cannot follow
BAD_POINTERS = [r"PEERS\.md", r"FIGURES\.md", r"papers/\w+\.txt", r"\.\./shared", r"shared/papers", r"github\.io",
                r"(?<![\w.])/(?:work|root)/"]       # this machine's folders (a test's made-up /home/me/... is fine)
_BACKTICKED = re.compile(r"`((?:nbs|docs|params|tests|mad_study|benchmarks|checkpoints)/[\w./-]*\w)`")
_MDLINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _texts(markdown_only: bool = False):
    """(repository path, text) of everything a reader meets: notebooks, the package's sources, README, docs, params;
    with `markdown_only`, the prose where a Markdown link can stand (Markdown files and notebooks' Markdown cells)."""
    files = [*sorted(ROOT.glob("nbs/**/*.ipynb")), *sorted(ROOT.glob("mad_study/*.py")), ROOT / "README.md",
             *sorted(ROOT.glob("docs/*.md")), *sorted(ROOT.glob("params/**/*.yaml")), ROOT / "CITATION.cff"]
    for f in files:
        rel = f.relative_to(ROOT).as_posix()
        if f.suffix == ".ipynb":
            cells = json.loads(f.read_text())["cells"]
            yield rel, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown" or not markdown_only)
        elif markdown_only and f.suffix != ".md": continue
        else:
            yield rel, f.read_text(encoding="utf-8")


def test_pointers_found_by_the_checker():
    "The checker itself: it finds each kind of bad pointer in a hand-made text."
    machine_path = "/" + "work/main/x"                              # built here so that no file holds one
    text = f"see PEERS.md, `nbs/99_nothing.ipynb`, [x](docs/none.md), papers/umad.txt and {machine_path} and Docs: https://a.github.io/b"
    assert _problems("x.md", text) == ["PEERS\\.md", "papers/\\w+\\.txt", "github\\.io", "(?<![\\w.])/(?:work|root)/",
                                      "missing nbs/99_nothing.ipynb", "missing docs/none.md"]


def _problems(rel: str, text: str, markdown: str | None = None) -> list[str]:
    out = [p for p in BAD_POINTERS if re.search(p, text)]
    for m in _BACKTICKED.findall(text):
        if not (ROOT / m).exists() and m not in EXAMPLE_PATHS: out.append(f"missing {m}")
    for m in _MDLINK.findall(text if markdown is None else markdown):
        if m.startswith(("http://", "https://", "mailto:")): continue
        if not ((ROOT / rel).parent / m).exists() and not (ROOT / m).exists(): out.append(f"missing {m}")
    return out


def test_no_pointer_to_a_file_or_site_the_repository_lacks():
    bad = {}
    prose = dict(_texts(markdown_only=True))
    for rel, text in _texts():
        for allowed in PENDING_POINTERS.get(rel, ()): text = text.replace(allowed, "")
        if (found := _problems(rel, text, prose.get(rel, ""))): bad[rel] = found
    assert bad == {}
    for rel, allowed in PENDING_POINTERS.items():                    # the allow-list shrinks as the lead applies it
        text = dict(_texts())[rel]
        assert [a for a in allowed if a not in text] == [], f"applied in {rel}: remove from PENDING_POINTERS"


def test_citation_cff_is_complete_and_matches_the_bibtex():
    import yaml
    d = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert d["cff-version"] == "1.2.0" and {"message", "title", "authors", "license", "version"} <= set(d)
    from mad_study import __version__
    assert d["version"] == __version__
    strip = lambda s: s.replace("{", "").replace("}", "")
    titles = {strip(e["title"]): e for e in cite.references().values()}
    for r in d["references"]:                                        # the five papers, as the BibTeX file has them
        e = titles[r["title"]]
        assert r["url"].endswith(e["eprint"]) and str(r["year"]) == e["year"]
        assert [a["family-names"] for a in r["authors"]] == [a.split(",")[0].strip() for a in e["author"].split(" and ")]


def test_citations_come_from_keys_not_docstring_words_and_served_runs_cite_what_ran():
    "Issue 41: a docstring's mention is not a citation; a served run's `quant` (the kit's setting) is not what ran."
    assert "zhang2025madc" not in cite.refs_of("compare.compare_methods")
    assert set(cite.MENTIONS) <= set(cite._exported())            # every mention belongs to an export
    for q, ks in cite.MENTIONS.items(): assert not set(ks) & set(cite.refs_of(q)), q
    meta = {"paper": "baseline", "params": {"backend": "openai", "quant": "nf4", "served_model": "/srv/m"},
            "models": {"qwen2.5-7b-instruct": "openai:..."}}
    assert "dettmers2023qlora" not in cite.provenance_refs(meta)
    meta["params"]["served_quant"] = "nf4"
    assert "dettmers2023qlora" in cite.provenance_refs(meta)
