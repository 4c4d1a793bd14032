"""The two release options checked against independent references (issue 55).

Each reference below is written in this file from the facts recorded in docs/reference_code.md (the releases'
behaviour, in the kit's words), not from the releases' code (which may not be copied):

- MADC (SG-XM/AAAI2026-MADC): "viewpoint entropy and log-likelihood drop unparsed answers (denominator = parsed
  agents; all unparsed = one "(None)" outcome)"; entropy is Shannon entropy in bits of the agents' answers; the
  "log-likelihood" is log2 of the fraction of agents that are correct.
- UMAD (qiaodan-cuhk/UMAD, veRL): "the NLL weight W = exp(-alpha * z) standardises with the population standard
  deviation and eps 1e-8; an empty response gets NLL 0 (so the largest W)"; alpha = 0.25.
"""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mad_study.madc import viewpoint_entropy, viewpoint_log_likelihood
from mad_study.umad import ALPHA_AU, au_advantage, umad_advantages

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNPARSED = st.sampled_from([None, float("nan")])


def _madc_outcomes(answers):
    "The release's outcomes: parsed answers only; none parsed -> the single outcome '(None)'."
    parsed = [a for a in answers if not (a is None or (isinstance(a, float) and math.isnan(a)))]
    return parsed or ["(None)"]


def madc_release_entropy(answers):
    outs = _madc_outcomes(answers)
    n = len(outs)
    return -sum(c / n * math.log2(c / n) for c in Counter(outs).values()) + 0.0


def madc_release_log_likelihood(answers, gold):
    outs = _madc_outcomes(answers)
    k = sum(1 for a in outs if a == gold)
    return math.log2(k / len(outs)) if k else -math.inf


@FUZZ
@given(st.lists(st.one_of(st.sampled_from("ABCD"), UNPARSED), min_size=1, max_size=12), st.sampled_from("ABCD"))
def test_madc_drop_matches_the_release(answers, gold):
    assert viewpoint_entropy(answers, fmt="option", unparsed="drop") == pytest.approx(
        madc_release_entropy(answers), abs=1e-12)
    ll, ref = viewpoint_log_likelihood(answers, gold, "option", unparsed="drop"), madc_release_log_likelihood(answers, gold)
    assert ll == ref or ll == pytest.approx(ref, abs=1e-12)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["18", "-3", "0.5", "7"]), UNPARSED), min_size=1, max_size=12))
def test_madc_drop_on_numbers_matches_the_release(answers):
    assert viewpoint_entropy(answers, fmt="number", unparsed="drop") == pytest.approx(
        madc_release_entropy(answers), abs=1e-12)


@pytest.mark.parametrize("answers,h,ll", [
    ([None, None, None], 0.0, -math.inf),           # all unparsed: one "(None)" outcome
    (["A", None, "B", None], 1.0, -1.0),            # denominator = the two parsed agents
    (["A", "A", float("nan")], 0.0, 0.0),
])
def test_madc_drop_worked_examples(answers, h, ll):
    assert viewpoint_entropy(answers, fmt="option", unparsed="drop") == h == madc_release_entropy(answers)
    assert viewpoint_log_likelihood(answers, "A", "option", unparsed="drop") == ll == madc_release_log_likelihood(answers, "A")


def verl_weights(nll, alpha=ALPHA_AU):
    "W over one group: empty responses (NaN here) at NLL 0, z with the population std and eps 1e-8."
    x = [0.0 if math.isnan(v) else float(v) for v in nll]
    mean = sum(x) / len(x)
    std = math.sqrt(sum((v - mean) ** 2 for v in x) / len(x))
    return [math.exp(-alpha * (v - mean) / (std + 1e-8)) for v in x]


NLL = st.one_of(st.floats(0.0, 8.0), st.just(float("nan")))


@FUZZ
@given(st.lists(NLL, min_size=2, max_size=8), st.floats(0.1, 3.0))
def test_umad_released_weight_matches_the_release(nll, adv):
    got = au_advantage(np.full(len(nll), adv), nll, nll_norm="released") / adv
    np.testing.assert_allclose(got, verl_weights(nll), rtol=1e-9, atol=1e-12)


@FUZZ
@given(st.integers(2, 6), st.integers(1, 3), st.data())
def test_umad_released_weight_per_group_of_an_array(G, N, data):
    "Shaped (G rollouts, N agents): each agent's G rollouts are one group."
    nll = np.array(data.draw(st.lists(NLL, min_size=G * N, max_size=G * N)), dtype=float).reshape(G, N)
    got = au_advantage(np.ones((G, N)), nll, axis=0, nll_norm="released")
    for j in range(N):
        np.testing.assert_allclose(got[:, j], verl_weights(nll[:, j]), rtol=1e-9, atol=1e-12)


def test_umad_released_differs_from_the_kit_and_reaches_the_advantages():
    nll = np.array([1.0, 2.0, 3.0, 5.0, np.nan])
    released = au_advantage(np.ones(5), nll, nll_norm="released")
    np.testing.assert_allclose(released, verl_weights(nll), rtol=1e-9)
    assert released[-1] == released.max()  # the empty response: NLL 0, the largest weight
    kit = au_advantage(np.ones(4), nll[:4], nll_norm="kit")
    assert not np.allclose(kit, released[:4])  # sample std and eps 1e-6: a different standardisation
    c = np.array([[[1, 0]], [[0, 1]], [[1, 1]], [[0, 0]], [[1, 0]]], dtype=float)  # (G=5, N=1, T=2)
    u = np.broadcast_to(nll[:, None, None], c.shape).copy()
    plain = umad_advantages(c, np.zeros_like(c), nll_norm="released")  # equal NLLs: W = 1
    np.testing.assert_allclose(umad_advantages(c, u, nll_norm="released"),
                               plain * np.array(verl_weights(nll))[:, None, None], rtol=1e-9, atol=1e-12)
