"Property tests for answer extraction and grading (mad_study.answers)."
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mad_study.answers import (answers_equivalent, canonical_number, extract_answer, is_correct,
                               merge_equivalent, parse_failure_rate, parse_number)
from mad_study.core import ANSWER_FORMATS

FMTS = st.sampled_from(ANSWER_FORMATS)
TOKENS = list("{}()[]$\\#*_-+,./:0123456789ABCDEabcxyz \n") + [
    "\\boxed{", "\\boxed", "\\fbox{", "\\frac{", "####", "The answer is ", "Answer:", "(A)", "B)", "**", "\\text{",
    "−", "%", "1,234"]
LATEXY = st.lists(st.sampled_from(TOKENS), max_size=80).map("".join)
ANY_INPUT = st.one_of(st.none(), st.text(max_size=500), LATEXY, st.binary(max_size=200), st.integers(),
                      st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.lists(st.integers(), max_size=3))
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(ANY_INPUT, FMTS)
def test_extract_never_raises(text, fmt):
    a = extract_answer(text, fmt)
    assert a is None or (isinstance(a, str) and a.strip() == a and a != "")


@FAST
@given(LATEXY, FMTS)
def test_extraction_is_a_fixed_point_for_options_and_numbers(text, fmt):
    "Extracting again from an extracted number or letter gives it back (canonical forms are stable)."
    a = extract_answer(text, fmt)
    if a is not None and fmt in ("number", "option"):
        assert extract_answer(a, fmt) == a


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=50)), FMTS)
def test_none_is_never_correct(gold, fmt):
    assert is_correct(None, gold, fmt) is False
    assert answers_equivalent(None, gold, fmt) is False


@FAST
@given(st.integers(min_value=-10**12, max_value=10**12), st.sampled_from(["", "So the total is ", "Step 1: 3+4=7.\n"]))
def test_integer_round_trips(n, prefix):
    assert extract_answer(f"{prefix}... \\boxed{{{n}}}", "number") == str(n)
    assert extract_answer(f"{prefix}The answer is {n}.", "number") == str(n)
    assert extract_answer(f"{prefix}\n#### {n:,}", "number") == str(n)          # thousands separators
    assert extract_answer(f"{prefix}... \\boxed{{{n}}}", "boxed") == str(n)
    assert is_correct(extract_answer(f"{prefix}\\boxed{{{n}}}", "boxed"), str(n), "boxed")
    assert is_correct(extract_answer(f"{prefix}\\boxed{{{n}}}", "number"), f"{n:,}", "number")


@FAST
@given(st.integers(min_value=-10**6, max_value=10**6), st.integers(min_value=1, max_value=999))
def test_fraction_round_trips(p, q):
    v = Fraction(p, q)
    a = extract_answer(f"so the value is \\boxed{{\\frac{{{p}}}{{{q}}}}}", "number")
    assert a == canonical_number(v)
    assert is_correct(a, f"{p}/{q}", "number")
    if v.denominator in (1, 2, 4, 5, 8, 10, 20, 25):
        assert parse_number(a) == v                                               # terminating: exact


@FAST
@given(st.sampled_from(list("ABCDEFGHIJK")), st.sampled_from(
    ["The answer is ({L}).", "Answer: {L}", "**Answer:** ({L})", "Thus \\boxed{{{L}}}", "... so ({L})",
     "Restating: A) 1, B) 2, C) 3, D) 4.\nMy answer is ({L})", "Options:\n(A) x\n(B) y\n(C) z\nThe answer is {L}."]))
def test_option_round_trips(letter, template):
    text = template.format(L=letter)
    assert extract_answer(text, "option") == letter
    assert is_correct(extract_answer(text, "option"), letter, "option")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-50, 50).map(str),
                          st.sampled_from(["0.5", "\\frac{1}{2}", "1/2", "\\dfrac12", "2.0", "-3"])), max_size=8),
       st.randoms())
def test_merge_is_order_invariant_and_idempotent(answers, rnd):
    merged = merge_equivalent(answers, "boxed")
    assert len(merged) == len(answers)
    assert [m is None for m in merged] == [a is None for a in answers]
    shuffled = list(range(len(answers))); rnd.shuffle(shuffled)
    merged2 = merge_equivalent([answers[i] for i in shuffled], "boxed")
    assert [merged[i] for i in shuffled] == merged2
    assert merge_equivalent(merged, "boxed") == merged
    for a, m in zip(answers, merged):
        if a is not None: assert answers_equivalent(a, m, "boxed")


def test_known_pitfalls():
    # Du et al.: unparsable GSM8K answers counted correct; minus signs dropped
    assert is_correct(extract_answer("I don't know.", "number"), "7", "number") is False
    assert extract_answer("The change is \\boxed{-7}", "number") == "-7"
    assert not is_correct("7", "-7", "number")
    # an option list in a restated question is not an answer
    assert extract_answer("Question: 2+2? A) 3, B) 4, C) 5, D) 6", "option") is None
    assert parse_failure_rate([None, "1", None, "B"]) == 0.5


@pytest.mark.parametrize("gold,pred,ok", [
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", True), ("3\\sqrt{13}", "\\sqrt{117}", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True), ("\\text{Evelyn}", "Evenly", False),
    ("p - q", "p-q", True), ("\\frac{14}{3}", "4.67", False), ("-50", "-50.0", True), ("10", "-10", False)])
def test_math_verify_grading(gold, pred, ok):
    assert is_correct(pred, gold, "boxed") is ok


def test_math_verify_in_a_thread():
    "math-verify's signal-based timeout fails outside the main thread; we must still grade there."
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as ex:
        res = list(ex.map(lambda p: is_correct(p, "\\frac{\\sqrt{2}}{2}", "boxed"), ["\\sqrt{2}/2", "\\sqrt{3}/2"]))
    assert res == [True, False]


def test_labelled_corpus_agrees_or_is_documented():
    "Issue 35: the labelled corpus of model text; every disagreement is a documented ambiguous entry."
    from mad_study.answers import corpus_agreement, load_answer_corpus
    corpus = load_answer_corpus()
    assert len(corpus) >= 300
    assert {e["source"] for e in corpus} == {"smollm2", "written"}
    assert {e["fmt"] for e in corpus} >= {"option", "number", "boxed", "exact"}
    rows = corpus_agreement(corpus)
    bad = [(e["fmt"], e["text"][:80], e["expected"], e["got"]) for e in rows if not e["agrees"] and not e["ambiguous"]]
    assert bad == []
    assert sum(e["ambiguous"] for e in rows) <= 10          # ambiguity is the exception, each one explained
    assert all(e["reason"] for e in rows)


def test_debate_distractors_hidden_variants():
    "Issue 35: explicit answers with rejected / attributed options and numbers before and after, other wordings."
    from mad_study.answers import extract_answer
    cases = [
        ("Agent 3 went with (C) and agent 1 with (A); having checked both, my final answer is (B), not (C).", "option", "B"),
        ("Not (A). Not (C) either. I'd choose (D).", "option", "D"),
        ("MY ANSWER REMAINS (C), whatever agent 2 says about (A).", "option", "C"),
        ("Final answer: **(A)** — agent 2's (D) misreads the graph.", "option", "A"),
        ("Agent 1 found 350 and agent 2 found 300; I find 325, not 350.", "number", "325"),
        ("My final answer is 7, not 9 as agent 2 suggested.", "number", "7"),
        (r"The answer is \$4.50, not \$5.", "boxed", r"\$4.50"),
        (r"Each ticket costs \$12, so the answer is \$36.", "number", "36"),
    ]
    for text, fmt, want in cases:
        assert extract_answer(text, fmt) == want, (text, extract_answer(text, fmt))


def test_verdict_hidden_variants_never_run_code(tmp_path):
    "Issue 35: single-quoted, mixed-quote and code-valued moderator dicts; code never runs."
    from mad_study.core import Item
    from mad_study.roles import parse_verdict
    item = Item("mmlu/0", "mmlu", "q", "B", "option", choices=("1", "2", "3", "4"))
    ok = parse_verdict("Verdict:\n{'Whether there is a preference': 'Yes', \"Supported Side\": 'Negative', "
                       "'Reason': \"The negative side's count is right\", 'debate_answer': '(B)'}", item)
    assert (ok.status, ok.answer, ok.side, ok.preference) == ("ok", "B", "Negative", True)
    flag = tmp_path / "ran"
    for code in [f"__import__('os').system('touch {flag}')", f"open('{flag}', 'w').write('x')",
                 "breakpoint()", "(lambda: 1)()", "{**globals()}"]:
        v = parse_verdict("{'Whether there is a preference': 'Yes', 'debate_answer': " + code + "}", item)
        assert v.status == "malformed"
    assert not flag.exists()
