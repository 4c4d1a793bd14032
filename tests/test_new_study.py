"""Issue 41, a new study in its first hour: each silent mistake is now an error, a one-line warning, or correct."""
import json

import pandas as pd
import pytest

from conftest import ROOT, mad_study


def _one_line(r):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("profile", ["sim", "cpu"])
@pytest.mark.parametrize("override, expect", [
    ("models=[qwen2.5-8b-instruct, qwen2.5-8b-instruct]", ["command line (-p)", "qwen2.5-8b-instruct", "unknown model"]),
    ("models=[qwen2.5-7b-instruct]", ["command line (-p)", "models=", "at least two agents, this gives 1"]),
    ("task=gsm9k", ["command line (-p)", "task='gsm9k'", "unknown task"]),
])
def test_unknown_model_one_agent_unknown_task_refused_in_every_profile(scratch, profile, override, expect):
    "`plan` validates like `reproduce` and runs nothing: one line on stderr naming the source and the value, exit 2."
    r = mad_study("plan", "du_gsm8k", "--profile", profile, "-p", override)
    assert r.returncode == 2, r.stdout + r.stderr
    line = _one_line(r)
    for e in expect: assert e in line, line
    assert line.count("unknown task") <= 1 and "du_gsm8k.yaml" not in line       # blamed on -p, once


def test_madc_one_agent_refused(scratch):
    r = mad_study("plan", "madc_fig1", "--profile", "sim", "-p", "n_agents=1")
    assert r.returncode == 2 and "n_agents=1" in _one_line(r) and "command line (-p)" in r.stderr


def test_identical_greedy_agents_warned_in_one_line(scratch):
    r = mad_study("plan", "du_gsm8k", "--profile", "cpu", "-p", "temperature=0.0")
    assert r.returncode == 0, r.stdout + r.stderr
    line = _one_line(r)
    assert line.startswith("mad-study: warning: command line (-p): temperature=0.0: all 3 agents") and "greedy" in line
    r = mad_study("plan", "du_gsm8k", "--profile", "cpu", "-p", "temperature=0.7")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
