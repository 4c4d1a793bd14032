"""The debate engine's speed work changes no result (issue 50): fixed sim debates through `run_debate` (several
protocols, the sparse ring and a stopping rule with reused rows, MADC's orderings, every history mode, greedy and
sampling) must give transcripts whose digest is the one the unchanged engine gave.

DIGESTS: the engine of commit dc1de10 (before the speed work) with the one-world sim of issue 50 gave these values, and
this checkout's faster engine prints the same. When the sim's random streams change on purpose, regenerate them with
`python tests/test_engine_speed.py` (it prints the dict to paste below) from a checkout whose engine is trusted."""
from __future__ import annotations

import hashlib
import warnings

import pytest

from mad_study.core import Sampling
from mad_study.debate import Agent, FullyConnected, OrderedPeers, make_protocol, run_debate
from mad_study.prompts import get_prompt
from mad_study.protocols import EarlyStop, GroupDebate, SparseTopology
from mad_study.sim import SimBackend, sim_items

# case -> sha256 (first 16 hex digits) of the transcript frame as CSV; from dc1de10's engine (see the docstring)
DIGESTS = {
    "du_full_sampling": "92d6ce6013423824",
    "random_last_greedy": "c7260fe363b1d540",
    "truth_last_none": "46c3730f3aff6270",
    "random_shared_madc": "1237572c56ece69d",
    "ring_earlystop_reused": "6953af03128c260b",
    "star_last_greedy": "4163accbbec3ca92",
    "groupdebate_views": "f9c147c907029245",
    # from commit 00f39b0 (the engine and sim the seven above were checked against), before this round of speed work
    "rumad_masked_tiers": "e2c3cad06e42fcf3",
    "sim_off_two_agents_five_rounds": "ab3f152640442890",
    "umad_math_last_four_rounds": "91d9c48142155cd9",
    "ring_six_one_round_off": "92e1368c476206cd",
}


def _agents(n: int, **params):
    backends = {f"sim-{i}": SimBackend(f"sim-{i}", skill=0.4 + 0.1 * i, **params) for i in range(n)}
    return [Agent(f"a{i}", f"sim-{i}") for i in range(n)], backends


class _MaskedTiers(FullyConnected):
    """RUMAD-style rounds without the trained controller: each agent speaks with P 0.7 (else its last row is reused)
    and each shown peer carries a tier tag, both drawn from the viewer's seeded generator."""
    name = "masked_tiers"

    def speaks(self, ctx, agent):
        return bool(ctx.viewer_rng(agent).random() < 0.7)

    def tags(self, ctx, agent, peers):
        r = ctx.viewer_rng(agent)
        return tuple(f"[{('Critical', 'Reference', 'Background')[int(r.integers(3))]}] " for _ in peers) or None


# the sim's controls and RUMAD's / UMAD's mechanisms, for the cases that switch them on or off
_RUMAD = dict(tier_trust=1.0, context_decay=0.3)
_UMAD = dict(debate_noise=0.2, context_entropy=0.5)


def _case(name: str):
    "The transcript of the fixed debate `name`."
    gsm, bbh = sim_items("gsm8k", 6), sim_items("bbh_logical_deduction_7", 4)
    hot, greedy = Sampling(temperature=1.0, seed=3), Sampling(temperature=0.0)
    gd = GroupDebate((2, 2))
    cases = {
        "du_full_sampling": (gsm, 3, None, dict(debate_rounds=2, samples=2, prompt="du_gsm8k", sampling=hot)),
        "random_last_greedy": (gsm, 3, OrderedPeers("random"), dict(debate_rounds=2, history="last", sampling=greedy)),
        "truth_last_none": (bbh, 4, make_protocol("truth_last"),
                            dict(debate_rounds=2, history="none", prompt="madc", sampling=hot)),
        "random_shared_madc": (bbh, 6, make_protocol("random_shared"),
                               dict(debate_rounds=3, samples=2, prompt="madc", sampling=hot)),
        "ring_earlystop_reused": (gsm, 5, EarlyStop(SparseTopology("ring"), min_agree=2),
                                  dict(debate_rounds=3, sampling=hot)),
        "star_last_greedy": (gsm, 4, SparseTopology("star"), dict(debate_rounds=1, history="last", sampling=greedy)),
        "groupdebate_views": (bbh, 4, gd, dict(debate_rounds=2, prompt=gd.prompt_for(get_prompt("auto", "option")),
                                               sampling=hot)),
    }
    # cases added with the sim's controls (their digests from commit 00f39b0's engine, before the round-level work)
    math = sim_items("math500", 5)
    cases |= {
        "rumad_masked_tiers": (gsm, 4, _MaskedTiers(), dict(debate_rounds=3, prompt="rumad_math", sampling=hot), _RUMAD),
        "sim_off_two_agents_five_rounds": (gsm, 2, None, dict(debate_rounds=5, sampling=greedy),
                                           dict(off=("conformity", "signals"))),
        "umad_math_last_four_rounds": (math, 3, OrderedPeers("random"),
                                       dict(debate_rounds=4, history="last", samples=2, sampling=hot), _UMAD),
        "ring_six_one_round_off": (bbh, 6, SparseTopology("ring"), dict(debate_rounds=1, prompt="madc", sampling=greedy),
                                   dict(off=("stubbornness",))),
    }
    items, n, protocol, kw, *params = cases[name]
    agents, backends = _agents(n, **(params[0] if params else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_debate(items, agents, backends, protocol=protocol, progress=False, **kw)


CASES = ("du_full_sampling", "random_last_greedy", "truth_last_none", "random_shared_madc", "ring_earlystop_reused",
         "star_last_greedy", "groupdebate_views", "rumad_masked_tiers", "sim_off_two_agents_five_rounds",
         "umad_math_last_four_rounds", "ring_six_one_round_off")


def digest(df) -> str:
    "sha256 of the frame as CSV (every column, dtypes as written), first 16 hex digits."
    return hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", CASES)
def test_transcript_unchanged(name):
    df = _case(name)
    assert len(df) > 0
    if name in ("ring_earlystop_reused", "rumad_masked_tiers"):
        assert df["reused"].any()  # the case exercises reused rows
    assert digest(df) == DIGESTS[name], f"{name}: the transcript changed (see the module docstring to regenerate)"


def _slow_extract(text, fmt):
    "The extractors' own answer, without the memo or the fast path (what `extract_answer` gave before them)."
    from mad_study.answers import MAX_CHARS
    from mad_study.extract import _EXTRACTORS
    s = text[-MAX_CHARS:].replace("\r\n", "\n").replace("\x00", "")
    if not s.strip():
        return None
    try:
        return _EXTRACTORS[fmt](s) or None
    except Exception:
        return None


@pytest.mark.parametrize("task", ["gsm8k", "math500", "bbh_logical_deduction_7", "bbh_geometric_shapes"])
def test_parser_fast_path_on_sim_texts(task):
    """Every text the sim writes for the task's items (each of the N_BODIES reasoning bodies of two lengths, the gold
    answer, a pool of wrong ones, no answer) reads as the extractors read it: the fast path changes no answer."""
    from mad_study.extract import _PLAIN_FINAL_RE, extract_answer
    from mad_study.sim import N_BODIES, compose_text, distractor_pool

    items = sim_items(task, 8)
    seen = fast = 0
    for it in items:
        for ans in [str(it.gold), *distractor_pool(it, 8), None]:
            for words in (40, 60):
                for j in range(N_BODIES):
                    text = compose_text(ans, it.fmt, words, (j + 0.5) / N_BODIES)
                    assert extract_answer(text, it.fmt) == _slow_extract(text, it.fmt), (task, text)
                    seen += 1
                    fast += _PLAIN_FINAL_RE.fullmatch(text) is not None
    # the sim's answers have the plain shape (its no-answer text has no final sentence), but for LaTeX with braces
    assert fast > 0
    if task != "math500":
        assert fast == seen - len(items) * 2 * N_BODIES


def test_parser_fast_path_on_corpus_and_transcripts():
    "The labelled corpus of model text and every text of the fixed debates read as the extractors read them."
    from mad_study.extract import extract_answer
    from mad_study.grading import load_answer_corpus

    for e in load_answer_corpus():
        assert extract_answer(e["text"], e["fmt"]) == _slow_extract(e["text"], e["fmt"]), e["text"][:200]
    for name in ("du_full_sampling", "random_shared_madc", "groupdebate_views"):
        df = _case(name)
        for text, fmt, ans in zip(df["text"], df["fmt"], df["answer"]):
            got = _slow_extract(text, fmt)
            assert (ans if isinstance(ans, str) else None) == got, (name, text)


if __name__ == "__main__":
    print("DIGESTS = {")
    for n in CASES:
        print(f"    {n!r}: {digest(_case(n))!r},")
    print("}")
