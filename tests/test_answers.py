"Property tests for answer extraction and grading (mad_study.answers, .extract, .grading, .equivalence)."
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mad_study.answers import canonical_number, parse_number
from mad_study.extract import extract_answer
from mad_study.grading import is_correct
from mad_study.equivalence import answers_equivalent, merge_equivalent, parse_failure_rate
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
    from mad_study.grading import corpus_agreement, load_answer_corpus
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
    from mad_study.extract import extract_answer
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


# --- issue 55: the last answer-reading gaps, each with hidden variants of its own -------------------------------

@pytest.mark.parametrize("text,expected", [
    ("Therefore, they used a total of 273 yards", "273"),
    ("Therefore, they used a total of 273 yards.", "273"),
    ("So the answer is 273.", "273"),
    ("Adding the two rolls: 200 + 73 = 273.", "273"),
    ("Final answer: 273", "273"),
    ("**Final Answer:** 273", "273"),
    ("In total, they used 273 yards of fabric. I hope this helps!", "273"),
    ("Thus the length is $273$ yards.", "273"),
    ("They bought two rolls, so altogether 273 yards were used", "273"),
    ("The total is 273", "273"),
    ("Hence, the result is $\\frac{3}{4}$.", "0.75"),
    ("Solving for x we find x = 2\\sqrt{3}.", "2\\sqrt{3}"),
])
def test_boxed_falls_back_to_a_stated_answer(text, expected):
    got = extract_answer(text, "boxed")
    assert got is not None and is_correct(got, expected, "boxed"), (text, got)


@pytest.mark.parametrize("text,expected", [
    ("Therefore 5 + 7 = 12, but the answer is \\boxed{13}.", "13"),
    ("\\boxed{\\frac{1}{2}} Therefore, they used a total of 273 yards", "\\frac{1}{2}"),
    ("The answer is 42. In total there were 17 steps", "42"),
])
def test_a_box_or_statement_still_wins_over_the_concluding_sentence(text, expected):
    assert extract_answer(text, "boxed") == expected


@pytest.mark.parametrize("text", [
    "The train left at 5 pm", "Agent 2 says it is 14, so they used a total of 14 yards",
    "Therefore, the product is 40πi", "We multiply 16 by 3 and then subtract the",
])
def test_no_concluding_answer(text):
    assert extract_answer(text, "boxed") in (None, "40πi")


@pytest.mark.parametrize("expr", [
    "40πi", "40\\pi i", "8!/(2!)^4", "7x+5", "7x + 5", "2\\sqrt{3}", "\\sqrt{2}", "n^2 + 1", "4n+1", "5!",
    "10 \\cdot 3", "3 \\times 10^{5}", "2^{10}", "18 - 3", "3x", "12i", "6\\pi",
])
def test_an_expression_is_no_number_answer(expr):
    bare = str(parse_number(expr, last=False))
    for text in (f"The answer is {expr}.", f"\\boxed{{{expr}}}", f"#### {expr}", f"So we get y = {expr}"):
        assert extract_answer(text, "number") is None, text
    # a grader handed the expression never reads it as one of its numbers
    assert not is_correct(expr, bare, "number"), (expr, bare)
    assert not answers_equivalent(expr, bare, "number")


@pytest.mark.parametrize("text,expected", [
    ("The answer is $40.", "40"), ("The answer is 40 dollars.", "40"), ("The answer is 40%.", "40"),
    ("\\boxed{\\$18.90}", "18.9"), ("\\boxed{1,200}", "1200"), ("The answer is 90^\\circ.", "90"),
    ("\\boxed{x = 5}", "5"), ("\\boxed{2^{10} = 1024}", "1024"), ("**Final Answer: 10**", "10"),
    ("The answer is -7 degrees.", "-7"), ("\\boxed{12 \\text{ cm}^2}", "12"), ("The answer is \\frac{3}{4}.", "0.75"),
    ("She finishes 10th.", "10"), ("The answer is 5 km", "5"),
])
def test_plain_numbers_with_units_are_still_numbers(text, expected):
    assert extract_answer(text, "number") == expected


LOOPS = [
    "So the number of bags is 2 x 60 = 120 and the total is 2 x 120 = 240. " * 4,
    "Let me think again about the eggs.\n" * 5 + "She had 16",
    "we still need to find the number of apples in the basket " * 5 + "4",
    "".join(f"Step {i}: we add 3 to the running total and carry on with the next term\n" for i in range(3)) * 2,
]
TRUNCATED = [
    "She sells 16 - 3 - 4 = 9 eggs a day. Then we multiply 9 by 2 and subtract the cost of the",
    "First, 16 - 3 = 13 eggs remain, and then 13 eggs are sold at 2 dollars each to",
    "Janet has 16 eggs. She eats three of them for breakfast and then she bakes muffins with",
    "The robe needs 2 bolts of blue fiber. Now we need to figure out how much white fiber is needed,",
    "We get 48 / 6 = 8 groups.\nNext we add the remaining students from the second class which",
]


@pytest.mark.parametrize("text", LOOPS + TRUNCATED)
def test_a_text_that_states_no_answer_is_unparsed(text):
    assert extract_answer(text, "number") is None, text[-60:]
    assert extract_answer(text, "boxed") is None, text[-60:]


@pytest.mark.parametrize("text", LOOPS + TRUNCATED)
def test_a_stated_answer_in_such_a_text_is_still_read(text):
    assert extract_answer("The answer is \\boxed{42}.\n" + text, "number") == "42"
    assert extract_answer(text + "\n#### 42", "number") == "42"


@pytest.mark.parametrize("text,expected", [
    ("Therefore, they used a total of 273 yards", "273"), ("18 apples", "18"), ("So she makes 9 * 2 = 18", "18"),
    ("She sells 9 eggs at $2 each, so she makes $18 every day.", "18"),
    ("She has 5 apples and 3 pears", "3"), ("1 + 1 = 2\n2 + 2 = 4\n4 + 4 = 8", "8"),
])
def test_concluded_texts_keep_their_last_number(text, expected):
    assert extract_answer(text, "number") == expected
