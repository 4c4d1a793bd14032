"""Tests of the benchmark registry (mad_study.data), the gold check and look-alikes (mad_study.lookalikes), fixtures,
subsets and hub loading (mad_study.loading) and one's own questions (mad_study.user_data)."""
import json
import math
import re
import warnings

import pytest

from mad_study import gold, loading, lookalikes, user_data
from mad_study.extract import extract_answer
from mad_study.grading import is_correct
from mad_study.core import ConfigError, Item
from mad_study.data import TASKS, format_question, get_task
from mad_study.lookalikes import SYNTHETIC_TAG
from mad_study.loading import (HubUnavailableError, SubsetSizeWarning, items_from_ids, load_items,
                               subset_path)

REAL = [t for t, s in TASKS.items() if s.redistributable]
SYNTH = [t for t, s in TASKS.items() if not s.redistributable]


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MAD_STUDY_RUNS", str(tmp_path / "runs"))
    yield tmp_path / "runs"


def test_registry_covers_the_study():
    assert set(TASKS) == {"gsm8k", "math500", "mmlu", "gpqa", "bbh_logical_deduction_7", "bbh_geometric_shapes",
                          "amc23", "aime24", "aime25", "imo_answerbench", "hle_mc", "math_train",
                          "mathvision", "mathvision_all", "realworldqa", "realworldqa_all"}
    assert set(REAL) == {"gsm8k", "math500", "mmlu", "bbh_logical_deduction_7", "bbh_geometric_shapes", "math_train"}
    for s in TASKS.values():
        assert s.hf_id and s.configs and s.split and s.fields and s.licence and s.papers and callable(s.convert)
        assert s.fmt in ("number", "boxed", "option", "exact")
        assert set(s.papers) <= {"rumad", "meta_debate", "umad", "madc", "svr_mad"}
    assert get_task("aime25").configs == ("AIME2025-I", "AIME2025-II")


@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_loads_from_fixtures(task):
    spec = TASKS[task]
    items = load_items(task)
    assert len(items) >= 30
    ids = [it.id for it in items]
    assert len(set(ids)) == len(ids)
    for it in items:
        free_form = it.fmt in ("number", "exact") and not it.choices and task.endswith("_all")   # mixed-format sets (vision)
        assert isinstance(it, Item) and it.task == task and (it.fmt == spec.fmt or free_form) and it.question.strip() and it.gold
        assert it.synthetic == (not spec.redistributable)
        if it.synthetic:
            assert it.question.startswith(SYNTHETIC_TAG) and re.fullmatch(rf"{task}/synthetic-\d+", it.id)
        else:
            assert it.id == f"{task}/{it.meta['index']}" and isinstance(it.meta["index"], int)
        assert format_question(it).strip()
    if spec.redistributable:
        idx = [it.meta["index"] for it in items]
        assert idx == sorted(idx) and all(0 <= i < spec.n_items for i in idx)


@pytest.mark.parametrize("task", list(TASKS))
def test_golds_extract_and_grade(task):
    "Every fixture gold survives extraction from a typical response in its own format, and grades as correct."
    for it in load_items(task):
        g, fmt = it.gold, it.fmt                                    # an item's own format (mixed-format sets differ per item)
        assert is_correct(g, g, fmt), (it.id, g)
        responses = {"number": [f"So the answer is \\boxed{{{g}}}.", f"#### {g}", f"The answer is {g}."],
                     "boxed": [f"Therefore the answer is $\\boxed{{{g}}}$.", f"\\boxed{{{g}}}"],
                     "option": [f"The answer is ({g}).", f"Answer: {g}", f"\\boxed{{{g}}}"],
                     "exact": [f"Answer: {g}"]}[fmt]
        for r in responses:
            e = extract_answer(r, fmt)
            assert e is not None and is_correct(e, g, fmt), (it.id, r, e)
        if fmt == "number": assert extract_answer(f"\\boxed{{{g}}}", fmt) == g
        if fmt == "option":
            assert re.fullmatch("[A-K]", g)
            if it.choices: assert ord(g) - 65 < len(it.choices)
            else: assert f"({g})" in it.question or f"{g}. " in it.question


def test_real_fixture_contents():
    gsm = {it.id: it for it in load_items("gsm8k")}
    assert {"-10", "-3", "1450000"} <= {it.gold for it in gsm.values()}           # signs kept, commas removed
    assert all("####" in it.meta["solution"] for it in gsm.values())
    math = load_items("math500")
    assert len({it.meta["subject"] for it in math}) == 7 and {it.meta["level"] for it in math} == {1, 2, 3, 4, 5}
    assert all(it.meta["unique_id"].startswith("test/") for it in math)
    mm = load_items("mmlu")
    assert len(mm) == 60 and len({it.meta["subject"] for it in mm}) >= 10 and all(len(it.choices) == 4 for it in mm)
    dev = load_items("mmlu:dev")
    assert len(dev) == 30 and all(it.id.startswith("mmlu/dev-") for it in dev)
    assert {it.gold for it in load_items("bbh_geometric_shapes")} >= {"K"}            # 11 options, (A)-(K)


def test_madc_case_questions_are_in_the_fixture():
    "MADC (AAAI 2026) prints CASE-54, CASE-66 and CASE-94: BBH logical_deduction_seven_objects test rows 53, 65, 93."
    ld = {it.id: it for it in load_items("bbh_logical_deduction_7")}
    cases = {53: ("In an antique car show, there are seven vehicles", "The tractor is the third-oldest.", "D"),
             65: ("A fruit stand sells seven fruits", "The watermelons are the second-most expensive.", "G"),
             94 - 1: ("On a shelf, there are seven books", "The black book is the second from the left.", "G")}
    for i, (start, clue, gold) in cases.items():
        it = ld[f"bbh_logical_deduction_7/{i}"]
        assert start in it.question and clue in it.question and it.gold == gold


def test_du_style_options():
    it = load_items("mmlu")[0]
    a, b, c, d = it.choices
    assert format_question(it) == f"{it.question.strip()}: A) {a.strip()}, B) {b.strip()}, C) {c.strip()}, D) {d.strip()}"
    bbh = load_items("bbh_logical_deduction_7")[0]
    assert format_question(bbh) == bbh.question.strip() and "Options:" in bbh.question


def test_subsets_are_deterministic_nested_and_saved(_runs):
    a = load_items("math500", n=12, seed=3)
    b = load_items("math500", n=12, seed=3)
    c = load_items("math500", n=12, seed=4)
    assert [x.id for x in a] == [x.id for x in b] and [x.id for x in a] != [x.id for x in c]
    assert len(a) == 12 and [x.meta["index"] for x in a] == sorted(x.meta["index"] for x in a)
    assert {x.id for x in load_items("math500", n=6, seed=3)} <= {x.id for x in a}
    p = subset_path("math500", "fixture", 12, 3)
    assert p == _runs / "subsets" / "math500-fixture-n12-s3.json"
    rec = json.loads(p.read_text())
    assert rec["ids"] == [x.id for x in a] and rec["n_available"] == 60 and rec["seed"] == 3
    assert items_from_ids(rec["ids"]) == a
    load_items("mmlu:dev", n=5)
    assert (_runs / "subsets" / "mmlu.dev-fixture-n5-s0.json").exists()
    load_items("gpqa")
    assert json.loads((_runs / "subsets" / "gpqa-fixture-nall-s0.json").read_text())["synthetic"] is True


def test_subset_does_not_depend_on_global_random_state():
    import random
    import numpy as np
    random.seed(1); np.random.seed(1)
    a = [x.id for x in load_items("gsm8k", n=7, seed=11)]
    random.seed(2); np.random.seed(2)
    assert a == [x.id for x in load_items("gsm8k", n=7, seed=11)]


def test_too_many_requested_warns_and_returns_all():
    with pytest.warns(SubsetSizeWarning, match=r"only 60 items; n=500 was requested.*source='hub'"):
        assert len(load_items("gsm8k", n=500)) == 60
    with pytest.warns(SubsetSizeWarning, match="only 30 items"):
        assert len(load_items("aime24", n=31)) == 30


def test_bad_arguments_give_one_clear_config_error():
    with pytest.raises(ConfigError) as e:
        load_items("gsm9k")
    msg = str(e.value)
    assert "\n" not in msg and "gsm9k" in msg and "gsm8k" in msg and "mmlu" in msg
    for kw, bad in [("source", "web"), ("n", -1), ("n", "10"), ("split", "train")]:
        with pytest.raises(ConfigError, match=re.escape(f"{kw}={bad!r}")):
            load_items("gsm8k", **{kw: bad})


@pytest.mark.parametrize("task", ["gsm8k", "gpqa", "imo_answerbench"])
def test_hub_offline_fails_clearly(task, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError) as e:
        load_items(task, n=5, source="hub")
    msg = str(e.value)
    assert "\n" not in msg and TASKS[task].hf_id in msg and "source='fixture' works offline" in msg
    assert "could not reach" in msg or "gated" in msg


def test_hub_rows_go_through_the_same_converters(monkeypatch):
    "The hub path (faked here: offline) builds the same Items: HLE filter, AIME 2025 configs, GPQA shuffle."
    fake = {
        "hle_mc": [{"question": "Q0\nAnswer Choices:\nA. x\nB. y", "answer": "B", "answer_type": "multipleChoice", "image": "", "category": "Physics"},
                   {"question": "Q1", "answer": "B", "answer_type": "multipleChoice", "image": "data:image/png", "category": "Physics"},
                   {"question": "Q2", "answer": "7", "answer_type": "exactMatch", "image": "", "category": "Physics"},
                   {"question": "Q3", "answer": "A", "answer_type": "multipleChoice", "image": "", "category": "Math"},
                   {"question": "Q4\nAnswer Choices:\nA. x\nB. y", "answer": "A", "answer_type": "multipleChoice", "image": "", "category": "Chemistry"}],
        "aime25": [{"question": f"P{i}", "answer": str(100 + i)} for i in range(3)],
        "gpqa": [{"Question": "Which?", "Correct Answer": "right", "Incorrect Answer 1": "w1", "Incorrect Answer 2": "w2",
                  "Incorrect Answer 3": "w3"}] * 8,
        "gsm8k": [{"question": "How many?", "answer": "2 + 2 = <<2+2=4>>4\n#### 1,234"}],
    }
    class FakeDatasets:
        @staticmethod
        def load_dataset(hf_id, config, split):
            task = next(t for t, s in TASKS.items() if s.hf_id == hf_id)
            return fake[task] if config == TASKS[task].configs[0] or task != "aime25" else fake[task][:2]
    import sys
    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    hle = load_items("hle_mc", source="hub")
    assert [it.id for it in hle] == ["hle_mc/0", "hle_mc/4"] and [it.gold for it in hle] == ["B", "A"]
    aime = load_items("aime25", source="hub")
    assert [it.id for it in aime] == [f"aime25/{i}" for i in range(5)]
    assert [it.meta["config"] for it in aime] == ["AIME2025-I"] * 3 + ["AIME2025-II"] * 2 and aime[3].gold == "100"
    gp = load_items("gpqa", source="hub")
    assert all(it.choices[ord(it.gold) - 65] == "right" for it in gp)
    assert len({it.gold for it in gp}) > 1                                          # shuffled per item
    assert [it.choices for it in gp] == [it.choices for it in load_items("gpqa", source="hub")]
    assert load_items("gsm8k", source="hub")[0].gold == "1234"


def _revcomp(s): return s.translate(str.maketrans("ACGT", "TGCA"))[::-1]

def test_synthetic_answers_are_computed_correctly():
    "Recompute the gold of synthetic items from their question text, independently of the generator."
    checked = 0
    for it in load_items("hle_mc"):
        opts = dict(re.findall(r"^([A-E])\. (.+)$", it.question, re.M))
        if m := re.search(r"5'-([ACGT]+)-3'", it.question):
            assert opts[it.gold] == _revcomp(m.group(1)); checked += 1
        elif m := re.search(r"from 0 to (\d+) inclusive", it.question):
            assert int(opts[it.gold]) == int(m.group(1)).bit_length(); checked += 1
        elif m := re.search(r"anagram of the word '(\w+)'", it.question):
            assert sorted(opts[it.gold]) == sorted(m.group(1)) and opts[it.gold] != m.group(1); checked += 1
    for task in ("aime24", "aime25", "amc23"):
        for it in load_items(task):
            assert 0 <= int(it.gold) <= 999
            if m := re.search(r"remainder when \$(\d+)\^\{(\d+)\}\$ is divided by \$1000\$", it.question):
                assert int(it.gold) == pow(int(m.group(1)), int(m.group(2)), 1000); checked += 1
            elif m := re.search(r"divisors does \$(\d+)\$", it.question):
                n = int(m.group(1))
                assert int(it.gold) == sum(1 + (d * d != n) for d in range(1, math.isqrt(n) + 1) if n % d == 0); checked += 1
    for it in load_items("gpqa"):
        if m := re.search(r"accelerates uniformly at (\d+) m/s\^2 for (\d+) s", it.question):
            a, t = map(int, m.groups()); assert float(it.choices[ord(it.gold) - 65].split()[0]) == pytest.approx(a * t * t / 2, rel=1e-2)
            checked += 1
    assert checked >= 40
    assert len({it.gold for it in load_items("gpqa")}) == 4 and len({it.gold for it in load_items("hle_mc")}) == 5


def test_synthetic_items_are_stable():
    a = lookalikes.synthetic_items("imo_answerbench", n=10)
    b = lookalikes.synthetic_items("imo_answerbench")[:10]
    assert a == b
    assert {it.meta["category"] for it in lookalikes.synthetic_items("imo_answerbench")} == {"Algebra", "Geometry", "Number theory", "Combinatorics"}


# ------------------------------------------------------------------ gold answers checked; one's own questions
def test_every_fixture_gold_fits_its_format():
    "Every shipped fixture (real and synthetic) passes the gold check unchanged: the rule is not loosened for them."
    for t in TASKS:
        items = load_items(t, save=False)
        assert gold.check_items(items) == items, t


def test_bad_golds_are_one_line_each():
    items = [Item("my/0", "my", "Spider legs?", "eight", "number"),
             Item("my/1", "my", "Which?", "E", "option", choices=("w", "x", "y", "z")),
             Item("my/2", "my", "Capital of France?", "(b)", "option", choices=("Rome", "Paris")),
             Item("my/3", "my", "BBH?\nOptions:\n(A) x\n(B) y", "(C)", "option")]
    with pytest.raises(gold.BadItemsError) as e:
        gold.check_items(items, where="mine")
    lines = str(e.value).splitlines()
    assert lines == ["mine: item my/0: gold='eight': not a number (mad_study.answers.parse_number finds none) (fmt number)",
                     "mine: item my/1: gold='E': option E but the item has 4 options (A-D) (fmt option)",
                     "mine: item my/3: gold='(C)': option C but the item has 2 options (A-B) (fmt option)"]
    assert gold.check_items(items[2:3])[0].gold == "B"


def test_load_items_file_csv_and_jsonl(tmp_path):
    p = tmp_path / "quiz.csv"
    p.write_text('qid,problem,options,target\nq1,Capital of Italy?,"[""Rome"", ""Paris""]",a\nq2,2 + 2?,3|4|5,(B)\n')
    items = user_data.load_items_file(p, "option")
    assert [(i.id, i.gold, i.choices) for i in items] == [("quiz/q1", "A", ("Rome", "Paris")), ("quiz/q2", "B", ("3", "4", "5"))]
    assert format_question(items[1]) == "2 + 2?: A) 3, B) 4, C) 5"
    j = tmp_path / "nums.jsonl"
    j.write_text(json.dumps({"question": "1 + 1?", "answer": 2, "level": 1}) + "\n\n" + json.dumps({"question": "half?", "answer": "1/2"}) + "\n")
    got = user_data.load_items_file(j, "number", task="arith")
    assert [(i.id, i.gold, i.meta.get("level")) for i in got] == [("arith/1", "2", 1), ("arith/3", "1/2", None)]
    named = user_data.load_items_file(p, "exact", columns={"question": "problem", "gold": "qid"})
    assert [i.gold for i in named] == ["q1", "q2"]


def test_load_items_file_errors_name_file_row_column(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": "eight"}) + "\n" + json.dumps({"question": "q2", "answer": None}) + "\n")
    with pytest.raises(gold.BadItemsError) as e:
        user_data.load_items_file(p, "number")
    assert str(e.value).splitlines() == [
        f"{p}: line 1: column 'answer': item bad/1: value 'eight': not a number (mad_study.answers.parse_number finds none) (fmt number)",
        f"{p}: line 2: column 'answer': item bad/2: value None: no gold answer (fmt number)"]
    d = tmp_path / "dup.csv"
    d.write_text("id,question,answer\n1,a,1\n1,b,2\n")
    with pytest.raises(gold.BadItemsError, match=r"dup.csv: row 2: column 'id': id 'dup/1' repeats row 1"):
        user_data.load_items_file(d, "number")
    (tmp_path / "broken.jsonl").write_text('{"question": "q", "answer": 1}\n{"question": \n')
    with pytest.raises(ConfigError, match=r"broken.jsonl: line 2: bad JSON"):
        user_data.load_items_file(tmp_path / "broken.jsonl", "number")
    (tmp_path / "opts.csv").write_text("question,choices,answer\nq,only one,A\n")
    with pytest.raises(ConfigError, match=r"opts.csv: row 1: column 'choices'.*at least two"):
        user_data.load_items_file(tmp_path / "opts.csv", "option")
    (tmp_path / "x.txt").write_text("q")
    with pytest.raises(ConfigError, match="not a .csv or .jsonl file"):
        user_data.load_items_file(tmp_path / "x.txt", "number")


def test_readme_your_own_questions_runs_as_written(tmp_path, monkeypatch):
    "The README's 'Your own questions' example, run in a scratch folder."
    from conftest import ROOT
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("### Your own questions", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    env: dict = {}
    exec(compile(block, "README.md", "exec"), env)
    assert [(i.id, i.gold, i.choices) for i in env["items"]] == [("capitals/1", "B", ("Rome", "Paris", "Oslo")),
                                                                 ("capitals/2", "C", ("Rome", "Paris", "Oslo"))]


def test_hub_item_with_a_bad_gold_is_left_out_with_one_line(monkeypatch):
    "A hub row whose gold does not fit its format is left out of the split, one warning line naming it (never graded wrong)."
    rows = [(0, "main", {"question": "q0", "answer": "so #### 4"}), (1, "main", {"question": "q1", "answer": "so #### eight"})]
    monkeypatch.setattr(loading, "_hub_rows", lambda spec, split: rows)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        items = load_items("gsm8k", source="hub", save=False)
    assert [i.id for i in items] == ["gsm8k/0"]
    msg = [str(x.message) for x in w if "left out" in str(x.message)]
    assert len(msg) == 1 and msg[0].splitlines()[1].startswith("item gsm8k/1: gold='eight'"), msg
